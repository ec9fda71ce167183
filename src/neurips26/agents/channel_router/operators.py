"""The six reliability operators (O1-O6) and the answer combiners they share.

Every operator has one signature,
``op(task, channels, *, judge=None, critic=None, rng, **budget) -> Result``, and charges every
channel call (``tokens_in * price_in + tokens_out * price_out``) and every judge/critic call (its
``cost``) to the returned :class:`Result`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np

from neurips26.agents.channel_router.channels import (
    Channel,
    Feedback,
    Result,
    Sample,
    Task,
    as_critic,
    as_judge,
)
from neurips26.common.checks import check_choice, check_float, check_int


# ------------------------------------------------------------------------------------------ combiners
def plurality_vote(answers: Sequence[str]) -> tuple[str, int]:
    """Equal-gain combining: the most frequent answer; ties go to the answer seen earliest.

    Returns ``(answer, index of its first occurrence)``.
    """
    if len(answers) == 0:
        raise ValueError("answers must not be empty")
    return weighted_vote(answers, [1.0] * len(answers))


def weighted_vote(answers: Sequence[str], weights: Sequence[float]) -> tuple[str, int]:
    """Maximal-ratio combining: the answer with the largest total weight; ties go to the earliest.

    Weights must be finite and non-negative. Returns ``(answer, index of its first occurrence)``.
    """
    if len(answers) == 0:
        raise ValueError("answers must not be empty")
    if len(weights) != len(answers):
        raise ValueError(f"weights has {len(weights)} entries, answers {len(answers)}")
    totals: dict[str, float] = {}
    first: dict[str, int] = {}
    for i, (a, w) in enumerate(zip(answers, weights)):
        w = float(w)
        if not math.isfinite(w) or w < 0:
            raise ValueError(f"weights must be finite and >= 0, got weights[{i}] = {w}")
        totals[a] = totals.get(a, 0.0) + w
        first.setdefault(a, i)
    best = max(totals.values())
    tol = 1e-12 * max(1.0, abs(best))
    winner = min((a for a, t in totals.items() if t >= best - tol), key=lambda a: first[a])
    return winner, first[winner]


def best_of_n(answers: Sequence[str], scores: Sequence[float]) -> tuple[str, int]:
    """Selection combining: the answer with the highest judge score; ties go to the earliest sample."""
    if len(answers) == 0:
        raise ValueError("answers must not be empty")
    if len(scores) != len(answers):
        raise ValueError(f"scores has {len(scores)} entries, answers {len(answers)}")
    arr = np.asarray(scores, dtype=float)
    if not np.isfinite(arr).all():
        raise ValueError("scores must be finite")
    i = int(np.argmax(arr))  # argmax returns the first maximum
    return answers[i], i


def logprob_weights(logprobs: Sequence[float | None], temperature: float = 0.1) -> np.ndarray:
    """``softmax(logprob / T_w)``; a missing log-probability counts as the smallest one present."""
    check_float("temperature", temperature, 0.0, low_open=True)
    vals = [v for v in logprobs if v is not None]
    if not vals:
        return np.full(len(logprobs), 1.0 / max(1, len(logprobs)))
    low = min(vals)
    z = np.array([low if v is None else v for v in logprobs], dtype=float) / temperature
    z = np.exp(z - z.max())
    return z / z.sum()


# --------------------------------------------------------------------------------------------- ledger
class _Ledger:
    """Accumulates the cost of channel, judge and critic calls and a trace."""

    def __init__(self, judge: Any, critic: Any, rng: np.random.Generator):
        self.judge, self.critic, self.rng = as_judge(judge), as_critic(critic), rng
        self.cost, self.calls, self.tokens = 0.0, 0, 0
        self.trace: list[dict[str, Any]] = []

    def draw(
        self, channel: Channel, task: Task, n: int = 1, feedback: Feedback | None = None
    ) -> list[Sample]:
        samples = channel.sample(task, n, rng=self.rng, feedback=feedback)
        for s in samples:
            self.cost += s.cost
            self.calls += 1
            self.tokens += s.tokens_in + s.tokens_out
            self.trace.append({"event": "sample", "channel": s.channel, "answer": s.answer, "cost": s.cost})
        return samples

    def score(self, task: Task, answer: str) -> float:
        if self.judge is None:
            raise ValueError("this operator needs a judge (judge=None was given)")
        value = self.judge(task, answer, rng=self.rng)
        self.cost += self.judge.cost
        self.trace.append({"event": "judge", "answer": answer, "score": value})
        return value

    def critique(self, task: Task, answer: str) -> str | None:
        if self.critic is None:
            raise ValueError("this operator needs a critic (critic=None was given)")
        fb = self.critic(task, answer, rng=self.rng)
        self.cost += self.critic.cost
        self.trace.append({"event": "critic", "answer": answer, "accept": fb is None})
        return fb

    def result(self, answer: str) -> Result:
        return Result(answer, self.cost, self.calls, self.tokens, self.trace)


def _check_common(task: Any, channels: Any, rng: Any) -> list[Channel]:
    if not isinstance(task, Task):
        raise TypeError(f"task must be a Task, got {type(task).__name__}")
    if isinstance(channels, Channel):
        channels = [channels]
    channels = list(channels) if channels is not None else []
    if not channels:
        raise ValueError("channels must hold at least one Channel")
    for i, c in enumerate(channels):
        if not isinstance(c, Channel):
            raise TypeError(f"channels[{i}] must be a Channel, got {type(c).__name__}")
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    return channels


# ---------------------------------------------------------------------------------------- operators
def single_shot(
    task: Task, channels: Sequence[Channel], *, judge=None, critic=None, rng: np.random.Generator
) -> Result:
    """Baseline: one sample from the first channel."""
    channels = _check_common(task, channels, rng)
    led = _Ledger(judge, critic, rng)
    return led.result(led.draw(channels[0], task)[0].answer)


def diversity_combining(
    task: Task,
    channels: Sequence[Channel],
    *,
    judge=None,
    critic=None,
    rng: np.random.Generator,
    n: int = 5,
    combine: str = "majority",
    weights: str = "judge",
    weight_temperature: float = 0.1,
) -> Result:
    """O1: draw ``n`` samples spread round-robin over ``channels`` and combine them.

    ``combine="majority"`` (equal-gain, self-consistency), ``"best"`` (selection combining =
    best-of-N, needs a judge) or ``"weighted"`` (maximal-ratio: vote weighted by judge scores, or by
    ``softmax(logprob / weight_temperature)`` when ``weights="logprob"``). Ties go to the earliest sample.
    """
    channels = _check_common(task, channels, rng)
    check_int("n", n, low=1)
    check_choice("combine", combine, ("majority", "best", "weighted"))
    check_choice("weights", weights, ("judge", "logprob"))
    weight_temperature = check_float("weight_temperature", weight_temperature, 0.0, low_open=True)
    if not math.isfinite(weight_temperature):
        raise ValueError("weight_temperature must be finite")
    led = _Ledger(judge, critic, rng)
    samples: list[Sample] = []
    for i in range(n):
        samples.extend(led.draw(channels[i % len(channels)], task))
    answers = [s.answer for s in samples]
    if combine == "majority":
        answer, _ = plurality_vote(answers)
    elif combine == "best":
        answer, _ = best_of_n(answers, [led.score(task, a) for a in answers])
    else:
        if weights == "judge":
            w = [led.score(task, a) for a in answers]
        else:
            w = list(logprob_weights([s.logprob for s in samples], weight_temperature))
        answer, _ = weighted_vote(answers, w)
    return led.result(answer)


def hybrid_retransmission(
    task: Task,
    channels: Sequence[Channel],
    *,
    judge=None,
    critic=None,
    rng: np.random.Generator,
    max_rounds: int = 5,
    threshold: float = 0.5,
    mode: str = "chase",
) -> Result:
    """O2: HARQ. One sample per round; stop at the first round whose judge score is ``>= threshold``.

    Without an accepted round the answer is: ``mode="retry"`` the last answer; ``"chase"`` (Chase
    combining) the plurality vote over all rounds; ``"ir"`` (incremental redundancy: each new round
    sees the critic's feedback on the previous answer) the last answer. Round ``r`` uses channel
    ``channels[min(r, len(channels) - 1)]`` (escalation when several are given).
    """
    channels = _check_common(task, channels, rng)
    check_int("max_rounds", max_rounds, low=1)
    check_float("threshold", threshold, 0.0, 1.0)
    check_choice("mode", mode, ("retry", "chase", "ir"))
    led = _Ledger(judge, critic, rng)
    if led.judge is None:
        raise ValueError("hybrid_retransmission needs a judge (judge=None was given)")
    answers: list[str] = []
    feedback = None
    for r in range(max_rounds):
        ch = channels[min(r, len(channels) - 1)]
        s = led.draw(ch, task, feedback=feedback)[0]
        answers.append(s.answer)
        if led.score(task, s.answer) >= threshold:
            led.trace.append({"event": "accept", "round": r + 1})
            return led.result(s.answer)
        if mode == "ir" and r + 1 < max_rounds:
            hint = led.critique(task, s.answer) if led.critic is not None else None
            feedback = Feedback("retry", s.answer, hint or "", round=r + 1)
    if mode == "chase":
        return led.result(plurality_vote(answers)[0])
    return led.result(answers[-1])


def generator_critic(
    task: Task,
    channels: Sequence[Channel],
    *,
    judge=None,
    critic=None,
    rng: np.random.Generator,
    rounds: int = 5,
    plateau: float = 0.01,
    contraction_check: bool = True,
) -> Result:
    """O3: iterative generator-critic decoding (self-refine as turbo decoding).

    ``answer_0`` from ``channels[0]``; for ``k = 1..rounds`` the critic comments on ``answer_{k-1}``
    and the generator revises. Stops when the critic accepts (returns ``None``), when the judge score
    changes by less than ``plateau`` twice in a row, or (``contraction_check``) when the least-squares
    contraction estimate of the judge-gap trajectory ``e_k = 1 - score_k`` is ``>= 1`` after at least
    three rounds; in that last case the best-scored answer so far is returned. Without a judge only the
    critic's acceptance and ``rounds`` stop the loop.
    """
    from neurips26.agents.channel_router.theory import estimate_contraction

    channels = _check_common(task, channels, rng)
    check_int("rounds", rounds, low=0)
    check_float("plateau", plateau, 0.0)
    led = _Ledger(judge, critic, rng)
    if led.critic is None:
        raise ValueError("generator_critic needs a critic (critic=None was given)")
    gen = channels[0]
    answer = led.draw(gen, task)[0].answer
    scores = [led.score(task, answer)] if led.judge is not None else []
    history = [answer]
    flat = 0
    for k in range(1, rounds + 1):
        hint = led.critique(task, answer)
        if hint is None:
            led.trace.append({"event": "stop", "why": "critic accepted", "round": k})
            break
        answer = led.draw(gen, task, feedback=Feedback("critique", answer, str(hint), round=k))[0].answer
        history.append(answer)
        if led.judge is None:
            continue
        scores.append(led.score(task, answer))
        flat = flat + 1 if abs(scores[-1] - scores[-2]) < plateau else 0
        if flat >= 2:
            led.trace.append({"event": "stop", "why": "plateau", "round": k})
            break
        if contraction_check and len(scores) >= 4:
            gaps = [1.0 - s for s in scores]
            if sum(g * g for g in gaps[:-1]) > 0 and estimate_contraction([gaps]) >= 1.0:
                led.trace.append({"event": "stop", "why": "non-contractive", "round": k})
                answer = history[int(np.argmax(scores))]
                break
    return led.result(answer)


def rateless_posterior(counts: Sequence[int], rng: np.random.Generator, n_draws: int = 256) -> float:
    """Monte-Carlo probability that the leading answer is the mode of the answer distribution.

    Dirichlet posterior with ``alpha = 1 + count`` for every seen answer plus one unseen-answer
    category with ``alpha = 1``; ``n_draws`` draws.
    """
    c = np.asarray(counts, dtype=float)
    if c.ndim != 1 or c.size == 0 or (c < 0).any():
        raise ValueError("counts must be a non-empty 1-D sequence of non-negative counts")
    alpha = np.concatenate([1.0 + c, [1.0]])
    draws = rng.dirichlet(alpha, size=n_draws)
    lead = int(np.argmax(c))
    return float(np.mean(draws.argmax(axis=1) == lead))


def rateless_sampling(
    task: Task,
    channels: Sequence[Channel],
    *,
    judge=None,
    critic=None,
    rng: np.random.Generator,
    margin: int = 2,
    delta: float = 0.1,
    n_max: int = 8,
    n_draws: int = 256,
    rule: str = "margin",
) -> Result:
    """O4: rateless (fountain-style) sampling: keep sampling until the vote is confident.

    After each sample (round-robin over ``channels``) the leader's vote margin (top count minus
    runner-up count) is checked: ``rule="margin"`` stops when it reaches ``margin``; ``"posterior"``
    stops when :func:`rateless_posterior` ``>= 1 - delta``; ``"either"`` uses both; ``"judge"`` stops
    at the first sample whose judge score is ``>= 0.5``. Never more than ``n_max`` samples; the answer
    is the plurality vote (earliest on ties), or for ``"judge"`` the last sample's answer.
    """
    channels = _check_common(task, channels, rng)
    check_int("margin", margin, low=1)
    check_float("delta", delta, 0.0, 1.0, low_open=True, high_open=True)
    check_int("n_max", n_max, low=1)
    check_int("n_draws", n_draws, low=1)
    check_choice("rule", rule, ("margin", "posterior", "either", "judge"))
    led = _Ledger(judge, critic, rng)
    answers: list[str] = []
    for i in range(n_max):
        a = led.draw(channels[i % len(channels)], task)[0].answer
        answers.append(a)
        if rule == "judge":
            if led.score(task, a) >= 0.5:
                break
            continue
        counts: dict[str, int] = {}
        for x in answers:
            counts[x] = counts.get(x, 0) + 1
        ordered = sorted(counts.values(), reverse=True)
        lead_margin = ordered[0] - (ordered[1] if len(ordered) > 1 else 0)
        stop = rule in ("margin", "either") and lead_margin >= margin
        if not stop and rule in ("posterior", "either"):
            stop = rateless_posterior(list(counts.values()), rng, n_draws) >= 1.0 - delta
        if stop:
            led.trace.append({"event": "stop", "n": i + 1, "margin": lead_margin})
            break
    if rule == "judge":
        return led.result(answers[-1])
    return led.result(plurality_vote(answers)[0])


def redundant_verification(
    task: Task,
    channels: Sequence[Channel],
    *,
    judge=None,
    critic=None,
    rng: np.random.Generator,
    rate: float = 0.5,
) -> Result:
    """O5: structured redundant verification (forward error correction with parity checks).

    Code rate ``r = answer budget / (answer + parity budget)``: ``r = 0.75`` adds one short check
    (the channel is asked whether the answer is correct; a "no" triggers one re-derivation and the
    judge decides between the two, or the re-derivation wins without a judge); ``r = 0.5`` adds one
    independent re-derivation and ``r = 1/3`` two. Decoding: majority over the answer and its
    re-derivations, ties broken by the judge (highest score; earliest without a judge).
    """
    channels = _check_common(task, channels, rng)
    rate = check_float("rate", rate, 0.0, 1.0, low_open=True, high_open=True)
    led = _Ledger(judge, critic, rng)
    ch = channels[0]
    first = led.draw(ch, task)[0].answer
    if rate > 0.6:
        verdict = led.draw(ch, task, feedback=Feedback("verify", first))[0].answer
        if verdict.startswith("y"):
            return led.result(first)
        second = led.draw(channels[-1], task)[0].answer
        if led.judge is None:
            return led.result(second)
        s1, s2 = led.score(task, first), led.score(task, second)
        return led.result(first if s1 >= s2 else second)
    n_parity = 1 if rate > 0.4 else 2
    answers = [first]
    for j in range(n_parity):
        answers.append(led.draw(channels[(j + 1) % len(channels)], task)[0].answer)
    counts: dict[str, int] = {}
    for a in answers:
        counts[a] = counts.get(a, 0) + 1
    top = max(counts.values())
    tied = [a for a in dict.fromkeys(answers) if counts[a] == top]
    if len(tied) == 1 or led.judge is None:
        return led.result(tied[0])
    scores = [led.score(task, a) for a in tied]
    return led.result(best_of_n(tied, scores)[0])


DEFAULT_ACM_TABLE: tuple[tuple[float, str, int, Mapping[str, Any]], ...] = (
    (0.5, "accept", 0, {}),
    (1.0, "sc", -1, {"n": 5}),
)


def adaptive_routing(
    task: Task,
    channels: Sequence[Channel],
    *,
    judge=None,
    critic=None,
    rng: np.random.Generator,
    table: Sequence[tuple[float, str, int, Mapping[str, Any]]] = DEFAULT_ACM_TABLE,
) -> Result:
    """O6: difficulty-adaptive routing (adaptive coding and modulation).

    A pilot (one sample from ``channels[0]`` + judge score) estimates the difficulty
    ``d = 1 - score``. ``table`` rows ``(upper_bound, operator, channel_index, budget)`` sorted by
    ``upper_bound`` map ``d`` to the first row with ``d <= upper_bound``; ``operator="accept"``
    keeps the pilot answer, any other name runs ``OPERATORS[name]`` on ``channels[channel_index]``
    with ``budget``. The pilot's cost is included.
    """
    channels = _check_common(task, channels, rng)
    rows = list(table)
    if not rows:
        raise ValueError("table must hold at least one (upper_bound, operator, channel_index, budget) row")
    bounds = [float(r[0]) for r in rows]
    if bounds != sorted(bounds) or bounds[-1] < 1.0:
        raise ValueError(f"table upper bounds must be sorted and end at >= 1, got {bounds}")
    led = _Ledger(judge, critic, rng)
    if led.judge is None:
        raise ValueError("adaptive_routing needs a judge for its pilot (judge=None was given)")
    pilot = led.draw(channels[0], task)[0].answer
    d = 1.0 - led.score(task, pilot)
    _, name, idx, budget = next(r for r in rows if d <= float(r[0]))
    led.trace.append({"event": "pilot", "difficulty": d, "dispatch": name})
    if name == "accept":
        return led.result(pilot)
    check_choice("operator", name, [k for k in OPERATORS if k != "acm"])
    sub = OPERATORS[name](task, [channels[idx]], judge=led.judge, critic=led.critic, rng=rng, **dict(budget))
    led.cost += sub.cost
    led.calls += sub.n_calls
    led.tokens += sub.tokens
    led.trace.extend(sub.trace)
    return led.result(sub.answer)


#: Operator name -> callable with the shared signature.
OPERATORS: dict[str, Callable[..., Result]] = {
    "single": single_shot,
    "retry": partial(hybrid_retransmission, mode="retry"),
    "sc": partial(diversity_combining, combine="majority"),
    "bon": partial(diversity_combining, combine="best"),
    "wbon": partial(diversity_combining, combine="weighted"),
    "harq_cc": partial(hybrid_retransmission, mode="chase"),
    "harq_ir": partial(hybrid_retransmission, mode="ir"),
    "refine": generator_critic,
    "rateless": rateless_sampling,
    "fec": redundant_verification,
    "acm": adaptive_routing,
}

__all__ = [
    "plurality_vote",
    "weighted_vote",
    "best_of_n",
    "logprob_weights",
    "single_shot",
    "diversity_combining",
    "hybrid_retransmission",
    "generator_critic",
    "rateless_posterior",
    "rateless_sampling",
    "redundant_verification",
    "adaptive_routing",
    "DEFAULT_ACM_TABLE",
    "OPERATORS",
]
