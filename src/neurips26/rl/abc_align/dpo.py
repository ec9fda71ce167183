"""The DPO path of ABC-Align: a pure loss over log-probabilities and a ``trl.DPOTrainer`` subclass.

:func:`abc_dpo_loss` works on the summed completion log-probabilities any DPO implementation
computes. :class:`ABCDPOTrainer` is TRL's ``DPOTrainer`` (sigmoid loss, reverse-KL) that takes a
human-labelled and a pseudo-labelled preference dataset in TRL's standard ``prompt`` / ``chosen`` /
``rejected`` format, draws every batch as ``pseudo_batch`` pseudo plus ``human_batch`` human pairs,
and replaces the DPO loss by the objective's rectified combination of per-pair DPO losses. With
``c = 0`` its loss is exactly TRL's DPO loss on the pseudo pairs; with ``c = 1`` it is the
PPI-rectified loss (tested on values and gradients).

Dataset columns
---------------
human dataset
    ``prompt``, ``chosen`` (the human-preferred response), ``rejected``, ``pseudo_label`` (the
    judge's probability that ``chosen`` is better, required) and optionally ``label`` (soft human
    label, default 1.0).
pseudo dataset
    ``prompt``, ``chosen`` (the judge-preferred response), ``rejected`` and optionally ``label``
    (soft judge probability that ``chosen`` is better, default 1.0).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from neurips26.common.checks import check_int
from neurips26.common.optional import require
from neurips26.rl.abc_align.objective import (
    ABCConfig,
    MarginBatch,
    RectifiedObjective,
    dpo_margin,
    make_objective,
    rectified_loss_from_margins,
)

ABC_COLUMNS = ("abc_is_human", "abc_label", "abc_pseudo_label", "abc_index")


def abc_dpo_loss(
    policy_logps_1: torch.Tensor,
    policy_logps_2: torch.Tensor,
    ref_logps_1: torch.Tensor,
    ref_logps_2: torch.Tensor,
    human_labels: torch.Tensor,
    pseudo_labels: torch.Tensor,
    is_human: torch.Tensor,
    objective: RectifiedObjective,
    beta: float = 0.1,
) -> torch.Tensor:
    """ABC-Align (or a baseline objective) on DPO margins of a mixed batch.

    .. math::  m_i = \\beta[(\\log\\pi_\\theta(y^1_i) - \\log\\pi_{ref}(y^1_i)) - (\\log\\pi_\\theta(y^2_i)
               - \\log\\pi_{ref}(y^2_i))], \\quad L = \\text{objective}(\\ell(m, \\hat p)_{P},
               \\ell(m, h)_{H}, \\ell(m, \\hat p)_{H})

    Parameters
    ----------
    policy_logps_1, policy_logps_2, ref_logps_1, ref_logps_2 : Tensor ``(B,)``
    human_labels, pseudo_labels : Tensor ``(B,)``
        Probability that response 1 is preferred under the human / the judge.
    is_human : Tensor ``(B,)`` bool
    objective : RectifiedObjective
    beta : float

    Returns
    -------
    Tensor ``()``
    """
    margin = dpo_margin(policy_logps_1, policy_logps_2, ref_logps_1, ref_logps_2, beta)
    loss, _ = rectified_loss_from_margins(margin, human_labels, pseudo_labels, is_human, objective)
    return loss


def _with_abc_columns(dataset, is_human: bool, name: str):
    """Keep ``prompt``/``chosen``/``rejected`` and add the ABC columns (label conventions above)."""
    columns = set(dataset.column_names)
    missing = {"prompt", "chosen", "rejected"} - columns
    if missing:
        raise ValueError(
            f"{name} lacks TRL preference columns {sorted(missing)} (needs prompt/chosen/rejected)"
        )
    if len(dataset) == 0:
        raise ValueError(f"{name} is empty")
    if is_human and "pseudo_label" not in columns:
        raise ValueError(
            f"{name} needs a 'pseudo_label' column: the judge's probability that 'chosen' is better"
        )
    labels = [float(v) for v in dataset["label"]] if "label" in columns else [1.0] * len(dataset)
    pseudo = [float(v) for v in dataset["pseudo_label"]] if is_human else labels
    for col, values in (("label", labels), ("pseudo_label", pseudo)):
        if any(not (0.0 <= v <= 1.0) for v in values):
            raise ValueError(f"{name}: column {col!r} must lie in [0, 1]")
    from datasets import Dataset

    return Dataset.from_dict(
        {
            "prompt": list(dataset["prompt"]),
            "chosen": list(dataset["chosen"]),
            "rejected": list(dataset["rejected"]),
            "abc_is_human": [int(is_human)] * len(dataset),
            "abc_label": labels,
            "abc_pseudo_label": pseudo,
            "abc_index": list(range(len(dataset))),  # row within its own dataset (windows key on it)
        }
    )


def mix_preference_datasets(human_dataset, pseudo_dataset):
    """One ``datasets.Dataset`` with pseudo rows first, then human rows, and the ABC label columns."""
    from datasets import concatenate_datasets

    return concatenate_datasets(
        [
            _with_abc_columns(pseudo_dataset, False, "pseudo_dataset"),
            _with_abc_columns(human_dataset, True, "human_dataset"),
        ]
    )


class StratifiedPairSampler(torch.utils.data.Sampler):
    """Index stream whose consecutive blocks of ``pseudo_batch + human_batch`` are stratified.

    Each block holds ``pseudo_batch`` pseudo then ``human_batch`` human indices, drawn without
    replacement from seeded permutations that are renewed when used up. One epoch is
    ``ceil(#pseudo / pseudo_batch)`` blocks.
    """

    def __init__(self, is_human: list[int], human_batch: int, pseudo_batch: int, seed: int = 0) -> None:
        self.human = [i for i, h in enumerate(is_human) if h]
        self.pseudo = [i for i, h in enumerate(is_human) if not h]
        if not self.human or not self.pseudo:
            raise ValueError("both the human and the pseudo part must be non-empty")
        self.human_batch = check_int("human_batch", human_batch, low=1)
        self.pseudo_batch = check_int("pseudo_batch", pseudo_batch, low=1)
        self.blocks = -(-len(self.pseudo) // self.pseudo_batch)
        self.seed, self.epoch = seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _stream(self, pool: list[int], gen: torch.Generator) -> Iterator[int]:
        while True:
            for j in torch.randperm(len(pool), generator=gen).tolist():
                yield pool[j]

    def __iter__(self) -> Iterator[int]:
        gen = torch.Generator().manual_seed(self.seed * 100_003 + self.epoch)
        human, pseudo = self._stream(self.human, gen), self._stream(self.pseudo, gen)
        for _ in range(self.blocks):
            for _ in range(self.pseudo_batch):
                yield next(pseudo)
            for _ in range(self.human_batch):
                yield next(human)

    def __len__(self) -> int:
        return self.blocks * (self.pseudo_batch + self.human_batch)


class _ABCCollator:
    """Wrap a TRL preference collator so that the ABC label columns reach the loss."""

    def __init__(self, base) -> None:
        self.base = base

    def __call__(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        extra = {k: [ex.pop(k) for ex in examples] for k in ABC_COLUMNS if k in examples[0]}
        out = self.base(examples)
        if "abc_is_human" in extra:
            out["abc_is_human"] = torch.tensor(extra["abc_is_human"], dtype=torch.bool)
        for k in ("abc_label", "abc_pseudo_label"):
            if k in extra:
                out[k] = torch.tensor(extra[k], dtype=torch.float32)
        if "abc_index" in extra:
            out["abc_index"] = torch.tensor(extra["abc_index"], dtype=torch.long)
        return out


def _trainer_class():
    trl = require("trl", "llm")

    class ABCDPOTrainer(trl.DPOTrainer):
        """``trl.DPOTrainer`` with the ABC-Align objective over a human and a pseudo preference dataset.

        Paper: ABC-Align (seed ``004_01f475bc147a144d.txt``, "Language model post-training is often
        bottlenecked"). Only TRL's standard setting is supported: ``loss_type=["sigmoid"]``,
        ``f_divergence_type="reverse_kl"``, ``ld_alpha=None``, no WPO weighting; other settings raise.

        Parameters
        ----------
        model, ref_model, args, processing_class, peft_config, callbacks, optimizers
            As for ``trl.DPOTrainer``. ``args.per_device_train_batch_size`` must equal
            ``abc_config.pseudo_batch + abc_config.human_batch``; ``args.beta`` is the DPO beta.
        human_dataset, pseudo_dataset : datasets.Dataset
            TRL preference format (see the module docstring for the label columns).
        abc_config : ABCConfig, optional
            Correction settings (``correction``, ``update_every``, ``window``, ``space``, batches).
        objective : str or RectifiedObjective
            ``"abc"`` (default; a fixed ``abc_config.correction`` gives fixed ``c``), or a baseline
            name of :func:`~neurips26.rl.abc_align.make_objective` (``"ppi"``, ``"ppi_pp"``,
            ``"pseudo_only"``, ``"human_only"``, ``"pooled"``), or an objective instance.
        probe_names : list of str, optional
            Parameters of the gradient-space statistics; default the LoRA ``B`` matrices of the
            deepest adapted layer (per-example gradients then cost one block's backward), else the
            LM output head.

        Shapes
        ------
        A training batch is ``pseudo_batch + human_batch`` pairs; the loss is a scalar.
        """

        def __init__(
            self,
            model,
            ref_model=None,
            args=None,
            human_dataset=None,
            pseudo_dataset=None,
            processing_class=None,
            abc_config: ABCConfig | None = None,
            objective: str | RectifiedObjective = "abc",
            probe_names: list[str] | None = None,
            **kwargs: Any,
        ) -> None:
            if human_dataset is None or pseudo_dataset is None:
                raise ValueError("ABCDPOTrainer needs both human_dataset and pseudo_dataset")
            if "train_dataset" in kwargs:
                raise ValueError("pass human_dataset and pseudo_dataset instead of train_dataset")
            self.abc_config = cfg = ABCConfig() if abc_config is None else abc_config
            if args is None:
                raise ValueError("ABCDPOTrainer needs a DPOConfig (args)")
            if list(args.loss_type) != ["sigmoid"] or args.f_divergence_type != "reverse_kl":
                raise ValueError(
                    "ABCDPOTrainer supports loss_type=['sigmoid'] with f_divergence_type='reverse_kl'"
                )
            if args.ld_alpha is not None or args.use_weighting:
                raise ValueError("ABCDPOTrainer does not support ld_alpha or use_weighting")
            if args.per_device_train_batch_size != cfg.pseudo_batch + cfg.human_batch:
                raise ValueError(
                    f"per_device_train_batch_size ({args.per_device_train_batch_size}) must equal "
                    f"pseudo_batch + human_batch ({cfg.pseudo_batch} + {cfg.human_batch})"
                )
            n, N = len(human_dataset), len(pseudo_dataset)
            if n == 0:
                raise ValueError("human_dataset is empty")
            if isinstance(objective, str):
                if objective == "abc" and not cfg.adaptive:
                    objective = make_objective("fixed", n, N, cfg, c=float(cfg.correction))
                else:
                    objective = make_objective(objective, n, N, cfg)
            if not isinstance(objective, RectifiedObjective):
                raise TypeError("objective must be a name or a RectifiedObjective")
            self.objective = objective
            self._abc_probe_names = probe_names
            self._abc_calls = 0
            train = mix_preference_datasets(human_dataset, pseudo_dataset)
            super().__init__(
                model=model,
                ref_model=ref_model,
                args=args,
                train_dataset=train,
                processing_class=processing_class,
                **kwargs,
            )
            self.data_collator = _ABCCollator(self.data_collator)
            if probe_names is None:
                from neurips26.rl.abc_align.reward import head_parameter_names

                base = self.model
                lora = [n for n, p in base.named_parameters() if p.requires_grad and "lora_B" in n]
                if lora:
                    # the deepest adapted layer only: a per-example gradient then backpropagates through
                    # one block instead of the whole network (with all B matrices it re-runs every layer)
                    import re

                    depth = {n: int(m.group(1)) for n in lora if (m := re.search(r"layers\.(\d+)\.", n))}
                    deepest = max(depth.values()) if depth else None
                    self._abc_probe_names = [n for n in lora if depth.get(n, deepest) == deepest]
                elif cfg.probe == "all":
                    self._abc_probe_names = [n for n, p in base.named_parameters() if p.requires_grad]
                else:
                    head = base.get_output_embeddings()
                    names = {id(p): n for n, p in base.named_parameters()}
                    self._abc_probe_names = (
                        [names[id(head.weight)]] if id(head.weight) in names else head_parameter_names(base)
                    )

        def _set_signature_columns_if_needed(self):
            super()._set_signature_columns_if_needed()
            self._signature_columns = list(dict.fromkeys([*self._signature_columns, *ABC_COLUMNS]))

        def _get_train_sampler(self, train_dataset=None):
            dataset = self.train_dataset if train_dataset is None else train_dataset
            return StratifiedPairSampler(
                list(dataset["abc_is_human"]),
                self.abc_config.human_batch,
                self.abc_config.pseudo_batch,
                self.args.seed,
            )

        def _policy_and_ref_logps(self, model, inputs):
            completion_mask = inputs["completion_mask"]
            non_model = {"completion_mask", "ref_chosen_logps", "ref_rejected_logps", *ABC_COLUMNS}
            model_kwargs = {k: v for k, v in inputs.items() if k not in non_model}
            model_kwargs["use_cache"] = False
            if self.aux_loss_enabled:
                model_kwargs["output_router_logits"] = True
            labels = inputs["input_ids"].masked_fill(completion_mask == 0, -100)
            outputs = model(**model_kwargs, labels=labels, fused_lm_head=True)
            seq_len = completion_mask.size(1) - 1
            logps = outputs.log_probs[:, -seq_len:].sum(dim=1)
            chosen, rejected = logps.chunk(2, dim=0)
            if self.precompute_ref_logps:
                ref_chosen, ref_rejected = inputs["ref_chosen_logps"], inputs["ref_rejected_logps"]
            else:
                ref_inputs = {k: v for k, v in inputs.items() if k not in ABC_COLUMNS}
                ref_chosen, ref_rejected = self.compute_ref_log_probs(
                    self.ref_model or self.model, ref_inputs
                )
            return outputs, chosen, rejected, ref_chosen.to(chosen.device), ref_rejected.to(chosen.device)

        def _probe_grads(self, margin: torch.Tensor) -> torch.Tensor:
            params = dict(self.model.named_parameters())
            probe = [params[n] for n in self._abc_probe_names]
            rows = []
            for i in range(margin.shape[0]):
                grads = torch.autograd.grad(margin[i], probe, retain_graph=True, allow_unused=True)
                rows.append(
                    torch.cat(
                        [
                            (g if g is not None else torch.zeros_like(p)).reshape(-1)
                            for g, p in zip(grads, probe)
                        ]
                    )
                )
            return torch.stack(rows).detach().unsqueeze(0)

        def _compute_loss(self, model, inputs, return_outputs):
            mode = "train" if self.model.training else "eval"
            if "abc_is_human" not in inputs:
                raise ValueError("the batch lacks the ABC columns; was it built by ABCDPOTrainer's collator?")
            is_human = inputs["abc_is_human"].bool()
            labels, pseudo = inputs["abc_label"].float(), inputs["abc_pseudo_label"].float()
            outputs, chosen, rejected, ref_c, ref_r = self._policy_and_ref_logps(model, inputs)
            margin = dpo_margin(chosen, rejected, ref_c, ref_r, beta=self.beta)
            loss, parts = rectified_loss_from_margins(margin, labels, pseudo, is_human, self.objective)
            if self.aux_loss_enabled:
                loss = loss + self.router_aux_loss_coef * outputs.aux_loss
            if mode == "train" and (self.objective.needs or getattr(self.objective, "space", "") == "loss"):
                human, other = is_human, ~is_human
                batch = MarginBatch(
                    margin[human].detach().unsqueeze(0),
                    labels[human].unsqueeze(0),
                    pseudo[human].unsqueeze(0),
                    margin[other].detach().unsqueeze(0),
                    pseudo[other].unsqueeze(0),
                    human_ids=inputs["abc_index"][human] if "abc_index" in inputs else None,
                    pseudo_ids=inputs["abc_index"][other] if "abc_index" in inputs else None,
                )
                if "human" in self.objective.needs:
                    batch.human_grads = self._probe_grads(margin[human])
                if "pseudo" in self.objective.needs:
                    batch.pseudo_grads = self._probe_grads(margin[other])
                self.objective.observe_batch(batch, 0)
                self._abc_calls += 1
                if self._abc_calls % self.abc_config.update_every == 0:
                    self.objective.update_correction()
            with torch.no_grad():
                metrics = self._metrics[mode]
                strength = getattr(self.objective, "c", None)
                if strength is not None:
                    metrics["abc/c"].append(float(strength))
                for key, value in self.objective.diagnostics().items():
                    if key != "c":
                        metrics[f"abc/{key}"].append(float(value))
                acc = (margin > 0).float()
                metrics["rewards/accuracies"].append(self.accelerator.gather(acc).mean().item())
                metrics["rewards/margins"].append(self.accelerator.gather(margin.detach()).mean().item())
                if bool(is_human.any()):
                    agree = ((labels[is_human] > 0.5) == (pseudo[is_human] > 0.5)).float().mean()
                    metrics["abc/human_pseudo_agreement"].append(float(agree))
                    metrics["abc/human_accuracy"].append(float((margin[is_human] > 0).float().mean()))
            return (loss, outputs) if return_outputs else loss

    return ABCDPOTrainer


_CLASS = None


def __getattr__(name: str):
    global _CLASS
    if name == "ABCDPOTrainer":
        if _CLASS is None:
            _CLASS = _trainer_class()
        return _CLASS
    raise AttributeError(name)


__all__ = ["ABCDPOTrainer", "StratifiedPairSampler", "abc_dpo_loss", "mix_preference_datasets"]  # noqa: F822 - lazy (PEP 562)
