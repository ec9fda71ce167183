"""ABC-Align's in-house reward trainer equals TRL's ``RewardTrainer`` (issue 35 item 13b).

The judged Part A trains ``R`` replicas of a feature-vector MLP ensemble in lockstep (one objective per
replica, up to 19 replicas x 2,000 steps x 5 human sets x 10 seeds), which TRL's ``RewardTrainer``
(a ``transformers.Trainer`` over a sequence-classification model and tokenised pairs) cannot run
within the claim's budget. The in-house :class:`ABCRewardTrainer` stays on the judged path; these
tests show that on the same tiny sequence-classification model and the same batch it computes
TRL's loss, gradient and one optimiser step:

* plain Bradley-Terry: ``RewardTrainer`` as shipped vs ``ABCRewardTrainer`` with the pseudo-only
  objective on the same pairs labelled 1 (chosen wins);
* ABC-Align: ``RewardTrainer`` whose ``compute_loss`` is :func:`abc_reward_loss` (the override
  documented in :mod:`neurips26.rl.abc_align.reward`) vs ``ABCRewardTrainer`` with the same
  objective (fixed c = 0.5, so both the pseudo and the human terms count) on one mixed batch.

Both trainers see every pair in one step (batch = whole set), TRL's optimiser is AdamW with weight
decay 0 (= Adam), constant learning rate, no gradient clipping.

Bounds (float32, different kernels: TRL forwards chosen and rejected as one ``2B``-row batch in a
shuffled order, the in-house trainer forwards the two halves separately; foreach vs per-tensor Adam):

* loss: ``|l_ours - l_trl| <= 64 eps32 max(1, |l|)`` (per-pair margins differ by a few ulps of the
  rewards; the mean over ``B`` pairs adds ``log2 B`` ulps);
* gradients: ``|g_ours - g_trl| <= 1e-5 + 1e-4 |g|`` elementwise (summation order over rows and
  tokens; the same tolerance the DPO equality tests use);
* one Adam step from the same parameters: the first update is ``-lr g / (|g| + eps)``, so a gradient
  difference ``dg`` moves it by at most ``lr |dg| / (|g| + eps)`` (capped at ``2 lr``); the check is
  ``|p_ours - p_trl| <= min(2 lr, 2 lr |dg| / (|g| + eps)) + 4 eps32 |p|``.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from neurips26.rl.abc_align import (
    ABCConfig,
    ABCRewardTrainer,
    PreferencePairs,
    abc_reward_loss,
    make_objective,
)

trl = pytest.importorskip("trl")

EPS32 = float(torch.finfo(torch.float32).eps)
LR = 1e-3
SEQ = 6


def _tiny_reward_model(vocab: int, pad: int):
    from transformers import LlamaConfig, LlamaForSequenceClassification

    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=32,
        num_labels=1,
        pad_token_id=pad,
    )
    torch.manual_seed(0)
    return LlamaForSequenceClassification(cfg).float()


class _Rewards(nn.Module):
    """``(B, L)`` token ids -> ``(B,)`` rewards of a sequence-classification model (no padding)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits.squeeze(-1)


def _pairs(n_human: int, n_pseudo: int, tok):
    """Fixed-length random token sequences (no pad inside), human labels, judge labels."""
    g = torch.Generator().manual_seed(3)
    ids = [tok.convert_tokens_to_ids(c) for c in "abcdef"]
    table = torch.tensor(ids)
    total = n_human + n_pseudo
    chosen = table[torch.randint(0, len(ids), (total, SEQ), generator=g)]
    rejected = table[torch.randint(0, len(ids), (total, SEQ), generator=g)]
    human_label = torch.rand(n_human, generator=g)
    judge = torch.rand(total, generator=g)
    return chosen, rejected, human_label, judge


class _Capture:
    """``on_pre_optimizer_step`` callback body: the gradients TRL's optimiser is about to use."""

    def __init__(self) -> None:
        self.grads: list[torch.Tensor] = []


def _trl_step(model, dataset, tok, tmp_path, batch, trainer_cls=None, collator=None):
    from transformers import TrainerCallback

    capture = _Capture()

    class Grab(TrainerCallback):
        def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
            capture.grads = [p.grad.detach().clone() for p in model.parameters() if p.requires_grad]

    args = trl.RewardConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=batch,
        max_steps=1,
        learning_rate=LR,
        lr_scheduler_type="constant",
        weight_decay=0.0,
        max_grad_norm=0.0,
        optim="adamw_torch",
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        seed=0,
        disable_tqdm=True,
        logging_steps=1,
        remove_unused_columns=collator is None,
        disable_dropout=True,
        bf16=False,  # TRL's configs default to bf16 autocast, which the float32 in-house trainer does not use
        fp16=False,
    )
    cls = trainer_cls or trl.RewardTrainer
    trainer = cls(model=model, args=args, train_dataset=dataset, processing_class=tok, data_collator=collator, callbacks=[Grab()])
    out = trainer.train()
    return out.training_loss, capture.grads, trainer


def _check_step(ours_model, trl_model, start, ours_grads, trl_grads):
    for g_o, g_t in zip(ours_grads, trl_grads):
        torch.testing.assert_close(g_o, g_t, rtol=1e-4, atol=1e-5)
    for p_o, p_t, p0, g_o, g_t in zip(ours_model.parameters(), trl_model.parameters(), start, ours_grads, trl_grads):
        dg = (g_o - g_t).abs()
        bound = torch.clamp(2 * LR * dg / (g_t.abs() + 1e-8), max=2 * LR) + 4 * EPS32 * p0.abs()
        assert ((p_o.detach() - p_t.detach()).abs() <= bound).all()
        assert not torch.equal(p_t.detach(), p0)  # same kernel: n/a, asserts a difference; the step moved the parameters


@pytest.fixture()
def tok():
    from neurips26.common.tokenizers import char_tokenizer

    return char_tokenizer("abcdef:", padding_side="right")


def test_pseudo_only_reward_trainer_equals_trl_reward_trainer(tmp_path, tok):
    from datasets import Dataset

    n_human, n_pseudo = 4, 12
    chosen, rejected, human_label, judge = _pairs(n_human, n_pseudo, tok)
    model = _tiny_reward_model(len(tok), tok.pad_token_id)
    start = [p.detach().clone() for p in model.parameters()]
    trl_model = copy.deepcopy(model)

    # ours: pseudo-only objective (weights 1, 0, 0) on the pseudo pairs labelled 1 (chosen wins)
    wrapped = _Rewards(model)
    human = PreferencePairs(chosen[:n_human], rejected[:n_human], human_label, judge[:n_human])
    pseudo = PreferencePairs(chosen[n_human:], rejected[n_human:], torch.ones(n_pseudo))
    trainer = ABCRewardTrainer(
        wrapped,
        make_objective("pseudo_only", n_human, n_pseudo),
        human,
        pseudo,
        lr=LR,
        human_batch=n_human,
        pseudo_batch=n_pseudo,
        probe=lambda a, b: torch.zeros(1, a.shape[0], 1),
    )
    model.train()
    ours_loss = trainer.step()["loss/0"]
    ours_grads = [p.grad.detach().clone() for p in model.parameters() if p.requires_grad]

    # TRL: RewardTrainer as shipped on the same pseudo pairs (chosen_ids / rejected_ids, pre-tokenised)
    data = Dataset.from_dict({"chosen_ids": chosen[n_human:].tolist(), "rejected_ids": rejected[n_human:].tolist()})
    trl_loss, trl_grads, _ = _trl_step(trl_model, data, tok, tmp_path, n_pseudo)

    assert abs(ours_loss - trl_loss) <= 64 * EPS32 * max(1.0, abs(trl_loss))
    _check_step(model, trl_model, start, ours_grads, trl_grads)


def test_abc_objective_reward_trainer_equals_trl_reward_trainer_with_abc_loss(tmp_path, tok):
    from datasets import Dataset
    from trl.trainer.reward_trainer import DataCollatorForPreference

    n_human, n_pseudo = 4, 12
    chosen, rejected, human_label, judge = _pairs(n_human, n_pseudo, tok)
    model = _tiny_reward_model(len(tok), tok.pad_token_id)
    start = [p.detach().clone() for p in model.parameters()]
    trl_model = copy.deepcopy(model)
    cfg = ABCConfig(update_every=10)

    wrapped = _Rewards(model)
    human = PreferencePairs(chosen[:n_human], rejected[:n_human], human_label, judge[:n_human])
    pseudo = PreferencePairs(chosen[n_human:], rejected[n_human:], judge[n_human:])
    objective = make_objective("fixed", n_human, n_pseudo, cfg, c=0.5)
    w = objective.weights()
    assert w[1] != 0 and w[0] != 0  # both the pseudo and the human (correction) terms count
    trainer = ABCRewardTrainer(
        wrapped,
        objective,
        human,
        pseudo,
        lr=LR,
        human_batch=n_human,
        pseudo_batch=n_pseudo,
        update_every=10,
        probe=lambda a, b: torch.zeros(1, a.shape[0], 1),
    )
    model.train()
    ours_loss = trainer.step()["loss/0"]
    ours_grads = [p.grad.detach().clone() for p in model.parameters() if p.requires_grad]

    # TRL: RewardTrainer with compute_loss = abc_reward_loss (the documented override), extra columns
    # carried through the collator; the same objective object (fixed c: no state changes in one step)
    trl_objective = make_objective("fixed", n_human, n_pseudo, cfg, c=0.5)
    extra = ("abc_is_human", "abc_label", "abc_pseudo_label")

    class ABCTRLRewardTrainer(trl.RewardTrainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            ex = {k: inputs.pop(k) for k in extra}
            rewards = model(**inputs).logits.squeeze(-1)
            chosen_r, rejected_r = rewards.chunk(2)
            return abc_reward_loss(
                chosen_r, rejected_r, ex["abc_is_human"].bool(), ex["abc_label"], ex["abc_pseudo_label"], trl_objective
            )

    base = DataCollatorForPreference(pad_token_id=tok.pad_token_id)

    def collate(rows):
        out = base([{k: r[k] for k in ("chosen_ids", "rejected_ids")} for r in rows])
        for k in extra:
            out[k] = torch.tensor([r[k] for r in rows], dtype=torch.float32)
        return out

    is_human = [1.0] * n_human + [0.0] * n_pseudo
    label = human_label.tolist() + [1.0] * n_pseudo  # pseudo rows' human label is ignored
    data = Dataset.from_dict(
        {
            "chosen_ids": chosen.tolist(),
            "rejected_ids": rejected.tolist(),
            "abc_is_human": is_human,
            "abc_label": label,
            "abc_pseudo_label": judge.tolist(),
        }
    )
    trl_loss, trl_grads, _ = _trl_step(
        trl_model, data, tok, tmp_path, n_human + n_pseudo, trainer_cls=ABCTRLRewardTrainer, collator=collate
    )
    assert abs(ours_loss - trl_loss) <= 64 * EPS32 * max(1.0, abs(trl_loss))
    _check_step(model, trl_model, start, ours_grads, trl_grads)
