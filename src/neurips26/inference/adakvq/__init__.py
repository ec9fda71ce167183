r"""AdaKVQ: mixed-precision KV-cache quantisation driven by Average Attention Distance (AAD).

Paper
-----
"AdaKVQ" (NeurIPS 2026 submission; seed file ``004_01f475bc147a144d.txt``, paragraph beginning
"Large Reasoning Models (LRMs) rely on"). Static low-bit KV quantisation gives every layer the same
bits at every moment. AdaKVQ measures how far back each layer reads with the Average Attention
Distance and gives more bits to layers with a high long-range retrieval demand (a static allocation
from a calibration profile), then modulates the bits of newly quantised KV blocks online when a
layer's current AAD surges or drops, under a global average-bit budget.

Math
----
For a query at cache index ``t`` with attention probabilities ``a_{t,j}`` over visible keys ``j``::

    AAD(t)  = sum_j a_{t,j} (t - j)
    nAAD(t) = AAD(t) / max(n_visible(t) - 1, 1)   in [0, 1]   (= AAD / t without padding)

averaged over heads and batch rows. Calibration gives per-layer ``mu_l``, ``sigma_l``; demand
``D_l = mu_l + kappa sigma_l``. Keys and values get separate bit-widths from a per-layer *ladder* of
rungs ``r = 0 .. |B| - 1`` with value bits ``B_r`` and key bits ``B_min(r + key_bonus, |B| - 1)``
(``key_bonus = 0``: the same bits for K and V; ``key_bonus = 1``: keys one step higher, capped at
``max(B)``). A rung costs ``c_r = (kbits_r + vbits_r) / 2`` bits per K/V scalar (K and V blocks hold
the same number of scalars). Static allocation: start every layer at rung 0, repeatedly raise the
highest-demand layer by one rung while ``mean_l c_{r_l} <= avg_bits`` and no layer ends on a higher rung
than a layer of higher demand (ties -> deeper layer). Online: ``d_l`` = EMA (rate ``1 - ema``) of the
layer's nAAD; at each block flush the block gets the next higher rung if
``d_l > mu_l + kappa_hi sigma_l``, the next lower if ``d_l < mu_l - kappa_lo sigma_l``, else the base;
the choice is lowered rung by rung while the mean bits (keys and values counted separately; layers
averaged) would exceed ``avg_bits + budget_slack`` (rung 0 never raises the mean, so the invariant
holds).

In one line (layer ``l``, flushed block; ``r_l`` the static rung, ``d_l`` the EMA of the layer's nAAD):

.. math::
    \mathrm{nAAD}(t) = \frac{\sum_j a_{t,j}\,(t - j)}{\max(n_t - 1, 1)},\qquad
    r = \begin{cases} r_l + 1 & d_l > \mu_l + \kappa_{hi} \sigma_l \\
                      r_l - 1 & d_l < \mu_l - \kappa_{lo} \sigma_l \\
                      r_l & \text{otherwise} \end{cases}

Memory (bytes, exact): for each flushed block of ``G`` tokens, the packed codes and fp16 (scale,
zero) of the keys (per-channel groups of ``G`` tokens, ``kbits``) and of the values (per-token groups
of ``G_v`` channels, ``vbits``), plus the full-precision residual (:func:`adakvq_memory_formula`).

AAD is measured by an attention function registered with ``transformers.AttentionInterface`` that
runs SDPA and additionally scores the last ``n_probe`` queries (``O(n_probe * T * d)`` extra work).
Calibration is data-parallel: :func:`all_reduce_profile` sums every rank's per-layer (count, sum, sum
of squares) of nAAD with ``torch.distributed.all_reduce``.

Shapes
------
- :meth:`AdaKVQCache.update` / :meth:`AdaKVQLayer.update`: ``key_states``, ``value_states``
  ``[B, H_kv, T_new, d]`` in; the full ``[B, H_kv, T, d]`` keys and values out.
- :func:`aad_from_probs`: attention probabilities ``[..., Q, K]`` and ``query_index [Q]`` -> ``aad``,
  ``naad`` ``[..., Q]``.
- :class:`AADProfile`: per-layer ``mean``, ``std`` ``[L]``; :func:`allocate_kv_bits`: two lists of ``L``
  bit-widths (keys, values).

Modules
-------
- :mod:`.config`: :class:`AdaKVQConfig`, :func:`kv_ladder`.
- :mod:`.aad`: :func:`aad_from_probs`, :class:`AADProfile`, :class:`AADTracker`,
  :func:`register_aad_attention`.
- :mod:`.calibrate`: :func:`calibrate_aad`, :func:`all_reduce_profile`.
- :mod:`.allocate`: :func:`allocate_kv_bits`, :func:`allocate_bits`, :class:`BitController`.
- :mod:`.memory`: :func:`adakvq_memory_formula`.
- :mod:`.cache`: :class:`AdaKVQLayer`, :class:`AdaKVQCache`.
"""

from neurips26.inference.adakvq.aad import AADProfile, AADTracker, aad_from_probs, register_aad_attention
from neurips26.inference.adakvq.allocate import BitController, allocate_bits, allocate_kv_bits
from neurips26.inference.adakvq.cache import AdaKVQCache, AdaKVQLayer
from neurips26.inference.adakvq.calibrate import all_reduce_profile, calibrate_aad
from neurips26.inference.adakvq.config import AdaKVQConfig, kv_ladder
from neurips26.inference.adakvq.memory import adakvq_memory_formula
from neurips26.inference.quant import KIVICache, kivi_memory_formula

__all__ = [
    "AdaKVQConfig",
    "AADTracker",
    "AADProfile",
    "aad_from_probs",
    "register_aad_attention",
    "calibrate_aad",
    "allocate_bits",
    "allocate_kv_bits",
    "kv_ladder",
    "BitController",
    "AdaKVQLayer",
    "AdaKVQCache",
    "KIVICache",
    "kivi_memory_formula",
    "adakvq_memory_formula",
    "all_reduce_profile",
]
