r"""CoRF: coupled receptive fields - shared, padded supports for batched conditional message passing.

Paper
-----
"CoRF" (abstract only; registry seed ``000_f8b4140a0e3b5d84.txt``, paragraph beginning
"Conditional message passing (CMP) currently represents"). No paper text or code is public; the
mechanisms below follow the spec's reconstruction (``../shared/specs/corf.md``), marked *inferred*.

Math
----
Conditional message passing answers a query :math:`q = (h_q, r_q, ?)` by propagating query-specific
node states from the head. :class:`NBFNetLite` is the shared CMP model, in the zero-preserving
("progressive") form that makes locality exact:

.. math::
    H_q^{(0)}[e] &= \mathbb 1[e = h_q]\, w(r_q), \\
    a_q^{(l)}[v] &= \frac{1}{\deg^-_{G}(v)} \sum_{(u, r, v) \in E} H_q^{(l-1)}[u] \odot W_l(r, r_q)
                    + H_q^{(0)}[v], \\
    H_q^{(l)}[v] &= H_q^{(l-1)}[v] + \mathbb 1[v \in R_l(q)]\,
                    \mathrm{ReLU}\big(\mathrm{Lin}_l [a_q^{(l)}[v], H_q^{(l-1)}[v]]\big), \\
    s(q, e) &= \mathrm{MLP}\big([H_q^{(L)}[e], w(r_q)]\big),

with :math:`W_l(r, r_q)` query-conditioned relation vectors (DistMult messages, NBFNet's dependent
relations), :math:`\deg^-_G` the *full-graph* in-degree, and :math:`R_l(q)` the entities within
:math:`l` hops of :math:`h_q`. Unreached entities keep the exact zero state and send nothing, so
every score on :math:`R_L(q)` depends only on the subgraph induced by :math:`R_L(q)` plus the
full-graph in-degrees, and every entity outside it gets the closed-form score
:math:`\mathrm{MLP}([0, w(r_q)])` (:meth:`NBFNetLite.unreached_score`).

Three executors share one model:

* :class:`FullGraphExecutor` - propagate every query over the whole graph (NBFNet);
* :class:`SubgraphExecutor` - extract :math:`R_L(q)` per query (PyG ``k_hop_subgraph``) and run the
  batch as a disjoint union (the per-query subgraph baseline);
* :class:`CoRFExecutor` - :class:`ReceptiveSupportPlanner` groups queries into *receptive supports*
  (unions of overlapping receptive fields under a node budget); each support is extracted once,
  carries the full-graph in-degrees of its nodes (boundary padding), and all its queries propagate on
  it together as a ``[|g|, |S_g|, d]`` state tensor. Queries whose receptive field a support cannot
  cover go to a residual set processed with their own exact subgraph (residual compensation), and
  candidates outside a support get the closed-form unreached score. Under these rules CoRF's scores
  equal the full-graph executor's (tested).

:func:`lpt_assign` balances supports over workers by longest-processing-time-first (makespan
:math:`\le (4/3 - 1/(3W))\,\mathrm{OPT}`) and :func:`distributed_scores` runs it on a
``torch.distributed`` group; :func:`balanced_run` spawns the worker processes and measures each
rank's load and the makespan. :class:`PPRSubgraphExecutor` is the approximate per-query PPR top-k
baseline (push-based PPR, :class:`PPRSampler`).

Shapes
------
- queries: ``[B, 2]`` long ``(head, relation)`` pairs; graph: a PyG ``Data`` with ``edge_index [2, E]``,
  ``edge_type [E]`` and ``num_nodes = N``.
- :meth:`NBFNetLite.forward`: scores ``[B, n]`` over the ``n`` nodes of the (sub)graph it is given;
  node states ``[B, n, d]``.
- :meth:`FullGraphExecutor.scores`, :meth:`SubgraphExecutor.scores`, :meth:`CoRFExecutor.scores`:
  full-entity scores ``[B, N]``.
- :func:`receptive_field`: masks ``[B, N]`` (bool) and hop distances ``[B, N]`` (int8).
- :class:`Support`: ``nodes [n_g]``, ``edge_index [2, E_g]``, ``edge_type [E_g]``, ``in_degree [n_g]``,
  ``queries [|g|]``.

Modules
-------
- :mod:`.reach`: :func:`hop_reach`, :func:`receptive_field`.
- :mod:`.model`: :class:`CMPLayer`, :class:`NBFNetLite`.
- :mod:`.baselines`: :class:`FullGraphExecutor`, :class:`SubgraphExecutor`.
- :mod:`.planner`: :class:`Support`, :func:`redundancy_ratio`, :class:`ReceptiveSupportPlanner`.
- :mod:`.executor`: :class:`CoRFExecutor` (alias ``CoRF``).
- :mod:`.distributed`: :func:`lpt_assign`, :func:`round_robin_assign`, :func:`makespan`,
  :func:`distributed_scores`.
- :mod:`.ppr`: :func:`approximate_ppr` (push), :func:`exact_ppr` (linear solve), :class:`PPRSampler`
  (top-k neighbourhoods), :class:`PPRSubgraphExecutor` (the one-shot-subgraph baseline).
- :mod:`.workers`: :func:`balanced_run` (supports assigned by cost, executed on spawned gloo worker
  processes, measured makespan), :func:`job_costs`, :func:`run_jobs`.
- :mod:`.training`: :func:`train_cmp` (BCE with uniform negatives or full-entity softmax).
- :mod:`.synthetic`: :func:`rule_community_kg`, the learnable synthetic KG of the claim check.
"""

from neurips26.kg.corf.baselines import FullGraphExecutor, SubgraphExecutor
from neurips26.kg.corf.distributed import distributed_scores, lpt_assign, makespan, round_robin_assign
from neurips26.kg.corf.executor import CoRF, CoRFExecutor
from neurips26.kg.corf.model import CMPLayer, NBFNetLite
from neurips26.kg.corf.planner import ReceptiveSupportPlanner, Support, redundancy_ratio
from neurips26.kg.corf.ppr import PPRSampler, PPRSubgraphExecutor, approximate_ppr, exact_ppr
from neurips26.kg.corf.reach import hop_reach, receptive_field
from neurips26.kg.corf.synthetic import rule_community_kg
from neurips26.kg.corf.training import train_cmp
from neurips26.kg.corf.workers import balanced_run, job_costs, run_jobs

__all__ = [
    "CMPLayer",
    "NBFNetLite",
    "receptive_field",
    "hop_reach",
    "Support",
    "ReceptiveSupportPlanner",
    "FullGraphExecutor",
    "SubgraphExecutor",
    "CoRFExecutor",
    "CoRF",
    "redundancy_ratio",
    "lpt_assign",
    "round_robin_assign",
    "makespan",
    "distributed_scores",
    "train_cmp",
    "approximate_ppr",
    "exact_ppr",
    "PPRSampler",
    "PPRSubgraphExecutor",
    "balanced_run",
    "job_costs",
    "run_jobs",
    "rule_community_kg",
]
