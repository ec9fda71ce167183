r"""The language-model testbed of the channel-router claim: reasoning-gym items, SmolLM2 and tiny-LM channels with
cached sample pools, and a real judge and critic: a separately trained verifier LM that scores an answer by its
likelihood (no access to the reference answer).

The judge's score of an answer :math:`a` to an arithmetic prompt with expression :math:`e` is the geometric-mean
probability of the answer's characters (and the end token) under the verifier :math:`p_v`:

.. math::

    J(e, a) = \exp\Big(\frac{1}{|a| + 1} \sum_{t=1}^{|a|+1} \log p_v(a_t \mid e{=}, a_{<t})\Big) \in [0, 1],

and the critic rejects :math:`a` (feedback "the answer a is likely wrong") when :math:`J(e, a) < \theta`.
"""

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
from neurips26.common.checks import check_int, check_probability

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
    """The arithmetic expression of a chain_sum / basic_arithmetic / multiple-choice prompt, or None."""
    first = prompt.split("\n")[0]
    m = (
        re.search(r"arithmetic problem:\s*(.+?)\s*=", prompt)
        or re.search(r"Calculate\s+(.+?)\.\s*$", first)
        or re.search(r"Which option equals\s+(.+?)\?\s*$", first)
    )
    if not m:
        return None
    expr = m.group(1).replace(" ", "")
    return expr if re.fullmatch(r"[0-9+\-*/()]+", expr) else None


#: The LM testbed's task families: (family, reasoning-gym generator, options). Fixed before any run.
LM_FAMILIES: tuple[tuple[str, str, dict[str, int]], ...] = (
    ("arith", "basic_arithmetic", {"min_terms": 2, "max_terms": 3, "max_digits": 2}),
    ("chain", "chain_sum", {"min_terms": 2, "max_terms": 3, "max_digits": 2}),
    ("chain_long", "chain_sum", {"min_terms": 4, "max_terms": 5, "max_digits": 2}),
)


def _lm_items(cfg: dict[str, Any]) -> list[Task]:
    from neurips26.common.tasks import ReasoningGymTask

    n = cfg["n_per_family"]
    out: list[Task] = []
    for fam, name, kw in LM_FAMILIES:
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

    ``role`` picks the config keys (``"tiny"``: the tiny channel; ``"verifier"``: the judge's model, a
    separately trained, larger model on another draw of expressions). Training expressions that occur
    in ``exclude`` (the testbed's items) are dropped, so neither model has seen an evaluated item.
    ``generate_batch(prompts, seed)`` answers the arithmetic expression found in each prompt (an empty
    completion with zero tokens when there is none: the channel is infeasible for that prompt);
    ``answer_logprob(pairs)`` is the mean log-probability of each answer's characters and end token.
    """

    ALPHABET = "0123456789+-*/()="

    def __init__(
        self,
        cfg: dict[str, Any],
        temperature: float,
        price_out: float,
        *,
        role: str = "tiny",
        exclude: frozenset[str] = frozenset(),
    ):
        import torch

        from neurips26.common.models import build_tiny_lm
        from neurips26.common.tokenizers import char_tokenizer
        from neurips26.common.training import train_or_load

        if role not in ("tiny", "verifier"):
            raise ValueError(f"role must be 'tiny' or 'verifier', got {role!r}")
        self.tok = char_tokenizer(self.ALPHABET)
        self.temperature, self.price_in, self.price_out = temperature, 0.0, price_out
        self.role, self._exclude = role, exclude
        self._seed = cfg["data_seed"] + (7 if role == "tiny" else 11)
        data = self._examples(cfg)
        lm_kw = {
            "hidden_size": cfg[f"{role}_hidden"],
            "intermediate_size": 2 * cfg[f"{role}_hidden"],
            "num_hidden_layers": cfg[f"{role}_layers"],
        }
        key = {
            "alphabet": self.ALPHABET,
            "n_train": cfg[f"{role}_examples"],
            "seed": self._seed,
            "families": [list(f[:2]) + [sorted(f[2].items())] for f in LM_FAMILIES],
            "exclude": hashlib.sha256(json.dumps(sorted(exclude)).encode()).hexdigest()[:16],
            **lm_kw,
        }
        self.model, self.history = train_or_load(
            f"channel-router-{role}",
            key,
            lambda: build_tiny_lm("llama", vocab_size=len(self.tok), seed=self._seed, **lm_kw),
            data,
            steps=cfg[f"{role}_steps"],
            batch_size=64,
            lr=3e-3,
            seed=self._seed,
        )
        self.model.eval()
        self.params = sum(p.numel() for p in self.model.parameters())
        self._torch = torch

    def _examples(self, cfg: dict[str, Any]):
        def make():
            import reasoning_gym as rg

            out = []
            per = cfg[f"{self.role}_examples"] // len(LM_FAMILIES)
            for j, (_, name, kw) in enumerate(LM_FAMILIES):
                ds = rg.create_dataset(name, size=per, seed=self._seed + 100 * j, **kw)
                for i in range(per):
                    expr = _expression(ds[i]["question"])
                    if expr is None or expr in self._exclude:
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

    def answer_logprob(self, pairs: Sequence[tuple[str, str]], batch_size: int = 256) -> list[float]:
        """Mean log-probability of ``answer`` + end token after ``expression=``, one value per pair.

        Shapes: a batch of ``B`` right-padded sequences ``(B, L)`` -> logits ``(B, L, V)``; the value of
        row ``b`` averages the answer tokens' log-probabilities (prompt and padding masked out).
        """
        torch = self._torch
        check_int("batch_size", batch_size, low=1)
        for pair in pairs:
            if not (isinstance(pair, tuple) and len(pair) == 2 and all(isinstance(x, str) for x in pair)):
                raise TypeError(f"pairs must hold (expression, answer) string tuples, got {pair!r}")
        out: list[float] = []
        self.tok.padding_side = "right"
        for start in range(0, len(pairs), batch_size):
            chunk = pairs[start : start + batch_size]
            heads = [len(self.tok(f"{e}=")["input_ids"]) for e, _ in chunk]
            seqs = [self.tok(f"{e}={a}")["input_ids"] + [self.tok.eos_token_id] for e, a in chunk]
            width = max(len(q) for q in seqs)
            ids = torch.full((len(seqs), width), self.tok.pad_token_id, dtype=torch.long)
            mask = torch.zeros((len(seqs), width), dtype=torch.long)
            for b, q in enumerate(seqs):
                ids[b, : len(q)] = torch.tensor(q)
                mask[b, : len(q)] = 1
            with torch.no_grad():
                logp = self.model(input_ids=ids, attention_mask=mask).logits.float().log_softmax(-1)
            tok_lp = logp[:, :-1].gather(-1, ids[:, 1:, None]).squeeze(-1)  # (B, L - 1)
            for b, (h, q) in enumerate(zip(heads, seqs)):
                out.append(float(tok_lp[b, h - 1 : len(q) - 1].mean()))
        return out


_INT = re.compile(r"-?\d+")


class VerifierJudge:
    """A real judge: a verifier LM's likelihood of the answer given the prompt's expression (no reference).

    ``score(task, answer)`` is :math:`\\exp` of :meth:`TinyArithmeticLM.answer_logprob` (in ``[0, 1]``);
    an answer that is not an integer scores 0; a prompt without a parseable expression scores 0.5
    (the judge abstains). Scores are memoised per (expression, answer); :meth:`prefetch` fills the memo
    in batches.
    """

    def __init__(self, lm: TinyArithmeticLM):
        if not callable(getattr(lm, "answer_logprob", None)):
            raise TypeError(
                f"lm must have answer_logprob(pairs) (a TinyArithmeticLM), got {type(lm).__name__}"
            )
        self.lm = lm
        self.memo: dict[tuple[str, str], float] = {}
        self.calls = 0

    def prefetch(self, pairs: Sequence[tuple[Task, str]]) -> None:
        todo = sorted(
            {(e, a) for t, a in pairs if (e := _expression(t.prompt)) is not None and _INT.fullmatch(a)}
            - set(self.memo)
        )
        for key, lp in zip(todo, self.lm.answer_logprob(todo)):
            self.memo[key] = math.exp(lp)

    def score(self, task: Task, answer: str) -> float:
        expr = _expression(task.prompt)
        if expr is None:
            return 0.5
        if not _INT.fullmatch(answer or ""):
            return 0.0
        key = (expr, answer)
        if key not in self.memo:
            self.calls += 1
            self.memo[key] = math.exp(self.lm.answer_logprob([key])[0])
        return self.memo[key]


def judge_auroc(scores: Sequence[float], labels: Sequence[bool]) -> float:
    """Area under the ROC curve of ``scores`` for ``labels`` (Mann-Whitney, ties count one half); NaN if one
    class is empty."""
    s, y = np.asarray(scores, dtype=float), np.asarray(labels)
    if s.ndim != 1 or y.shape != s.shape:
        raise ValueError(f"scores and labels must be 1-D of one length, got shapes {s.shape} and {y.shape}")
    if not np.isfinite(s).all():
        raise ValueError("scores must be finite")
    if y.size and y.dtype != bool and not np.isin(y, (0, 1)).all():
        raise ValueError("labels must be booleans (or 0/1)")
    y = y.astype(bool)
    pos, neg = s[y], s[~y]
    if len(pos) == 0 or len(neg) == 0:
        return math.nan
    greater = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return float(greater / (len(pos) * len(neg)))


def _lm_judge(verifier: VerifierJudge, cost: float) -> Judge:
    return Judge(verifier.score, cost=cost, name="verifier")


def verifier_critic(verifier: VerifierJudge, cost: float, threshold: float) -> Critic:
    """Reject an answer the verifier scores below ``threshold``; the hint names the answer, never the truth."""
    if not isinstance(verifier, VerifierJudge):
        raise TypeError(f"verifier must be a VerifierJudge, got {type(verifier).__name__}")
    threshold = check_probability("threshold", threshold)

    def critique(task: Task, answer: str) -> str | None:
        if verifier.score(task, answer) >= threshold:
            return None
        return f"The answer {answer or '(none)'} is likely wrong."

    return Critic(critique, cost=cost, name="verifier-critic")


_LM_CACHE: dict[str, Any] = {}


def _lm_channels(cfg: dict[str, Any], items: Sequence[Task]) -> dict[str, Any]:
    """SmolLM2 at two temperatures and the tiny model, each wrapped in a pool, and the verifier judge (built
    once per process). SmolLM2 runs in the CPU's matmul dtype (bf16 where the CPU has bf16 units)."""
    key = json.dumps(
        {
            k: cfg[k]
            for k in sorted(cfg)
            if k.startswith(("smol", "tiny", "verifier", "data", "max_new", "n_per"))
        }
    )
    if key in _LM_CACHE:
        return _LM_CACHE[key]
    from neurips26.agents.channel_router import HFChannel
    from neurips26.common.models import load_pretrained
    from neurips26.common.precision import matmul_dtype

    dtype = matmul_dtype()
    model, tok = load_pretrained("smollm2-135m")
    model = model.to(dtype)
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
            hf,
            name=name,
            cache_tag={
                "model": "smollm2-135m",
                "T": t,
                "max_new": cfg["max_new_tokens"],
                "dtype": str(dtype),
                "batch": cfg["batch_size"],
            },
        )
    exclude = frozenset(e for t in items if (e := _expression(t.prompt)) is not None)
    tiny = TinyArithmeticLM(cfg, cfg["tiny_temperature"], price_out=1.0, role="tiny", exclude=exclude)
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
            "final_loss": round(float(tiny.history.get("final_loss", math.nan)), 6),
        },
    )
    verifier = TinyArithmeticLM(cfg, 1.0, price_out=0.0, role="verifier", exclude=exclude)
    out = {"channels": chans, "tiny": tiny, "verifier": VerifierJudge(verifier)}
    _LM_CACHE[key] = out
    return out


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
    built = _lm_channels(cfg, items)
    chans, verifier = built["channels"], built["verifier"]
    t0 = time.perf_counter()
    for ch in chans.values():
        ch.warm([t.prompt for t in items], cfg["pool"])
    verifier.prefetch(
        [(t, s.answer) for ch in chans.values() for t in items for s in ch.pools[ch.key(t.prompt)]]
    )
    # refinement prompts: the verifier critic's feedback on every distinct rejected pooled answer (round 1),
    # then on the revisions
    critic = verifier_critic(verifier, cfg["critic_cost"], cfg["critic_threshold"])
    for name, ch in chans.items():
        if name == "tiny" or name not in cfg["refine_channels"]:
            continue  # the tiny model ignores feedback text (its pool serves the revision)
        frontier = {(t, s.answer) for t in items for s in ch.pools[t.prompt]}
        for k in range(1, cfg["refine_rounds"] + 1):
            prompts = []
            for t, a in sorted(frontier, key=lambda ta: (ta[0].prompt, ta[1])):
                hint = critic(t, a)
                if hint is not None:
                    prompts.append((t, t.prompt + Feedback("critique", a, hint, round=k).render()))
            ch.warm([p for _, p in prompts], 1)
            frontier = {(t, ch.pools[p][0].answer) for t, p in prompts}
            verifier.prefetch(sorted(frontier, key=lambda ta: (ta[0].prompt, ta[1])))
    gen_s = time.perf_counter() - t0
    rng = np.random.default_rng([seed, 303])
    train, test = [], []
    for fam in [f for f, *_ in LM_FAMILIES] + ["mc"]:
        fam_items = [t for t in items if t.family == fam]
        order = rng.permutation(len(fam_items))
        half = len(fam_items) // 2
        train += [fam_items[i] for i in order[:half]]
        test += [fam_items[i] for i in order[half:]]
    # the judge's discrimination on the test split: every distinct pooled (item, answer) pair of every channel
    pairs = sorted(
        {
            (t.prompt, s.answer, s.answer == t.answer)
            for ch in chans.values()
            for t in test
            for s in ch.pools[ch.key(t.prompt)]
        }
    )
    by_prompt = {t.prompt: t for t in test}
    auroc = judge_auroc([verifier.score(by_prompt[p], a) for p, a, _ in pairs], [y for *_, y in pairs])
    if "embedder" not in _LM_CACHE:
        _LM_CACHE["embedder"] = SentenceEmbedder()
    ops = [
        (op, (("rounds", cfg["refine_rounds"]),) if op == "refine" else budget) for op, budget in LM_OPERATORS
    ]
    arms = [Arm(c, op, b) for c in chans for op, b in ops if op != "refine" or c in cfg["refine_channels"]]
    tiny, ver = built["tiny"], verifier.lm
    return {
        "train": train,
        "test": test,
        "channels": chans,
        "arms": arms,
        "judge": _lm_judge(verifier, cfg["judge_cost"]),
        "critic": critic,
        "embedder": _LM_CACHE["embedder"],
        "reference": f"smol_t{int(round(10 * cfg['smol_temperatures'][0])):02d}",
        "judge_auroc": auroc,
        "info": {
            "generation_s": gen_s,
            "pool_prompts": {k: len(c.pools) for k, c in chans.items()},
            "tiny_params": int(tiny.params),
            "tiny_final_loss": tiny.history.get("final_loss", math.nan),
            "tiny_train_s": tiny.history.get("seconds", math.nan),
            "verifier_params": int(ver.params),
            "verifier_final_loss": ver.history.get("final_loss", math.nan),
            "verifier_train_s": ver.history.get("seconds", math.nan),
            "judge_pairs": len(pairs),
            "judge_positive_share": float(np.mean([y for *_, y in pairs])) if pairs else math.nan,
            "judge_live_calls": verifier.calls,
            "prices": {k: [c.price_in, c.price_out] for k, c in chans.items()},
        },
    }
