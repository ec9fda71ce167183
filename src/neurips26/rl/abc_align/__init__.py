"""ABC-Align: preference learning from abundant AI pseudo-labels plus a small human-labelled subset.

Paper
-----
"ABC-Align" (NeurIPS 2026 submission; registry seed ``004_01f475bc147a144d.txt``, paragraph
beginning "Language model post-training is often bottlenecked"). Only the abstract is public; the
estimator instantiates its description on top of the PPI / PPI++ rectified-loss framework
(Angelopoulos et al., arXiv 2311.01453). Choices the abstract leaves open are marked *inferred*.

Method
------
Human set :math:`D_H` (``n`` pairs with human label :math:`h` and judge label :math:`\\hat p`) and
pseudo pool :math:`D_P` (``N >> n`` pairs with judge label only). With the soft logistic loss
:math:`\\ell(m, q) = -q\\log\\sigma(m) - (1-q)\\log\\sigma(-m)` on a margin ``m`` (reward-model margin
or DPO margin),

.. math::  L_{ABC}(\\theta) = \\overline{\\ell(z,\\hat p)}_{D_P}
           + c\\,\\overline{\\ell(z,h) - \\ell(z,\\hat p)}_{D_H},

where ``c = 0`` is pseudo-only RLAIF and ``c = 1`` the unbiased PPI-rectified loss. ABC-Align picks
``c`` to minimise the estimated MSE of the corrected gradient,
:math:`c^* = \\lVert\\mu\\rVert^2 / (\\lVert\\mu\\rVert^2 + \\mathrm{tr}\\Sigma/n)`, with :math:`\\mu, \\Sigma`
the mean and covariance of the per-example correction gradients :math:`d_i = (\\hat p_i - h_i)
\\nabla_\\psi m_i` on a probe :math:`\\psi`, re-estimated every ``K`` steps from the last ``W`` human
examples and smoothed by an EMA (*inferred*).

Modules
-------
- :mod:`.objective`: :func:`soft_logistic_loss`, :func:`dpo_margin`, :func:`preference_margin_rm`,
  :class:`ABCConfig`, :class:`ABCAlignObjective`, :func:`estimate_correction_strength`,
  :func:`ppi_pp_lambda` and the baselines (:class:`PseudoOnlyObjective`, :class:`HumanOnlyObjective`,
  :class:`PPIPlusPlusObjective`, :class:`PooledObjective`, :func:`make_objective`).
- :mod:`.reward`: :func:`abc_reward_loss` (Bradley-Terry reward models, e.g. inside TRL's
  ``RewardTrainer.compute_loss``) and :class:`ABCRewardTrainer` (a minimal trainer for any
  ``nn.Module`` reward model, optionally several in lockstep).
- :mod:`.dpo`: :func:`abc_dpo_loss` and :class:`ABCDPOTrainer` (a ``trl.DPOTrainer`` subclass over a
  human and a pseudo preference dataset; imported lazily, needs the ``llm`` extra).

Shapes
------
Per-example loss vectors ``(k,)`` (pseudo) and ``(m,)`` (human) go into an objective, a scalar comes
out; per-example corrections are ``(m, dim)`` with ``dim`` the probe size.
"""

from neurips26.rl.abc_align.dpo import StratifiedPairSampler, abc_dpo_loss, mix_preference_datasets
from neurips26.rl.abc_align.objective import (
    OBJECTIVES,
    ABCAlignObjective,
    ABCConfig,
    HumanOnlyObjective,
    MarginBatch,
    PooledObjective,
    PPIPlusPlusObjective,
    PseudoOnlyObjective,
    RectifiedObjective,
    correction_from_statistics,
    correction_statistics,
    dpo_margin,
    estimate_correction_strength,
    make_objective,
    ppi_pp_lambda,
    preference_margin_rm,
    rectified_loss_from_margins,
    soft_logistic_loss,
)
from neurips26.rl.abc_align.reward import (
    ABCRewardTrainer,
    PreferencePairs,
    abc_reward_loss,
    head_parameter_names,
    per_example_margin_grads,
)


def __getattr__(name: str):
    if name == "ABCDPOTrainer":
        from neurips26.rl.abc_align import dpo

        return dpo.ABCDPOTrainer
    raise AttributeError(f"module 'neurips26.rl.abc_align' has no attribute {name!r}")


__all__ = [
    "ABCAlignObjective",
    "ABCConfig",
    "ABCDPOTrainer",
    "ABCRewardTrainer",
    "HumanOnlyObjective",
    "MarginBatch",
    "OBJECTIVES",
    "PPIPlusPlusObjective",
    "PooledObjective",
    "PreferencePairs",
    "PseudoOnlyObjective",
    "RectifiedObjective",
    "StratifiedPairSampler",
    "abc_dpo_loss",
    "abc_reward_loss",
    "correction_from_statistics",
    "correction_statistics",
    "dpo_margin",
    "estimate_correction_strength",
    "head_parameter_names",
    "make_objective",
    "mix_preference_datasets",
    "per_example_margin_grads",
    "ppi_pp_lambda",
    "preference_margin_rm",
    "rectified_loss_from_margins",
    "soft_logistic_loss",
]
