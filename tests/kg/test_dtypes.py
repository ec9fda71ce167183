"""KG components keep their input's dtype (issue 33 item 5).

SCORE's similarities follow the embeddings (float64 / complex128 in, float64 out, matching a float64
reference to float64 precision); the CoRF model runs after ``.double()`` and under a float64 default
dtype; the reach sets work whatever the adjacency's or torch's default dtype; the fuzzy executor runs in
its adjacency's dtype. The float32 paths are unchanged.
"""

from __future__ import annotations

import contextlib

import pytest
import torch
from torch_geometric.data import Data

from neurips26.common.kg import add_inverse
from neurips26.kg.corf import CoRF, NBFNetLite, ReceptiveSupportPlanner, hop_reach, receptive_field
from neurips26.kg.corf.reach import _transpose_adjacency
from neurips26.kg.score import SCORE, STRUCTURES, CosineReranker, FuzzyAdjacency, QTOExecutor, complex_cosine
from neurips26.kg.score.baselines import NQRLite
from neurips26.kg.score.distributed import distributed_session_scores
from neurips26.kg.score.metrics import Session

EPS64 = torch.finfo(torch.float64).eps


@contextlib.contextmanager
def default_dtype(dtype):
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def _cosine_reference(e: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Plain float64 cosine of the stacked real and imaginary parts, computed term by term."""
    x = torch.view_as_real(e).flatten(1) if e.is_complex() else e
    x = x.to(torch.float64)
    norms = x.pow(2).sum(1).sqrt()
    return (x[ids] @ x.t()) / (norms[ids, None] * norms[None, :])


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128])
def test_score_similarity_is_float64_for_float64_embeddings(dtype):
    e = torch.randn(7, 5, dtype=dtype, generator=torch.Generator().manual_seed(0))
    ids = torch.tensor([0, 3, 6])
    sim = SCORE(e).similarity(ids)
    assert sim.dtype == torch.float64
    # the float64 reference differs only by rounding: a few ulps of a k-term dot product (k <= 10)
    bound = 32 * 10 * EPS64
    assert (sim - _cosine_reference(e, ids)).abs().max() <= bound
    # the float32 computation is ~1e-7 off: float64 input is no longer rounded through float32
    sim32 = complex_cosine(e.to(torch.complex64 if e.is_complex() else torch.float32), ids)
    assert sim32.dtype == torch.float32
    assert (sim32.double() - sim).abs().max() <= 32 * 10 * torch.finfo(torch.float32).eps


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64])
def test_score_similarity_float32_unchanged(dtype):
    e = torch.randn(6, 4, dtype=dtype, generator=torch.Generator().manual_seed(1))
    ids = torch.arange(6)
    x = torch.view_as_real(e).flatten(1) if e.is_complex() else e
    x = torch.nn.functional.normalize(x.float(), dim=1)
    assert torch.equal(complex_cosine(e, ids), (x[ids] @ x.t()).clamp(-1.0, 1.0))  # same kernel, same inputs
    assert complex_cosine(torch.arange(12).reshape(6, 2), ids).dtype == torch.get_default_dtype()


def test_score_adjust_and_baselines_keep_float64():
    gen = torch.Generator().manual_seed(2)
    e = torch.randn(8, 4, dtype=torch.complex128, generator=gen)
    scores = torch.rand(8, dtype=torch.float64, generator=gen)
    ids, labels = torch.tensor([1, 5]), torch.tensor([1, 0])
    out = SCORE(e).adjust(scores, ids, labels)
    assert out.dtype == torch.float64 and torch.isfinite(out).all()
    sim = SCORE(e).similarity(ids)
    for labs in (labels, torch.tensor([1, 1]), torch.tensor([0, 0])):
        assert CosineReranker()(scores, sim, labs).dtype == torch.float64
        feats = NQRLite.features(scores, sim, labs, torch.randn(8, 3, dtype=torch.float64, generator=gen))
        assert feats.dtype == torch.float64


def _toy_adjacency(dtype):
    edges = {0: torch.tensor([[0, 0], [1, 2]]), 1: torch.tensor([[1, 2], [3, 4]])}
    adj = FuzzyAdjacency.from_edges(edges, 6, 2)
    adj.values = [v.to(dtype) for v in adj.values]
    return adj


def test_executor_runs_in_the_adjacency_dtype():
    for dtype in (torch.float32, torch.float64):
        adj = _toy_adjacency(dtype)
        assert adj.dtype == dtype
        out = QTOExecutor(adj)(STRUCTURES["2p"], torch.tensor([0]), torch.tensor([0, 1]))
        assert out.dtype == dtype
        assert out.tolist() == [0.0, 0.0, 0.0, 1.0, 1.0, 0.0]  # exact: products and maxima of 0/1


def test_link_predictor_adjacency_keeps_the_scorer_dtype():
    gen = torch.Generator().manual_seed(3)
    table = torch.randn(2, 5, 5, dtype=torch.float64, generator=gen)
    edges = {0: torch.tensor([[0], [1]])}
    adj64 = FuzzyAdjacency.from_link_predictor(lambda h, r: table[r, h], edges, 5, 2, threshold=0.0)
    adj32 = FuzzyAdjacency.from_link_predictor(lambda h, r: table[r, h].float(), edges, 5, 2, threshold=0.0)
    assert adj64.dtype == torch.float64 and adj32.dtype == torch.float32
    for v64, v32 in zip(adj64.values, adj32.values):
        # softmax over 5 logits times an integer degree: a few float32 ulps apart
        assert (v64 - v32.double()).abs().max() <= 16 * torch.finfo(torch.float32).eps


def test_distributed_session_scores_keep_float64():
    adj = _toy_adjacency(torch.float64)
    ex = QTOExecutor(adj)
    s = Session(
        structure=STRUCTURES["1p"],
        anchors=torch.tensor([0]),
        relations=torch.tensor([0]),
        variable=0,
        pref_ids=torch.tensor([1]),
        pref_labels=torch.tensor([1]),
        preferred=torch.tensor([1]),
        other=torch.tensor([2]),
        easy=torch.tensor([], dtype=torch.long),
    )
    assert distributed_session_scores(ex, [s]).dtype == torch.float64
    score = SCORE(torch.randn(6, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(4)))
    assert distributed_session_scores(ex, [s], score).dtype == torch.float64
    assert distributed_session_scores(QTOExecutor(_toy_adjacency(torch.float32)), [s]).dtype == torch.float32


def _kg(n=9, m=14, seed=0):
    gen = torch.Generator().manual_seed(seed)
    triples = torch.stack(
        [
            torch.randint(0, n, (m,), generator=gen),
            torch.randint(0, 3, (m,), generator=gen),
            torch.randint(0, n, (m,), generator=gen),
        ],
        1,
    )
    ei, et = add_inverse(triples, 3)
    return Data(edge_index=ei, edge_type=et, num_nodes=n)


def test_nbfnet_runs_in_float64_after_double():
    g = _kg()
    queries = torch.tensor([[0, 1], [4, 3], [8, 5]])
    torch.manual_seed(0)
    m32 = NBFNetLite(6, hidden=8, num_layers=2).eval()
    m64 = NBFNetLite(6, hidden=8, num_layers=2).eval()
    m64.load_state_dict(m32.state_dict())
    m64 = m64.double()
    with torch.no_grad():
        s32 = m32(g.edge_index, g.edge_type, queries, g.num_nodes)
        s64 = m64(g.edge_index, g.edge_type, queries, g.num_nodes)
    assert s32.dtype == torch.float32 and s64.dtype == torch.float64
    # the same weights in float32 vs float64: 2 layers of width-8 products, relative error ~1e-6
    assert torch.allclose(s64, s32.double(), rtol=1e-4, atol=1e-5)
    with torch.no_grad():
        full64 = CoRF(m64, ReceptiveSupportPlanner(2)).scores(queries, g)
    assert full64.dtype == torch.float64
    # the exact executor equals the full-graph forward in float64 up to summation order
    assert torch.allclose(full64, s64, rtol=0, atol=1e3 * EPS64 * (1 + s64.abs().max().item()))


def test_nbfnet_under_a_float64_default_dtype():
    g = _kg(seed=1)
    queries = torch.tensor([[1, 0], [2, 2]])
    with default_dtype(torch.float64):
        torch.manual_seed(0)
        m = NBFNetLite(6, hidden=8, num_layers=2).eval()
        with torch.no_grad():
            out = m(g.edge_index, g.edge_type, queries, g.num_nodes)
    assert out.dtype == torch.float64 and torch.isfinite(out).all()


def test_reach_sets_do_not_depend_on_dtypes():
    g = _kg(seed=2)
    src = torch.zeros(2, g.num_nodes, dtype=torch.bool)
    src[0, 0] = src[1, 5] = True
    ref = hop_reach(g.edge_index, src, 3, g.num_nodes)
    with default_dtype(torch.float64):
        assert _transpose_adjacency(g.edge_index, g.num_nodes).dtype == torch.float32
        under64 = hop_reach(g.edge_index, src, 3, g.num_nodes)
    adj64 = _transpose_adjacency(g.edge_index, g.num_nodes).to(torch.float64)
    given64 = hop_reach(g.edge_index, src, 3, g.num_nodes, adjacency_t=adj64)
    for a, b, c in zip(ref, under64, given64):
        assert a.dtype == torch.bool and torch.equal(a, b) and torch.equal(a, c)  # same kernel: bool sets; sets: exact
    with default_dtype(torch.float64):
        mask, dist = receptive_field(g.edge_index, torch.tensor([0, 5]), 3, g.num_nodes)
    assert torch.equal(mask, ref[-1])  # same kernel: bool sets
