"""Tests for SGNNBench: neurons, surrogates, spiking layers, SGNN, energy accounting, benchmark runner."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_geometric.data import Data
from torch_geometric.utils import to_torch_coo_tensor, to_torch_csr_tensor

from neurips26.common.graphs import csbm, karate_club
from neurips26.graph.sgnnbench import (
    GCN,
    IF,
    LIF,
    PLIF,
    SGC,
    SGNN,
    SURROGATES,
    SpikingGCNConv,
    SpikingSAGEConv,
    count_parameters,
    design_space_sweep,
    energy_report,
    factor_average_ranks,
    peak_memory,
    run_benchmark,
    spikenet_lite,
    spiking_gcn,
    surrogate_grad,
    surrogate_spike,
)
from neurips26.graph.sgnnbench.energy import E_AC, E_MAC


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny graphs: one intra-op thread is faster and avoids spin-waiting on a shared CPU."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def graph():
    return csbm(60, 3, 0.8, 6, 1.5, 5.0, seed=0)


def _permute(data, perm):
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(perm.numel())
    return data.x[perm], inv[data.edge_index]


# ------------------------------------------------------------------------------------------- neurons
@pytest.mark.parametrize("cls", [IF, LIF, PLIF])
def test_spikes_binary_and_reset(cls):
    torch.manual_seed(0)
    neuron = cls(v_threshold=0.5)
    inputs = [torch.randn(10, 4) for _ in range(6)]
    first = [neuron(i) for i in inputs]
    assert all(set(s.unique().tolist()) <= {0.0, 1.0} for s in first)
    neuron.reset()
    second = [neuron(i) for i in inputs]
    assert all(torch.equal(a, b) for a, b in zip(first, second))  # same kernel: rerun after reset, same inputs


@pytest.mark.parametrize(("c", "theta"), [(0.3, 1.0), (0.5, 1.0), (0.26, 0.5), (1.5, 1.0)])
def test_if_fires_with_expected_period(c, theta):
    neuron = IF(v_threshold=theta)
    spikes = [float(neuron(torch.tensor([c]))) for _ in range(24)]
    period = math.ceil(theta / c - 1e-9)
    expected = [1.0 if (t + 1) % period == 0 else 0.0 for t in range(24)]
    assert spikes == expected


def test_lif_tau_one_is_memoryless():
    neuron = LIF(tau=1.0, v_threshold=0.5)
    currents = torch.tensor([[0.4], [0.6], [0.2], [0.49], [0.51], [0.0]])
    out = torch.cat([neuron(i) for i in currents])
    assert out.tolist() == (currents >= 0.5).float().view(-1).tolist()


def test_lif_hand_computed():
    neuron = LIF(tau=2.0, v_threshold=1.0)
    # v1 = 0 + (0.8 - 0)/2 = 0.4; v2 = 0.4 + (0.8 - 0.4)/2 = 0.6; v3 = 0.7; v4 = 0.75 ... never reaches 1 at c=0.8
    for _ in range(20):
        assert neuron(torch.tensor([0.8])).item() == 0.0
    assert neuron.v.item() == pytest.approx(0.8, abs=1e-4)


def test_plif_learns_tau_gt_one():
    neuron = PLIF(tau=2.0, v_threshold=0.5)
    assert neuron.learned_tau == pytest.approx(2.0, abs=1e-6)
    out = sum(neuron(torch.full((5,), 0.4)) for _ in range(3))
    out.sum().backward()
    assert neuron.w.grad is not None and neuron.learned_tau > 1.0


def test_adaptive_threshold_raises_threshold():
    plain, adaptive = IF(v_threshold=1.0), IF(v_threshold=1.0, adaptive_threshold=True)
    c = torch.tensor([1.0])
    assert sum(float(plain(c)) for _ in range(10)) > sum(float(adaptive(c)) for _ in range(10))


@pytest.mark.parametrize("name", SURROGATES)
def test_surrogate_forward_heaviside_backward_closed_form(name):
    x = torch.tensor([-2.0, -0.5, -0.1, 0.0, 0.05, 0.3, 1.7], requires_grad=True)
    for alpha in (None, 2.0):
        out = surrogate_spike(x, name, alpha)
        assert out.tolist() == [0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0]
        (grad,) = torch.autograd.grad(out.sum(), x)
        a = {"sigmoid": 1.0, "triangle": 1.0, "arctan": 10.0, "superspike": 10.0, "multigauss": 1.0}[name]
        a = a if alpha is None else alpha
        xv = x.detach()
        if name == "sigmoid":
            ref = a * torch.sigmoid(a * xv) * (1 - torch.sigmoid(a * xv))
        elif name == "triangle":
            ref = torch.clamp(a * (1 - a * xv.abs()), min=0)
        elif name == "arctan":
            ref = a / 2 / (1 + (math.pi / 2 * a * xv) ** 2)
        elif name == "superspike":
            ref = 1 / (1 + a * xv.abs()) ** 2
        else:
            s = 0.5 / a

            def g(m, sd, xv=xv):
                return torch.exp(-((xv - m) ** 2) / (2 * sd**2)) / (math.sqrt(2 * math.pi) * sd)

            ref = 1.15 * g(0, s) - 0.15 * g(6 * s, 6 * s) - 0.15 * g(-6 * s, 6 * s)
        assert torch.allclose(grad, ref, atol=1e-6)
        assert torch.allclose(surrogate_grad(xv, name, a), ref, atol=1e-6)


def test_unknown_surrogate_and_neuron_arguments():
    with pytest.raises(ValueError, match="surrogate"):
        surrogate_spike(torch.zeros(2), "relu")
    with pytest.raises(ValueError, match="surrogate"):
        IF(surrogate="gauss")
    with pytest.raises(ValueError, match="tau"):
        LIF(tau=0.5)
    with pytest.raises(ValueError, match="v_reset"):
        IF(v_threshold=0.0, v_reset=0.5)


# ------------------------------------------------------------------------------------------- layers
@pytest.mark.parametrize("layer_cls", [SpikingGCNConv, SpikingSAGEConv])
def test_layers_equivariant_and_sparse_agree(graph, layer_cls):
    torch.manual_seed(0)
    layer = layer_cls(6, 8, neuron="LIF", norm="bn", residual=True, v_threshold=0.2).eval()
    currents = []
    layer.neuron.register_forward_pre_hook(lambda _m, args: currents.append(args[0].detach().clone()))
    out = layer(graph.x, graph.edge_index)
    layer.reset()
    assert set(out.unique().tolist()) <= {0.0, 1.0} and out.shape == (60, 8)
    cur = currents[-1]
    # A permuted edge list or a sparse adjacency sums each node's neighbours in another order (another
    # kernel), so the neuron's input current agrees only to rounding: propagation over <= max degree + 1
    # terms, then two Linears of 6 inputs and an affine norm:
    # bound: |current_a - current_b| <= (max_deg + 1 + 2 * 6 + 4) * eps32 * max|current|
    max_deg = int(torch.bincount(graph.edge_index[1], minlength=60).max())
    bound = (max_deg + 1 + 2 * 6 + 4) * torch.finfo(torch.float32).eps * float(cur.abs().max())
    # spikes are portable where moving the current by the bound cannot cross the threshold
    lo = layer.neuron(cur - bound)
    layer.reset()
    hi = layer.neuron(cur + bound)
    layer.reset()
    robust = lo == hi
    assert robust.float().mean() > 0.95  # near-threshold ties are rare, so the check below has teeth
    perm = torch.randperm(60)
    xp, eip = _permute(graph, perm)
    out_p = layer(xp, eip)
    layer.reset()
    torch.testing.assert_close(currents[-1], cur[perm], rtol=0.0, atol=bound)
    assert torch.equal(out_p[robust[perm]], out[perm][robust[perm]])  # same kernel: binary spikes at robust nodes (currents checked above)
    for convert in (to_torch_coo_tensor, to_torch_csr_tensor):
        out_s = layer(graph.x, convert(graph.edge_index, size=60))
        layer.reset()
        torch.testing.assert_close(currents[-1], cur, rtol=0.0, atol=bound)
        assert torch.equal(out_s[robust], out[robust])  # same kernel: binary spikes at robust nodes (currents checked above)


def test_spiking_gcn_conv_matches_hand_propagation():
    # 3-node path, K=1, identity-like linear: z = Â x ; threshold crossing checked by hand
    ei = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    layer = SpikingGCNConv(1, 1, K=1, neuron="LIF", norm="none", tau=1.0, v_threshold=0.45, bias=False).eval()
    with torch.no_grad():
        layer.lin.weight.fill_(1.0)
    x = torch.tensor([[1.0], [0.0], [0.0]])
    # Â = D^-1/2 (A+I) D^-1/2 with degrees (2, 3, 2): node0 -> 1/2, node1 -> 1/sqrt(6), node2 -> 0
    out = layer(x, ei)
    assert out.view(-1).tolist() == [1.0, 0.0, 0.0]
    x2 = torch.tensor([[1.0], [1.0], [0.0]])  # node1: 1/sqrt6 + 1/3 = 0.74 ; node2: 1/sqrt6 = 0.41
    layer.reset()
    assert layer(x2, ei).view(-1).tolist() == [1.0, 1.0, 0.0]


# ------------------------------------------------------------------------------------------- SGNN
@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"conv": "sage"},
        {"neuron": "PLIF", "residual": True, "jk": True},
        {"neuron": "IF", "norm": "none", "precompute": True, "cache_encoder": False},
    ],
)
def test_sgnn_logits_rates_and_equivariance(graph, kw):
    torch.manual_seed(0)
    model = SGNN(6, 16, 3, T=3, **kw).eval()
    logits = model(graph.x, graph.edge_index)
    assert logits.shape == (60, 3) and torch.isfinite(logits).all()
    rates = model.firing_rates()
    assert rates and all(0.0 <= r <= 1.0 for r in rates.values())
    perm = torch.randperm(60)
    xp, eip = _permute(graph, perm)
    assert torch.allclose(model(xp, eip), logits[perm], atol=1e-5)
    # states were reset at the end of forward: a second call is identical
    assert torch.equal(model(graph.x, graph.edge_index), logits)  # same kernel: rerun, same shapes and seed


def test_sgnn_trains_with_bptt(graph):
    torch.manual_seed(0)
    model = SGNN(6, 16, 3, T=4)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    losses = []
    for _ in range(15):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(graph.x, graph.edge_index), graph.y)
        loss.backward()
        opt.step()
        losses.append(float(loss))
    assert losses[-1] < losses[0]
    assert model.encoder.weight.grad.abs().sum() > 0


def test_sgnn_bad_input(graph):
    with pytest.raises(ValueError, match="T"):
        SGNN(6, 8, 3, T=0)
    with pytest.raises(ValueError, match="conv"):
        SGNN(6, 8, 3, conv="cheb")
    with pytest.raises(ValueError, match="neuron"):
        SGNN(6, 8, 3, neuron="Izhikevich")
    with pytest.raises(ValueError, match="norm"):
        SGNN(6, 8, 3, norm="stfn_x")
    with pytest.raises(ValueError, match="encoding"):
        SGNN(6, 8, 3, encoding="latency")
    model = SGNN(6, 8, 3)
    with pytest.raises(ValueError, match="num_nodes"):
        model(graph.x, torch.tensor([[0, 60], [1, 0]]))
    with pytest.raises(ValueError, match="in_channels=6"):
        model(torch.randn(60, 5), graph.edge_index)


def test_poisson_encoding_warns_and_clips(graph):
    model = SGNN(6, 8, 3, encoding="poisson", T=2)
    with pytest.warns(UserWarning, match="clipping"):
        out = model(graph.x, graph.edge_index)
    assert torch.isfinite(out).all()


# ------------------------------------------------------------------------------------------- energy
def _four_node():
    ei = torch.tensor([[0, 1, 1, 2, 2, 3], [1, 0, 2, 1, 3, 2]])
    return Data(x=torch.tensor([[0.3, -1.2], [0.7, 0.1], [-0.4, 0.9], [1.1, 0.25]]), edge_index=ei)


def test_ann_energy_hand_counted():
    data = _four_node()
    torch.manual_seed(0)
    model = GCN(2, 3, 2, dropout=0.0)
    rep = energy_report(model, data)
    nnz = 6 + 4  # edges + self-loops
    macs = 4 * 2 * 3 + nnz * 3 + 4 * 3 * 2 + nnz * 2
    assert rep.mac_ops == macs and rep.ac_ops == 0
    assert rep.total_joules == pytest.approx(E_MAC * macs)
    assert rep.float_share == 1.0
    sgc = energy_report(SGC(2, 2, K=2), data)
    assert sgc.mac_ops == 2 * nnz * 2 + 4 * 2 * 2


def test_zero_spikes_zero_ac_energy_and_linear_scaling():
    data = _four_node()
    torch.manual_seed(0)
    # huge threshold: no spike anywhere -> spike-input layers cost nothing
    silent = SGNN(2, 4, 2, num_layers=1, T=3, v_threshold=1e6, norm="none")
    rep = energy_report(silent, data)
    conv_rows = [r for r in rep.per_layer if r["name"].startswith("convs.0.lin")]
    assert conv_rows and conv_rows[0]["ac_ops"] == 0.0 and rep.ac_ops == 0.0
    assert 0.0 <= rep.float_share <= 1.0


def test_snn_energy_scales_with_T_and_rate_and_encoder_cache():
    data = csbm(40, 2, 0.8, 4, 1.0, 4.0, seed=1)

    def build(T, cache):
        torch.manual_seed(0)
        return SGNN(4, 8, 2, num_layers=1, T=T, cache_encoder=cache, norm="none", neuron="IF", K=0)

    # IF with constant (cached) input current: spikes are periodic, firing rate of T=2 vs T=4 equal
    r2 = energy_report(build(2, True), data)
    r4 = energy_report(build(4, True), data)
    enc2 = next(r for r in r2.per_layer if r["name"] == "encoder")
    enc4 = next(r for r in r4.per_layer if r["name"] == "encoder")
    assert enc2["mac_ops"] == enc4["mac_ops"]  # cached: computed once
    lin2 = next(r for r in r2.per_layer if r["name"] == "convs.0.lin")
    lin4 = next(r for r in r4.per_layer if r["name"] == "convs.0.lin")
    # AC ops = sum_t fr_t * O: linear in T at equal mean rate, linear in rate at fixed T
    assert lin4["ac_ops"] / lin4["firing_rate"] == pytest.approx(2 * lin2["ac_ops"] / lin2["firing_rate"])
    assert lin2["ac_ops"] == pytest.approx(2 * lin2["firing_rate"] * lin2["ops_per_call"])
    recomputed = energy_report(build(4, False), data)
    enc_re = next(r for r in recomputed.per_layer if r["name"] == "encoder")
    assert enc_re["mac_ops"] == 4 * enc4["mac_ops"]
    assert enc_re["energy_j"] == pytest.approx(4 * enc4["energy_j"])


def test_params_and_memory_helpers(graph):
    torch.manual_seed(0)
    model = spiking_gcn(6, 16, 3)
    assert count_parameters(model) == count_parameters(model) > 0
    assert count_parameters(spikenet_lite(6, 16, 3)) > 0

    def step():
        loss = model(graph.x, graph.edge_index).sum()
        loss.backward()
        return loss

    a, b = peak_memory(step), peak_memory(step)
    assert isinstance(a, int) and a > 0 and a == b
    # BPTT stores every step: more steps, more memory
    longer = spiking_gcn(6, 16, 3, T=10)
    assert peak_memory(lambda: longer(graph.x, graph.edge_index).sum().backward()) > a


# ------------------------------------------------------------------------------------------- runner
def test_run_benchmark_rows_and_reproducible():
    data = karate_club()
    data.val_mask = data.train_mask.clone()
    models = {"gcn": lambda f, c: GCN(f, 8, c), "sgnn": lambda f, c: spiking_gcn(f, 8, c, T=2)}
    kw = {"seeds": (0, 1), "epochs": 12, "eval_every": 4, "patience": 2}
    rows = run_benchmark(models, {"karate": data}, **kw)
    again = run_benchmark(models, {"karate": data}, **kw)
    assert [(r["dataset"], r["model"]) for r in rows] == [("karate", "gcn"), ("karate", "sgnn")]
    for r, r2 in zip(rows, again):
        for key in (
            "acc_mean",
            "acc_std",
            "energy_uj",
            "float_share",
            "firing_rate",
            "params",
            "memory_bytes",
        ):
            assert key in r
            assert r[key] == r2[key]
        assert r["accs"] == r2["accs"]
    assert rows[0]["firing_rate"] is None and 0 <= rows[1]["firing_rate"] <= 1


def test_design_space_sweep_and_ranks(graph):
    grid = {"neuron": ["IF", "LIF"], "T": [1, 2]}
    rows = design_space_sweep(
        graph, grid, seeds=(0,), hidden_channels=8, epochs=4, eval_every=2, patience=1, base={"num_layers": 1}
    )
    assert len(rows) == 4 and {(r["neuron"], r["T"]) for r in rows} == {
        ("IF", 1),
        ("IF", 2),
        ("LIF", 1),
        ("LIF", 2),
    }
    ranks = factor_average_ranks(rows, ["neuron", "T"])
    assert set(ranks) == {"neuron", "T"} and all(1.0 <= v <= 2.0 for d in ranks.values() for v in d.values())
    with pytest.raises(ValueError, match="grid"):
        design_space_sweep(graph, {})


@settings(max_examples=8, deadline=None)
@given(T=st.integers(1, 4), thr=st.floats(0.05, 2.0))
def test_energy_report_invariants(T, thr):
    data = _four_node()
    torch.manual_seed(0)
    rep = energy_report(SGNN(2, 4, 2, T=T, v_threshold=thr), data)
    assert 0.0 <= rep.float_share <= 1.0
    assert rep.total_joules == pytest.approx(E_AC * rep.ac_ops + E_MAC * rep.mac_ops)
    assert all(0.0 <= r <= 1.0 for r in rep.firing_rates.values())


@pytest.mark.parametrize("conv", ["gcn", "sage"])
def test_sgnn_sparse_adjacency_agrees(graph, conv):
    torch.manual_seed(0)
    model = SGNN(6, 16, 3, T=3, conv=conv).eval()
    dense = model(graph.x, graph.edge_index)
    for convert in (to_torch_coo_tensor, to_torch_csr_tensor):
        assert torch.allclose(model(graph.x, convert(graph.edge_index, size=60)), dense, atol=1e-5)


@pytest.mark.parametrize("build", [lambda: GCN(6, 8, 3, dropout=0.0), lambda: SGC(6, 3)])
def test_ann_baselines_equivariant(graph, build):
    torch.manual_seed(0)
    model = build().eval()
    perm = torch.randperm(60)
    xp, eip = _permute(graph, perm)
    assert torch.allclose(model(xp, eip), model(graph.x, graph.edge_index)[perm], atol=1e-5)
    with pytest.raises(ValueError, match="in_channels=6"):
        model(torch.randn(60, 4), graph.edge_index)


# ------------------------------------------------------------------------------------------- model zoo
from neurips26.graph.sgnnbench import (  # noqa: E402
    DRSGNN,
    STFN,
    SpikeGCL,
    SpikeGraphormer,
    SpikingGATConv,
    SpikingLinearAttention,
    ga_snn,
    gc_snn,
    random_walk_pe,
)
from neurips26.graph.sgnnbench.neurons import IF as _IF  # noqa: E402

ZOO = {
    "gc_snn": lambda f, c: gc_snn(f, 8, c, T=3),
    "ga_snn": lambda f, c: ga_snn(f, 8, c, T=3),
    "drsgnn": lambda f, c: DRSGNN(f, 8, c, T=3, pe_steps=4),
    "spikegcl": lambda f, c: SpikeGCL(f, 8, c, T=3),
    "spikegraphormer": lambda f, c: SpikeGraphormer(f, 8, c, T=3),
}


def _spike_outputs(model):
    """Forward hooks collecting every neuron's output during one call."""
    seen = []
    hooks = [
        m.register_forward_hook(lambda mod, i, o: seen.append(o))
        for m in model.modules()
        if isinstance(m, _IF)
    ]
    return seen, hooks


@pytest.mark.parametrize("name", sorted(ZOO))
def test_zoo_shapes_binary_spikes_rates_and_energy(name, graph):
    torch.manual_seed(0)
    model = ZOO[name](6, 3)
    seen, hooks = _spike_outputs(model)
    model.eval()
    out = model(graph.x, graph.edge_index)
    for h in hooks:
        h.remove()
    assert out.shape == (60, 3) and torch.isfinite(out).all()
    assert seen and all(set(s.unique().tolist()) <= {0.0, 1.0} for s in seen)
    rates = model.firing_rates()
    assert rates and all(0.0 <= r <= 1.0 for r in rates.values())
    rep = energy_report(model, graph)
    assert rep.total_joules > 0 and 0.0 <= rep.float_share <= 1.0 and rep.ac_ops > 0


@pytest.mark.parametrize("name", sorted(ZOO))
def test_zoo_surrogate_gradient_reaches_first_layer(name, graph):
    torch.manual_seed(0)
    model = ZOO[name](6, 3)
    loss = torch.nn.functional.cross_entropy(model(graph.x, graph.edge_index), graph.y)
    loss.backward()
    first = next(p for n, p in model.named_parameters() if p.dim() == 2)  # the input-side weight matrix
    assert first.grad is not None and float(first.grad.abs().sum()) > 0
    assert all(p.grad is None or torch.isfinite(p.grad).all() for p in model.parameters())


@pytest.mark.parametrize("name", sorted(ZOO))
def test_zoo_deterministic_and_stateless_between_calls(name, graph):
    outs = []
    for _ in range(2):
        torch.manual_seed(3)
        model = ZOO[name](6, 3).eval()
        outs.append(model(graph.x, graph.edge_index))
        outs.append(model(graph.x, graph.edge_index))  # membranes reset between calls
    assert all(torch.equal(outs[0], o) for o in outs[1:])  # same kernel: rerun, same shapes and seed


@pytest.mark.parametrize("name", sorted(ZOO))
def test_zoo_bad_inputs(name, graph):
    model = ZOO[name](6, 3)
    with pytest.raises(ValueError, match="num_nodes"):
        model(graph.x, torch.tensor([[0, 60], [1, 0]]))
    with pytest.raises(ValueError, match="in_channels=6"):
        model(torch.randn(60, 5), graph.edge_index)
    with pytest.raises(ValueError, match="NaN"):
        model(torch.full((60, 6), float("nan")), graph.edge_index)


def test_zoo_constructor_errors():
    with pytest.raises(ValueError, match="T"):
        SpikeGCL(6, 8, 3, T=7)  # more groups than features
    with pytest.raises(ValueError, match="neuron"):
        SpikeGraphormer(6, 8, 3, neuron="HH")
    with pytest.raises(ValueError, match="pe_steps"):
        DRSGNN(6, 8, 3, pe_steps=0)
    with pytest.raises(ValueError, match="heads"):
        SpikingGATConv(6, 10, heads=4)
    with pytest.raises(ValueError, match="norm"):
        gc_snn(6, 8, 3, norm="layer")
    with pytest.raises(ValueError, match="T"):
        ga_snn(6, 8, 3, T=0)


def test_stfn_standardises_each_node_and_scales_by_threshold():
    norm = STFN(4, v_threshold=0.5)
    z = torch.tensor([[1.0, 2.0, 3.0, 4.0], [10.0, 10.0, 10.0, 14.0]])
    out = norm(z)
    assert torch.allclose(out.mean(1), torch.zeros(2), atol=1e-6)
    assert torch.allclose(out.pow(2).mean(1), torch.full((2,), 0.25), atol=1e-4)  # unit variance x 0.5^2
    with pytest.raises(ValueError, match="z must be"):
        norm(torch.randn(3, 5))


def test_stfn_rejects_bad_input_naming_it():
    norm = STFN(4)
    with pytest.raises(TypeError, match="z must be a floating-point"):
        norm(torch.ones(2, 4, dtype=torch.long))
    with pytest.raises(TypeError, match="z is torch.float64"):
        norm(torch.ones(2, 4, dtype=torch.float64))  # parameters are float32: convert one or the other
    with pytest.raises(ValueError, match="z contains NaN"):
        norm(torch.tensor([[0.0, float("nan"), 1.0, 2.0]]))
    with pytest.raises(ValueError, match="meta"):
        norm(torch.empty(2, 4, device="meta"))
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="v_threshold"):
            STFN(4, v_threshold=bad)
    with pytest.raises(ValueError, match="eps"):
        STFN(4, eps=0.0)
    double = STFN(4).double()  # a float64 model takes float64 input and keeps it
    assert double(torch.randn(3, 4, dtype=torch.float64)).dtype == torch.float64


def test_linear_attention_matches_dense_formula():
    torch.manual_seed(0)
    att = SpikingLinearAttention(5).eval()
    s = (torch.rand(7, 5) > 0.5).float()
    q = att.sn_q(att.bn_q(att.q(s)))
    k = att.sn_k(att.bn_k(att.k(s)))
    v = att.sn_v(att.bn_v(att.v(s)))
    att.reset()
    expected = att.bn_out(att.out((q @ k.t()) @ v / 7))  # all-pair form: N x N scores, same sums
    assert torch.allclose(att(s), expected, atol=1e-5)


def test_random_walk_pe_on_a_path_and_a_triangle():
    path = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    pe = random_walk_pe(path, 3, 2)
    # 1 step: no return (no self-loops); 2 steps: an end node goes to the middle (1) and back (1/2),
    # the middle goes to either end (1/2 each) and back (1)
    assert torch.allclose(pe[:, 0], torch.zeros(3))
    assert torch.allclose(pe[:, 1], torch.tensor([0.5, 1.0, 0.5]))
    tri = torch.tensor([[0, 1, 1, 2, 2, 0], [1, 0, 2, 1, 0, 2]])
    assert torch.allclose(random_walk_pe(tri, 3, 2)[:, 1], torch.full((3,), 0.5))


def test_drsgnn_uses_dynamic_thresholds_and_caches_pe(graph):
    model = DRSGNN(6, 8, 3, T=3, pe_steps=4)
    assert all(n.adaptive_threshold for n in model.sgnn.neurons().values())
    model(graph.x, graph.edge_index)
    pe = model._pe_cache[2]
    model(graph.x, graph.edge_index)
    assert model._pe_cache[2] is pe  # same graph: cached
    model(graph.x, graph.edge_index.flip(1).contiguous())  # same edges, other order: recomputed, equal
    assert model._pe_cache[2] is not pe and torch.equal(model._pe_cache[2], pe)  # same kernel: the dense adjacency is the same matrix for any edge order


def test_spikegcl_steps_see_disjoint_feature_groups():
    model = SpikeGCL(10, 4, 2, T=3)
    assert model.groups == [(0, 3), (3, 7), (7, 10)]
    assert model.readout.in_features == 3 * 4


def test_fast_csr_propagation_equals_message_passing(graph):
    from neurips26.graph.sgnnbench.layers import GCNPropagation

    x = torch.randn(60, 5, dtype=torch.float64, requires_grad=True)
    prop = GCNPropagation(2, cached=True)
    fast = prop(x, graph.edge_index)
    ei, w = prop.normalized(graph.edge_index, None, 60, torch.float64)
    slow = prop.propagate(ei, x=prop.propagate(ei, x=x, edge_weight=w), edge_weight=w)  # PyG gather-scatter
    assert torch.allclose(fast, slow, atol=1e-12)
    (ga,) = torch.autograd.grad(fast.sum(), x)
    (gb,) = torch.autograd.grad(slow.sum(), x)
    assert torch.allclose(ga, gb, atol=1e-12)
    assert torch.equal(fast, GCNPropagation(2, cached=False)(x, graph.edge_index))  # same kernel


def test_sage_mean_csr_equals_scatter_mean(graph):
    from torch_geometric.utils import scatter

    conv = SpikingSAGEConv(6, 4, norm="none")
    agg = torch.sparse.mm(conv._mean_csr(graph.edge_index, 60), graph.x)
    ref = scatter(graph.x[graph.edge_index[0]], graph.edge_index[1], 0, dim_size=60, reduce="mean")
    assert torch.allclose(agg, ref, atol=1e-6)
