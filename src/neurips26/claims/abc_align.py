"""Claim check for ABC-Align: an MSE-tuned bias correction beats semi-supervised baselines when human labels are scarce.

Part A (reward modelling, statistical): synthetic preference pairs over feature vectors. The true
human utility is a fixed random MLP; human labels are Bernoulli draws from it; the AI judge adds a
systematic "length" bias ``b * phi_0`` and noise. Every (n, b) cell trains all arms in lockstep on
the same mini-batches with :class:`~neurips26.rl.abc_align.ABCRewardTrainer` (an ensemble reward model
with one objective per replica) and scores them on held-out pairs labelled by the noiseless utility.
At the smallest ``n`` the cell is repeated on independent human sets (``replicates``) to measure the
spread that a scarce human set causes.

Part B (DPO on a tiny LM): prompt = a target letter, responses = short strings sampled from an SFT'd
tiny Llama; true utility = count of the target letter - 0.3 * length; the judge prefers longer
strings. DPO runs through :class:`~neurips26.rl.abc_align.ABCDPOTrainer` (TRL's ``DPOTrainer``) with
each objective; metric: mean true utility of policy samples and win rate against the SFT reference.
"""

from __future__ import annotations

import copy
import multiprocessing
import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from neurips26.claims.base import AtLeast, Better, Claim, Headline, SeedResult, Within
from neurips26.claims.plotting import pyplot, save_figure
from neurips26.rl.abc_align import (
    ABCConfig,
    ABCRewardTrainer,
    PreferencePairs,
    make_objective,
)

METHOD = "abc"
BASELINES = ("ppi_pp", "ppi", "pseudo_only", "human_only")
REFERENCES = ("fixed_c_oracle",)
FIXED_GRID = (0.5,)  # with c = 0 (pseudo_only) and c = 1 (ppi) the oracle's grid is {0, 0.5, 1}
PART_A_REPLICAS = ("abc", "ppi_pp", "ppi", "pseudo_only", "human_only", *[f"fixed_{c:g}" for c in FIXED_GRID])
DPO_ARMS = ("abc", "ppi_pp", "pseudo_only")


def _b_name(b: float) -> str:
    return f"b{b:g}"


# ============================================================================= Part A
class EnsembleRewardMLP(nn.Module):
    """``R`` independent MLP reward models ``d -> hidden -> 1`` evaluated together: ``(B, d) -> (R, B)``.

    Replica ``r`` is initialised from ``init_seeds[r]`` (replicas that share a seed start equal, so
    arms compared on one human set share their initialisation).
    """

    def __init__(self, init_seeds: list[int], dim: int, hidden: int) -> None:
        super().__init__()
        W1, b1, w2 = [], [], []
        for s in init_seeds:
            g = torch.Generator().manual_seed(int(s))
            bound1, bound2 = 1 / dim**0.5, 1 / hidden**0.5  # nn.Linear's default uniform bounds
            W1.append((torch.rand(dim, hidden, generator=g) * 2 - 1) * bound1)
            b1.append((torch.rand(1, hidden, generator=g) * 2 - 1) * bound1)
            w2.append((torch.rand(hidden, generator=g) * 2 - 1) * bound2)
        self.W1 = nn.Parameter(torch.stack(W1))
        self.b1 = nn.Parameter(torch.stack(b1))
        self.w2 = nn.Parameter(torch.stack(w2))
        self._memo: list = []

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(torch.einsum("bi,rih->rbh", x, self.W1) + self.b1)

    def _features_no_grad(self, x: torch.Tensor) -> torch.Tensor:
        """:meth:`features` outside autograd, remembered for the last two inputs at the current weights.

        The trainer's re-estimate computes the margins and then the head gradients of the same pairs at
        the same weights; the remembered features make the second pass free (the same numbers).
        """
        version = (self.W1._version, self.b1._version)
        for key, value in self._memo:
            if key[0] is x and key[1] == version:
                return value
        out = self.features(x)
        self._memo = [*self._memo[-1:], ((x, version), out)]
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        feats = self.features(x) if torch.is_grad_enabled() else self._features_no_grad(x)
        return torch.einsum("rbh,rh->rb", feats, self.w2)

    def head_grads(self, first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
        """Closed-form per-example margin gradients on the output weights: ``(R, B, hidden)``."""
        with torch.no_grad():
            return self._features_no_grad(first) - self._features_no_grad(second)


def _true_utility(dim: int) -> nn.Module:
    """The fixed human utility u*: a random tanh MLP (seed 12345), scaled to unit std under N(0, I)."""
    g = torch.Generator().manual_seed(12345)
    net = nn.Sequential(nn.Linear(dim, 32), nn.Tanh(), nn.Linear(32, 1))
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * (1.5 / p.shape[-1] ** 0.5 if p.ndim > 1 else 0.1))
        probe = torch.randn(20_000, dim, generator=g)
        scale = net(probe).std()
        net[2].weight /= scale
        net[2].bias /= scale
    net.requires_grad_(False)
    return net


def _utility(net: nn.Module, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return net(x).squeeze(-1)


def _judge(u: torch.Tensor, x: torch.Tensor, b: float, noise: torch.Tensor) -> torch.Tensor:
    """AI judge utility: u* + b * phi_0 + noise (phi_0 plays "length")."""
    return u + b * x[:, 0] + noise


def _part_a_cell(config: dict, seed: int, n: int, rep: int, pool: dict, u_net: nn.Module) -> dict[str, Any]:
    """Train every Part A replica (arm x bias level) for one human set; return per-replica scores."""
    dim, T, biases = config["dim"], config["temperature"], config["biases"]
    g = torch.Generator().manual_seed(10_000 * seed + 100 * n + rep)
    x1, x2 = torch.randn(n, dim, generator=g), torch.randn(n, dim, generator=g)
    u1, u2 = _utility(u_net, x1), _utility(u_net, x2)
    h = (torch.rand(n, generator=g) < torch.sigmoid((u1 - u2) / T)).float()
    e1, e2 = (
        config["judge_noise"] * torch.randn(n, generator=g),
        config["judge_noise"] * torch.randn(n, generator=g),
    )
    human_pseudo = torch.stack(
        [torch.sigmoid((_judge(u1, x1, b, e1) - _judge(u2, x2, b, e2)) / T) for b in biases]
    )

    arms, labels_h, labels_hp, labels_p, objectives = [], [], [], [], []
    N = pool["x1"].shape[0]
    cfg = ABCConfig(update_every=config["update_every"], window=config["window"])
    for bi, b in enumerate(biases):
        for arm in PART_A_REPLICAS:
            if arm == "human_only" and bi > 0:
                # human_only never reads a judge label: its replica is the same computation at every bias
                # (same initialisation, batches and human labels), so it is trained once and shared
                continue
            arms.append((b, arm))
            labels_h.append(h)
            labels_hp.append(human_pseudo[bi])
            labels_p.append(pool["pseudo"][bi])
            if arm.startswith("fixed_"):
                objectives.append(make_objective("fixed", n, N, cfg, c=float(arm.split("_")[1])))
            else:
                objectives.append(make_objective(arm, n, N, cfg))
    model = EnsembleRewardMLP([1000 * seed + rep] * len(arms), dim, config["hidden"])
    human = PreferencePairs(x1, x2, torch.stack(labels_h), torch.stack(labels_hp))
    pseudo = PreferencePairs(pool["x1"], pool["x2"], torch.stack(labels_p))
    trainer = ABCRewardTrainer(
        model,
        objectives,
        human,
        pseudo,
        lr=config["lr"],
        human_batch=config["human_batch"],
        pseudo_batch=config["pseudo_batch"],
        update_every=config["update_every"],
        probe=model.head_grads,
        seed=seed * 7919 + rep,
    )
    trainer.train(config["steps"])
    with torch.no_grad():
        model.eval()
        acc = ((model(pool["test1"]) - model(pool["test2"])) > 0).float() == pool["test_sign"]
        acc = acc.float().mean(1)
        val = (((model(pool["val1"]) - model(pool["val2"])) > 0).float() == pool["val_sign"]).float().mean(1)
        scores = model(pool["bo_x"].reshape(-1, dim)).reshape(len(arms), *pool["bo_u"].shape)
        pick = scores.argmax(-1)  # (R, groups)
        bo16 = pool["bo_u"].gather(1, pick.T).T.mean(1)
    out: dict[str, Any] = {}
    for r, (b, arm) in enumerate(arms):
        out[(b, arm)] = {"acc": float(acc[r]), "val": float(val[r]), "bo16": float(bo16[r])}
        obj = objectives[r]
        if arm in ("abc", "ppi_pp"):
            out[(b, arm)]["strength"] = float(obj.c)
            out[(b, arm)]["history"] = [float(v) for v in obj.history]
    for b in biases[1:]:
        out[(b, "human_only")] = dict(out[(biases[0], "human_only")])
    return out


def _part_a_pool(config: dict, seed: int, u_net: nn.Module) -> dict[str, torch.Tensor]:
    dim, T = config["dim"], config["temperature"]
    g = torch.Generator().manual_seed(seed)
    N = config["n_pseudo"]
    x1, x2 = torch.randn(N, dim, generator=g), torch.randn(N, dim, generator=g)
    u1, u2 = _utility(u_net, x1), _utility(u_net, x2)
    e1, e2 = (
        config["judge_noise"] * torch.randn(N, generator=g),
        config["judge_noise"] * torch.randn(N, generator=g),
    )
    pseudo = torch.stack(
        [torch.sigmoid((_judge(u1, x1, b, e1) - _judge(u2, x2, b, e2)) / T) for b in config["biases"]]
    )
    pool = {"x1": x1, "x2": x2, "pseudo": pseudo}
    for name, size in (("test", config["n_test"]), ("val", config["n_val"])):
        a, c = torch.randn(size, dim, generator=g), torch.randn(size, dim, generator=g)
        pool[f"{name}1"], pool[f"{name}2"] = a, c
        pool[f"{name}_sign"] = (_utility(u_net, a) > _utility(u_net, c)).float()
    bo_x = torch.randn(config["bo_groups"], config["bo_k"], dim, generator=g)
    pool["bo_x"] = bo_x
    pool["bo_u"] = _utility(u_net, bo_x.reshape(-1, dim)).reshape(config["bo_groups"], config["bo_k"])
    return pool


def _part_a_jobs(config: dict) -> list[tuple[int, int]]:
    """The (n, replicate) human sets of Part A: ``replicates`` at the smallest n, one elsewhere."""
    ns = config["n_human"]
    return [(n, rep) for n in ns for rep in range(config["replicates"] if n == min(ns) else 1)]


def _run_job(payload: dict[str, Any], span: tuple[int, int]) -> Any:
    """One unit of a seed's work (a Part A human set, or Part B), for :func:`~neurips26.common.pool.map_spans`."""
    job = payload["jobs"][span[0]]
    if job == "part_b":
        return run_part_b(payload["config"], payload["seed"])
    n, rep = job
    return _part_a_cell(payload["config"], payload["seed"], n, rep, payload["pool"], payload["u_net"])


def _run_jobs(config: dict, seed: int, with_part_b: bool) -> tuple[dict[tuple[int, int], dict], Any]:
    """Every Part A human set (and Part B when asked) of one seed, in ``config["workers"]`` processes.

    The jobs are independent and seeded on their own (explicit generators; Part B seeds TRL from its
    config), so running them in worker processes gives the same numbers as running them in turn; it
    only uses the second core of a 2-core machine. ``workers = 1`` runs them here, in turn.
    """
    u_net = _true_utility(config["dim"])
    pool = _part_a_pool(config, seed, u_net)
    jobs: list[Any] = (["part_b"] if with_part_b else []) + _part_a_jobs(config)  # the longest job first
    payload = {"config": config, "seed": seed, "pool": pool, "u_net": u_net, "jobs": jobs}
    spans = [(i, i + 1) for i in range(len(jobs))]
    workers = int(config.get("workers", 1))
    if workers > 1 and not multiprocessing.current_process().daemon:  # a daemon may not start processes
        from neurips26.common.pool import map_spans

        if (
            with_part_b
        ):  # build (or load) the cached SFT model here, so that this run's cold-cache clock counts it
            _sft_model(config)

        outs = map_spans(
            _run_job, spans, payload, workers=workers, threads=config["threads"], what="Part A jobs"
        )
    else:
        outs = [_run_job(payload, span) for span in spans]
    runs = {job: out for job, out in zip(jobs, outs) if job != "part_b"}
    return runs, (outs[0] if with_part_b else None)


def run_part_a(config: dict, seed: int, runs: dict[tuple[int, int], dict] | None = None) -> dict[str, Any]:
    """Part A for one seed: per (n, b) cell, every arm's held-out accuracy and best-of-k utility.

    ``runs`` maps ``(n, replicate)`` to :func:`_part_a_cell`'s output (computed here when None).
    """
    if runs is None:
        runs, _ = _run_jobs(config, seed, with_part_b=False)
    ns, biases = config["n_human"], config["biases"]
    cells: dict[tuple[int, float], dict[str, dict[str, Any]]] = {}
    spread: dict[float, dict[str, float]] = {}
    by_n = {n: [runs[job] for job in _part_a_jobs(config) if job[0] == n] for n in ns}
    for n in ns:
        runs_n = by_n[n]
        reps = len(runs_n)
        for b in biases:
            cell: dict[str, dict[str, Any]] = {}
            for arm in PART_A_REPLICAS:
                cell[arm] = {
                    key: float(np.mean([run[(b, arm)][key] for run in runs_n]))
                    for key in ("acc", "val", "bo16")
                }
                if "strength" in runs_n[0][(b, arm)]:
                    cell[arm]["strength"] = float(np.mean([run[(b, arm)]["strength"] for run in runs_n]))
                    cell[arm]["history"] = runs_n[0][(b, arm)]["history"]
                if reps > 1:
                    cell[arm]["acc_std"] = float(np.std([run[(b, arm)]["acc"] for run in runs_n], ddof=1))
            # oracle-tuned fixed c: the best of c in {0, .25, .5, .75, 1} on the validation pairs, per replicate
            grid = {0.0: "pseudo_only", **{c: f"fixed_{c:g}" for c in FIXED_GRID}, 1.0: "ppi"}
            chosen, accs, bos = [], [], []
            for run in runs_n:
                c_best = max(grid, key=lambda c: run[(b, grid[c])]["val"])
                chosen.append(c_best)
                accs.append(run[(b, grid[c_best])]["acc"])
                bos.append(run[(b, grid[c_best])]["bo16"])
            cell["fixed_c_oracle"] = {"acc": float(np.mean(accs)), "bo16": float(np.mean(bos)), "c": chosen}
            if reps > 1:
                cell["fixed_c_oracle"]["acc_std"] = float(np.std(accs, ddof=1))
            cells[(n, b)] = cell
    return {"cells": cells, "spread": spread}


# ============================================================================= Part B
ALPHABET = "abcdef"


def _true_utility_text(prompt_letter: str, text: str, length_cost: float) -> float:
    return text.count(prompt_letter) - length_cost * len(text)


def _sft_examples(tok, count: int, max_len: int, seed: int) -> list[dict[str, list[int]]]:
    """SFT data: ``"<letter>:"`` prompts followed by uniform random strings of 1..max_len letters."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        letter = rng.choice(ALPHABET)
        text = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, max_len)))
        prompt = tok(f"{letter}:")["input_ids"]
        full = tok(f"{letter}:{text}")["input_ids"] + [tok.eos_token_id]
        out.append({"input_ids": full, "loss_mask": [0] * len(prompt) + [1] * (len(full) - len(prompt))})
    return out


def _sft_model(config: dict):
    from neurips26.common.models import build_tiny_lm
    from neurips26.common.tokenizers import char_tokenizer
    from neurips26.common.training import train_or_load

    tok = char_tokenizer(ALPHABET + ":", padding_side="left")
    key = {
        "task": "abc-letters",
        "alphabet": ALPHABET,
        "max_len": config["b_max_len"],
        "preset": "llama",
        "hidden": 64,
        "layers": 2,
        "examples": config["b_sft_examples"],
    }
    model, history = train_or_load(
        "abc-align-sft",
        key,
        lambda: build_tiny_lm("llama", vocab_size=len(tok), seed=0),
        lambda: _sft_examples(tok, config["b_sft_examples"], config["b_max_len"], seed=0),
        steps=config["b_sft_steps"],
        batch_size=64,
        lr=3e-3,
        warmup=20,
        seed=0,
    )
    return model, tok, history


def _samples(model, tok, letters: list[str], seed: int, max_new: int) -> list[str]:
    from neurips26.common.rollouts import sample

    out = []
    for start in range(0, len(letters), 512):
        chunk = letters[start : start + 512]
        roll = sample(model, tok, [f"{c}:" for c in chunk], max_new_tokens=max_new, seed=seed + start)
        out += roll.texts
    return out


def run_part_b(config: dict, seed: int) -> dict[str, Any]:
    """Part B for one seed: DPO with each objective through ABCDPOTrainer; true utility of policy samples."""
    from datasets import Dataset
    from trl import DPOConfig

    from neurips26.rl.abc_align import ABCDPOTrainer

    os.environ.setdefault("TQDM_DISABLE", "1")
    sft, tok, sft_history = _sft_model(config)
    n, N = config["b_n_human"], config["b_n_pseudo"]
    rng = random.Random(seed)
    letters = [rng.choice(ALPHABET) for _ in range(n + N)]
    first = _samples(sft, tok, letters, seed * 11 + 1, config["b_max_len"] + 2)
    second = _samples(sft, tok, letters, seed * 11 + 2, config["b_max_len"] + 2)
    cost, T, bias = config["b_length_cost"], config["b_temperature"], config["b_judge_length_bias"]
    gen = torch.Generator().manual_seed(seed)
    u = torch.tensor(
        [
            [_true_utility_text(c, a, cost), _true_utility_text(c, b, cost)]
            for c, a, b in zip(letters, first, second)
        ]
    )
    lengths = torch.tensor([[len(a), len(b)] for a, b in zip(first, second)], dtype=torch.float32)
    judge = u + bias * lengths + config["b_judge_noise"] * torch.randn(u.shape, generator=gen)
    p_first = torch.sigmoid((judge[:, 0] - judge[:, 1]) / T)
    h_first = (torch.rand(n + N, generator=gen) < torch.sigmoid((u[:, 0] - u[:, 1]) / T)).float()

    def rows(idx, label_first, pseudo_first=None):
        data = {"prompt": [], "chosen": [], "rejected": [], "label": []}
        if pseudo_first is not None:
            data["pseudo_label"] = []
        for i in idx:
            flip = float(label_first[i]) < 0.5  # chosen = the response this label prefers
            a, b = (second[i], first[i]) if flip else (first[i], second[i])
            data["prompt"].append(f"{letters[i]}:")
            data["chosen"].append(a)
            data["rejected"].append(b)
            data["label"].append(1.0)
            if pseudo_first is not None:
                q = float(pseudo_first[i])
                data["pseudo_label"].append(1.0 - q if flip else q)
        return Dataset.from_dict(data)

    human = rows(range(n), h_first, p_first)
    pseudo_hard = torch.where(p_first >= 0.5, 1.0, 0.0)
    pseudo = rows(range(n, n + N), pseudo_hard)
    eval_letters = [ALPHABET[(i + seed) % len(ALPHABET)] for i in range(config["b_eval_samples"])]
    ref_texts = _samples(sft, tok, eval_letters, 7_777 + seed, config["b_max_len"] + 2)
    ref_u = np.array([_true_utility_text(c, t, cost) for c, t in zip(eval_letters, ref_texts)])
    out = {
        "sft_utility": float(ref_u.mean()),
        "sft_length": float(np.mean([len(t) for t in ref_texts])),
        "judge_agreement": float(((p_first[:n] > 0.5).float() == h_first[:n]).float().mean()),
        "sft_loss": sft_history.get("final_loss"),
    }
    tok.padding_side = "right"
    for arm in config["b_arms"]:
        policy = copy.deepcopy(sft)
        policy.train()
        args = DPOConfig(
            output_dir=str(Path(config.get("b_output_dir", "/tmp/neurips26-abc-dpo")) / f"{arm}-{seed}"),
            per_device_train_batch_size=config["b_pseudo_batch"] + config["b_human_batch"],
            max_steps=config["b_steps"],
            learning_rate=config["b_lr"],
            beta=0.1,
            report_to=[],
            save_strategy="no",
            logging_steps=max(1, config["b_steps"] // 10),
            use_cpu=True,
            seed=seed,
            disable_tqdm=True,
            lr_scheduler_type="constant",
            warmup_steps=0,
            dataloader_num_workers=0,
            # TRL turns activation checkpointing on by default; a 2-layer, 64-wide model does not need the memory it
            # saves, and recomputing every block's forward in the backward only costs time (same numbers)
            activation_checkpointing=False,
        )
        cfg = ABCConfig(human_batch=config["b_human_batch"], pseudo_batch=config["b_pseudo_batch"])
        trainer = ABCDPOTrainer(
            policy,
            ref_model=copy.deepcopy(sft),
            args=args,
            human_dataset=human,
            pseudo_dataset=pseudo,
            processing_class=tok,
            abc_config=cfg,
            objective=arm,
        )
        trainer.train()
        tok.padding_side = "left"
        texts = _samples(trainer.model, tok, eval_letters, 7_777 + seed, config["b_max_len"] + 2)
        tok.padding_side = "right"
        util = np.array([_true_utility_text(c, t, cost) for c, t in zip(eval_letters, texts)])
        win = float(np.mean((util > ref_u) + 0.5 * (util == ref_u)))
        out[arm] = {
            "utility": float(util.mean()),
            "win_rate": win,
            "length": float(np.mean([len(t) for t in texts])),
            "strength": float(getattr(trainer.objective, "c", float("nan"))),
        }
    tok.padding_side = "left"
    return out


# ============================================================================= claim
def run(config: dict[str, Any], seed: int) -> SeedResult:
    with_part_b = seed in config.get("b_seeds", ())
    runs, part_b = _run_jobs(config, seed, with_part_b)
    a = run_part_a(config, seed, runs)
    cells = a["cells"]
    ns, biases = config["n_human"], config["biases"]
    n_min, b_max = min(ns), max(biases)
    arms = (METHOD, *BASELINES, "fixed_c_oracle")
    metrics: dict[str, dict[str, float]] = {}
    for (n, b), cell in cells.items():
        metrics[f"acc_n{n}_{_b_name(b)}"] = {arm: cell[arm]["acc"] for arm in arms}
        metrics[f"bo16_n{n}_{_b_name(b)}"] = {arm: cell[arm]["bo16"] for arm in arms}
    metrics["acc_small_n"] = {
        arm: float(np.mean([cells[(n_min, b)][arm]["acc"] for b in biases])) for arm in arms
    }
    metrics["bo16_small_n"] = {
        arm: float(np.mean([cells[(n_min, b)][arm]["bo16"] for b in biases])) for arm in arms
    }
    metrics["acc_std_small_n"] = {
        arm: float(np.mean([cells[(n_min, b)][arm]["acc_std"] for b in biases])) for arm in arms
    }
    metrics["acc_high_bias"] = {
        arm: float(np.mean([cells[(n, b_max)][arm]["acc"] for n in ns])) for arm in arms
    }
    metrics["acc_no_bias"] = {arm: float(np.mean([cells[(n, 0.0)][arm]["acc"] for n in ns])) for arm in arms}
    metrics["acc_large_n_high_bias"] = {arm: cells[(max(ns), b_max)][arm]["acc"] for arm in arms}
    metrics["c_gap"] = {
        METHOD: float(
            np.mean([cells[(n, b_max)][METHOD]["strength"] - cells[(n, 0.0)][METHOD]["strength"] for n in ns])
        )
    }
    curves = {f"c_abc_n{n_min}_{_b_name(b)}": {METHOD: cells[(n_min, b)][METHOD]["history"]} for b in biases}
    info: dict[str, Any] = {
        "strength": {
            f"n{n}_{_b_name(b)}": {arm: cells[(n, b)][arm]["strength"] for arm in ("abc", "ppi_pp")}
            for (n, b) in cells
        },
        "fixed_c_oracle_choice": {
            f"n{n}_{_b_name(b)}": cells[(n, b)]["fixed_c_oracle"]["c"] for (n, b) in cells
        },
        "budget": {
            "steps": config["steps"],
            "human_batch": config["human_batch"],
            "pseudo_batch": config["pseudo_batch"],
            "lr": config["lr"],
            "same_batches_for_all_arms": True,
        },
    }
    if with_part_b:
        info["part_b"] = part_b
    return SeedResult(metrics=metrics, curves=curves, info=info)


def plot(result: dict, folder: Path) -> list[Path]:
    """Accuracy against the human-set size per bias level (mean over seeds), and c during training."""
    plt = pyplot()
    paths = []
    config = result["config"]
    ns, biases = config["n_human"], config["biases"]
    arms = [result["method"], *result["baselines"], *result.get("references", [])]
    fig, axes = plt.subplots(1, len(biases), figsize=(4 * len(biases), 3.4), squeeze=False)
    for ax, b in zip(axes[0], biases):
        for arm in arms:
            ys = [np.mean(result["metrics"][f"acc_n{n}_{_b_name(b)}"][arm]) for n in ns]
            ax.plot(ns, ys, marker="o", label=arm)
        ax.set_xscale("log")
        ax.set_title(f"judge bias b = {b:g}")
        ax.set_xlabel("human pairs n")
        ax.set_ylabel("held-out accuracy")
    axes[0][0].legend(fontsize=7)
    paths.append(save_figure(fig, folder, "abc_align_accuracy", dpi=100))
    fig, ax = plt.subplots(figsize=(5, 3.4))
    for name, arms_curves in result.get("curves", {}).items():
        for runs in arms_curves.values():
            ax.plot(np.asarray(runs[0], dtype=float), label=name)
    ax.set_xlabel(f"re-estimate (every {config['update_every']} steps)")
    ax.set_ylabel("c")
    ax.legend(fontsize=7)
    paths.append(save_figure(fig, folder, "abc_align_c", dpi=100))
    return paths


_COMMON = dict(
    threads=1,
    # independent jobs of a seed (Part A human sets, Part B) run in this many processes: the same numbers as
    # running them in turn (each is seeded on its own), on both cores of a 2-core machine
    workers=2,
    dim=16,
    hidden=64,
    temperature=0.5,
    judge_noise=0.1,
    lr=1e-3,
    human_batch=16,
    pseudo_batch=64,
    update_every=10,
    window=256,
    bo_k=16,
    # Part B (DPO on a tiny Llama)
    b_max_len=8,
    b_sft_examples=4000,
    b_sft_steps=400,
    b_n_human=100,
    b_n_pseudo=3000,
    b_length_cost=0.3,
    b_temperature=1.0,
    b_judge_length_bias=0.5,
    b_judge_noise=0.3,
    b_eval_samples=256,
    b_arms=list(DPO_ARMS),
    b_pseudo_batch=16,
    b_human_batch=8,
    b_lr=1e-3,
)

CONFIGS = {
    "smoke": {
        **_COMMON,
        "workers": 1,
        "n_human": [20],
        "biases": [0.0, 2.0],
        "n_pseudo": 500,
        "n_test": 500,
        "n_val": 200,
        "bo_groups": 50,
        "steps": 30,
        "replicates": 2,
        "b_seeds": [],
    },
    "quick": {
        **_COMMON,
        "n_human": [100],
        "biases": [0.0, 2.0],
        "n_pseudo": 10_000,
        "n_test": 5_000,
        "n_val": 1_000,
        "bo_groups": 500,
        "steps": 800,
        "replicates": 2,
        "b_seeds": [],
    },
    "full": {
        **_COMMON,
        "n_human": [50, 100, 200, 400],
        "biases": [0.0, 0.5, 2.0],
        "n_pseudo": 10_000,
        "n_test": 5_000,
        "n_val": 1_000,
        "bo_groups": 500,
        "steps": 2_000,
        "replicates": 2,
        "b_seeds": [0, 1, 2],
        "b_steps": 100,
    },
}

GLOSSARY = {
    "acc_n{n}_b{b}": "Part A cell (n human pairs, judge bias b): fraction of 5,000 held-out pairs whose order under "
    "the reward model matches the noiseless true utility (mean over the replicate human sets at the smallest n)",
    "bo16_n{n}_b{b}": "Part A cell: mean true utility (in units of its std) of the response the reward model picks "
    "among 16 random candidates, over 500 groups",
    "acc_small_n": "mean over the bias levels of the held-out accuracy at the smallest human-set size",
    "acc_std_small_n": "mean over the bias levels of the standard deviation of held-out accuracy across independent "
    "human sets (and initialisations) at the smallest n: the spread a scarce human set causes",
    "bo16_small_n": "mean over the bias levels of the best-of-16 true utility at the smallest n",
    "acc_high_bias": "mean over n of the held-out accuracy at the largest judge bias",
    "acc_no_bias": "mean over n of the held-out accuracy at judge bias 0",
    "acc_large_n_high_bias": "held-out accuracy at the largest n and the largest judge bias",
    "c_gap": "ABC's final correction strength c at the largest bias minus at bias 0, mean over n",
}

for _profile in CONFIGS.values():
    for _n in _profile["n_human"]:
        for _b in _profile["biases"]:
            GLOSSARY[f"acc_n{_n}_{_b_name(_b)}"] = GLOSSARY["acc_n{n}_b{b}"]
            GLOSSARY[f"bo16_n{_n}_{_b_name(_b)}"] = GLOSSARY["bo16_n{n}_b{b}"]

CLAIM = Claim(
    slug="abc_align",
    claim=(
        "With scarce human labels and abundant, systematically biased AI-judge labels, training on the judge labels "
        "plus an MSE-tuned fraction c of the human-set correction outperforms PPI-style semi-supervised baselines."
    ),
    method=METHOD,
    baselines=BASELINES,
    references=REFERENCES,
    premises=(
        Better(
            "acc_large_n_high_bias",
            arm="human_only",
            baseline="pseudo_only",
            margin=0.02,
            label="judge_is_biased",
        ),
        Better(
            "acc_std_small_n",
            arm="human_only",
            baseline="pseudo_only",
            margin=0.0,
            label="scarce_humans_are_noisy",
        ),
    ),
    criteria=(
        Better("acc_small_n", baseline="ppi_pp", margin=0.0, label="abc_beats_ppi_pp_small_n"),
        Better(
            "acc_std_small_n", baseline="ppi_pp", higher_is_better=False, label="abc_lower_spread_than_ppi_pp"
        ),
        Better("acc_small_n", baseline="ppi", margin=0.0, label="abc_beats_ppi_small_n"),
        Better("bo16_small_n", baseline="ppi_pp", margin=0.0, label="abc_best_of_16_beats_ppi_pp"),
        Better("acc_high_bias", baseline="pseudo_only", margin=0.0, label="abc_beats_pseudo_high_bias"),
        Within("acc_no_bias", baseline="pseudo_only", tolerance=0.01, label="abc_matches_pseudo_no_bias"),
        AtLeast("c_gap", threshold=0.2, label="c_tracks_bias"),
    ),
    headlines=(
        Headline(
            "ABC-Align outperforms prior semi-supervised baselines when human feedback is scarce (reward modelling / RLHF path)",
            primary=True,
            criteria=(
                "abc_beats_ppi_pp_small_n",
                "abc_beats_ppi_small_n",
                "abc_best_of_16_beats_ppi_pp",
                "abc_lower_spread_than_ppi_pp",
            ),
        ),
        Headline(
            "The same holds for DPO",
            untested=(
                "Part B (DPO through ABCDPOTrainer on a tiny Llama, judge biased towards length) costs about 50 s per "
                "seed on 2 cores, so it runs on seeds 0-2 only and cannot enter the 10-seed criteria; its numbers "
                "(true utility, win rate vs SFT, length per arm) are in info['part_b']"
            ),
        ),
    ),
    run=run,
    configs=CONFIGS,
    seeds={"smoke": (0,), "quick": (0, 1, 2), "full": tuple(range(10))},
    items={
        m: {"full": 5000, "quick": 5000}
        for m in ("acc_small_n", "acc_no_bias", "acc_high_bias", "acc_large_n_high_bias")
    },
    implemented=(
        "ABCAlignObjective (L_P + c·Δ with c re-estimated every 10 steps from plug-in gradient-space bias and variance "
        "of the correction, EMA 0.9, warm start c = 1) trained with ABCRewardTrainer: all arms are replicas of one "
        "ensemble reward model (MLP 16-64-1 each, same initialisation per human set) updated in lockstep on identical "
        "mini-batches of 64 pseudo + 16 human pairs, Adam 1e-3. Baselines: PPI++ (power-tuned λ, trace form, clipped "
        "to [0, 1]), PPI (c = 1), pseudo-only, human-only; reference: a fixed c in {0, 0.5, 1} chosen per cell on 1,000 "
        "validation pairs labelled by the true utility (an oracle a practitioner does not have). The statistics for c "
        "and λ are computed at each re-estimate on the whole human set (n <= 256) and 256 pseudo pairs."
    ),
    differences=(
        "Only the abstract is public; the estimator is the spec's inferred instantiation. Part A follows the spec "
        "(16-d features, utility = fixed random MLP, T = 0.5, judge = utility + b·phi_0 + N(0, 0.1²), N = 10,000, "
        "2,000 steps) with 10 seeds; at the smallest n each seed trains 2 independent human sets to measure the spread. "
        "The fixed-c grid is {0, 0.5, 1} (the spec's 'tuned fixed c' is oracle-tuned here and reported as a reference). "
        "Part B runs on seeds 0-2 with 3 arms (ABC, PPI++, pseudo-only), 100 DPO steps of 16 pseudo + 8 human pairs "
        "(spec: 200 steps, 64 + 16) and is reported in info, not judged (see the DPO headline). The SmolLM2-135M LoRA arm "
        "is not run. Part A's reward models train through the in-house ABCRewardTrainer, not TRL's RewardTrainer: the "
        "arms are replicas of one feature-vector MLP ensemble trained in lockstep (up to 19 replicas x 2,000 steps per "
        "human set), which RewardTrainer (a transformers Trainer over a sequence-classification model and tokenised "
        "pairs) cannot run within the budget. tests/rl/test_abc_align_reward_trl.py shows that on one tiny Llama "
        "sequence classifier and batch the in-house trainer equals RewardTrainer as shipped (pseudo-only objective, "
        "Bradley-Terry) and RewardTrainer with compute_loss = abc_reward_loss (ABC-Align, c = 0.5): loss within "
        "64 eps32, gradients within 1e-5 + 1e-4 |g|, one Adam(W, decay 0) step within the first-step bound "
        "min(2 lr, 2 lr |dg| / (|g| + eps)) + 4 eps32 |p| (float32, no bf16 autocast)."
    ),
    data=(
        "Part A: synthetic Gaussian features and a seeded random-MLP utility (generated in code). Part B: strings over "
        "'abcdef' sampled from a tiny Llama trained here on random strings."
    ),
    glossary=GLOSSARY,
    plot=plot,
)
