"""Tests of neurips26.agents.channel_router.parallel: concurrent sampling and the 2-worker evaluation.

Worker processes use the ``fork`` start method on purpose: the simulated channels below are closures
(not picklable), fork hands them over without pickling and starts in milliseconds. ``spawn`` is only
exercised on its error path (unpicklable inputs are refused before any process starts).
"""

from __future__ import annotations

import json
import math
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from neurips26.agents.channel_router import (
    Arm,
    Channel,
    ConcurrentSampler,
    Critic,
    Judge,
    OpenAICompletionsSampler,
    SimulatedChannel,
    Task,
    diversity_combining,
    evaluate_arms,
    parallel_evaluate,
    rateless_sampling,
)

FORK = "fork"

OPS = (
    ("single", ()),
    ("retry", (("max_rounds", 3),)),
    ("sc", (("n", 3),)),
    ("bon", (("n", 3),)),
    ("refine", (("rounds", 2),)),
    ("rateless", (("n_max", 6),)),
    ("fec", (("rate", 0.5),)),
)


def _tasks(n: int, seed: int) -> list[Task]:
    rng = np.random.default_rng([seed, 7])
    return [
        Task(f"add {int(a)} and {int(b)} (item {i})", str(int(a + b)), "fam" + str(i % 2), {"d": float(d)})
        for i, (a, b, d) in enumerate(
            zip(rng.integers(0, 50, n), rng.integers(0, 50, n), rng.uniform(0, 1, n))
        )
    ]


def _sim(name: str, skill: float, price: float) -> SimulatedChannel:
    return SimulatedChannel(
        lambda t: 1.0 / (1.0 + math.exp(-(skill - 3.0 * t.meta["d"]))),
        lambda t, rng: str(int(t.answer) + int(rng.integers(1, 4))),
        lambda t, rng: (8, max(2, int(rng.normal(12, 3)))),
        (0.1, price),
        name=name,
        gamma=1.0,
        kappa=0.6,
    )


def _text_sampler(prompt: str, n: int, temperature: float, rng: np.random.Generator) -> list[str]:
    """A noisy 'model': the right sum with probability ~0.6, else a nearby number; some wordy filler."""
    a, b = (int(w) for w in prompt.split()[1:4:2])
    out = []
    for _ in range(n):
        ans = a + b if rng.random() < 0.6 else a + b + int(rng.integers(1, 3))
        out.append("so " * int(rng.integers(0, 4)) + f"the answer is {ans}")
    return out


def _channels(workers: int = 1) -> dict[str, Channel]:
    return {
        "small": _sim("small", 1.0, 1.0),
        "large": _sim("large", 2.5, 4.0),
        "text": Channel(ConcurrentSampler(_text_sampler, workers=workers), name="text", price_out=2.0),
    }


def _judge() -> Judge:
    return Judge(
        lambda t, a, rng=None: float(a == t.answer) + (0.2 * rng.standard_normal() if rng else 0.0), 0.5
    )


def _critic() -> Critic:
    return Critic(lambda t, a: None if a == t.answer else "recheck the sum", 0.5)


def _arms(channels) -> list[Arm]:
    return [Arm(c, op, b) for c in channels for op, b in OPS]


# ------------------------------------------------------------------------------------ parallel_evaluate
def test_two_workers_reproduce_sequential_matrices_exactly():
    tasks, chans = _tasks(10, 3), _channels()
    arms = _arms(chans)
    kw = dict(judge=_judge(), critic=_critic(), seed=5, reference_channel="small")
    Q0, C0 = evaluate_arms(tasks, arms, chans, **kw)
    Q2, C2 = parallel_evaluate(tasks, arms, chans, workers=2, start_method=FORK, **kw)
    assert Q2.shape == C2.shape == (len(tasks), len(arms)) and Q2.dtype == C2.dtype == np.float64
    assert np.array_equal(Q0, Q2) and np.array_equal(C0, C2)  # same kernel: per-item work in a worker
    # the matrices are not degenerate: some arms succeed, some fail, costs differ between arms
    assert 0.0 < Q0.mean() < 1.0 and len(np.unique(C0)) > len(arms) // 2
    # one arm per block (uneven arm costs balanced dynamically) gives the same numbers too
    Qb, Cb = parallel_evaluate(tasks, arms, chans, workers=2, blocks=len(arms), start_method=FORK, **kw)
    assert np.array_equal(Q0, Qb) and np.array_equal(C0, Cb)  # same kernel: per-item work in a worker


def test_one_worker_is_evaluate_arms_and_seed_matters():
    tasks, chans = _tasks(6, 0), _channels()
    arms = _arms(chans)[:5]
    Q1, C1 = parallel_evaluate(tasks, arms, chans, _judge(), _critic(), 1, workers=1)
    Q0, C0 = evaluate_arms(tasks, arms, chans, _judge(), _critic(), 1)
    assert np.array_equal(Q0, Q1) and np.array_equal(C0, C1)  # same kernel: per-item work in a worker
    _, C9 = parallel_evaluate(tasks, arms, chans, _judge(), _critic(), 9, workers=2, start_method=FORK)
    assert not np.array_equal(C0, C9)  # a different seed draws different token counts


@settings(max_examples=4, deadline=None)
@given(st.integers(0, 2**16), st.integers(1, 7), st.integers(2, 3))
def test_parallel_equals_sequential_over_seeds_and_sizes(seed, n_items, workers):
    tasks, chans = _tasks(n_items, seed), _channels()
    arms = _arms(chans)[::2]
    kw = dict(judge=_judge(), critic=_critic(), seed=seed % 1000)
    Q0, C0 = evaluate_arms(tasks, arms, chans, **kw)
    Qp, Cp = parallel_evaluate(tasks, arms, chans, workers=workers, start_method=FORK, **kw)
    assert np.array_equal(Q0, Qp) and np.array_equal(C0, Cp)  # same kernel: per-item work in a worker


# ------------------------------------------------------------------------------------ ConcurrentSampler
def test_concurrent_samples_equal_sequential_in_order():
    seq, par = ConcurrentSampler(_text_sampler, workers=1), ConcurrentSampler(_text_sampler, workers=4)
    with par:
        for n in (1, 2, 7, 16):
            a = seq("add 3 and 4", n, 0.7, rng=np.random.default_rng(11))
            b = par("add 3 and 4", n, 0.7, rng=np.random.default_rng(11))
            assert a == b and len(a) == n
        # sample k is the wrapped sampler called once with seed s_k: order is by k, not by finishing time
        seeds = par.sample_seeds(5, np.random.default_rng(2))
        expect = [_text_sampler("add 3 and 4", 1, 0.7, rng=np.random.default_rng(s))[0] for s in seeds]
        assert par("add 3 and 4", 5, 0.7, rng=np.random.default_rng(2)) == expect
    assert len(set(seeds)) == 5


def test_concurrent_calls_really_overlap():
    barrier = threading.Barrier(4, timeout=10)

    def waits(prompt, n, temperature, seed):
        barrier.wait()  # breaks (BrokenBarrierError) unless 4 calls are in flight together
        return [f"{prompt}:{seed % 1000}"]

    with ConcurrentSampler(waits, workers=4) as s:
        out = s("p", 8, 0.5, rng=np.random.default_rng(0))
    assert out == [f"p:{x % 1000}" for x in s.sample_seeds(8, np.random.default_rng(0))]


def test_operators_and_evaluation_through_concurrent_channels_match():
    task = _tasks(1, 4)[0]
    results = []
    for workers in (1, 4):
        ch = Channel(ConcurrentSampler(_text_sampler, workers=workers), name="text", price_out=2.0)
        r1 = diversity_combining(task, [ch], n=9, rng=np.random.default_rng(3))
        r2 = rateless_sampling(task, [ch], n_max=8, rng=np.random.default_rng(3))
        results.append([(r.answer, r.cost, r.n_calls, r.tokens) for r in (r1, r2)])
        ch.sampler.close()
    assert results[0] == results[1]
    tasks = _tasks(5, 8)
    seq, conc = _channels(workers=1), _channels(workers=3)
    arms = [a for a in _arms(seq) if a.channel == "text"]
    Qs, Cs = evaluate_arms(tasks, arms, seq, _judge(), _critic(), 2)
    Qc, Cc = evaluate_arms(tasks, arms, conc, _judge(), _critic(), 2)
    conc["text"].sampler("add 1 and 2", 4, 0.7)  # a live thread pool in the parent ...
    Qp, Cp = parallel_evaluate(tasks, arms, conc, _judge(), _critic(), 2, workers=2, start_method=FORK)
    conc["text"].sampler.close()
    assert np.array_equal(Qs, Qc) and np.array_equal(Cs, Cc)  # same kernel
    # ... is rebuilt in the forked workers
    assert np.array_equal(Qs, Qp) and np.array_equal(Cs, Cp)  # same kernel


# ------------------------------------------------------------------------------------ loopback server
class _Stub(BaseHTTPRequestHandler):
    barrier: threading.Barrier | None = None

    def do_POST(self):  # noqa: N802 (http.server naming)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.barrier is not None:
            self.barrier.wait()
        rng = np.random.default_rng(body.get("seed", 0))
        choices = [
            {"index": i, "text": f"{body['prompt']} -> {int(rng.integers(0, 10))}"} for i in range(body["n"])
        ][::-1]
        data = json.dumps({"choices": choices}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def stub_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Stub)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    _Stub.barrier = None


def test_loopback_server_concurrent_equals_sequential(stub_server):
    url = f"http://127.0.0.1:{stub_server.server_address[1]}"
    client = OpenAICompletionsSampler(url, "stub-model", max_tokens=8, timeout=10)
    assert client("q", 3, 0.0, seed=1) == [f"q -> {v}" for v in np.random.default_rng(1).integers(0, 10, 3)]
    seq = ConcurrentSampler(client, workers=1)("What is 2+2?", 6, 0.7, rng=np.random.default_rng(5))
    _Stub.barrier = threading.Barrier(3, timeout=10)  # the server now answers only 3 requests at a time
    with ConcurrentSampler(client, workers=3) as conc:
        par = conc("What is 2+2?", 6, 0.7, rng=np.random.default_rng(5))
    assert par == seq and len(set(seq)) > 1
    ch = Channel(ConcurrentSampler(client, workers=3), name="server")
    samples = ch.sample(Task("What is 2+2?", "4"), 3, rng=np.random.default_rng(5))
    assert [s.text for s in samples] == seq[:3]


# ----------------------------------------------------------------------------------------------- errors
def test_bad_inputs_raise_clear_errors():
    tasks, chans = _tasks(3, 0), _channels()
    arms = _arms(chans)[:3]
    with pytest.raises(ValueError, match="workers"):
        parallel_evaluate(tasks, arms, chans, workers=0)
    with pytest.raises(ValueError, match="tasks must not be empty"):
        parallel_evaluate([], arms, chans, workers=2)
    with pytest.raises(ValueError, match="arms must not be empty"):
        parallel_evaluate(tasks, [], chans, workers=2)
    with pytest.raises(TypeError, match=r"tasks\[1\]"):
        parallel_evaluate([tasks[0], "x"], arms, chans, workers=2)
    with pytest.raises(ValueError, match="start_method"):
        parallel_evaluate(tasks, arms, chans, workers=2, start_method="threads")
    with pytest.raises(TypeError, match="picklable"):
        parallel_evaluate(tasks, arms, chans, workers=2, start_method="spawn")
    with pytest.raises(ValueError, match="names channel"):  # raised in a worker, re-raised here
        parallel_evaluate(tasks, [Arm("nope", "single")] * 2, chans, workers=2, start_method=FORK)
    with pytest.raises(TypeError, match="sampler must be callable"):
        ConcurrentSampler("not a function")
    with pytest.raises(ValueError, match="workers"):
        ConcurrentSampler(_text_sampler, workers=0)
    s = ConcurrentSampler(_text_sampler, workers=2)
    with pytest.raises(ValueError, match="n"):
        s("add 1 and 2", 0, 0.7)
    with pytest.raises(TypeError, match="rng"):
        s("add 1 and 2", 2, 0.7, rng=3)
    with pytest.raises(ValueError, match="exactly 1 completion"):
        ConcurrentSampler(lambda p, n, t: ["a", "b"], workers=2)("p", 2, 0.5)
    with pytest.raises(ValueError, match="base_url"):
        OpenAICompletionsSampler("localhost:8000", "m")


def test_spawn_workers_with_picklable_server_channels(stub_server):
    """``spawn`` pickles the channels: library-level samplers (an HTTP client) travel; results match."""
    url = f"http://127.0.0.1:{stub_server.server_address[1]}"
    chans = {
        name: Channel(
            ConcurrentSampler(OpenAICompletionsSampler(url, name), workers=2), name=name, price_out=p
        )
        for name, p in (("cheap", 1.0), ("dear", 3.0))
    }
    tasks = [Task(f"question {i}", str(i % 10)) for i in range(4)]
    arms = [Arm(c, op, b) for c in chans for op, b in (("single", ()), ("sc", (("n", 3),)))]
    Q0, C0 = evaluate_arms(tasks, arms, chans, seed=1)
    Qs, Cs = parallel_evaluate(tasks, arms, chans, seed=1, workers=2, start_method="spawn")
    assert np.array_equal(Q0, Qs) and np.array_equal(C0, Cs)  # same kernel: per-item work in a worker
    assert 0.0 < Q0.mean() < 1.0
