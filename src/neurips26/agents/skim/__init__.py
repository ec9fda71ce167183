"""SKIM: token-role-aware saliency pruning and valid-token on-policy distillation for constrained agents.

Paper
-----
SKIM (seed ``000_f8b4140a0e3b5d84.txt``, abstract beginning "Large Language Model (LLM) agents are");
only the abstract is public, so the mechanics follow the spec's reconstruction (``../shared/specs/skim.md``)
and are inferred where the abstract is silent.

Method
------
When an agent decodes under a
grammar (a JSON schema for tool calls), most output positions are forced and only a few choose the
action. SKIM labels every prediction position as *context* (reading the prompt), *decision* (the grammar
leaves a choice) or *format* (forced), prunes with role-weighted Wanda-style saliency so the weights
behind decision positions survive, and recovers the pruned student by on-policy distillation in which
the student generates under the grammar and is matched to the teacher only over the valid tokens, plus
role-weighted hidden-state matching.

.. math::

    r_t \\in \\{\\text{context}, \\text{decision}, \\text{format}\\}, \\qquad
    \\text{score}_{ij} = |W_{ij}| \\sqrt{\\textstyle\\sum_c w_c S_c[j] / n_c}, \\qquad
    \\mathcal L = \\frac{\\sum_t w_{r_t} KL(\\tilde p_T^{V_t} \\| \\tilde p_S^{V_t})}{\\sum_t w_{r_t}}
        + \\mu \\mathcal L_{feat}.

Submodules: :mod:`.grammar` (xgrammar JSON-schema constraint, roles, constrained ``generate``),
:mod:`.prune` (role statistics, SKIM / Wanda / magnitude saliency, masks), :mod:`.distill`
(valid-set KL, :class:`SKIMDistiller`, the token-level KD baseline, evaluation).

Shapes
------
roles ``LongTensor[B, L]``; role statistics ``[3, d_in]``; saliency and masks ``[d_out, d_in]``;
logits and valid masks ``[B, L, V]``.
"""

from neurips26.agents.skim.distill import (
    FEATURE_WEIGHTS,
    SKIMDistiller,
    constrained_kl,
    evaluate_constrained,
    greedy_match,
    output_masks,
)
from neurips26.agents.skim.grammar import (
    IGNORE,
    ROLE_NAMES,
    JsonSchemaGrammar,
    TokenRole,
    assign_token_roles,
    constrained_generate,
    role_weight_vector,
)
from neurips26.agents.skim.prune import (
    PRUNE_METHODS,
    SALIENCY_WEIGHTS,
    PruneResult,
    RoleStats,
    collect_role_stats,
    find_prunable,
    magnitude_saliency,
    prune_model,
    saliency_mask,
    skim_saliency,
    wanda_saliency,
)

GrammarConstraint = JsonSchemaGrammar

__all__ = [
    "FEATURE_WEIGHTS",
    "SKIMDistiller",
    "constrained_kl",
    "evaluate_constrained",
    "greedy_match",
    "output_masks",
    "IGNORE",
    "ROLE_NAMES",
    "GrammarConstraint",
    "JsonSchemaGrammar",
    "TokenRole",
    "assign_token_roles",
    "constrained_generate",
    "role_weight_vector",
    "PRUNE_METHODS",
    "SALIENCY_WEIGHTS",
    "PruneResult",
    "RoleStats",
    "collect_role_stats",
    "find_prunable",
    "magnitude_saliency",
    "prune_model",
    "saliency_mask",
    "skim_saliency",
    "wanda_saliency",
]
