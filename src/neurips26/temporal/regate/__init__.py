r"""REGATE: time-causal, confidence-gated fusion of policy documents into temporal GNNs under regime shifts.

Paper
-----
REGATE (NeurIPS 2026 submission; full title not public); seed file ``000_f8b4140a0e3b5d84.txt``, abstract
beginning "Risk assessment and anomaly detection in". Public: only the abstract (no paper text or code). The
forms follow the spec (``shared/specs/regate.md``), whose reconstructed parts are marked *inferred* there.

Math
----
Documents are turned into auditable :class:`PolicyToken` s by an extractor (rule-based by default, or any
JSON-returning callable via :class:`LLMExtractor`); a token ``k`` (publish time :math:`p_k`, effective time
:math:`e_k`, confidence :math:`c_k`) is visible to a prediction at time :math:`t` iff

.. math::
    p_k < t \quad\text{and}\quad \max(p_k, e_k) \le t,
    \qquad w_k(t) = \exp\bigl(-(t - \max(p_k, e_k)) / \tau_s\bigr),

attached to its entities and to the members of its groups; tokens with :math:`c_k w_k < 10^{-3}` are
evicted and at most ``k_max`` are kept per node (largest :math:`c_k w_k`). With token embeddings
:math:`e_k = E_{type} + E_{dir} + W_\tau \phi(t - p_k) + W_x x_{d(k)}` (:math:`x_d` the document's
all-MiniLM-L6-v2 embedding when ``text_dim > 0``) and the backbone state :math:`h_v`:

.. math::
    a_{vk} = \mathrm{softmax}_k\Bigl(\frac{(W_q h_v)^\top W_k e_k}{\sqrt d} + \log(c_k w_k)\Bigr),\quad
    m_v = \sum_k a_{vk} W_v e_k,\quad g_v = \sigma(W_g [h_v, m_v] + b_g),

.. math::
    \tilde h_v = h_v + \rho\, \gamma_v\, g_v \odot \tanh(m_v), \qquad
    \gamma_v = 1 - \exp\bigl(-\textstyle\sum_k c_k w_k\bigr) \ (\text{evidence gate, or } 1),

so :math:`\|\tilde h_v - h_v\|_\infty \le \rho` and :math:`\tilde h_v = h_v` exactly without visible
tokens. :class:`REGATE` puts the gate between a backbone (``embed(nodes, t)``, ``observe``) and a decoder.

Package layout: ``tokens`` (tokens, documents, schema, extractors, token store, MiniLM embeddings),
``model`` (gate, backbones, REGATE, naive injection, retrieval adapter), ``world`` (the template world),
``training`` (training/scoring loops, temperature scaling, ECE).

Shapes
------
- ``h [B, d]``; a :class:`TokenBatch` holds ``[B, k_max]`` tensors (``text [B, k_max, text_dim]``).
- ``REGATE.forward(src [B], t [B], store) -> [B]`` logits.
"""

from neurips26.temporal.regate.model import (
    REGATE,
    BoundedPolicyGate,
    GraphMixerLite,
    NaiveTextInjection,
    RetrievalAdapter,
    attention_mass,
)
from neurips26.temporal.regate.tokens import (
    POLICY_TYPES,
    Document,
    Extractor,
    LLMExtractor,
    NoisyExtractor,
    PolicySchema,
    PolicyToken,
    RuleBasedExtractor,
    TokenBatch,
    TokenStore,
    embed_documents,
)
from neurips26.temporal.regate.training import (
    expected_calibration_error,
    fit_temperature,
    stream_risk_scores,
    train_risk_epoch,
)
from neurips26.temporal.regate.world import (
    TransactionWorld,
    default_schema,
    stated_effective_dates,
    transaction_world,
)

__all__ = [
    "PolicyToken",
    "Document",
    "PolicySchema",
    "Extractor",
    "RuleBasedExtractor",
    "LLMExtractor",
    "NoisyExtractor",
    "TokenBatch",
    "TokenStore",
    "BoundedPolicyGate",
    "GraphMixerLite",
    "NaiveTextInjection",
    "REGATE",
    "expected_calibration_error",
    "attention_mass",
    "RetrievalAdapter",
    "embed_documents",
    "POLICY_TYPES",
    "TransactionWorld",
    "transaction_world",
    "default_schema",
    "stated_effective_dates",
    "train_risk_epoch",
    "stream_risk_scores",
    "fit_temperature",
]
