r"""SCORE: log-odds score reweighting that adds soft similarity constraints to any variable of a complex KG query.

Paper
-----
"SCORE" (OpenReview KMzaR3M8SY); seed file ``000_f8b4140a0e3b5d84.txt``, paragraph beginning "Machine
learning models for answering logical". Public: the abstract and the code (the ``score`` branch of
https://github.com/dfdazac/nqr), which fix the log-odds update below. Inferred (spec
``shared/specs/score.md``): the threshold scaling for small graphs, the NDCG cut-off, the default grid,
the synthetic grouping source and multi-variable simultaneous preferences; :class:`NQRLite` is a small
stand-in for NQR's learned reranker.

Math
----

A tree-shaped query in BetaE form is executed QTO-style over fuzzy sets :math:`v \in [0, 1]^N`:
anchors are one-hot, a projection by ``r`` is max-product with a fuzzy adjacency :math:`M_r`,
:math:`v'[t] = \max_h v[h] M_r[h, t]`, an intersection is the elementwise product, a union (DNF)
:math:`1 - \prod_i (1 - v_i)` and a negated projection :math:`1 - \min(1, s\, v')`. Every projection or
intersection that creates a logical variable is indexed ``j = 0..V-1`` in creation order (target
``V - 1``; :func:`query_variables`). SCORE adjusts variable ``j`` with positive examples ``P`` and
negative examples ``Q`` in log-odds space,

.. math::
    v'_j[e] = \sigma\Big(\mathrm{logit}(v_j[e])
      + w_p \tfrac{1}{|P|}\textstyle\sum_{p \in P} \mathrm{logit}\,\varsigma(p, e)
      + w_n \tfrac{1}{|Q|}\textstyle\sum_{n \in Q} \mathrm{logit}\,(1 - \varsigma(n, e))\Big),
    \qquad \varsigma(p, e) = \tfrac{1 + \mathrm{sim}(p, e)}{2},

with :math:`\mathrm{sim}` the (complex) cosine of entity embeddings. At an intermediate variable the
adjusted set is propagated through the rest of the query by the same executor.

Also here: the base link predictor (:func:`train_complex`, ComplEx with reciprocal relations, N3 and
1-vs-all cross entropy; its scores equal PyKEEN's ``ComplExInteraction``), BetaE query sampling
(:class:`QuerySampler`), exact per-value bindings of a variable (:func:`variable_bindings`), preference
sessions and their metrics (:class:`Session`, :func:`session_metrics`; interactive sessions that
reveal one example per step, :func:`session_steps` / :func:`interactive_metrics`), query sharding over
``torch.distributed`` ranks (:func:`distributed_session_scores`) and the baselines: the
unconstrained QTO ranking (the executor itself), :class:`CosineReranker` and :class:`NQRLite`. The
claim check is ``neurips26.claims.score``.

Shapes
------
- fuzzy sets and scores: ``[N]`` (the executor broadcasts over leading dimensions, ``[B, N]``)
- preference similarities: ``[P, N]``; labels ``[P]``
- ComplEx embeddings: entities ``[N, k]`` complex, relations ``[2R, k]`` complex
"""

from __future__ import annotations

from neurips26.kg.score.adjust import SCORE, complex_cosine, score_adjust
from neurips26.kg.score.baselines import CosineReranker, NQRLite, train_nqr
from neurips26.kg.score.distributed import distributed_session_scores
from neurips26.kg.score.executor import FuzzyAdjacency, QTOExecutor
from neurips26.kg.score.linkpred import ComplExEmbeddings, complex_tail_scores, train_complex
from neurips26.kg.score.metrics import (
    SESSION_MODES,
    Session,
    add_answer_ranks,
    answer_mrr,
    graded_ndcg,
    interactive_metrics,
    pairwise_accuracy,
    session_metrics,
    session_steps,
)
from neurips26.kg.score.queries import (
    NEGATION_STRUCTURES,
    STRUCTURES,
    UNION_STRUCTURES,
    VariableInfo,
    query_variables,
)
from neurips26.kg.score.sampling import QuerySampler, sample_query, variable_bindings

__all__ = [
    "STRUCTURES",
    "UNION_STRUCTURES",
    "NEGATION_STRUCTURES",
    "SESSION_MODES",
    "session_steps",
    "interactive_metrics",
    "distributed_session_scores",
    "VariableInfo",
    "query_variables",
    "FuzzyAdjacency",
    "QTOExecutor",
    "score_adjust",
    "complex_cosine",
    "SCORE",
    "CosineReranker",
    "graded_ndcg",
    "pairwise_accuracy",
    "complex_tail_scores",
    "ComplExEmbeddings",
    "train_complex",
    "QuerySampler",
    "sample_query",
    "variable_bindings",
    "Session",
    "answer_mrr",
    "add_answer_ranks",
    "session_metrics",
    "NQRLite",
    "train_nqr",
]
