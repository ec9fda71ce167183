"""Claim check for channel-coded reliability with a cost-aware semantic router ("A Communication-Theoretic
Framework for LLM Agents: Cost-Aware Adaptive Reliability", arXiv 2605.09121).

Per seed: items of several task families are split into train/test; every fixed arm
(channel x operator x budget) is run on every item (common random numbers across arms); the
:class:`~neurips26.agents.channel_router.SemanticKNNRouter` is fitted on the train split's quality
and cost matrices and swept over a lambda grid on the test split. The router's (cost, quality) curve
is compared with the fixed arms' points: Pareto occupancy, cost at the strongest fixed arm's quality,
quality at its cost, quality at the best single-shot arm's cost. The two closed-form criteria are
checked against Monte Carlo as design criteria.

Testbeds
--------
``sim`` (smoke, quick): six families x ``n_per_family`` items with a latent difficulty; three
simulated channels (small / medium / large, prices 1 : 3 : 10) with logistic accuracy, family-specific
confusion (an "attractor" wrong answer for some families, diffuse errors for others), a noisy judge
and a critic; the large channel over-corrects under refinement (gamma kappa > 2). Embedder: hashed
character n-grams.

``lm`` (full): reasoning-gym items (gsm_symbolic, basic_arithmetic, chain_sum and a multiple-choice
arithmetic family built from basic_arithmetic items); channels SmolLM2-135M-Instruct at two
temperatures and a character-level tiny Llama trained from scratch on arithmetic expressions; judge =
the exact checker plus Gaussian noise; critic = the checker's "X is wrong" hint. Generations are drawn
once into per-prompt pools (cached on disk) and every seed re-splits the items and re-orders the pools.
Embedder: all-MiniLM-L6-v2 (sentence-transformers, offline package).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from neurips26.agents.channel_router import (
    Arm,
    Channel,
    Critic,
    HashingEmbedder,
    Judge,
    Sample,
    SemanticKNNRouter,
    SimulatedChannel,
    Task,
    averaging_mse,
    empirical_crossover,
    estimate_contraction,
    evaluate_arms,
    matched_cost_quality_gain,
    matched_quality_cost_reduction,
    normalize_answer,
    pareto_frontier,
    pareto_occupancy,
    simulate_averaging_mse,
    simulate_refinement,
    strongest_fixed,
    time_decisions,
    uniform_vs_weighted_threshold,
)
from neurips26.claims.base import AtLeast, AtMost, Better, Claim, Headline, SeedResult, sweep_record
from neurips26.claims.plotting import pyplot, save_figure

METHOD = "router"
BASELINES = ("strongest_fixed", "single_shot", "random_arm")
REFERENCES = ("oracle_family", "testbed", "theory")
LAMBDAS = [0.0, *np.round(np.logspace(-3, math.log10(50.0), 24), 6).tolist()]


# ============================================================================== simulated testbed
#: family -> (prompt template, family skill offset (logit), attractor probability, judge noise sd,
#: mean output tokens, prompt tokens, vocabulary). Fixed before any run; seeds change the items only.
SIM_FAMILIES: dict[str, tuple[str, float, float, float, int, int, tuple[str, ...]]] = {
    "arith": (
        "Compute the total of the following quantities and report one number:",
        0.8,
        0.05,
        0.25,
        60,
        80,
        ("apples", "crates", "boxes", "coins", "marbles", "pencils"),
    ),
    "trap": (
        "Answer the trick riddle about these objects carefully:",
        -0.3,
        0.85,
        0.35,
        30,
        60,
        ("mirror", "shadow", "candle", "river", "echo", "clock"),
    ),
    "facts": (
        "Recall the capital city of the following country:",
        2.2,
        0.3,
        0.3,
        10,
        30,
        ("kingdom", "republic", "island", "federation", "duchy", "state"),
    ),
    "logic": (
        "Decide which statement follows logically from the premises:",
        -0.6,
        0.4,
        0.1,
        80,
        120,
        ("all", "some", "none", "implies", "therefore", "unless"),
    ),
    "code": (
        "Write the exact output printed by the following short program:",
        -1.0,
        0.1,
        0.45,
        120,
        160,
        ("print", "loop", "range", "append", "return", "lambda"),
    ),
    "hard": (
        "Prove or disprove the following combinatorial identity:",
        -2.2,
        0.2,
        0.5,
        200,
        140,
        ("binomial", "partition", "sum", "bijection", "graph", "permutation"),
    ),
}
#: channel -> (skill logit, price_in, price_out, gamma, kappa, per-family skill bonus)
SIM_CHANNELS: dict[str, tuple[float, float, float, float, float, dict[str, float]]] = {
    "small": (0.0, 0.2, 1.0, 0.8, 0.3, {"facts": 0.5}),
    "medium": (1.0, 0.6, 3.0, 1.0, 0.5, {"code": 1.2}),
    "large": (2.2, 2.0, 10.0, 2.6, 0.9, {"trap": 1.0}),
}
SIM_OPERATORS: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...] = (
    ("single", ()),
    ("retry", (("max_rounds", 5),)),
    ("sc", (("n", 3),)),
    ("sc", (("n", 5),)),
    ("bon", (("n", 5),)),
    ("refine", (("rounds", 3),)),
    ("rateless", (("n_max", 8), ("rule", "either"))),
    ("fec", (("rate", 0.5),)),
)


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def _sim_tasks(n_per_family: int, seed: int) -> list[Task]:
    rng = np.random.default_rng([seed, 101])
    tasks = []
    for fam, (template, *_, vocab) in SIM_FAMILIES.items():
        for i in range(n_per_family):
            words = " ".join(rng.choice(vocab, size=4))
            nums = " ".join(str(int(x)) for x in rng.integers(1, 100, size=3))
            truth = str(int(rng.integers(100, 10_000)))
            d = float(rng.uniform(0, 1))
            tasks.append(Task(f"{template} {words} {nums} (item {i})", truth, fam, {"difficulty": d}))
    return tasks


def _sim_channels() -> dict[str, Channel]:
    out = {}
    for name, (skill, p_in, p_out, gamma, kappa, bonus) in SIM_CHANNELS.items():

        def acc(task: Task, skill=skill, bonus=bonus) -> float:
            fam = SIM_FAMILIES[task.family]
            return _sigmoid(
                0.3 + skill + fam[1] + bonus.get(task.family, 0.0) - 3.5 * task.meta["difficulty"]
            )

        def confusion(task: Task, rng: np.random.Generator) -> str:
            if rng.random() < SIM_FAMILIES[task.family][2]:
                return str(int(task.answer) + 1)  # the family's attractor: one fixed wrong answer
            return str(int(task.answer) + int(rng.integers(2, 40)))

        def tokens(task: Task, rng: np.random.Generator) -> tuple[int, int]:
            fam = SIM_FAMILIES[task.family]
            return fam[5], max(5, int(rng.normal(fam[4], 0.25 * fam[4])))

        out[name] = SimulatedChannel(
            acc, confusion, tokens, (p_in, p_out), name=name, gamma=gamma, kappa=kappa
        )
    return out


def _sim_judge(cost: float) -> Judge:
    def score(task: Task, answer: str, rng: np.random.Generator | None = None) -> float:
        noise = SIM_FAMILIES[task.family][3] * float(rng.standard_normal()) if rng is not None else 0.0
        return float(answer == task.answer) + noise

    return Judge(score, cost=cost)


def _sim_critic(cost: float) -> Critic:
    def critique(task: Task, answer: str, rng: np.random.Generator | None = None) -> str | None:
        right = answer == task.answer
        flip = rng is not None and rng.random() < 0.1
        return None if right != flip else "the result does not check out"

    return Critic(critique, cost=cost)


def _sim_testbed(cfg: dict[str, Any], seed: int) -> dict[str, Any]:
    tasks = _sim_tasks(cfg["n_per_family"], seed)
    rng = np.random.default_rng([seed, 202])
    train, test = [], []
    for fam in SIM_FAMILIES:
        items = [t for t in tasks if t.family == fam]
        order = rng.permutation(len(items))
        half = len(items) // 2
        train += [items[i] for i in order[:half]]
        test += [items[i] for i in order[half:]]
    channels = _sim_channels()
    arms = [Arm(c, op, budget) for c in channels for op, budget in SIM_OPERATORS]
    return {
        "train": train,
        "test": test,
        "channels": channels,
        "arms": arms,
        "judge": _sim_judge(cfg["judge_cost"]),
        "critic": _sim_critic(cfg["critic_cost"]),
        "embedder": HashingEmbedder(dim=512),
        "reference": "small",
        "info": {"families": list(SIM_FAMILIES), "channels": {k: v[:5] for k, v in SIM_CHANNELS.items()}},
    }


# ==================================================================================== LM testbed
_LM_SUFFIX = "\nReply with the final answer only."
_OPT = re.compile(r"([A-D])\)\s*(-?\d+)")
_LETTER = re.compile(r"^\W*([A-D])\b")


def _lm_parse(prompt: str, text: str) -> str:
    """Numeric answer of a completion; for a multiple-choice prompt a leading letter maps to its option."""
    options = dict(_OPT.findall(prompt.split("Options:", 1)[1])) if "Options:" in prompt else {}
    if options:
        m = _LETTER.match(text.strip())
        if m and m.group(1) in options:
            return options[m.group(1)]
    return normalize_answer(text)


def _expression(prompt: str) -> str | None:
    """The arithmetic expression of a chain_sum / basic_arithmetic prompt, or None."""
    m = re.search(r"arithmetic problem:\s*(.+?)\s*=", prompt) or re.search(
        r"Calculate\s+(.+?)\.\s*$", prompt.split("\n")[0]
    )
    if not m:
        return None
    expr = m.group(1).replace(" ", "")
    return expr if re.fullmatch(r"[0-9+\-*()]+", expr) else None


def _lm_items(cfg: dict[str, Any]) -> list[Task]:
    from neurips26.common.tasks import ReasoningGymTask

    n = cfg["n_per_family"]
    out: list[Task] = []
    for fam, name, kw in (
        ("gsm", "gsm_symbolic", {}),
        ("arith", "basic_arithmetic", {"min_terms": 2, "max_terms": 3, "max_digits": 2}),
        ("chain", "chain_sum", {"min_terms": 2, "max_terms": 3, "max_digits": 2}),
    ):
        task = ReasoningGymTask(name, n, 0, seed=cfg["data_seed"], **kw)
        out += [Task(p.prompt + _LM_SUFFIX, normalize_answer(p.answer), fam) for p in task.train]
    mc = ReasoningGymTask(
        "basic_arithmetic", n, 0, seed=cfg["data_seed"] + 1, min_terms=2, max_terms=3, max_digits=2
    )
    rng = np.random.default_rng(cfg["data_seed"])
    for p in mc.train:
        truth = int(normalize_answer(p.answer))
        opts = {truth}
        while len(opts) < 4:
            opts.add(truth + int(rng.choice([-10, -2, -1, 1, 2, 10, 11])))
        opts = list(rng.permutation(sorted(opts)))
        body = "  ".join(f"{'ABCD'[j]}) {int(o)}" for j, o in enumerate(opts))
        q = p.prompt.replace("Calculate", "Which option equals").rstrip(".") + "?"
        out.append(
            Task(f"{q}\nOptions: {body}\nReply with the letter of the correct option only.", str(truth), "mc")
        )
    return out


class PoolChannel(Channel):
    """A channel that serves pre-generated samples per prompt, in an order drawn from the operator's rng.

    ``warm(prompts, n)`` generates ``n`` samples per prompt in batches (cached on disk) through
    ``base.generate_batch(prompts, seed=...)``. ``sample`` serves a prompt's pooled samples without
    replacement in a random order fixed by the rng of the operator run (so every arm sees the same
    order for a given item and seed: common random numbers); a prompt without pooled samples left is
    generated live (counted in ``live``). ``key`` maps a full prompt to its pool key.
    """

    def __init__(self, base: Any, *, name: str, key=None, cache_tag: dict[str, Any]):
        super().__init__(
            lambda p, n, t: [""] * n,
            name=name,
            temperature=base.temperature,
            price_in=base.price_in,
            price_out=base.price_out,
        )
        self.base, self.key, self.cache_tag = base, key or (lambda p: p), cache_tag
        self.pools: dict[str, list[Sample]] = {}
        self._orders: dict[int, tuple[Any, dict[str, list[int]]]] = {}
        self.live = 0

    def warm(self, prompts: Sequence[str], n: int, gen_seed: int = 0) -> int:
        from neurips26.common.cache import cached_object

        todo = sorted({self.key(p) for p in prompts} - set(self.pools))
        if not todo:
            return 0
        digest = hashlib.sha256(json.dumps(todo).encode()).hexdigest()[:16]
        config = {**self.cache_tag, "prompts": digest, "n": n, "gen_seed": gen_seed, "v": 3}

        def build() -> list[list[tuple]]:
            samples = self.base.generate_batch(todo, seed=gen_seed, n=n)
            return [
                [(s.text, s.tokens_in, s.tokens_out) for s in samples[i * n : (i + 1) * n]]
                for i in range(len(todo))
            ]

        rows = cached_object("channel-router-pool", config, build)
        for p, row in zip(todo, rows):
            self.pools[p] = [self._wrap(p, *r) for r in row]
        return len(todo)

    def _wrap(self, key: str, text: str, t_in: int, t_out: int) -> Sample:
        return Sample(text, _lm_parse(key, text), None, t_in, t_out, self.name, self.price(t_in, t_out))

    def reset(self) -> None:
        self._orders.clear()

    def sample(self, task, n=1, *, rng=None, feedback=None):
        prompt = task.prompt if feedback is None else task.prompt + feedback.render()
        key = self.key(prompt)
        _, orders = self._orders.setdefault(id(rng), (rng, {}))
        pool = self.pools.get(key, [])
        if key not in orders:
            orders[key] = [int(i) for i in rng.permutation(len(pool))] if pool else []
        out = []
        for _ in range(n):
            if orders[key]:
                out.append(pool[orders[key].pop(0)])
            else:
                self.live += 1
                s = self.base.generate_batch([key], seed=int(rng.integers(2**31 - 1)))[0]
                out.append(self._wrap(key, s.text, s.tokens_in, s.tokens_out))
        return out


class TinyArithmeticLM:
    """Character-level tiny Llama trained from scratch on ``expression=value`` strings.

    ``generate_batch(prompts, seed)`` answers the arithmetic expression found in each prompt (an empty
    completion with zero tokens when there is none: the channel is infeasible for that prompt).
    """

    ALPHABET = "0123456789+-*()="

    def __init__(self, cfg: dict[str, Any], temperature: float, price_out: float):
        import torch

        from neurips26.common.models import build_tiny_lm
        from neurips26.common.tokenizers import char_tokenizer
        from neurips26.common.training import train_or_load

        self.tok = char_tokenizer(self.ALPHABET)
        self.temperature, self.price_in, self.price_out = temperature, 0.0, price_out
        data = self._examples(cfg)
        lm_kw = {
            "hidden_size": cfg["tiny_hidden"],
            "intermediate_size": 2 * cfg["tiny_hidden"],
            "num_hidden_layers": cfg["tiny_layers"],
        }
        self.model, self.history = train_or_load(
            "channel-router-tiny",
            {"alphabet": self.ALPHABET, "n_train": cfg["tiny_examples"], "seed": cfg["data_seed"], **lm_kw},
            lambda: build_tiny_lm("llama", vocab_size=len(self.tok), seed=cfg["data_seed"], **lm_kw),
            data,
            steps=cfg["tiny_steps"],
            batch_size=64,
            lr=3e-3,
            seed=cfg["data_seed"],
        )
        self.model.eval()
        self.params = sum(p.numel() for p in self.model.parameters())
        self._torch = torch

    def _examples(self, cfg: dict[str, Any]):
        def make():
            import reasoning_gym as rg

            out = []
            per = cfg["tiny_examples"] // 2
            for name in ("chain_sum", "basic_arithmetic"):
                ds = rg.create_dataset(
                    name, size=per, seed=cfg["data_seed"] + 7, min_terms=2, max_terms=3, max_digits=2
                )
                for i in range(per):
                    expr = _expression(ds[i]["question"])
                    if expr is None:
                        continue
                    ids = self.tok(f"{expr}={ds[i]['answer']}")["input_ids"] + [self.tok.eos_token_id]
                    n_prompt = len(self.tok(f"{expr}=")["input_ids"])
                    out.append({"input_ids": ids, "loss_mask": [0] * n_prompt + [1] * (len(ids) - n_prompt)})
            return out

        return make

    def generate_batch(self, prompts: Sequence[str], *, seed: int, n: int = 1) -> list[Sample]:
        torch = self._torch
        prompts = [p for p in prompts for _ in range(n)]
        exprs = [_expression(p) for p in prompts]
        out: list[Sample | None] = [None] * len(prompts)
        idx = [i for i, e in enumerate(exprs) if e is not None]
        for i in range(len(prompts)):
            if exprs[i] is None:
                out[i] = Sample("", "", None, 0, 0)
        if idx:
            self.tok.padding_side = "left"
            enc = self.tok([f"{exprs[i]}=" for i in idx], return_tensors="pt", padding=True)
            with torch.random.fork_rng(devices=[]), torch.no_grad():
                torch.manual_seed(seed)
                gen = self.model.generate(
                    **enc,
                    do_sample=True,
                    temperature=self.temperature,
                    top_k=0,
                    top_p=1.0,
                    max_new_tokens=8,
                    pad_token_id=self.tok.pad_token_id,
                    eos_token_id=self.tok.eos_token_id,
                )
            new = gen[:, enc["input_ids"].shape[1] :]
            for row, i, t_in in zip(new, idx, enc["attention_mask"].sum(1).tolist()):
                ids = row.tolist()
                if self.tok.eos_token_id in ids:
                    ids = ids[: ids.index(self.tok.eos_token_id) + 1]
                text = self.tok.decode(ids, skip_special_tokens=True)
                out[i] = Sample(text, normalize_answer(text), None, int(t_in), len(ids))
        return out  # type: ignore[return-value]


def _lm_judge(cost: float, sd: float) -> Judge:
    def score(task: Task, answer: str, rng: np.random.Generator | None = None) -> float:
        return float(answer == task.answer) + (sd * float(rng.standard_normal()) if rng is not None else 0.0)

    return Judge(score, cost=cost)


def _lm_critic(cost: float) -> Critic:
    return Critic(
        lambda task, answer: None if answer == task.answer else f"The answer {answer or '(none)'} is wrong.",
        cost=cost,
    )


_LM_CACHE: dict[str, Any] = {}


def _lm_channels(cfg: dict[str, Any]) -> dict[str, PoolChannel]:
    """SmolLM2 at two temperatures and the tiny model, each wrapped in a pool (built once per process)."""
    key = json.dumps({k: cfg[k] for k in sorted(cfg) if k.startswith(("smol", "tiny", "data", "max_new"))})
    if key in _LM_CACHE:
        return _LM_CACHE[key]
    from neurips26.agents.channel_router import HFChannel
    from neurips26.common.models import load_pretrained

    model, tok = load_pretrained("smollm2-135m")
    n_params = sum(p.numel() for p in model.parameters())
    chans: dict[str, PoolChannel] = {}
    for t in cfg["smol_temperatures"]:
        name = f"smol_t{int(round(10 * t)):02d}"
        hf = HFChannel(
            model,
            tok,
            0.0,  # cost counts generated tokens only (x model size)
            1.0,
            lambda text: text,
            cfg["max_new_tokens"],
            name=name,
            temperature=t,
            batch_size=cfg["batch_size"],
        )
        chans[name] = PoolChannel(
            hf, name=name, cache_tag={"model": "smollm2-135m", "T": t, "max_new": cfg["max_new_tokens"]}
        )
    tiny = TinyArithmeticLM(cfg, cfg["tiny_temperature"], price_out=1.0)
    tiny.price_out = tiny.params / n_params
    tiny.price_in = 0.0  # cost counts generated tokens only
    tiny_key = lambda p: p.split("\nA previous answer", 1)[0]  # noqa: E731 - the tiny model ignores feedback text
    chans["tiny"] = PoolChannel(
        tiny,
        name="tiny",
        key=tiny_key,
        cache_tag={
            "model": "tiny",
            "params": tiny.params,
            "T": cfg["tiny_temperature"],
            "steps": cfg["tiny_steps"],
        },
    )
    chans["tiny"].tiny_history = tiny.history
    _LM_CACHE[key] = chans
    return chans


LM_OPERATORS: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...] = (
    ("single", ()),
    ("retry", (("max_rounds", 3),)),
    ("sc", (("n", 3),)),
    ("sc", (("n", 5),)),
    ("bon", (("n", 5),)),
    ("refine", (("rounds", 2),)),
    ("rateless", (("n_max", 5), ("rule", "either"))),
    ("fec", (("rate", 0.5),)),
)


def _lm_testbed(cfg: dict[str, Any], seed: int) -> dict[str, Any]:
    from neurips26.agents.channel_router import Feedback, SentenceEmbedder

    items = _lm_items(cfg)
    chans = _lm_channels(cfg)
    t0 = time.perf_counter()
    for ch in chans.values():
        ch.warm([t.prompt for t in items], cfg["pool"])
    # refinement prompts: critique of every distinct wrong pooled answer (round 1), then of the revisions
    critic = _lm_critic(cfg["critic_cost"])
    for name, ch in chans.items():
        if name == "tiny" or name not in cfg["refine_channels"]:
            continue  # the tiny model ignores feedback text (its pool serves the revision)
        frontier = {(t, s.answer) for t in items for s in ch.pools[t.prompt]}
        for k in range(1, cfg["refine_rounds"] + 1):
            prompts, nxt = [], set()
            for t, a in frontier:
                hint = critic(t, a)
                if hint is not None:
                    prompts.append((t, t.prompt + Feedback("critique", a, hint, round=k).render()))
            ch.warm([p for _, p in prompts], 1)
            nxt = {(t, ch.pools[p][0].answer) for t, p in prompts}
            frontier = nxt
    gen_s = time.perf_counter() - t0
    rng = np.random.default_rng([seed, 303])
    train, test = [], []
    for fam in ("gsm", "arith", "chain", "mc"):
        fam_items = [t for t in items if t.family == fam]
        order = rng.permutation(len(fam_items))
        half = len(fam_items) // 2
        train += [fam_items[i] for i in order[:half]]
        test += [fam_items[i] for i in order[half:]]
    if "embedder" not in _LM_CACHE:
        _LM_CACHE["embedder"] = SentenceEmbedder()
    ops = [
        (op, (("rounds", cfg["refine_rounds"]),) if op == "refine" else budget) for op, budget in LM_OPERATORS
    ]
    arms = [Arm(c, op, b) for c in chans for op, b in ops if op != "refine" or c in cfg["refine_channels"]]
    return {
        "train": train,
        "test": test,
        "channels": chans,
        "arms": arms,
        "judge": _lm_judge(cfg["judge_cost"], cfg["judge_sd"]),
        "critic": critic,
        "embedder": _LM_CACHE["embedder"],
        "reference": f"smol_t{int(round(10 * cfg['smol_temperatures'][0])):02d}",
        "info": {
            "generation_s": gen_s,
            "pool_prompts": {k: len(c.pools) for k, c in chans.items()},
            "tiny_params": int(chans["tiny"].base.params),
            "tiny_final_loss": chans["tiny"].tiny_history.get("final_loss", math.nan),
            "tiny_train_s": chans["tiny"].tiny_history.get("seconds", math.nan),
            "prices": {k: [c.price_in, c.price_out] for k, c in chans.items()},
        },
    }


# ================================================================================= closed forms
def _theory(cfg: dict[str, Any], seed: int) -> dict[str, float]:
    rng = np.random.default_rng([seed, 404])
    n_draws = cfg["mc_draws"]
    mse_err, cross_dev = 0.0, 0.0
    for _ in range(3):
        v = rng.uniform(0.2, 5.0, size=5)
        t = uniform_vs_weighted_threshold(v)
        for tau2 in (0.5 * t, 2.0 * t):
            mc, cf = simulate_averaging_mse(v, tau2, n_draws=n_draws, rng=rng), averaging_mse(v, tau2)
            mse_err = max(mse_err, abs(mc[0] / cf[0] - 1), abs(mc[1] / cf[1] - 1))
        x = empirical_crossover(v, list(np.linspace(0.4 * t, 1.6 * t, 25)), n_draws=n_draws, rng=rng)
        cross_dev = max(cross_dev, abs(x / t - 1))
    rho_err, correct, total = 0.0, 0, 0
    for gk in (-0.5, -0.2, 0.3, 0.6, 1.0, 1.4, 1.7, 2.3, 2.6, 3.0):
        rho = 1.0 - gk
        trs = [simulate_refinement(rho, 1.0, 8, noise=0.05, rng=rng) for _ in range(40)]
        if abs(rho) < 1.5:
            rho_err = max(rho_err, abs(estimate_contraction(trs) - rho))
        diverged = np.mean([abs(tr[-1]) > 1.0 for tr in trs]) > 0.5
        correct += int(diverged == (not 0 < gk < 2))
        total += 1
    return {
        "mse_rel_err": mse_err,
        "crossover_dev": cross_dev,
        "rho_err": rho_err,
        "boundary_acc": correct / total,
    }


# ======================================================================================== run
def _family_best(Q: np.ndarray, tasks: Sequence[Task], arms: Sequence[Arm]) -> dict[str, str]:
    out = {}
    for fam in dict.fromkeys(t.family for t in tasks):
        rows = [i for i, t in enumerate(tasks) if t.family == fam]
        out[fam] = arms[int(np.argmax(Q[rows].mean(0)))].name
    return out


def run(config: dict[str, Any], seed: int) -> SeedResult:
    """One seed: evaluate every fixed arm on train and test, fit the router, sweep lambda, score."""
    cfg = config
    bed = _sim_testbed(cfg, seed) if cfg["testbed"] == "sim" else _lm_testbed(cfg, seed)
    arms, chans = bed["arms"], bed["channels"]
    t0 = time.perf_counter()
    kw = dict(judge=bed["judge"], critic=bed["critic"], reference_channel=bed["reference"])
    Q_tr, C_tr = evaluate_arms(bed["train"], arms, chans, seed=2 * seed, **kw)
    Q_te, C_te = evaluate_arms(bed["test"], arms, chans, seed=2 * seed + 1, **kw)
    for ch in chans.values():
        if hasattr(ch, "reset"):
            ch.reset()
    eval_s = time.perf_counter() - t0

    # router settings (k, weighting) chosen by leave-one-out quality on the train split only
    train_prompts, prompts = [t.prompt for t in bed["train"]], [t.prompt for t in bed["test"]]
    m_train = len(train_prompts)
    k_grid = [k for k in cfg["k_grid"] if k <= m_train - 1] or [max(1, m_train - 1)]
    k_default = min(cfg["k"], max(1, m_train - 1))
    router = SemanticKNNRouter(bed["embedder"], k=k_default, weighting="softmax", temperature=cfg["tau_w"])
    router.fit(train_prompts, arms, Q_tr, C_tr)
    loo = {}
    for k in k_grid:
        for weighting in ("softmax", "uniform"):
            router.k, router.weighting = k, weighting
            loo[f"{weighting}_k{k}"] = router.loo_quality(0.0)
    chosen = max(loo, key=lambda key: (loo[key], -list(loo).index(key)))
    default = f"softmax_k{k_default}"
    rows = np.arange(len(prompts))
    fixed = np.stack([C_te.mean(0), Q_te.mean(0)], axis=1)
    best = strongest_fixed(fixed)
    singles = [j for j, a in enumerate(arms) if a.operator == "single"]
    single = max(singles, key=lambda j: (fixed[j, 1], -fixed[j, 0]))

    def sweep(setting: str) -> dict[str, Any]:
        weighting, k = setting.split("_k")
        router.k, router.weighting = int(k), weighting
        picks = router.route_curve(prompts, LAMBDAS)
        curve = np.array(
            [[lam, C_te[rows, p].mean(), Q_te[rows, p].mean()] for lam, p in zip(LAMBDAS, picks)]
        )
        return {
            "curve": curve,
            "mq": matched_quality_cost_reduction(curve, fixed, best),
            "mc": matched_cost_quality_gain(curve, fixed, best),
            "ms": matched_cost_quality_gain(curve, fixed, single),
            "occupancy": pareto_occupancy(curve[:, 1:], fixed),
        }

    spec_default = sweep(default)
    main = sweep(chosen)
    curve, mq, mc, ms, occupancy = main["curve"], main["mq"], main["mc"], main["ms"], main["occupancy"]
    latency = time_decisions(router, prompts[: cfg["latency_queries"]], lam=1.0)

    rng = np.random.default_rng([seed, 505])
    rand = rng.integers(0, len(arms), size=len(prompts))
    fam_best_test = _family_best(Q_te, bed["test"], arms)
    fam_idx = {f: [a.name for a in arms].index(n) for f, n in fam_best_test.items()}
    oracle = np.array([fam_idx[t.family] for t in bed["test"]])
    fam_best_train = _family_best(Q_tr, bed["train"], arms)
    theory = _theory(cfg, seed)

    metrics = {
        "cost_at_matched_quality": {
            METHOD: mq["router_cost"] if mq["matched"] else math.inf,
            "strongest_fixed": float(fixed[best, 0]),
        },
        "cost_reduction": {METHOD: mq["reduction"] if mq["matched"] else -math.inf},
        "quality_at_matched_cost": {
            METHOD: mc["router_quality"] if mc["matched"] else -math.inf,
            "strongest_fixed": float(fixed[best, 1]),
        },
        "quality_at_single_cost": {
            METHOD: ms["router_quality"] if ms["matched"] else -math.inf,
            "single_shot": float(fixed[single, 1]),
        },
        "pareto_occupancy": {METHOD: occupancy},
        "quality": {
            METHOD: float(curve[0, 2]),
            "strongest_fixed": float(fixed[best, 1]),
            "single_shot": float(fixed[single, 1]),
            "random_arm": float(Q_te[rows, rand].mean()),
            "oracle_family": float(Q_te[rows, oracle].mean()),
        },
        "cost": {
            METHOD: float(curve[0, 1]),
            "strongest_fixed": float(fixed[best, 0]),
            "single_shot": float(fixed[single, 0]),
            "random_arm": float(C_te[rows, rand].mean()),
            "oracle_family": float(C_te[rows, oracle].mean()),
        },
        "n_family_best": {"testbed": float(len(set(fam_best_test.values())))},
        "decision_ms": {METHOD: latency["median_ms"]},
        **{name: {"theory": value} for name, value in theory.items()},
    }
    budget = {a.name: dict(a.budget) for a in arms}
    info = {
        "testbed": cfg["testbed"],
        **bed["info"],
        "n_train": len(bed["train"]),
        "n_test": len(bed["test"]),
        "arms": [a.name for a in arms],
        "fixed_points": fixed.tolist(),
        "router_curve": curve.tolist(),
        "frontier": pareto_frontier(np.vstack([curve[:, 1:], fixed])).tolist(),
        "strongest_fixed": arms[best].name,
        "single_shot_arm": arms[single].name,
        "matched_quality": mq,
        "matched_cost": mc,
        "matched_single_cost": ms,
        "family_best_test": fam_best_test,
        "family_best_train": fam_best_train,
        "latency": latency,
        "eval_s": eval_s,
        "arm_budget": budget,
        "router": {
            "chosen": chosen,
            "tau_w": cfg["tau_w"],
            "lambdas": LAMBDAS,
            "loo_quality": loo,
            "embedder": type(bed["embedder"]).__name__,
        },
        "sweeps": {"router_k": sweep_record(k_grid, int(chosen.split("_k")[1]))},
        "router_spec_default": {
            "setting": default,
            "curve": spec_default["curve"].tolist(),
            "matched_quality": spec_default["mq"],
            "matched_cost": spec_default["mc"],
            "matched_single_cost": spec_default["ms"],
            "pareto_occupancy": spec_default["occupancy"],
        },
        "live_generations": {k: getattr(c, "live", 0) for k, c in chans.items()},
        "note": "lambda* is picked on the test curve as the spec's metric defines it (largest lambda whose router "
        "quality reaches the strongest fixed arm's); every fixed arm runs on the same items with the same rng "
        "stream per item (common random numbers).",
    }
    curves = {"router_cost": {METHOD: curve[:, 1].tolist()}, "router_quality": {METHOD: curve[:, 2].tolist()}}
    return SeedResult(metrics=metrics, curves=curves, info=info)


def plot(result: dict[str, Any], folder: Path) -> list[Path]:
    """Quality-cost plane of the first seed: fixed arms, the router's lambda sweep, the frontier."""
    plt = pyplot()
    info = result["info"][0]
    fixed = np.array(info["fixed_points"])
    curve = np.array(info["router_curve"])
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    ax.scatter(fixed[:, 0], fixed[:, 1], s=18, c="gray", label="fixed arms")
    ax.plot(curve[:, 1], curve[:, 2], "o-", ms=3, c="C0", label="router (lambda sweep)")
    best = info["arms"].index(info["strongest_fixed"])
    ax.scatter(
        [fixed[best, 0]],
        [fixed[best, 1]],
        s=60,
        marker="*",
        c="C3",
        label=f"strongest: {info['strongest_fixed']}",
    )
    ax.set_xscale("log")
    ax.set_xlabel("mean normalised cost (single shot on the reference channel = 1)")
    ax.set_ylabel("mean quality (test)")
    ax.legend(fontsize=7)
    ax.set_title(f"channel_router ({info['testbed']} testbed, seed 0)")
    return [save_figure(fig, folder, "channel_router_frontier", dpi=110)]


_SIM = {
    "testbed": "sim",
    "judge_cost": 30.0,
    "critic_cost": 30.0,
    "k": 10,
    "k_grid": [5, 10, 20, 40],
    "tau_w": 0.05,
    "latency_queries": 50,
    "threads": 1,
}
_LM = {
    "testbed": "lm",
    "n_per_family": 24,
    "data_seed": 0,
    "refine_rounds": 1,
    "refine_channels": ["smol_t02", "tiny"],
    "smol_temperatures": [0.2, 0.8],
    "max_new_tokens": 10,
    "batch_size": 16,
    "pool": 5,
    "tiny_temperature": 0.7,
    "tiny_hidden": 96,
    "tiny_layers": 2,
    "tiny_steps": 800,
    "tiny_examples": 6000,
    "judge_cost": 10.0,
    "judge_sd": 0.3,
    "critic_cost": 10.0,
    "k": 10,
    "k_grid": [5, 10, 20, 40],
    "tau_w": 0.05,
    "latency_queries": 50,
    "mc_draws": 200_000,
    "threads": 2,
}

CLAIM = Claim(
    slug="channel_router",
    claim=(
        "No fixed (channel, technique, budget) arm is best on every task family, and a semantic kNN router over "
        "arms with one cost weight lambda traces a quality-cost curve that occupies the empirical Pareto frontier, "
        "costs less than the strongest fixed technique at its quality and beats it at its cost."
    ),
    method=METHOD,
    baselines=BASELINES,
    references=REFERENCES,
    premises=(
        AtLeast("n_family_best", threshold=2.0, arm="testbed", label="no_dominant_arm"),
        AtLeast("quality", threshold=0.05, arm="single_shot", label="single_not_at_floor"),
        AtMost("quality", threshold=0.95, arm="strongest_fixed", label="not_at_ceiling"),
    ),
    criteria=(
        AtLeast("pareto_occupancy", threshold=0.8, label="pareto_occupancy"),
        Better(
            "cost_at_matched_quality",
            baseline="strongest_fixed",
            margin=0.0,
            higher_is_better=False,
            min_seeds=3,
            label="cheaper_at_matched_quality",
        ),
        AtLeast("cost_reduction", threshold=0.2, min_seeds=3, label="cost_reduction"),
        Better(
            "quality_at_matched_cost",
            baseline="strongest_fixed",
            margin=0.0,
            min_seeds=3,
            label="better_at_matched_cost",
        ),
        Better(
            "quality_at_single_cost",
            baseline="single_shot",
            margin=0.0,
            min_seeds=3,
            label="better_than_single",
        ),
        AtMost("mse_rel_err", threshold=0.02, arm="theory", kind="design", label="mse_closed_form"),
        AtMost("crossover_dev", threshold=0.1, arm="theory", kind="design", label="averaging_threshold"),
        AtMost("rho_err", threshold=0.05, arm="theory", kind="design", label="rho_recovery"),
        AtLeast("boundary_acc", threshold=1.0, arm="theory", kind="design", label="contraction_boundary"),
    ),
    headlines=(
        Headline(
            "Across six channel configurations on 69 hard tasks no fixed model-technique-budget choice dominates",
            criteria=("no_dominant_arm",),
        ),
        Headline(
            "On a 300-item hard split the router occupies the full empirical Pareto frontier",
            criteria=("pareto_occupancy",),
        ),
        Headline(
            "At matched quality the router's normalized cost is about 56% lower than the strongest fixed technique",
            criteria=("cheaper_at_matched_quality", "cost_reduction"),
        ),
        Headline(
            "At matched normalized cost quality is about 7% higher than the strongest fixed technique",
            criteria=("better_at_matched_cost",),
        ),
        Headline("Quality is 26% higher than single-shot decoding", criteria=("better_than_single",)),
        Headline(
            "Closed forms: a noise threshold above which uniform averaging beats quality weighting, and a "
            "contraction criterion for generator-critic refinement",
            criteria=("mse_closed_form", "averaging_threshold", "rho_recovery", "contraction_boundary"),
        ),
        Headline(
            "A contractive-to-divergent transition in generator-critic refinement occurs between 3B and 14B models",
            untested="no 3B or 14B models offline on 2 CPU cores; only the criterion itself is checked (design) and "
            "the sim testbed builds one over-correcting channel in by construction",
        ),
        Headline(
            "lambda = 3 gives higher quality at matched cost and lambda = 38 about 56% cost reduction; 29 "
            "dispatchable techniques",
            untested="the paper says these values are lineup-specific; our lambda* is reported in info but the "
            "arm set (24 arms: 3 channels x 8 techniques) differs",
        ),
        Headline(
            "Evaluated on MMLU, GSM8K and HumanEval with local and cloud models",
            untested="no such models or data sets offline; the full profile uses reasoning-gym items and SmolLM2",
        ),
    ),
    items={
        "quality_at_matched_cost": {"smoke": 60, "quick": 300, "full": 48},
        "quality_at_single_cost": {"smoke": 60, "quick": 300, "full": 48},
    },
    run=run,
    configs={
        "smoke": {**_SIM, "n_per_family": 20, "mc_draws": 200_000},
        "quick": {**_SIM, "n_per_family": 100, "mc_draws": 200_000},
        "full": _LM,
    },
    seeds={"smoke": (0,), "quick": (0, 1, 2), "full": (0, 1, 2)},
    implemented=(
        "neurips26.agents.channel_router: Channel over any sampler (prompt, n, temperature) -> completions, "
        "SimulatedChannel, HFChannel (transformers generate), Judge, Critic; operators O1 diversity_combining "
        "(majority / best-of-N / weighted vote), O2 hybrid_retransmission (retry, Chase, incremental redundancy), "
        "O3 generator_critic (critic-accept, plateau and contraction stops), O4 rateless_sampling (margin and "
        "Dirichlet-posterior stops), O5 redundant_verification (code rates 0.75 / 0.5 / 0.33), O6 adaptive_routing "
        "(pilot -> difficulty table); closed forms uniform_vs_weighted_threshold / averaging_mse and "
        "contraction_factor / estimate_contraction; SemanticKNNRouter (top-k cosine, softmax weights, "
        "argmax q_hat - lambda c_hat, ties to lower cost, arm mask, npz save/load) with HashingEmbedder and "
        "SentenceEmbedder (all-MiniLM-L6-v2). Arms: every channel x {single, retry, sc-3, sc-5, bon-5, refine, "
        "rateless, fec-0.5}; every arm runs every item with the same per-item rng (common random numbers) and "
        "the same judge/critic prices."
    ),
    differences=(
        "Quick profile: simulated channels (heterogeneity designed in, so it checks the mechanism and the metric "
        "code, not the paper's 56%/7%). Full profile: SmolLM2-135M-Instruct at T = 0.2 and 0.8 plus one "
        "character-level 2-layer tiny Llama trained from scratch on arithmetic (the spec's 2-3 tiny models cut to "
        "one for the 10-minute budget); 24 items per family x 4 families, half train / half test (spec 300/300); "
        "generations are pooled once (5 per prompt per channel, max 10 new tokens, plus one refinement round whose "
        "critique prompts are generated for every distinct wrong pooled answer) and the three seeds re-split the "
        "items, re-order the pools and redraw judge noise, so seeds are not independent generations. Refinement "
        "runs on SmolLM2 T = 0.2 and the tiny model only (budget); the tiny model ignores feedback text, so its "
        "revision is a fresh sample. LM cost counts generated tokens x model size (SmolLM2 = 1 per token, tiny = "
        "its parameter share), plus 10 per judge or critic call. Cost is normalised by the single-shot cost of a "
        "reference channel (the cheapest simulated channel; SmolLM2 at T = 0.2) on the same item, not per channel "
        "(per-channel normalisation would erase the price differences between channels). The router's k and "
        "weighting are chosen by leave-one-out quality on the train split from k in {5, 10, 20, 40} x {softmax "
        "(tau_w = 0.05), uniform}; the spec's default (k = 10, softmax) is reported in info['router_spec_default']. "
        "lambda* is read off the test curve (as the spec's metric defines it), and the strongest fixed arm is also "
        "picked on test; the other criteria compare at the fixed arm's cost or quality by interpolation along the "
        "router curve. Pareto occupancy counts every lambda point of the router, so a dense lambda grid raises it; "
        "the matched-cost and matched-quality criteria are the stricter tests. Judge = exact checker + Gaussian "
        "noise, critic = the checker's hint (an oracle-style verifier, cheaper than an LLM judge)."
    ),
    data=(
        "sim: 6 families x n items generated per seed (prompt = family template + family words + numbers; latent "
        "difficulty U(0, 1)), half train / half test per family. lm: reasoning-gym gsm_symbolic, basic_arithmetic "
        "(2-3 terms, <= 2 digits), chain_sum (2-3 terms), and a 4-option multiple-choice family built from "
        "basic_arithmetic items; tiny model trained on 6,000 reasoning-gym chain_sum/basic_arithmetic expressions "
        "from a disjoint generator seed."
    ),
    plot=plot,
    glossary={
        "cost_at_matched_quality": "router: normalised test cost at the largest lambda whose router quality reaches "
        "the strongest fixed arm's quality (linear interpolation toward the next lambda; inf if never reached); "
        "strongest_fixed: that arm's mean normalised cost",
        "cost_reduction": "1 - router cost_at_matched_quality / strongest fixed arm's cost (-inf if unmatched)",
        "quality_at_matched_cost": "router: best router quality at cost <= the strongest fixed arm's cost "
        "(upper envelope, linear interpolation); strongest_fixed: its mean test quality",
        "quality_at_single_cost": "as quality_at_matched_cost, at the cost of the best single-shot arm",
        "pareto_occupancy": "share of the joint (router lambda points + fixed arms) Pareto frontier on (mean cost, "
        "mean quality) that are router points",
        "quality": "mean test quality: router at lambda = 0, the strongest fixed arm, the best single-shot arm, a "
        "uniformly random arm per query, and the per-family best fixed arm chosen on test (oracle upper bound)",
        "cost": "mean normalised test cost of the same arms (single-shot on the reference channel = 1 per item)",
        "n_family_best": "number of distinct arms that are best (mean test quality) in some task family",
        "decision_ms": "median wall time of one routing decision (embedding + kNN + argmax), ms",
        "mse_rel_err": "max relative error of the closed-form MSEs (weighted, uniform) vs Monte Carlo, 3 random "
        "variance profiles (N = 5) x tau^2 in {0.5, 2} tau*^2",
        "crossover_dev": "max |empirical crossover / tau*^2 - 1| over the 3 profiles",
        "rho_err": "max |rho_hat - rho| over a gamma*kappa grid (|rho| < 1.5; 40 AR(1) trajectories of 8 rounds)",
        "boundary_acc": "share of gamma*kappa grid points where simulated refinement diverges (|e_8| > e_0) iff "
        "gamma*kappa is outside (0, 2)",
    },
)
