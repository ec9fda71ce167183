r"""AdaCal settings: task names, head kinds, per-task policies and :class:`AdaCalConfig`.

A :class:`TaskPolicy` holds the head-activation thresholds and the dynamic-selection parameters of one
task type; :data:`DEFAULT_POLICIES` maps ``structure``/``mixed``/``retrieval`` to their (inferred)
defaults.

.. math::
    \pi_\tau = (\theta_{mid}, \theta_H, \gamma, \beta_{max}, \mathrm{dense\_quota}, \mathrm{augment})

Shapes
------
Configuration only (no tensors).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from neurips26.common.checks import check_choice, check_float, check_int

TASKS = ("structure", "mixed", "retrieval")
AUGMENT_MODES = ("off", "topm", "topm+stride")
METHODS = ("adacal", "a_shape", "flexprefill", "dense")
BACKENDS = ("reference", "flex")
HEAD_STATIC, HEAD_DYNAMIC, HEAD_DENSE = 0, 1, 2


# --------------------------------------------------------------------------------------------
# configuration
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TaskPolicy:
    """Thresholds of one task type (all inferred; see the module docstring).

    Parameters
    ----------
    theta_mid : float
        Heads with mid-zone coverage below it stay static (A-shape), in ``[0, 1]``.
    theta_h : float
        Heads with normalised entropy above it may run dense, in ``[0, 1]``.
    gamma : float
        Cumulative estimated mass a dynamic head keeps per query block, in ``(0, 1]``.
    augment : {"off", "topm", "topm+stride"}
        Long-range augmentation of dynamic heads.
    beta_max : float
        Per-row budget of a dynamic head as a fraction of the causal blocks, in ``(0, 1]``.
    """

    theta_mid: float
    theta_h: float
    gamma: float
    augment: str
    beta_max: float

    def __post_init__(self) -> None:
        check_float("theta_mid", self.theta_mid, 0.0, 1.0)
        check_float("theta_h", self.theta_h, 0.0, 1.0)
        check_float("gamma", self.gamma, 0.0, 1.0, low_open=True)
        check_choice("augment", self.augment, AUGMENT_MODES)
        check_float("beta_max", self.beta_max, 0.0, 1.0, low_open=True)


#: The policy table of the spec (thresholds inferred).
DEFAULT_POLICIES: Mapping[str, TaskPolicy] = {
    "structure": TaskPolicy(theta_mid=0.25, theta_h=0.95, gamma=0.85, augment="off", beta_max=0.15),
    "mixed": TaskPolicy(theta_mid=0.15, theta_h=0.90, gamma=0.90, augment="topm", beta_max=0.30),
    "retrieval": TaskPolicy(theta_mid=0.10, theta_h=0.85, gamma=0.95, augment="topm+stride", beta_max=0.50),
}


@dataclass(frozen=True)
class AdaCalConfig:
    """Configuration of AdaCal sparse prefill.

    Parameters
    ----------
    block_size : int
        Block edge ``B`` in tokens (128 for long contexts; 16-64 for short ones).
    sink_blocks : int
        Leading blocks always kept (attention sinks).
    local_blocks : int
        Blocks before the diagonal always kept (local window).
    probe_queries : int, optional
        Number of last queries in the probe (default ``block_size``).
    policies : mapping of str to TaskPolicy
        One policy per task in :data:`TASKS`.
    dense_quota : float
        At most ``round(dense_quota * h)`` heads per layer run dense.
    augment_top_m : int
        Mid-zone probe blocks added by ``"topm"`` augmentation.
    augment_stride : int
        Stride ``r`` of ``"topm+stride"`` augmentation.
    default_task : str
        Task used when neither a tag nor a dispatcher decides.
    backend : {"reference", "flex"}
        ``"reference"``: token-expanded mask + exact SDPA (pure torch, any device). ``"flex"``:
        ``torch.nn.attention.flex_attention`` with a ``BlockMask`` built from the plan
        (:func:`flex_block_mask`); block-sparse on GPU, eager and unfused (slow, exact) on CPU.
    """

    block_size: int = 128
    sink_blocks: int = 1
    local_blocks: int = 2
    probe_queries: int | None = None
    policies: Mapping[str, TaskPolicy] = field(default_factory=lambda: dict(DEFAULT_POLICIES))
    dense_quota: float = 0.1
    augment_top_m: int = 4
    augment_stride: int = 8
    default_task: str = "mixed"
    backend: str = "reference"

    def __post_init__(self) -> None:
        check_int("block_size", self.block_size, low=1)
        check_int("sink_blocks", self.sink_blocks, low=0)
        check_int("local_blocks", self.local_blocks, low=0)
        if self.probe_queries is not None:
            check_int("probe_queries", self.probe_queries, low=1)
        if not isinstance(self.policies, Mapping):
            raise TypeError(
                f"policies must be a mapping task -> TaskPolicy, got {type(self.policies).__name__}"
            )
        missing = [t for t in TASKS if t not in self.policies]
        if missing:
            raise ValueError(f"policies must define every task {list(TASKS)}; missing {missing}")
        for name, pol in self.policies.items():
            if not isinstance(pol, TaskPolicy):
                raise TypeError(f"policies[{name!r}] must be a TaskPolicy, got {type(pol).__name__}")
        check_float("dense_quota", self.dense_quota, 0.0, 1.0)
        check_int("augment_top_m", self.augment_top_m, low=0)
        check_int("augment_stride", self.augment_stride, low=1)
        check_choice("default_task", self.default_task, TASKS)
        check_choice("backend", self.backend, BACKENDS)
