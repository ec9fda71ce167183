"""The channel abstraction: an LLM sampled at a temperature as a noisy discrete channel ``p(y | x)``.

A :class:`Channel` wraps any sampler callable ``sampler(prompt, n, temperature) -> completions`` and
turns completions into :class:`Sample` records (text, parsed answer, token counts, cost).
:class:`SimulatedChannel` draws answers from a parametric accuracy/confusion model (no language model);
:class:`HFChannel` wraps a ``transformers`` causal LM. :class:`Judge` scores an answer in ``[0, 1]``;
:class:`Critic` returns feedback (``None`` = accept).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from neurips26.common.checks import check_float, check_int

_NUM = re.compile(r"-?\d+(?:\.\d+)?")


def normalize_answer(text: Any) -> str:
    """Map a completion to a comparable answer: the last number in it, else the first word, lower-cased.

    ``None`` and empty text give ``""`` (an answer that matches nothing but itself).
    """
    if text is None:
        return ""
    text = str(text).strip()
    if not text:
        return ""
    nums = _NUM.findall(text.replace(",", ""))
    if nums:
        value = float(nums[-1])
        return str(int(value)) if value == int(value) and abs(value) < 1e15 else repr(value)
    word = text.split()[0].strip(".,;:!?()[]{}\"'").lower()
    return word


@dataclass(frozen=True)
class Task:
    """One query: the prompt, its reference answer (when known) and metadata.

    ``family`` names the task family (used by per-family reports and by simulated channels);
    ``meta`` carries anything a channel or checker needs (e.g. a latent difficulty).
    """

    prompt: str
    answer: str | None = None
    family: str = ""
    meta: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        if not isinstance(self.prompt, str):
            raise TypeError(f"prompt must be a str, got {type(self.prompt).__name__}")


@dataclass(frozen=True)
class Sample:
    """One channel use: generated text, normalised answer, optional log-probability and token counts."""

    text: str
    answer: str
    logprob: float | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    channel: str = ""
    cost: float = 0.0


@dataclass(frozen=True)
class Feedback:
    """What an operator sends back to a channel together with the prompt.

    ``kind``: ``"critique"`` (revise ``answer`` using ``hint``), ``"verify"`` (answer yes/no: is
    ``answer`` correct?) or ``"retry"`` (incremental redundancy: try again knowing ``answer`` failed).
    ``round`` counts refinement rounds from 1.
    """

    kind: str
    answer: str
    hint: str = ""
    round: int = 1

    def render(self) -> str:
        if self.kind == "verify":
            return f"\nProposed answer: {self.answer}\nIs the proposed answer correct? Reply yes or no.\n"
        note = f" {self.hint}" if self.hint else ""
        return f"\nA previous answer was {self.answer}.{note} Give a corrected final answer.\n"


@dataclass
class Result:
    """What an operator returns: final answer, total cost, number of channel calls, tokens and a trace."""

    answer: str
    cost: float
    n_calls: int
    tokens: int
    trace: list[dict[str, Any]] = field(default_factory=list)


def _whitespace_tokens(text: str) -> int:
    return max(1, len(str(text).split()))


class Channel:
    """A sampler callable seen as a noisy channel with per-token prices.

    Parameters
    ----------
    sampler : callable
        ``sampler(prompt: str, n: int, temperature: float) -> list[str]`` (``n`` completions). It may
        also accept an ``rng`` keyword (a ``numpy.random.Generator``) for reproducible draws; it is
        passed when the signature has it.
    name : str
        Channel identifier (used in arms and traces).
    temperature : float
        Sampling temperature (>= 0) handed to the sampler.
    price_in, price_out : float
        Cost per prompt token and per generated token (>= 0).
    answer_parser : callable
        Completion text -> comparable answer (default :func:`normalize_answer`).
    count_tokens : callable
        Text -> token count (default: whitespace words, at least 1).
    """

    def __init__(
        self,
        sampler: Callable[..., Sequence[Any]],
        *,
        name: str = "channel",
        temperature: float = 0.7,
        price_in: float = 0.0,
        price_out: float = 1.0,
        answer_parser: Callable[[str], str] = normalize_answer,
        count_tokens: Callable[[str], int] = _whitespace_tokens,
    ):
        if not callable(sampler):
            raise TypeError(
                f"sampler must be callable (prompt, n, temperature) -> completions, got {type(sampler).__name__}"
            )
        if not callable(answer_parser):
            raise TypeError(f"answer_parser must be callable, got {type(answer_parser).__name__}")
        if not callable(count_tokens):
            raise TypeError(f"count_tokens must be callable, got {type(count_tokens).__name__}")
        if not isinstance(name, str) or not name:
            raise ValueError(f"name must be a non-empty str, got {name!r}")
        self.sampler = sampler
        self.name = name
        self.temperature = check_float("temperature", temperature, 0.0)
        self.price_in = check_float("price_in", price_in, 0.0)
        self.price_out = check_float("price_out", price_out, 0.0)
        if not (
            math.isfinite(self.price_in) and math.isfinite(self.price_out) and math.isfinite(self.temperature)
        ):
            raise ValueError("temperature, price_in and price_out must be finite")
        self.answer_parser = answer_parser
        self.count_tokens = count_tokens
        try:
            import inspect

            self._takes_rng = "rng" in inspect.signature(sampler).parameters
        except (TypeError, ValueError):
            self._takes_rng = False

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, temperature={self.temperature:g})"

    def price(self, tokens_in: int, tokens_out: int) -> float:
        """Cost of one call: ``tokens_in * price_in + tokens_out * price_out``."""
        return tokens_in * self.price_in + tokens_out * self.price_out

    def _texts(self, prompt: str, n: int, rng: np.random.Generator | None) -> list[Any]:
        if self._takes_rng:
            out = self.sampler(prompt, n, self.temperature, rng=rng)
        else:
            out = self.sampler(prompt, n, self.temperature)
        out = list(out)
        if len(out) != n:
            raise ValueError(
                f"sampler of channel {self.name!r} returned {len(out)} completions, {n} requested"
            )
        return out

    def sample(
        self,
        task: Task,
        n: int = 1,
        *,
        rng: np.random.Generator | None = None,
        feedback: Feedback | None = None,
    ) -> list[Sample]:
        """Draw ``n`` samples for ``task`` (with ``feedback`` appended to the prompt when given)."""
        check_int("n", n, low=1)
        prompt = task.prompt if feedback is None else task.prompt + feedback.render()
        tokens_in = self.count_tokens(prompt)
        out = []
        for item in self._texts(prompt, n, rng):
            if isinstance(item, Sample):
                cost = self.price(item.tokens_in, item.tokens_out)
                out.append(
                    Sample(
                        item.text, item.answer, item.logprob, item.tokens_in, item.tokens_out, self.name, cost
                    )
                )
                continue
            if not isinstance(item, str):
                raise TypeError(
                    f"sampler of channel {self.name!r} must return str completions, got {type(item).__name__}"
                )
            t_out = self.count_tokens(item)
            answer = self.answer_parser(item)
            out.append(Sample(item, answer, None, tokens_in, t_out, self.name, self.price(tokens_in, t_out)))
        return out


class SimulatedChannel(Channel):
    """A channel whose answers come from a parametric model instead of a language model.

    The probability of a correct answer is ``accuracy_fn(task)``; a wrong answer is drawn from
    ``confusion(task, rng)``. Refinement feedback moves the error ``e = 1 - p`` by the linear model of
    the contraction criterion, ``e_k = min(1, |1 - gamma * kappa|^k e_0)`` (``kappa``: critic
    reliability, ``gamma``: responsiveness), so ``gamma * kappa > 2`` over-corrects. A ``"verify"``
    request answers ``yes`` iff the proposed answer is right, flipped with probability ``verify_error``.

    Parameters
    ----------
    accuracy_fn : callable
        ``task -> p in [0, 1]``.
    confusion : callable
        ``(task, rng) -> wrong answer string``.
    token_model : callable
        ``(task, rng) -> (tokens_in, tokens_out)`` for one call.
    prices : (float, float)
        ``(price_in, price_out)``.
    gamma, kappa : float
        Generator responsiveness and critic reliability of this channel (refinement model).
    logprob_noise : float
        Standard deviation of the Gaussian noise on the reported log-probability (a confidence
        signal: ``log p`` for the correct answer, ``log(1 - p)`` - 1 for a wrong one, plus noise).
    """

    def __init__(
        self,
        accuracy_fn: Callable[[Task], float],
        confusion: Callable[[Task, np.random.Generator], str],
        token_model: Callable[[Task, np.random.Generator], tuple[int, int]],
        prices: tuple[float, float] = (0.0, 1.0),
        *,
        name: str = "sim",
        temperature: float = 0.7,
        gamma: float = 1.0,
        kappa: float = 0.5,
        verify_error: float = 0.2,
        logprob_noise: float = 1.0,
    ):
        for arg, fn in (("accuracy_fn", accuracy_fn), ("confusion", confusion), ("token_model", token_model)):
            if not callable(fn):
                raise TypeError(f"{arg} must be callable, got {type(fn).__name__}")
        if len(prices) != 2:
            raise ValueError(f"prices must be (price_in, price_out), got {prices!r}")
        super().__init__(
            lambda p, n, t: [""] * n,
            name=name,
            temperature=temperature,
            price_in=prices[0],
            price_out=prices[1],
        )
        self.accuracy_fn, self.confusion, self.token_model = accuracy_fn, confusion, token_model
        self.gamma = check_float("gamma", gamma, 0.0)
        self.kappa = check_float("kappa", kappa, -1.0, 1.0)
        self.verify_error = check_float("verify_error", verify_error, 0.0, 1.0)
        self.logprob_noise = check_float("logprob_noise", logprob_noise, 0.0)

    def p_correct(self, task: Task, feedback: Feedback | None = None) -> float:
        p = float(np.clip(self.accuracy_fn(task), 0.0, 1.0))
        if feedback is not None and feedback.kind in ("critique", "retry"):
            rho = abs(1.0 - self.gamma * self.kappa)
            p = 1.0 - min(1.0, (1.0 - p) * rho**feedback.round)
        return p

    def sample(self, task, n=1, *, rng=None, feedback=None):
        check_int("n", n, low=1)
        if rng is None:
            raise ValueError("SimulatedChannel.sample needs rng (a numpy.random.Generator)")
        out = []
        truth = "" if task.answer is None else str(task.answer)
        for _ in range(n):
            t_in, t_out = self.token_model(task, rng)
            if feedback is not None and feedback.kind == "verify":
                t_out = max(1, t_out // 3)
                right = feedback.answer == truth
                says_yes = right != (rng.random() < self.verify_error)
                text = "yes" if says_yes else "no"
                out.append(Sample(text, text, None, t_in, t_out, self.name, self.price(t_in, t_out)))
                continue
            p = self.p_correct(task, feedback)
            ok = rng.random() < p
            answer = truth if ok else str(self.confusion(task, rng))
            base = math.log(max(p, 1e-6)) if ok else math.log(max(1.0 - p, 1e-6)) - 1.0
            logprob = base + self.logprob_noise * float(rng.standard_normal())
            out.append(Sample(answer, answer, logprob, t_in, t_out, self.name, self.price(t_in, t_out)))
        return out


class HFChannel(Channel):
    """A ``transformers`` causal LM as a channel (``generate(do_sample=True, temperature=T)``).

    Parameters
    ----------
    model : transformers.PreTrainedModel
        A causal LM in eval mode.
    codec : tokenizer
        Its tokenizer (``__call__``, ``decode``, ``pad_token_id``, optional chat template).
    price_in, price_out : float
        Per-token prices (e.g. proportional to the parameter count).
    answer_parser : callable
        Completion -> answer (default :func:`normalize_answer`).
    max_new_tokens : int
        Generation budget per call.
    chat : bool
        Wrap the prompt in the tokenizer's chat template when it has one.
    """

    def __init__(
        self,
        model: Any,
        codec: Any,
        price_in: float = 0.0,
        price_out: float = 1.0,
        answer_parser: Callable[[str], str] = normalize_answer,
        max_new_tokens: int = 32,
        *,
        name: str = "hf",
        temperature: float = 0.7,
        chat: bool = True,
        batch_size: int = 8,
    ):
        if not hasattr(model, "generate"):
            raise TypeError(
                f"model must be a transformers causal LM with generate(), got {type(model).__name__}"
            )
        if not callable(codec):
            raise TypeError(f"codec must be a tokenizer (callable), got {type(codec).__name__}")
        self.model, self.codec = model, codec
        self.max_new_tokens = check_int("max_new_tokens", max_new_tokens, low=1)
        self.batch_size = check_int("batch_size", batch_size, low=1)
        self.chat = bool(chat) and getattr(codec, "chat_template", None) is not None
        super().__init__(
            self._generate,
            name=name,
            temperature=temperature,
            price_in=price_in,
            price_out=price_out,
            answer_parser=answer_parser,
        )

    def _encode(self, prompt: str) -> str:
        if self.chat:
            return self.codec.apply_chat_template(
                [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
            )
        return prompt

    def generate_batch(self, prompts: Sequence[str], *, seed: int, n: int = 1) -> list[Sample]:
        """``n`` sampled completions per prompt (batched, left-padded), prompt-major order.

        With ``n > 1`` each prompt is prefilled once and its key/value cache is repeated ``n`` times
        (``DynamicCache.batch_repeat_interleave``) before sampling, so the prompt is not recomputed per
        sample. Every sample is charged the full prompt (``tokens_in``) as a separate API call would be.
        """
        import torch
        from transformers import DynamicCache

        check_int("n", n, low=1)
        out: list[Sample] = []
        old_side = getattr(self.codec, "padding_side", "left")
        self.codec.padding_side = "left"
        per = max(1, self.batch_size // n)
        try:
            for start in range(0, len(prompts), per):
                chunk = [self._encode(p) for p in prompts[start : start + per]]
                enc = self.codec(chunk, return_tensors="pt", padding=True, add_special_tokens=not self.chat)
                ids, mask = enc["input_ids"], enc["attention_mask"]
                kwargs: dict[str, Any] = dict(
                    do_sample=self.temperature > 0, max_new_tokens=self.max_new_tokens
                )
                if self.temperature > 0:
                    kwargs.update(temperature=self.temperature, top_k=0, top_p=1.0)
                with torch.random.fork_rng(devices=[]), torch.no_grad():
                    torch.manual_seed(seed + start)
                    if n > 1 and ids.shape[1] > 1:
                        cache = DynamicCache(config=self.model.config)
                        # positions as generate() computes them for left-padded rows
                        positions = (mask.long().cumsum(-1) - 1).clamp(min=0)
                        self.model(
                            input_ids=ids[:, :-1],
                            attention_mask=mask[:, :-1],
                            position_ids=positions[:, :-1],
                            past_key_values=cache,
                            use_cache=True,
                        )
                        cache.batch_repeat_interleave(n)
                        kwargs["past_key_values"] = cache
                    ids, mask = ids.repeat_interleave(n, 0), mask.repeat_interleave(n, 0)
                    gen = self.model.generate(
                        input_ids=ids, attention_mask=mask, pad_token_id=self.codec.pad_token_id, **kwargs
                    )
                new = gen[:, ids.shape[1] :]
                eos = self.codec.eos_token_id
                for row, t_in in zip(new, mask.sum(1).tolist()):
                    toks = row.tolist()
                    if eos in toks:
                        toks = toks[: toks.index(eos) + 1]
                    text = self.codec.decode(toks, skip_special_tokens=True)
                    t_out = len(toks)
                    cost = self.price(int(t_in), t_out)
                    out.append(
                        Sample(text, self.answer_parser(text), None, int(t_in), t_out, self.name, cost)
                    )
        finally:
            self.codec.padding_side = old_side
        return out

    def _generate(
        self, prompt: str, n: int, temperature: float, rng: np.random.Generator | None = None
    ) -> list[Sample]:
        seed = int(rng.integers(2**31 - 1)) if rng is not None else 0
        return self.generate_batch([prompt], seed=seed, n=n)


def _accepts_rng(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` takes an ``rng`` keyword (judges and critics may be stochastic)."""
    import inspect

    try:
        return "rng" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


class Judge:
    """A verifier/LLM judge/programmatic checker: ``score(task, answer) -> [0, 1]`` with a cost per call."""

    def __init__(self, fn: Callable[..., float], cost: float = 0.0, *, name: str = "judge"):
        if not callable(fn):
            raise TypeError(f"judge fn must be callable (task, answer) -> score, got {type(fn).__name__}")
        self.fn, self.name = fn, name
        self.cost = check_float("cost", cost, 0.0)
        self._takes_rng = _accepts_rng(fn)

    def __call__(self, task: Task, answer: str, rng: np.random.Generator | None = None) -> float:
        score = self.fn(task, answer, rng=rng) if self._takes_rng else self.fn(task, answer)
        score = float(score)
        if not math.isfinite(score):
            raise ValueError(f"judge {self.name!r} returned a non-finite score {score}")
        return min(1.0, max(0.0, score))


class Critic:
    """A critic: ``feedback(task, answer) -> str | None`` (``None`` = accept) with a cost per call."""

    def __init__(self, fn: Callable[..., str | None], cost: float = 0.0, *, name: str = "critic"):
        if not callable(fn):
            raise TypeError(
                f"critic fn must be callable (task, answer) -> str | None, got {type(fn).__name__}"
            )
        self.fn, self.name = fn, name
        self.cost = check_float("cost", cost, 0.0)
        self._takes_rng = _accepts_rng(fn)

    def __call__(self, task: Task, answer: str, rng: np.random.Generator | None = None) -> str | None:
        return self.fn(task, answer, rng=rng) if self._takes_rng else self.fn(task, answer)


def as_judge(judge: Any) -> Judge | None:
    """``None``, a :class:`Judge`, or a plain callable wrapped as a zero-cost judge."""
    if judge is None or isinstance(judge, Judge):
        return judge
    return Judge(judge)


def as_critic(critic: Any) -> Critic | None:
    if critic is None or isinstance(critic, Critic):
        return critic
    return Critic(critic)


__all__ = [
    "normalize_answer",
    "Task",
    "Sample",
    "Feedback",
    "Result",
    "Channel",
    "SimulatedChannel",
    "HFChannel",
    "Judge",
    "Critic",
    "as_judge",
    "as_critic",
]
