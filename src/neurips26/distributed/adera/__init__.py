r"""AdERA: Adaptive Exponent Reuse Allgather, lossless all-gather compression for sharded MoE training.

Paper
-----
*AdERA: lossless exponent-reuse all-gather for sharded MoE training* (registry slug ``adera``;
seed file ``004_01f475bc147a144d.txt``, paragraph beginning "In training Mixture-of-Experts models,
sharded data"). With ZeRO-3 / FSDP every rank all-gathers each layer's full weights before using
them. After a short warm-up the exponent field of almost every bf16 weight equals the one of the
previous iteration, so AdERA keeps, on every rank, the exponents it last received from every other
rank and sends only sign + mantissa plus a small list of changed exponents. The receiver recombines
cached exponents and received bits and obtains the weights bit for bit.

Bit fields
----------
For a float of ``B`` bits with ``E`` exponent and ``M`` mantissa bits, viewed as an unsigned
integer ``u``:

.. math::

    s = u \gg (B - 1),\quad e = (u \gg M)\ \&\ (2^E - 1),\quad f = u\ \&\ (2^M - 1)

bf16 (E=8, M=7): the 16-bit word is rotated left by one bit, ``w = e << 8 | f << 1 | s``, so the
exponent is the high byte and ``sm = f << 1 | s`` the low byte: the wire carries 8 of 16 bits.
fp16 (E=5, M=10): 11 sign+mantissa bits, sent as the low mantissa byte plus three bit planes
``(s, f9, f8)`` (11/16 of the raw size). fp32 (E=8, M=23): the 32-bit word rotated the same way;
three sign+mantissa bytes per element (24 of 32 bits). Every operation is a vectorised integer op
on int16/int32/uint8 views of the tensor (no Python loop over elements), so NaN payloads, +-0, +-inf
and subnormals survive unchanged. The implementation assumes a little-endian host (checked at import).

Wire modes (one per shard and call, the smallest payload wins)
--------------------------------------------------------------
With ``m`` elements, ``S`` sign+mantissa bytes (``m`` for bf16), ``n_c`` changed exponents,
``n_b = ceil(m / Bk)`` blocks of which ``n_cb`` contain a change (``L_cb`` exponents in them), the
payload bytes of each mode are (SPARSE sends int32 indices plus the new exponents):

.. math::

    \mathrm{RAW} = \mathrm{itemsize}\cdot m, \qquad
    \mathrm{SPARSE} = S + 4 n_c + n_c, \qquad
    \mathrm{BITMAP} = S + \lceil m / 8 \rceil + n_c, \qquad
    \mathrm{BLOCK} = S + \lceil n_b / 8 \rceil + L_{cb},

plus a 24-byte header (mode, dtype, flags, CRC32 of the shard when ``verify=True``, ``numel``,
``n_c``). With zero changes a bf16 shard costs ``m + 24`` bytes: a ratio ``2m / (m + 24)``.

Collective
----------
*Two-phase* (default): phase 1 all-gathers every rank's payload length (one int64 each); phase 2
all-gathers the payloads padded to the longest one (``all_gather_single`` /
``all_gather_into_tensor`` on ``uint8``). *Fixed capacity* (``capacity_frac=c``): a single
collective of capacity ``header + S + 5 ceil(c m)`` bytes; a rank whose payload does not fit flags
an overflow in its header and all ranks then run one extra raw collective for that call.

Adaptive enable
---------------
``T_raw = alpha + s N (P-1) / (P BW)`` and ``T_ada = t_enc + t_dec + 2 alpha + N w(rho) (P-1)/(P BW)``
with ``N`` gathered elements, ``s`` the item size, ``w(rho)`` the expected wire bytes per element at
change rate ``rho``; compress iff ``T_ada < (1 - margin) T_raw``:

.. math::

    T_{\mathrm{ada}} < (1 - \mathrm{margin})\, T_{\mathrm{raw}}

``alpha``/``BW`` come from :meth:`CostModel.measure`, ``t_enc``/``t_dec`` are timed per shard and
max-reduced over ranks so that every rank takes the same decision.

Other parts: chunked encode/communicate/decode pipeline with ``async_op`` work handles, a
ZeRO-3-style :class:`ShardedMoEWrapper`, the lossless baseline :func:`lossless_zlib_all_gather`
(zlib over the byte-grouped exponent stream), the lossy baseline :func:`int8_block_all_gather`
(ZeRO++ qwZ-style block int8), and the trace-driven :func:`simulate`.

Everything runs with ``torch.distributed`` (gloo on CPU, NCCL on GPU: tensors stay on the input's
device; headers are read on the host). :class:`ThreadGroup` (from :mod:`neurips26.common.distributed`)
emulates ``P`` ranks inside one process (one thread per virtual rank) with the same code path, for
tests and single-machine studies.

Shapes
------
- ``adera_all_gather(output_tensor, input_tensor)``: ``input_tensor [m]`` (this rank's shard),
  ``output_tensor [P * m]``, same dtype (bfloat16, float16 or float32).
- :attr:`AdERAState.caches`: ``[P, m]`` uint8.
- :class:`ShardedMoEWrapper`: a parameter of ``n`` elements becomes a ``[ceil(n / P)]`` fp32 shard.

Modules
-------
- :mod:`.codec`: :class:`AdERAConfig`, bit fields (:func:`split_fields`, :func:`join_fields`,
  :func:`exponents`), :class:`Payload`, :func:`payload_size`, :func:`encode_shard`, :func:`decode_payload`.
- :mod:`.cost`: :class:`GatherStats`, :class:`CostModel`, :func:`expected_wire_bytes_per_element`,
  :class:`AdERAState`.
- :mod:`.allgather`: :func:`adera_all_gather`, :func:`emulate_all_gather`, :class:`AdERAAllGather` (FSDP2).
- :mod:`.baselines`: :func:`raw_all_gather`, :func:`lossless_zlib_all_gather`, :func:`int8_block_all_gather`.
- :mod:`.sharded`: :class:`ShardedMoEWrapper`, :data:`GATHER_FNS`.
- :mod:`.simulate`: :class:`LayerSpec`, :class:`Network`, :data:`DEFAULT_CODECS`, :func:`simulate`.

The two-process gloo self-check (AdERA against ``all_gather_into_tensor`` and FSDP2) lives in
``tests/distributed/test_adera_gloo.py``.
"""

from neurips26.common.distributed import ThreadGroup
from neurips26.distributed.adera.allgather import AdERAAllGather, adera_all_gather, emulate_all_gather
from neurips26.distributed.adera.baselines import (
    int8_block_all_gather,
    int8_dequantize,
    int8_quantize,
    lossless_zlib_all_gather,
    raw_all_gather,
    zlib_decode,
    zlib_encode,
)
from neurips26.distributed.adera.codec import (
    HEADER_BYTES,
    MODES,
    AdERAConfig,
    Payload,
    decode_payload,
    encode_shard,
    exponents,
    join_fields,
    payload_size,
    sm_stream_bytes,
    split_fields,
)
from neurips26.distributed.adera.cost import (
    AdERAState,
    CostModel,
    GatherStats,
    expected_wire_bytes_per_element,
)
from neurips26.distributed.adera.sharded import GATHER_FNS, ShardedMoEWrapper
from neurips26.distributed.adera.simulate import DEFAULT_CODECS, LayerSpec, Network, simulate

__all__ = [
    "AdERAAllGather",
    "AdERAConfig",
    "AdERAState",
    "CostModel",
    "DEFAULT_CODECS",
    "GATHER_FNS",
    "GatherStats",
    "HEADER_BYTES",
    "LayerSpec",
    "MODES",
    "Network",
    "Payload",
    "ShardedMoEWrapper",
    "ThreadGroup",
    "adera_all_gather",
    "decode_payload",
    "emulate_all_gather",
    "encode_shard",
    "expected_wire_bytes_per_element",
    "exponents",
    "int8_block_all_gather",
    "int8_dequantize",
    "int8_quantize",
    "join_fields",
    "lossless_zlib_all_gather",
    "payload_size",
    "raw_all_gather",
    "simulate",
    "sm_stream_bytes",
    "split_fields",
    "zlib_decode",
    "zlib_encode",
]
