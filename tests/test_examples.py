"""The scripts in ``examples/``: each is imported by path and its ``main()`` run; the numbers it returns are
checked, not only that it ran.

One script per component kind (KV-cache quantiser in ``generate``, RL loss in a TRL trainer, optimizer,
PyG layer, Flower strategy, ``torch.distributed`` collective, ``nn.Module`` block). The gloo example spawns
two processes and is in the integration tier; the others are unit tests.
"""

from __future__ import annotations

import ast
import importlib.util
import math
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SCRIPTS = (
    "kv_cache_generate",
    "trl_archer_grpo",
    "optim_accelegrad_sharp",
    "pyg_spiking_gcn",
    "flower_fedrevive",
    "dist_adera_allgather",
    "nn_ancre_residual",
)


def load(name: str):
    """Import ``examples/<name>.py`` by path as module ``name`` (registered, so that pickling by reference
    works, e.g. for the processes the gloo example spawns)."""
    if name in sys.modules and getattr(sys.modules[name], "__file__", None) == str(EXAMPLES / f"{name}.py"):
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.unit
def test_every_example_is_listed_and_has_the_runnable_shape():
    """Each script has a module docstring naming what it shows, ``main(seed: int = 0) -> dict`` and a
    ``__main__`` guard; every script in examples/ is covered by this file."""
    assert sorted(p.stem for p in EXAMPLES.glob("*.py")) == sorted(SCRIPTS)
    for name in SCRIPTS:
        tree = ast.parse((EXAMPLES / f"{name}.py").read_text())
        doc = ast.get_docstring(tree)
        assert doc and "What it shows" in doc and "Paper" in doc, name
        mains = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main"]
        assert len(mains) == 1, name
        args = mains[0].args
        assert args.args[0].arg == "seed" and ast.unparse(args.defaults[0]) == "0", name
        assert ast.unparse(args.args[0].annotation) == "int" and ast.unparse(mains[0].returns) == "dict", name
        guards = [n for n in tree.body if isinstance(n, ast.If) and "__name__" in ast.unparse(n.test)]
        assert guards, name


@pytest.mark.unit
def test_kv_cache_quantizers_in_generate(one_thread):
    """Every cache generates exactly the requested tokens; each quantised cache holds fewer bytes than
    DynamicCache, whose bytes are the exact fp32 K/V size: 2 layers x (K, V) x 2 KV heads x 127 cached
    positions x head_dim 16 x 4 bytes."""
    ex = load("kv_cache_generate")
    out = ex.main()
    assert out["new_tokens"] == dict.fromkeys(("dynamic", "kivi2", "adakvq", "adkv2"), ex.NEW_TOKENS)
    positions = ex.PROMPT_TOKENS + ex.NEW_TOKENS - 1  # the last generated token is never cached
    assert out["bytes"]["dynamic"] == 2 * 2 * 2 * positions * 16 * 4
    for name in ("kivi2", "adakvq", "adkv2"):
        assert 0 < out["bytes"][name] < out["bytes"]["dynamic"], name
    assert out["ratio"]["kivi2"] < 0.6 and out["ratio"]["adkv2"] < 0.3


@pytest.mark.unit
def test_archer_loss_in_trl_grpo_trainer(one_thread):
    """TRL's loop ran Archer's loss on every step and changed the weights; the reasoning-token share stays
    near 1 - q = 0.2 per response; on hand-made per-token log-probs Archer marks exactly the top-entropy
    token of each response (2 of 10 valid tokens) while the GRPO preset marks none, and no gradient
    reaches the padding."""
    out = load("trl_archer_grpo").main()
    assert out["steps"] == 4 and out["loss_calls"] >= out["steps"]
    assert out["max_param_change"] > 0
    assert len(out["reasoning_frac"]) == 4 and all(0 < f <= 0.5 for f in out["reasoning_frac"])
    assert all(math.isfinite(v) and v >= 0 for v in out["kl_knowledge"])
    archer, grpo = out["loss_fn"]["archer"], out["loss_fn"]["grpo"]
    assert archer["reasoning_frac"] == pytest.approx(0.2) and grpo["reasoning_frac"] == 0.0
    for m in (archer, grpo):
        assert math.isfinite(m["loss"]) and m["grad_finite"] and m["grad_on_padding"] == 0.0


@pytest.mark.unit
def test_accelegrad_sharp_trains_and_resumes(one_thread):
    """Training loss falls over the epochs, test loss falls below the untrained model's, and a run resumed
    from a state_dict checkpoint equals the uninterrupted one exactly."""
    out = load("optim_accelegrad_sharp").main()
    curve = out["train_curve"]
    assert all(math.isfinite(v) for v in curve) and curve[-1] < curve[0]
    assert out["test_loss"] < out["initial_loss"] and out["test_acc"] > 0.6
    assert out["resume_max_diff"] == 0.0


@pytest.mark.unit
def test_spiking_gcn_layer_in_a_two_layer_gnn(one_thread):
    """Logits are [N, classes], the loss is finite and falls, the spiking layer emits binary spikes, and the
    three well-separated communities are learned (test accuracy > 0.8)."""
    out = load("pyg_spiking_gcn").main()
    assert out["logits_shape"] == [out["num_nodes"], 3] and out["num_nodes"] == 120
    assert all(math.isfinite(v) for v in out["losses"]) and out["losses"][-1] < 0.5 * out["losses"][0]
    assert out["spikes_binary"] and 0.0 < out["spike_rate"] < 1.0
    assert out["test_acc"] > 0.8


@pytest.mark.unit
def test_fedrevive_strategy_in_flower_equals_weighted_mean(one_thread):
    """Two Flower rounds (strategy.start, ClientApp messages, in-process grid): fresh updates give revival
    weight 0, so FedRevive's aggregate equals the sample-weighted mean of the client models computed by
    hand and Flower's own FedAvg. Tolerance 1e-5: the same fp32 sums of 3 terms in a different order
    (FedRevive adds a weighted mean of deltas to the global model), weights of size <= ~3. Then the
    asynchronous run through the Grid's message API, where stale updates are revived."""
    out = load("flower_fedrevive").main()
    assert out["server_steps"] == 2 and out["mean_staleness"] == 0 and out["revival_weight"] == 0.0
    assert out["client_samples"] == [40, 80, 120]
    assert out["max_diff_vs_hand_fedavg"] <= 1e-5
    assert out["max_diff_vs_flwr_fedavg"] <= 1e-5
    _check_async(out)


def _check_async(out: dict) -> None:
    """The asynchronous run: some updates arrive stale, get a positive revival weight (at most beta_max
    = 0.5) and are distilled on the server; the pooled loss falls."""
    assert max(out["async_staleness"]) >= 1 and 0.0 < out["async_revival_weight"] <= 0.5
    assert out["async_kd_steps"] > 0
    loss = out["async_loss"]
    assert len(loss) == 5 and all(math.isfinite(v) for v in loss) and loss[-1] < loss[0]


@pytest.mark.integration
def test_adera_allgather_on_two_gloo_processes():
    """Two spawned gloo ranks: AdERA's gather equals torch's all-gather and the single-process
    concatenation bit for bit (tolerance 0: the codec is lossless) on every call, sends RAW during the
    2-call warm-up and fewer bytes than raw overall."""
    out = load("dist_adera_allgather").main()
    assert out["world_size"] == 2 and len(out["modes"]) == out["iterations"]
    assert out["bitwise_equal_plain"] and out["bitwise_equal_reference"]
    assert out["max_abs_diff_reference"] == 0.0
    assert out["modes"][:2] == ["raw", "raw"] and all(m != "raw" for m in out["modes"][2:])
    assert out["bytes_sent"] < out["bytes_raw"] and out["compression"] > 1.2


@pytest.mark.unit
def test_ancre_connector_forward_backward_and_training(one_thread):
    """The fixed-residual connector equals the plain ``h = h + f(h)`` loop exactly; gradients reach the
    connection logits; AdamW lowers the test loss; the routing matrix stays row-stochastic; the extra
    parameters are < 1%. Same seed, same numbers."""
    ex = load("nn_ancre_residual")
    out = ex.main()
    assert out["residual_max_diff"] == 0.0
    assert out["output_shape"] == [16, 1] and out["logit_grad_norm"] > 0
    assert all(math.isfinite(v) for v in out["losses"])
    assert out["test_loss_after"] < 0.5 * out["test_loss_before"]
    assert out["row_sums_max_dev"] < 1e-6 and out["extra_fraction"] < 0.01
    assert ex.main(seed=0) == out


@pytest.mark.slow
@pytest.mark.integration
def test_fedrevive_on_flowers_simulation_engine():
    """The same script on Flower's simulation engine (Ray actors; three runs that each start Ray, minutes on
    a loaded 2-core machine, hence slow): the same equalities as in-process, and the same asynchronous run
    (the simulated clock, not Ray's timing, orders the arrivals)."""
    ex = load("flower_fedrevive")
    out = ex.main(engine="simulation")
    assert out["engine"] == "simulation" and out["server_steps"] == 2 and out["revival_weight"] == 0.0
    assert out["max_diff_vs_hand_fedavg"] <= 1e-5 and out["max_diff_vs_flwr_fedavg"] <= 1e-5
    _check_async(out)
    local = ex.main(engine="inprocess")
    assert out["async_staleness"] == local["async_staleness"]
    assert out["async_loss"] == pytest.approx(local["async_loss"], abs=1e-5)
