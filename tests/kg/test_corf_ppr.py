"""Tests of CoRF's PPR sampler (push-based approximate PPR vs an exact solve) and the real-worker balancer."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_geometric.data import Data

from neurips26.common.kg import add_inverse
from neurips26.kg.corf import (
    CoRFExecutor,
    FullGraphExecutor,
    NBFNetLite,
    ReceptiveSupportPlanner,
    lpt_assign,
    round_robin_assign,
)
from neurips26.kg.corf.ppr import PPRSampler, PPRSubgraphExecutor, approximate_ppr, exact_ppr
from neurips26.kg.corf.workers import balanced_run, job_costs, run_jobs

R = 3


def random_kg(n, m, seed):
    gen = torch.Generator().manual_seed(seed)
    triples = torch.stack(
        [torch.randint(0, n, (m,), generator=gen), torch.randint(0, R, (m,), generator=gen),
         torch.randint(0, n, (m,), generator=gen)], 1)  # fmt: skip
    ei, et = add_inverse(triples, R)
    return Data(edge_index=ei, edge_type=et, num_nodes=n)


@settings(max_examples=15, deadline=None)
@given(
    n=st.integers(2, 50),
    m=st.integers(1, 90),
    alpha=st.sampled_from([0.05, 0.15, 0.5]),
    eps=st.sampled_from([1e-2, 1e-3, 1e-5]),
    seed=st.integers(0, 1000),
)
def test_push_ppr_within_acl_bound_of_exact(n, m, alpha, eps, seed):
    g = random_kg(n, m, seed)
    src = torch.arange(n)
    approx = approximate_ppr(g.edge_index, src, n, alpha=alpha, eps=eps)
    exact = exact_ppr(g.edge_index, src, n, alpha=alpha)
    deg = torch.bincount(g.edge_index[0], minlength=n).clamp_min(1).double()
    gap = exact - approx
    # ACL on a symmetric graph: 0 <= pi - p <= eps * d_v; float64 solve/accumulation slack 1e-12
    assert gap.min() >= -1e-12
    assert (gap <= eps * deg + 1e-12).all()
    assert torch.allclose(exact.sum(1), torch.ones(n, dtype=torch.float64), atol=1e-12)  # a distribution


def test_push_ppr_deterministic_and_dangling_nodes():
    g = random_kg(30, 20, 3)  # sparse: isolated (dangling) nodes exist
    src = torch.arange(30)
    a, b = approximate_ppr(g.edge_index, src, 30), approximate_ppr(g.edge_index, src, 30)
    assert torch.equal(a, b)  # same kernel
    isolated = torch.bincount(g.edge_index[0], minlength=30) == 0
    assert isolated.any()
    i = int(isolated.nonzero()[0])
    assert exact_ppr(g.edge_index, torch.tensor([i]), 30)[0, i] == pytest.approx(1.0, abs=1e-12)
    assert a[i, i] == pytest.approx(1.0, abs=1e-4)  # only the walker that stays


def test_sampler_topk_keeps_head_and_is_sorted():
    g = random_kg(40, 70, 1)
    heads = torch.tensor([0, 5, 5, 39])
    picked = PPRSampler(6).sample(g.edge_index, heads, 40)
    exact = exact_ppr(g.edge_index, heads, 40)
    for h, v in zip(heads.tolist(), picked):
        assert h in v.tolist() and 1 <= v.numel() <= 6
        assert torch.equal(v, v.sort().values)  # same kernel
        # the kept nodes carry the largest exact PPR up to the ACL error eps * d_max
        outside = torch.ones(40, dtype=torch.bool)
        outside[v] = False
        dmax = torch.bincount(g.edge_index[0], minlength=40).max().item()
        if outside.any() and v.numel() == 6:
            kept = exact[heads.tolist().index(h), v]
            assert kept.min() >= exact[heads.tolist().index(h), outside].max() - 1e-4 * dmax - 1e-12


def test_ppr_executor_with_whole_component_equals_full_graph():
    g = random_kg(25, 60, 2)
    torch.manual_seed(0)
    model = NBFNetLite(2 * R, hidden=8, num_layers=2).eval()
    q = torch.tensor([[0, 1], [3, 4], [7, 0], [12, 5]])
    with torch.no_grad():
        full = FullGraphExecutor(model, batch_size=2).scores(q, g)
        ppr = PPRSubgraphExecutor(model, PPRSampler(25, eps=1e-9), batch_size=3).scores(q, g)
    # a top-k over all reachable nodes is the head's component: exact (float32 sums of <= 120 terms)
    assert torch.allclose(ppr, full, atol=1e-5)


def test_ppr_bad_input():
    g = random_kg(10, 15, 0)
    with pytest.raises(ValueError, match="alpha"):
        approximate_ppr(g.edge_index, torch.tensor([0]), 10, alpha=1.0)
    with pytest.raises(ValueError, match="eps"):
        approximate_ppr(g.edge_index, torch.tensor([0]), 10, eps=0.0)
    with pytest.raises(ValueError, match="sources"):
        approximate_ppr(g.edge_index, torch.tensor([10]), 10)
    with pytest.raises(ValueError, match="sources"):
        exact_ppr(g.edge_index, torch.zeros(0, dtype=torch.long), 10)
    with pytest.raises(ValueError, match="num_nodes"):
        exact_ppr(g.edge_index, torch.tensor([0]), 5000)
    with pytest.raises(ValueError, match="top_k"):
        PPRSampler(0)
    with pytest.raises(TypeError, match="sampler"):
        PPRSubgraphExecutor(NBFNetLite(2 * R, hidden=4, num_layers=1), sampler=None)
    with pytest.raises(RuntimeError, match="max_rounds"):
        approximate_ppr(g.edge_index, torch.tensor([0]), 10, eps=1e-9, max_rounds=1)


def _setup():
    g = random_kg(60, 100, 4)
    torch.manual_seed(0)
    model = NBFNetLite(2 * R, hidden=8, num_layers=2).eval()
    gen = torch.Generator().manual_seed(1)
    q = torch.stack(
        [torch.randint(0, 60, (20,), generator=gen), torch.randint(0, 2 * R, (20,), generator=gen)], 1
    )
    ex = CoRFExecutor(model, ReceptiveSupportPlanner(2, node_budget=1.5), batch_size=4)
    sup, res = ex.plan(q, g)
    return g, ex, q, sup, res


def test_run_jobs_partition_equals_single_process():
    g, ex, q, sup, res = _setup()
    costs = job_costs(sup, res, g.edge_index.shape[1], 2)
    with torch.no_grad():
        single = ex.scores(q, g)
        out = torch.zeros_like(single)
        for jobs in lpt_assign(costs, 3):
            idx, sc = run_jobs(ex, q, g, sup, res, jobs)
            out[idx] = sc
    # packing differs per partition (float summation order): allclose, float32, short sums
    assert torch.allclose(out, single, atol=1e-6)


@pytest.mark.slow
def test_balanced_run_on_two_gloo_processes():
    g, ex, q, sup, res = _setup()
    costs = job_costs(sup, res, g.edge_index.shape[1], 2)
    asg = {"lpt": lpt_assign(costs, 2), "round_robin": round_robin_assign(len(costs), 2)}
    out = balanced_run(ex, q, g, sup, res, asg, repeats=2)
    with torch.no_grad():
        single = ex.scores(q, g)
    assert torch.allclose(out["scores"], single, atol=1e-6)
    assert [r["assignment"] for r in out["rounds"]] == ["lpt", "round_robin", "round_robin", "lpt"]
    for r in out["rounds"]:
        # timings depend on machine load: only their presence and sign are asserted
        assert len(r["load_s"]) == 2 and r["makespan_s"] > 0 and min(r["load_s"]) >= 0
        assert sum(r["jobs"]) == len(costs)


def test_balanced_run_bad_input():
    g, ex, q, sup, res = _setup()
    with pytest.raises(ValueError, match="assignments"):
        balanced_run(ex, q, g, sup, res, {})
    with pytest.raises(ValueError, match="exactly once"):
        balanced_run(ex, q, g, sup, res, {"a": [[0], []]})
    with pytest.raises(ValueError, match="same number of workers"):
        balanced_run(ex, q, g, sup, res, {"a": [[0]], "b": [[0], []]})
