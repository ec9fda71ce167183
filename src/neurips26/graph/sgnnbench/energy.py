"""Theoretical energy, parameter and memory accounting for (spiking) GNNs.

Every linear layer, normalisation layer and propagation hop executed in one full-graph inference
is recorded with its *dense* operation count :math:`O` (``rows x in x out`` for a linear map,
``nnz(Â) x channels`` per propagation hop, one per element for normalisation) and whether its input
was binary spikes. The energy is

.. math::
    E = \\sum_{\\text{spike-input calls}} E_{AC}\\, f\\, O
      + \\sum_{\\text{real-input calls}} E_{MAC}\\, O,

summed over *calls*, so an op executed at each of ``T`` time steps is counted ``T`` times and an
op computed once (a cached encoder, a precomputed propagation) once; ``f`` is the measured input
firing rate of that call. Constants: :math:`E_{MAC} = 4.6` pJ, :math:`E_{AC} = 0.9` pJ (45 nm).
``float_share`` is the real-valued (MAC) part of the total: the bottleneck indicator. An ANN has
only real-valued inputs, so its energy is :math:`E_{MAC} \\sum O`. Element-wise work (neuron
updates, activations, dropout) is not counted, by the usual convention.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn
from torch_geometric.data import Data
from torch_geometric.nn import GCNConv, SGConv
from torch_geometric.nn.dense.linear import Linear as PyGLinear
from torch_geometric.utils import add_remaining_self_loops, is_torch_sparse_tensor

from neurips26.common.checks import check_float
from neurips26.common.models import count_parameters
from neurips26.common.profiling import saved_tensor_bytes
from neurips26.graph.sgnnbench._ops import recording

__all__ = ["E_MAC", "E_AC", "EnergyReport", "energy_report", "count_parameters", "peak_memory"]

E_MAC = 4.6e-12
E_AC = 0.9e-12


def _is_binary(x: Tensor) -> bool:
    return bool(((x == 0) | (x == 1)).all())


def _nnz_with_self_loops(edge_index: Tensor, num_nodes: int) -> int:
    if is_torch_sparse_tensor(edge_index):
        return int(edge_index._nnz()) + num_nodes
    return int(add_remaining_self_loops(edge_index, num_nodes=num_nodes)[0].size(1))


@dataclass
class EnergyReport:
    """Result of :func:`energy_report`.

    Attributes
    ----------
    per_layer : list of dict
        One row per module: ``name``, ``kind`` (linear / propagation / norm), ``input``
        (spike / real / mixed), ``calls``, ``ops_per_call``, ``firing_rate`` (mean over spike-input
        calls, else ``None``), ``ac_ops``, ``mac_ops``, ``energy_j``.
    total_joules : float
    float_share : float
        MAC energy / total energy, in ``[0, 1]`` (0 for an empty model).
    ac_ops, mac_ops : float
        Rate-weighted accumulate operations and multiply-accumulate operations.
    ac_joules, mac_joules : float
    """

    per_layer: list[dict]
    total_joules: float
    float_share: float
    ac_ops: float
    mac_ops: float
    ac_joules: float = 0.0
    mac_joules: float = 0.0
    firing_rates: dict[str, float] = field(default_factory=dict)

    @property
    def total_uj(self) -> float:
        return self.total_joules * 1e6

    def to_dict(self) -> dict:
        return {
            "per_layer": self.per_layer,
            "total_joules": self.total_joules,
            "float_share": self.float_share,
            "ac_ops": self.ac_ops,
            "mac_ops": self.mac_ops,
            "ac_joules": self.ac_joules,
            "mac_joules": self.mac_joules,
            "firing_rates": self.firing_rates,
        }


@torch.no_grad()
def energy_report(
    model: nn.Module, data: Data, e_mac: float = E_MAC, e_ac: float = E_AC, spike_aware: bool = True
) -> EnergyReport:
    """Count operations of one full-graph inference of ``model(data.x, data.edge_index)`` (eval mode).

    Parameters
    ----------
    model : nn.Module
        Any model built from ``nn.Linear``/PyG ``Linear``, ``BatchNorm1d``, PyG ``GCNConv``/``SGConv``
        and the SGNNBench layers.
    data : Data
        Needs ``x`` and ``edge_index``.
    e_mac, e_ac : float
        Joules per MAC and per AC.
    spike_aware : bool
        ``False`` counts every op as a MAC (the ANN convention) even for binary inputs.

    Returns
    -------
    EnergyReport
    """
    check_float("e_mac", e_mac, 0.0, high=math.inf, high_open=True)
    check_float("e_ac", e_ac, 0.0, high=math.inf, high_open=True)
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    names = {id(m): n or type(m).__name__ for n, m in model.named_modules()}
    rows: dict[str, dict] = {}

    def add(module: nn.Module, kind: str, ops: float, x: Tensor, force_real: bool = False) -> None:
        name = names.get(id(module), type(module).__name__)
        row = rows.setdefault(
            name,
            {
                "name": name,
                "kind": kind,
                "inputs": set(),
                "calls": 0,
                "ops_per_call": ops,
                "fr": [],
                "ac_ops": 0.0,
                "mac_ops": 0.0,
            },
        )
        row["calls"] += 1
        if spike_aware and not force_real and _is_binary(x):
            fr = float(x.float().mean()) if x.numel() else 0.0
            row["inputs"].add("spike")
            row["fr"].append(fr)
            row["ac_ops"] += fr * ops
        else:
            row["inputs"].add("real")
            row["mac_ops"] += ops

    def linear_hook(module, inputs, output):
        x = inputs[0]
        add(module, "linear", x.numel() * output.size(-1), x)

    def norm_hook(module, inputs, output):
        add(module, "norm", inputs[0].numel(), inputs[0], force_real=True)

    def gcnconv_hook(module, inputs, output):
        x, edge_index = inputs[0], inputs[1]
        nnz = _nnz_with_self_loops(edge_index, x.size(0))
        add(module, "propagation", nnz * output.size(-1), output, force_real=True)

    def sgconv_hook(module, inputs, output):
        x, edge_index = inputs[0], inputs[1]
        nnz = _nnz_with_self_loops(edge_index, x.size(0))
        add(module, "propagation", nnz * x.size(-1), x)
        if module.K > 1:
            add(module, "propagation", (module.K - 1) * nnz * x.size(-1), x, force_real=True)

    handles = []
    for m in model.modules():
        if isinstance(m, (nn.Linear, PyGLinear)):
            handles.append(m.register_forward_hook(linear_hook))
        elif isinstance(m, nn.modules.batchnorm._BatchNorm):
            handles.append(m.register_forward_hook(norm_hook))
        elif isinstance(m, GCNConv):
            handles.append(m.register_forward_hook(gcnconv_hook))
        elif isinstance(m, SGConv):
            handles.append(m.register_forward_hook(sgconv_hook))
    was_training = model.training
    model.eval()
    try:
        with recording(lambda module, kind, ops, x: add(module, kind, ops, x)):
            model(data.x, data.edge_index)
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)
    per_layer = []
    ac_ops = mac_ops = 0.0
    for row in rows.values():
        energy = e_ac * row["ac_ops"] + e_mac * row["mac_ops"]
        inputs = row.pop("inputs")
        fr = row.pop("fr")
        row["input"] = inputs.pop() if len(inputs) == 1 else "mixed"
        row["firing_rate"] = sum(fr) / len(fr) if fr else None
        row["energy_j"] = energy
        ac_ops += row["ac_ops"]
        mac_ops += row["mac_ops"]
        per_layer.append(row)
    ac_j, mac_j = e_ac * ac_ops, e_mac * mac_ops
    total = ac_j + mac_j
    rates = model.firing_rates() if hasattr(model, "firing_rates") else {}
    return EnergyReport(
        per_layer=per_layer,
        total_joules=total,
        float_share=mac_j / total if total > 0 else 0.0,
        ac_ops=ac_ops,
        mac_ops=mac_ops,
        ac_joules=ac_j,
        mac_joules=mac_j,
        firing_rates=rates,
    )


def peak_memory(fn: Callable, *args, device: str = "cpu", **kwargs) -> int:
    """Memory of one call ``fn(*args, **kwargs)`` in bytes (e.g. a forward + backward step).

    CUDA: ``torch.cuda.max_memory_allocated`` above the level before the call. CPU (PyTorch exposes
    no allocator high-water mark): bytes of the distinct tensor storages autograd saved for the
    backward pass during the call (the activation memory that dominates training, exactly ``T``-fold
    for an SNN unrolled over ``T`` steps) + bytes of returned tensors + the Python-heap peak from
    :mod:`tracemalloc`. Deterministic for a fixed model and input.
    """
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        fn(*args, **kwargs)
        torch.cuda.synchronize()
        return int(torch.cuda.max_memory_allocated() - base)
    out, saved = saved_tensor_bytes(lambda: fn(*args, **kwargs))
    outs = out if isinstance(out, (tuple, list)) else (out,)
    out_bytes = sum(o.numel() * o.element_size() for o in outs if isinstance(o, Tensor))
    return int(saved + out_bytes)
