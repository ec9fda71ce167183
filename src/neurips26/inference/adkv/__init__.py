r"""ADKV: adaptive delta quantisation of the KV cache with EMA-tracked, stream-embedded metadata.

Paper
-----
"ADKV" (NeurIPS 2026 submission; seed file ``004_01f475bc147a144d.txt``, paragraph beginning
"The KV cache is a major"). Static group-wise KV quantisation stores a zero-point and a scale for every
group, so its metadata grows with the context length. ADKV quantises each channel of the key and value
streams like adaptive differential PCM: a per-channel prediction (zero-point) and step (scale) are
updated from the *reconstructed* values, so the decoder regenerates them from the codes alone and only
a constant-size initial state plus per-channel parameters are stored. The encoder/decoder is an RNN
whose rates are calibrated by SGD (straight-through rounding) to minimise attention-output error.

Math (per layer, head and channel; ``b`` bits, ``L = 2**b`` levels, offset ``o = L / 2``)
--------------------------------------------------------------------------------------------------
Initial state from the first ``B0`` tokens: ``z_1 = mean(x)``, ``a_1 = mean|x - z_1|`` (both stored in fp16),
``s_1 = max(gamma * a_1 / o, 1e-6)``, ``s_min = s_min_rel * s_1``. For :math:`t = 1, \dots, T` (codes
:math:`q_t` are packed; :math:`|x_t - \hat x_t| \le s_t / 2` unless saturated; :math:`z` is the EMA
prediction, i.e. the zero-point):

.. math::

    q_t = \mathrm{clamp}\big(\mathrm{round}((x_t - z_t) / s_t) + o,\ 0,\ L - 1\big), \qquad
    d_t = q_t - o, \qquad \hat x_t = z_t + d_t s_t,

    z_{t+1} = z_t + \eta_z (\hat x_t - z_t), \qquad
    s_{t+1} = \max\big(s_t [(1 - \eta_s) + \eta_s \gamma |d_t| / o]\, \omega^{sat_t},\ s_{min}\big).

The step update is the EMA of the reconstructed magnitude ``a_{t+1} = (1 - eta_s) a_t + eta_s |x_hat_t -
z_t|`` with ``s = gamma a / o`` written multiplicatively (Jayant/ADPCM step adaptation), with overload
recovery ``omega`` when a code saturates (``sat_t = 1`` if ``q_t`` is ``0`` or ``L - 1``). Because
``s -> max(alpha s, beta)`` maps compose associatively, the decoder is a parallel scan:

.. math::

    m_t = \log\big((1 - \eta_s) + \eta_s \gamma |d_t| / o\big) + sat_t \log \omega, \qquad
    L_t = \sum_{k<t} m_k,

    \log s_t = L_t + \max_{k \le t} c_k, \qquad c_1 = \log s_1, \qquad c_k = \log s_{min} - L_k \ (k \ge 2),

    z_t = z_1 + \eta_z \sum_{k<t} d_k s_k .

The encoder runs the same arithmetic sequentially in float64, so ``decode(encode(x)) == simulate(x)``
bit for bit.

Metadata per head and stream: ``(2 + 3) * 16 * d`` bits (``z_1, a_1, eta_z, eta_s,
gamma``), independent of the context length ``T``; static group-wise keys need ``2 * 16 * d *
ceil(T / G)`` bits and per-token values ``2 * 16 * T * ceil(d / G_v)``.

Outlier channels (``n_outliers = n``): per layer, KV head and ADKV stream (keys, and values when they
are ADKV-coded) the ``n`` channels of largest mean square ``mean_t x_{t,c}^2`` are kept exactly in
fp16 and the other ``d' = d - n`` channels are ADKV-coded. The indices are static: chosen by the
calibration from the recorded keys/values (pooled over sequences and tokens), or, without
calibration, from the first ``B0`` tokens of the first prefill pooled over the batch. They cost
``n * ceil(log2 d)`` metadata bits per head and stream (stored bit-packed); the fp16 outlier values
are payload (``16 * n`` bits per token). Metadata then is ``(2 + 3) * 16 * d' + n ceil(log2 d)``.

Decoder checkpoints (``checkpoint_every = C``): the encoder stores its exact float64 accumulators
``(L_t, cmax_t, sum_{k<t} d_k s_k)`` before tokens ``t = C, 2C, ...``; chunk ``j`` then starts its
running sums from checkpoint ``j`` instead of from the start, so the ``ceil(T / C)`` chunks are
scanned in one vectorised pass with the same left-to-right float64 operations, i.e. with bit-identical
output. Cost: ``(T_q - 1) // C`` checkpoints of ``3 * 64 * d'`` bits per head, stream and batch row
(metadata that again grows with ``T``, by ``192 / C`` bits per channel and token).

Calibration treats the quantiser as an RNN: parameters ``eta = sigmoid(.)``, ``gamma = softplus(.)``,
straight-through rounding, truncated BPTT, Adam; loss = relative MSE between causal attention outputs
computed with reconstructed and exact keys/values recorded through a registered
``transformers.AttentionInterface`` function (outlier channels enter the loss exactly). Layers do not
interact, so the calibration splits over worker processes with bit-identical results.

Shapes
------
- :meth:`ADKVCache.update` / :meth:`ADKVLayer.update`: ``key_states``, ``value_states`` ``[B, H_kv, T_new, d]``
  in; the full ``[B, H_kv, T, d]`` keys and values out.
- :class:`ADKVQuantizer`: ``x [..., T, d]`` (channels last) -> codes ``[..., T, d]`` with ``b`` bits each.
- outlier indices: ``[B or 1, H_kv, n]`` per layer and stream.

Modules
-------
- :mod:`.quantizer`: :class:`ADKVConfig`, :class:`ADKVState`, :class:`ADKVQuantizer`.
- :mod:`.outliers`: :func:`select_outlier_channels`, :func:`index_bits`.
- :mod:`.cache`: :class:`ADKVLayer`, :class:`ADKVCache`, :class:`GroupwiseStaticCache` (baseline).
- :mod:`.memory`: :func:`metadata_bits`, :func:`adkv_memory_formula`.
- :mod:`.calibrate`: :func:`record_qkv`, :func:`calibrate_streams`, :func:`calibrate_adkv`.
"""

from neurips26.inference.adkv.baseline import GroupwiseStaticCache
from neurips26.inference.adkv.cache import ADKVCache, ADKVLayer
from neurips26.inference.adkv.calibrate import calibrate_adkv, calibrate_streams, record_qkv
from neurips26.inference.adkv.memory import adkv_memory_formula, metadata_bits
from neurips26.inference.adkv.outliers import (
    index_bits,
    select_outlier_channels,
)
from neurips26.inference.adkv.quantizer import ADKVConfig, ADKVQuantizer, ADKVState

__all__ = [
    "ADKVConfig",
    "ADKVState",
    "ADKVQuantizer",
    "ADKVLayer",
    "ADKVCache",
    "GroupwiseStaticCache",
    "calibrate_adkv",
    "calibrate_streams",
    "record_qkv",
    "metadata_bits",
    "adkv_memory_formula",
    "select_outlier_channels",
    "index_bits",
]
