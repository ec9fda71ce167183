"""Scale-out path of the channel-coded reliability router: concurrent sampling and parallel evaluation.

Paper
-----
"A Communication-Theoretic Framework for LLM Agents: Cost-Aware Adaptive Reliability" (Omidvar &
Akhlaghi, arXiv 2605.09121); seed file ``004_01f475bc147a144d.txt``, abstract beginning "Agents built
on large language models". The paper prices reliability in channel uses; this module only changes
*where* the channel uses run, never what they return. It implements the spec's "Scale-out path"
(``shared/specs/channel_router.md``): operators issuing their samples concurrently, and the
(items x arms) evaluation sweep split across worker processes, both reproducing the sequential
numbers exactly with fixed seeds.

Method
------
* :class:`ConcurrentSampler` wraps a single-sample sampler ``(prompt, 1, temperature) -> [completion]``
  (a local model, an OpenAI-compatible server through :class:`OpenAICompletionsSampler`, ...) and
  serves ``(prompt, n, temperature, rng=...)`` by issuing the ``n`` calls on a
  ``concurrent.futures.ThreadPoolExecutor``. Sample ``k`` of a call gets its own seed, derived from one
  draw ``b`` of the operator's generator:

  .. math::

      s_k = \\mathrm{SeedSequence}([b, k]) \\quad (k = 0, \\dots, n - 1), \\qquad
      y_k = \\mathrm{sampler}(x, 1, T; s_k)_0,

  so the completions do not depend on thread timing and come back in the order ``k``; with
  ``workers=1`` the same calls run one after another in the calling thread (the sequential reference).
* :func:`parallel_evaluate` computes the quality and normalised-cost matrices of
  :func:`~neurips26.agents.channel_router.router.evaluate_arms` with worker processes
  (``concurrent.futures.ProcessPoolExecutor``). ``evaluate_arms`` seeds every (item ``i``, arm)
  pair with ``default_rng([seed, i])``: the generator depends on the item's global row index and not
  on the arm's column, and each arm's run is independent of the others. The arms are therefore split
  into contiguous column blocks, each worker calls ``evaluate_arms`` unchanged on all items and its
  block, and the blocks are concatenated:

  .. math::

      Q = [\\,Q^{(1)} \\mid \\dots \\mid Q^{(B)}\\,], \\qquad C = [\\,C^{(1)} \\mid \\dots \\mid C^{(B)}\\,],

  which equals the sequential ``(Q, C)`` bit for bit (the per-item single-shot cost that normalises
  ``C`` is recomputed in every block from the same generator, so it is the same number).

Start method: ``"fork"`` (the default on Linux) hands the channels, judge, critic and operators to the
workers through the fork itself, so closures, lambdas and loaded models need no pickling; ``"spawn"``
pickles them (module-level callables only) and is checked up front. Every worker sets
``torch.set_num_threads(threads)`` (default 1) when torch is loaded, and ``OMP_NUM_THREADS`` for later
imports. Stateful channels must give the same draws whatever the order of the (item, arm) runs, as
``evaluate_arms`` already assumes for common random numbers.

Shapes
------
``ConcurrentSampler(prompt, n, T)`` -> list of ``n`` completions (str or ``Sample``), in order.
``parallel_evaluate(tasks, arms, ...)`` -> ``(Q, C)``, each float64 ``(len(tasks), len(arms))``.
"""

from __future__ import annotations

import inspect
import json
import os
import threading
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from neurips26.agents.channel_router.channels import Channel, Task
from neurips26.agents.channel_router.router import Arm, evaluate_arms
from neurips26.common.checks import check_float, check_int
from neurips26.common.pool import contiguous_spans, map_spans, resolve_start_method

_SEED_SPACE = 2**63 - 1


# ------------------------------------------------------------------------------------ concurrent sampling
class ConcurrentSampler:
    """Serve ``n`` samples of one channel call as ``n`` concurrent single-sample calls.

    Parameters
    ----------
    sampler : callable
        ``sampler(prompt: str, 1, temperature: float, **seeding) -> [completion]`` returning exactly
        one completion (a str or a :class:`~neurips26.agents.channel_router.channels.Sample`). When
        its signature has a ``seed`` keyword it receives an int per sample (as OpenAI-compatible
        servers take); when it has ``rng`` it receives a ``numpy.random.Generator`` per sample;
        otherwise it is called without seeding (reproducible only if the sampler is deterministic).
        It must be safe to call from several threads at once.
    workers : int
        Threads issuing the calls (>= 1); ``1`` runs them in order in the calling thread.
    seed : int
        Base seed used when a call brings no ``rng`` (every such call then repeats the same draws).

    Notes
    -----
    One value ``b`` is drawn from the caller's ``rng`` per call whatever ``n`` is; sample ``k`` uses
    ``SeedSequence([b, k])``. Use as ``Channel(ConcurrentSampler(f, workers=8), ...)``: ``Channel``
    passes the operator's generator as ``rng``. Call :meth:`close` (or use ``with``) to stop the
    thread pool.
    """

    def __init__(self, sampler: Callable[..., Sequence[Any]], *, workers: int = 4, seed: int = 0):
        if not callable(sampler):
            raise TypeError(
                "sampler must be callable (prompt, n, temperature) -> completions, "
                f"got {type(sampler).__name__}"
            )
        self.sampler = sampler
        self.workers = check_int("workers", workers, low=1)
        self.seed = check_int("seed", seed, low=0)
        try:
            params = inspect.signature(sampler).parameters
        except (TypeError, ValueError):
            params = {}
        self.seeding = "rng" if "rng" in params else "seed" if "seed" in params else None
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._pid = os.getpid()

    def __repr__(self) -> str:
        return f"ConcurrentSampler(workers={self.workers}, seeding={self.seeding!r})"

    def sample_seeds(self, n: int, rng: np.random.Generator | None = None) -> list[int]:
        """The per-sample seeds ``s_0 .. s_{n-1}`` of one call (draws one value from ``rng``)."""
        check_int("n", n, low=1)
        if rng is not None and not isinstance(rng, np.random.Generator):
            raise TypeError(f"rng must be a numpy.random.Generator or None, got {type(rng).__name__}")
        base = int(rng.integers(_SEED_SPACE)) if rng is not None else self.seed
        return [int(np.random.SeedSequence([base, k]).generate_state(1, np.uint64)[0] >> 1) for k in range(n)]

    def _one(self, prompt: str, temperature: float, seed: int) -> Any:
        if self.seeding == "rng":
            out = self.sampler(prompt, 1, temperature, rng=np.random.default_rng(seed))
        elif self.seeding == "seed":
            out = self.sampler(prompt, 1, temperature, seed=seed)
        else:
            out = self.sampler(prompt, 1, temperature)
        out = list(out)
        if len(out) != 1:
            raise ValueError(f"the wrapped sampler must return exactly 1 completion per call, got {len(out)}")
        return out[0]

    def _executor(self) -> ThreadPoolExecutor:
        if self._pid != os.getpid():  # a forked copy: the parent's threads do not exist here
            self._pool, self._lock, self._pid = None, threading.Lock(), os.getpid()
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="channel-sample")
            return self._pool

    def __call__(
        self, prompt: str, n: int, temperature: float, rng: np.random.Generator | None = None
    ) -> list[Any]:
        if not isinstance(prompt, str):
            raise TypeError(f"prompt must be a str, got {type(prompt).__name__}")
        temperature = check_float("temperature", temperature, 0.0)
        seeds = self.sample_seeds(n, rng)
        if self.workers == 1 or n == 1:
            return [self._one(prompt, temperature, s) for s in seeds]
        futures = [self._executor().submit(self._one, prompt, temperature, s) for s in seeds]
        return [f.result() for f in futures]

    def __getstate__(self) -> dict[str, Any]:  # picklable for spawn: the pool and lock stay behind
        state = dict(self.__dict__)
        state.update(_pool=None, _lock=None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock, self._pid = threading.Lock(), os.getpid()

    def close(self) -> None:
        """Shut the thread pool down (a later call starts a new one)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)

    def __enter__(self) -> ConcurrentSampler:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class OpenAICompletionsSampler:
    """A sampler over an OpenAI-compatible ``/v1/completions`` endpoint (vLLM, SGLang, a cloud API).

    ``sampler(prompt, n, temperature, seed=None) -> list[str]`` posts ``{"model", "prompt", "n",
    "temperature", "max_tokens", "seed"}`` as JSON and returns ``choices[*].text`` ordered by
    ``index``. Only the standard library is used (``urllib``); wrap it in :class:`ConcurrentSampler`
    to issue a channel's samples concurrently with one seed each.

    Parameters
    ----------
    base_url : str
        Server root, e.g. ``"http://127.0.0.1:8000"`` (``/v1/completions`` is appended).
    model : str
        Model name sent with every request.
    max_tokens : int
        Generation budget per completion.
    timeout : float
        Seconds per request.
    headers : mapping, optional
        Extra HTTP headers (e.g. an authorisation header supplied by the caller).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        max_tokens: int = 32,
        timeout: float = 30.0,
        headers: Mapping[str, str] | None = None,
    ):
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must be an http(s) URL, got {base_url!r}")
        if not isinstance(model, str) or not model:
            raise ValueError(f"model must be a non-empty str, got {model!r}")
        self.url = base_url.rstrip("/") + "/v1/completions"
        self.model = model
        self.max_tokens = check_int("max_tokens", max_tokens, low=1)
        self.timeout = check_float("timeout", timeout, 0.0, low_open=True)
        self.headers = {"Content-Type": "application/json", **dict(headers or {})}

    def __call__(self, prompt: str, n: int, temperature: float, seed: int | None = None) -> list[str]:
        check_int("n", n, low=1)
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": prompt,
            "n": n,
            "temperature": float(temperature),
            "max_tokens": self.max_tokens,
        }
        if seed is not None:
            body["seed"] = int(seed)
        req = urllib.request.Request(self.url, data=json.dumps(body).encode(), headers=self.headers)
        with urllib.request.urlopen(req, timeout=self.timeout) as resp:
            data = json.loads(resp.read().decode())
        choices = data.get("choices") if isinstance(data, dict) else None
        if not isinstance(choices, list) or len(choices) != n:
            raise ValueError(f"server at {self.url} returned {choices!r} for n={n}; expected {n} choices")
        return [c["text"] for c in sorted(choices, key=lambda c: c.get("index", 0))]


# ----------------------------------------------------------------------------------- process pool plumbing
def _evaluate_block(w: Mapping[str, Any], block: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    start, stop = block
    return evaluate_arms(
        w["tasks"], w["arms"][start:stop], w["channels"], w["judge"], w["critic"], w["seed"], **w["kw"]
    )


def parallel_evaluate(
    tasks: Sequence[Task],
    arms: Sequence[Arm],
    channels: Mapping[str, Channel],
    judge: Any = None,
    critic: Any = None,
    seed: int = 0,
    *,
    scorer: Callable[[Task, str], float] | None = None,
    reference_channel: str | None = None,
    operators: Mapping[str, Callable[..., Any]] | None = None,
    workers: int = 2,
    blocks: int | None = None,
    start_method: str | None = None,
    threads: int = 1,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`~neurips26.agents.channel_router.router.evaluate_arms` split over worker processes.

    Parameters
    ----------
    tasks, arms, channels, judge, critic, seed, scorer, reference_channel, operators
        Exactly as in ``evaluate_arms`` (same meaning, same defaults).
    workers : int
        Worker processes (>= 1). ``1`` calls ``evaluate_arms`` in this process.
    blocks : int, optional
        Number of contiguous arm blocks handed out (default ``workers``; at most ``len(arms)``). More
        blocks balance uneven arm costs better; each block recomputes the per-item single-shot
        reference cost once.
    start_method : {"fork", "spawn", "forkserver"}, optional
        Default ``"fork"`` where available (nothing is pickled), else ``"spawn"``.
    threads : int
        ``torch.set_num_threads`` inside each worker (>= 1).

    Returns
    -------
    (Q, C) : two float64 arrays of shape (len(tasks), len(arms)), equal to ``evaluate_arms``'s.
    """
    workers = check_int("workers", workers, low=1)
    threads = check_int("threads", threads, low=1)
    seed = check_int("seed", seed, low=0)
    method = resolve_start_method(start_method)
    if isinstance(tasks, (str, bytes)) or not isinstance(tasks, Sequence):
        raise TypeError(f"tasks must be a sequence of Task, got {type(tasks).__name__}")
    tasks, arms = list(tasks), list(arms)
    if not tasks:
        raise ValueError("tasks must not be empty (nothing to evaluate)")
    if not arms:
        raise ValueError("arms must not be empty")
    for i, t in enumerate(tasks):
        if not isinstance(t, Task):
            raise TypeError(f"tasks[{i}] must be a Task, got {type(t).__name__}")
    for j, a in enumerate(arms):
        if not isinstance(a, Arm):
            raise TypeError(f"arms[{j}] must be an Arm, got {type(a).__name__}")
    if not isinstance(channels, Mapping) or not channels:
        raise ValueError("channels must be a non-empty mapping name -> Channel")
    n_blocks = min(len(arms), workers if blocks is None else check_int("blocks", blocks, low=1))
    kw = dict(scorer=scorer, reference_channel=reference_channel, operators=operators)
    if workers == 1 or n_blocks == 1:
        return evaluate_arms(tasks, arms, channels, judge, critic, seed, **kw)
    spans = contiguous_spans(len(arms), n_blocks)
    payload = dict(tasks=tasks, arms=arms, channels=channels, judge=judge, critic=critic, seed=seed, kw=kw)
    blocks_out = map_spans(
        _evaluate_block, spans, payload, workers=workers, threads=threads, start_method=method,
        what="the channels, judge, critic and operators",
    )  # fmt: skip
    Q = np.zeros((len(tasks), len(arms)))
    C = np.zeros((len(tasks), len(arms)))
    for (start, stop), (q, c) in zip(spans, blocks_out):
        Q[:, start:stop], C[:, start:stop] = q, c
    return Q, C


__all__ = ["ConcurrentSampler", "OpenAICompletionsSampler", "parallel_evaluate"]
