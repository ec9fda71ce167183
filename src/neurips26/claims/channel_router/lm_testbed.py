"""The language-model testbed of the channel-router claim: reasoning-gym items, SmolLM2 and tiny-LM channels with cached sample pools, judges and critics."""

from __future__ import annotations

import hashlib
import json
import math
import re
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from neurips26.agents.channel_router import (
    Arm,
    Channel,
    Critic,
    Judge,
    Sample,
    Task,
    normalize_answer,
)

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
