"""Channel-coded reliability for LLM agents: six reliability operators, two closed-form design
criteria and a cost-aware semantic nearest-neighbour router.

Paper
-----
"A Communication-Theoretic Framework for LLM Agents: Cost-Aware Adaptive Reliability" (Omidvar &
Akhlaghi, arXiv 2605.09121); seed file ``004_01f475bc147a144d.txt``, abstract beginning "Agents built
on large language models". The reference implementation (AgentCodec) is under a noncommercial licence
and was read for facts only; this module is written independently. The closed-form derivations
(threshold A, contraction model B) and the router's k, weighting and embedder are inferred (see the
spec), not taken from the paper.

Method
------
An LLM sampled at temperature ``T`` is a noisy discrete channel ``p(y | x)``; the usual
reliability tricks are channel-coding operators over it:

* O1 :func:`diversity_combining` (majority = equal-gain, best-of-N = selection, weighted vote =
  maximal-ratio combining), O2 :func:`hybrid_retransmission` (retry, Chase combining, incremental
  redundancy with critic feedback), O3 :func:`generator_critic` (self-refine as iterative decoding),
  O4 :func:`rateless_sampling` (sample until the vote is confident), O5
  :func:`redundant_verification` (answer + parity checks at code rate ``r``), O6
  :func:`adaptive_routing` (pilot -> difficulty bin -> dispatch table). All share
  ``op(task, channels, *, judge, critic, rng, **budget) -> Result`` and are listed in
  :data:`OPERATORS`. A :class:`Channel` wraps any sampler ``(prompt, n, temperature) -> completions``.
* Closed form A (:func:`uniform_vs_weighted_threshold`): with branch noise variances ``v_i`` and
  weight-estimation noise ``tau^2``,

  .. math::

      \\mathrm{MSE}_w = \\frac{1}{P} + \\tau^2 \\Big(1 - \\frac{1}{N}\\Big) V, \\quad
      \\mathrm{MSE}_u = \\frac{V}{N^2}, \\quad
      \\tau_*^2 = \\Big(\\frac{1}{N^2} - \\frac{1}{P V}\\Big)\\frac{N}{N-1},

  ``P = sum 1/v_i``, ``V = sum v_i``; uniform averaging wins iff ``tau^2 > tau*^2``.
* Closed form B (:func:`contraction_factor`): refinement ``e_{k+1} = rho e_k + xi_k`` with
  ``rho = 1 - gamma kappa`` contracts iff ``0 < gamma kappa < 2``; :func:`estimate_contraction`
  is the pooled least-squares slope.
* :class:`SemanticKNNRouter`: ``a* = argmax_a q_hat_a(x) - lambda c_hat_a(x)`` with ``q_hat, c_hat``
  softmax-weighted averages of the quality and cost of the ``k`` nearest training prompts by cosine
  similarity of unit-norm embeddings; sweeping ``lambda >= 0`` traces the quality-cost frontier
  without refitting.

Shapes
------
Router index: embeddings ``E`` (M, D) unit rows; quality ``Q`` (M, |A|) in [0, 1]; normalised cost
``C`` (M, |A|) >= 0; arm mask (|A|,). ``estimates(prompt)`` -> two (|A|,) arrays;
``route_curve(prompts, lams)`` -> (len(lams), len(prompts)) arm indices. Closed forms take a 1-D
variance vector (N,) with N >= 2.

Scale-out (:mod:`.parallel`): :class:`ConcurrentSampler` issues a channel's ``n`` samples on a thread
pool with one seed per sample (same completions, same order as sequential calls);
:class:`OpenAICompletionsSampler` talks to an OpenAI-compatible server; :func:`parallel_evaluate`
splits the ``(Q, C)`` sweep of :func:`evaluate_arms` into arm blocks over worker processes and
reproduces it exactly.
"""

# Each submodule lists its public names once, in its own ``__all__``; the package re-exports them.
from neurips26.agents.channel_router import operators as _operators
from neurips26.agents.channel_router import parallel as _parallel
from neurips26.agents.channel_router import router as _router
from neurips26.agents.channel_router import theory as _theory
from neurips26.agents.channel_router.channels import (
    Channel,
    Critic,
    Feedback,
    HFChannel,
    Judge,
    Result,
    Sample,
    SimulatedChannel,
    Task,
    normalize_answer,
)
from neurips26.agents.channel_router.operators import *  # noqa: F403
from neurips26.agents.channel_router.parallel import *  # noqa: F403
from neurips26.agents.channel_router.router import *  # noqa: F403
from neurips26.agents.channel_router.theory import *  # noqa: F403

# The channel model's public names (``as_judge``/``as_critic`` stay in :mod:`.channels`), then the
# other submodules' public names.
__all__ = [
    "Sample",
    "Task",
    "Result",
    "Feedback",
    "Channel",
    "SimulatedChannel",
    "HFChannel",
    "Judge",
    "Critic",
    "normalize_answer",
    *_operators.__all__,
    *_theory.__all__,
    *_router.__all__,
    *_parallel.__all__,
]
