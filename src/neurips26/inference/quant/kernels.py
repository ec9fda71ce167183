r"""Attention on the codes: the two reductions of a decode step over KIVI-layout blocks, without
dequantising them.

For a key block (per-channel groups along tokens: step ``s_c``, zero ``z_c`` per channel ``c``) and a
query row ``q``, and for a value block (per-token groups of ``G_v`` channels: ``s_{t,k}``, ``z_{t,k}``)
and probabilities ``p``:

.. math::
    q \cdot \hat K_t = \sum_c (q_c s_c)\, c_{t,c} + \sum_c q_c z_c, \qquad
    \sum_t p_t \hat V_{t,c} = \sum_t (p_t s_{t,k(c)})\, c_{t,c} + \sum_t p_t z_{t,k(c)}

so the scores need the unpacked integer codes and one scaled query per block, and the output one
scaled probability per token and group; no dequantised ``K`` or ``V`` is ever formed.

Two implementations with one contract (:func:`key_scores`, :func:`value_accum`):

- a C++ CPU operator (``torch.ops.neurips26_kv``), compiled on first use with
  ``torch.utils.cpp_extension.load_inline`` (cached under ``$TORCH_EXTENSIONS_DIR``; GCC function
  multi-versioning picks AVX-512, AVX2 or plain code at run time). It decodes each packed row with a
  256-entry table (1, 2, 4 bits), three bytes at a time (3 bits) or per element (unaligned rows) into a
  buffer of at most ``max(G, d)`` floats and reduces it at once, so the codes are read once and nothing of
  ``O(T d)`` is written. Parallel over (batch, KV head, block chunk) with ``at::parallel_for``; the value
  partial sums of the chunks are added in chunk order (deterministic for a given thread count).
- the same formulas in torch ops over the unpacked codes (:func:`unpack_float`): the fallback where the
  operator does not build (no compiler; ``NEURIPS26_KV_KERNEL=0`` forces it), for 16-bit blocks and for
  float64 inputs.

Both accumulate in float32 (float64 for float64 queries in the torch path).

Shapes
------
- ``q [B, H, R, d]`` float32: the ``R = g Q`` query rows that read KV head ``h`` (GQA group ``g``), already
  multiplied by the softmax scale.
- key buffers: ``codes uint8 [B, cap, ceil(H d G b / 8)]`` (per block the codes of ``[H, d, G]``),
  ``scale``/``zero`` ``[B, cap, H, d, 1]``; value buffers: ``codes [B, cap, ceil(H G d b / 8)]`` (``[H, G, d]``),
  ``scale``/``zero`` ``[B, cap, H, G, d / G_v]``; the first ``n`` slots are used.
- ``pos int64 [n]``: the position of slot ``i`` among all stored blocks (its tokens are columns
  ``pos[i] G .. pos[i] G + G - 1`` of the scores).
- :func:`key_scores` writes ``out [B, H, R, >= max(pos) G + G]`` (float32); :func:`value_accum` reads
  ``p [B, H, R, >= ...]`` and adds into ``out [B, H, R, d]`` (float32).
"""

from __future__ import annotations

import torch

from neurips26.inference.quant.cpp_op import InlineCppOp
from neurips26.inference.quant.store import unpack_float

__all__ = ["available", "key_scores", "value_accum", "load"]

_NAME = "neurips26_kv_codes_v1"

_CPP = r"""
#include <torch/library.h>
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/Half.h>
#include <c10/util/BFloat16.h>
#include <cstdint>
#include <cstring>
#include <vector>
#include <algorithm>

namespace {

struct Lut { float v[256][8]; };

Lut make_lut(int bits) {
  Lut l;
  const int per = 8 / bits;
  const int mask = (1 << bits) - 1;
  for (int x = 0; x < 256; ++x)
    for (int k = 0; k < 8; ++k) l.v[x][k] = k < per ? float((x >> (k * bits)) & mask) : 0.f;
  return l;
}

const Lut& lut(int bits) {
  static const Lut l1 = make_lut(1), l2 = make_lut(2), l4 = make_lut(4);
  return bits == 1 ? l1 : (bits == 2 ? l2 : l4);
}

// codes e0 .. e0 + n - 1 of a packed row (little-endian bit order) as floats
inline void decode(const uint8_t* row, int64_t nbytes, int64_t e0, int64_t n, int bits, float* out) {
  if (bits == 8) {
    for (int64_t i = 0; i < n; ++i) out[i] = float(row[e0 + i]);
    return;
  }
  int64_t done = 0;
  if (((e0 * bits) & 7) == 0) {
    const uint8_t* p = row + ((e0 * bits) >> 3);
    if (8 % bits == 0) {
      const int per = 8 / bits;
      const Lut& L = lut(bits);
      const int64_t full = n / per;
      for (int64_t i = 0; i < full; ++i) std::memcpy(out + i * per, L.v[p[i]], sizeof(float) * per);
      done = full * per;
    } else if (bits == 3) {
      const int64_t full = n / 8;
      for (int64_t i = 0; i < full; ++i) {
        const uint32_t v = uint32_t(p[3 * i]) | (uint32_t(p[3 * i + 1]) << 8) | (uint32_t(p[3 * i + 2]) << 16);
        for (int k = 0; k < 8; ++k) out[8 * i + k] = float((v >> (3 * k)) & 7u);
      }
      done = full * 8;
    }
  }
  const uint32_t mask = (1u << bits) - 1u;
  for (int64_t i = done; i < n; ++i) {
    const int64_t bit = (e0 + i) * bits;
    const int64_t by = bit >> 3;
    uint32_t v = row[by];
    if (by + 1 < nbytes) v |= uint32_t(row[by + 1]) << 8;
    out[i] = float((v >> (bit & 7)) & mask);
  }
}

// one (batch, head) and a range of blocks: scores of R query rows against G tokens per block
template <typename M>
__attribute__((target_clones("avx512f", "avx2", "default")))
void key_item(const float* q, int64_t R, int64_t D, const uint8_t* codes, int64_t cs1, int64_t nbytes,
              const M* scale, const M* zero, int64_t ss1, int64_t ssd, int64_t zs1, int64_t zsd,
              const int64_t* pos, int64_t i0, int64_t i1, int64_t h, int bits, int64_t G,
              float* out, int64_t os_r) {
  std::vector<float> buf(G), acc(R * G), qz(R);
  for (int64_t i = i0; i < i1; ++i) {
    const uint8_t* row = codes + i * cs1;
    std::fill(acc.begin(), acc.end(), 0.f);
    std::fill(qz.begin(), qz.end(), 0.f);
    for (int64_t c = 0; c < D; ++c) {
      const float s = float(scale[i * ss1 + c * ssd]);
      const float z = float(zero[i * zs1 + c * zsd]);
      decode(row, nbytes, (h * D + c) * G, G, bits, buf.data());
      const float* bp = buf.data();
      for (int64_t r = 0; r < R; ++r) {
        const float qc = q[r * D + c];
        const float qs = qc * s;
        qz[r] += qc * z;
        float* a = acc.data() + r * G;
        for (int64_t t = 0; t < G; ++t) a[t] += qs * bp[t];
      }
    }
    const int64_t col = pos[i] * G;
    for (int64_t r = 0; r < R; ++r) {
      float* o = out + r * os_r + col;
      const float* a = acc.data() + r * G;
      for (int64_t t = 0; t < G; ++t) o[t] = a[t] + qz[r];
    }
  }
}

template <typename M>
__attribute__((target_clones("avx512f", "avx2", "default")))
void value_item(const float* p, int64_t ps_r, int64_t R, int64_t D, const uint8_t* codes, int64_t cs1,
                int64_t nbytes, const M* scale, const M* zero, int64_t ss1, int64_t ss_t, int64_t zs1,
                int64_t zs_t, int64_t NG, int64_t Gv, const int64_t* pos, int64_t i0, int64_t i1, int64_t h,
                int bits, int64_t G, float* acc /* [R, D] zeroed */) {
  std::vector<float> buf(D), zacc(R * NG, 0.f), sk(NG), zk(NG);
  for (int64_t i = i0; i < i1; ++i) {
    const uint8_t* row = codes + i * cs1;
    const int64_t col = pos[i] * G;
    for (int64_t t = 0; t < G; ++t) {
      bool any = false;
      for (int64_t r = 0; r < R; ++r) any |= p[r * ps_r + col + t] != 0.f;
      if (!any) continue;
      decode(row, nbytes, (h * G + t) * D, D, bits, buf.data());
      for (int64_t k = 0; k < NG; ++k) {
        sk[k] = float(scale[i * ss1 + t * ss_t + k]);
        zk[k] = float(zero[i * zs1 + t * zs_t + k]);
      }
      const float* bp = buf.data();
      for (int64_t r = 0; r < R; ++r) {
        const float w = p[r * ps_r + col + t];
        if (w == 0.f) continue;
        float* a = acc + r * D;
        for (int64_t k = 0; k < NG; ++k) {
          const float ws = w * sk[k];
          zacc[r * NG + k] += w * zk[k];
          float* ak = a + k * Gv;
          const float* bk = bp + k * Gv;
          for (int64_t c = 0; c < Gv; ++c) ak[c] += ws * bk[c];
        }
      }
    }
  }
  for (int64_t r = 0; r < R; ++r)
    for (int64_t k = 0; k < NG; ++k) {
      const float z = zacc[r * NG + k];
      float* a = acc + r * D + k * Gv;
      for (int64_t c = 0; c < Gv; ++c) a[c] += z;
    }
}

int64_t chunks_per_item(int64_t items, int64_t n) {
  const int64_t want = 4 * int64_t(at::get_num_threads());
  return std::max<int64_t>(1, std::min<int64_t>(n, (want + items - 1) / items));
}

void check_common(const at::Tensor& codes, const at::Tensor& scale, const at::Tensor& zero, const at::Tensor& pos,
                  int64_t n, int64_t bits) {
  TORCH_CHECK(codes.scalar_type() == at::kByte && codes.dim() == 3, "codes must be uint8 [B, cap, nbytes]");
  TORCH_CHECK(codes.stride(2) == 1, "codes rows must be contiguous");
  TORCH_CHECK(scale.scalar_type() == zero.scalar_type(), "scale and zero must share a dtype");
  TORCH_CHECK(pos.scalar_type() == at::kLong && pos.is_contiguous() && pos.numel() >= n, "pos must be int64 [n]");
  TORCH_CHECK(n <= codes.size(1), "n exceeds the buffer");
  TORCH_CHECK(bits == 1 || bits == 2 || bits == 3 || bits == 4 || bits == 8, "bits must be 1, 2, 3, 4 or 8");
}

void key_scores(const at::Tensor& q, const at::Tensor& codes, const at::Tensor& scale, const at::Tensor& zero,
                const at::Tensor& pos, int64_t n, int64_t bits, int64_t G, const at::Tensor& out) {
  check_common(codes, scale, zero, pos, n, bits);
  TORCH_CHECK(q.scalar_type() == at::kFloat && q.is_contiguous() && q.dim() == 4, "q must be contiguous float32 [B, H, R, d]");
  TORCH_CHECK(out.scalar_type() == at::kFloat && out.dim() == 4 && out.stride(3) == 1, "out must be float32 [B, H, R, T]");
  TORCH_CHECK(scale.dim() == 5 && scale.size(4) == 1, "key scale must be [B, cap, H, d, 1]");
  const int64_t B = q.size(0), H = q.size(1), R = q.size(2), D = q.size(3);
  if (n == 0) return;
  const int64_t per = chunks_per_item(B * H, n);
  const int64_t step = (n + per - 1) / per;
  const int64_t items = B * H * per;
  const uint8_t* cp = codes.data_ptr<uint8_t>();
  const int64_t* pp = pos.data_ptr<int64_t>();
  const float* qp = q.data_ptr<float>();
  float* op = out.data_ptr<float>();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, scale.scalar_type(), "key_scores", [&] {
    const scalar_t* sp = scale.data_ptr<scalar_t>();
    const scalar_t* zp = zero.data_ptr<scalar_t>();
    at::parallel_for(0, items, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t it = lo; it < hi; ++it) {
        const int64_t bh = it / per, ch = it % per, b = bh / H, h = bh % H;
        const int64_t i0 = ch * step, i1 = std::min(n, i0 + step);
        if (i0 >= i1) continue;
        key_item<scalar_t>(qp + (b * H + h) * R * D, R, D, cp + b * codes.stride(0), codes.stride(1), codes.size(2),
                           sp + b * scale.stride(0) + h * scale.stride(2), zp + b * zero.stride(0) + h * zero.stride(2),
                           scale.stride(1), scale.stride(3), zero.stride(1), zero.stride(3), pp, i0, i1, h, int(bits), G,
                           op + b * out.stride(0) + h * out.stride(1), out.stride(2));
      }
    });
  });
}

void value_accum(const at::Tensor& p, const at::Tensor& codes, const at::Tensor& scale, const at::Tensor& zero,
                 const at::Tensor& pos, int64_t n, int64_t bits, int64_t G, const at::Tensor& out) {
  check_common(codes, scale, zero, pos, n, bits);
  TORCH_CHECK(p.scalar_type() == at::kFloat && p.dim() == 4 && p.stride(3) == 1, "p must be float32 [B, H, R, T]");
  TORCH_CHECK(out.scalar_type() == at::kFloat && out.is_contiguous() && out.dim() == 4, "out must be contiguous float32 [B, H, R, d]");
  TORCH_CHECK(scale.dim() == 5 && scale.stride(4) == 1 && zero.stride(4) == 1, "value scale must be [B, cap, H, G, d / Gv]");
  const int64_t B = out.size(0), H = out.size(1), R = out.size(2), D = out.size(3);
  const int64_t NG = scale.size(4);
  TORCH_CHECK(D % NG == 0, "d must be a multiple of the number of value groups");
  const int64_t Gv = D / NG;
  if (n == 0) return;
  const int64_t per = chunks_per_item(B * H, n);
  const int64_t step = (n + per - 1) / per;
  const int64_t items = B * H * per;
  std::vector<float> part(size_t(items) * R * D, 0.f);
  const uint8_t* cp = codes.data_ptr<uint8_t>();
  const int64_t* pp = pos.data_ptr<int64_t>();
  const float* pr = p.data_ptr<float>();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, scale.scalar_type(), "value_accum", [&] {
    const scalar_t* sp = scale.data_ptr<scalar_t>();
    const scalar_t* zp = zero.data_ptr<scalar_t>();
    at::parallel_for(0, items, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t it = lo; it < hi; ++it) {
        const int64_t bh = it / per, ch = it % per, b = bh / H, h = bh % H;
        const int64_t i0 = ch * step, i1 = std::min(n, i0 + step);
        if (i0 >= i1) continue;
        value_item<scalar_t>(pr + b * p.stride(0) + h * p.stride(1), p.stride(2), R, D, cp + b * codes.stride(0),
                             codes.stride(1), codes.size(2), sp + b * scale.stride(0) + h * scale.stride(2),
                             zp + b * zero.stride(0) + h * zero.stride(2), scale.stride(1), scale.stride(3),
                             zero.stride(1), zero.stride(3), NG, Gv, pp, i0, i1, h, int(bits), G,
                             part.data() + it * R * D);
      }
    });
  });
  float* op = out.data_ptr<float>();
  at::parallel_for(0, B * H, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t bh = lo; bh < hi; ++bh) {
      float* o = op + bh * R * D;
      for (int64_t ch = 0; ch < per; ++ch) {
        const float* src = part.data() + (bh * per + ch) * R * D;
        for (int64_t e = 0; e < R * D; ++e) o[e] += src[e];
      }
    }
  });
}

}  // namespace

TORCH_LIBRARY(neurips26_kv, m) {
  m.def("key_scores(Tensor q, Tensor codes, Tensor scale, Tensor zero, Tensor pos, int n, int bits, int group, Tensor(a!) out) -> ()");
  m.def("value_accum(Tensor p, Tensor codes, Tensor scale, Tensor zero, Tensor pos, int n, int bits, int group, Tensor(a!) out) -> ()");
}

TORCH_LIBRARY_IMPL(neurips26_kv, CPU, m) {
  m.impl("key_scores", &key_scores);
  m.impl("value_accum", &value_accum);
}
"""

_OP = InlineCppOp(_NAME, _CPP, namespace="neurips26_kv", probe="key_scores", label="KV-code kernel")


def load() -> bool:
    """Build (first time, then cached) and load the C++ operator; ``False`` where it cannot be built.

    ``NEURIPS26_KV_KERNEL=0`` disables it (every call then takes the torch path). A failed build is
    warned about once and not retried in this process (:class:`~neurips26.inference.quant.cpp_op.InlineCppOp`).
    """
    return _OP.load()


def available() -> bool:
    """Whether the C++ operator is loaded (builds it on the first call)."""
    return load()


def _use_kernel(x: torch.Tensor, bits: int) -> bool:
    return x.device.type == "cpu" and x.dtype == torch.float32 and bits in (1, 2, 3, 4, 8) and load()


# --------------------------------------------------------------------------------- torch paths
def _key_scores_torch(q, codes, scale, zero, pos, n, bits, group, out) -> None:
    b, h, r, d = q.shape
    comp = q.dtype
    c = unpack_float(codes[:, :n], bits, h * d * group, comp).view(b, n, h, d, group)
    s = scale[:, :n, ..., 0].to(comp)  # [B, n, H, d]
    z = zero[:, :n, ..., 0].to(comp)
    qe = q.unsqueeze(1)  # [B, 1, H, R, d]
    sc = torch.matmul(qe * s.unsqueeze(-2), c)  # [B, n, H, R, G]
    sc += (qe * z.unsqueeze(-2)).sum(-1, keepdim=True)
    _scatter_blocks(out, sc.permute(0, 2, 3, 1, 4), pos[:n], group)


def _scatter_blocks(out, blocks, pos, group) -> None:
    """``out[..., pos[i] G : pos[i] G + G] = blocks[..., i, :]`` for ``blocks [B, H, R, n, G]``."""
    b, h, r, n, g = blocks.shape
    if n and int(pos[-1]) == n - 1 and int(pos[0]) == 0:  # consecutive slots 0..n-1 (one bit-width)
        out[..., : n * g].view(b, h, r, n, g).copy_(blocks)
        return
    cols = (pos.view(n, 1) * group + torch.arange(g, device=pos.device)).reshape(-1)
    out.index_copy_(-1, cols, blocks.reshape(b, h, r, n * g).to(out.dtype))


def _gather_blocks(p, pos, group, n) -> torch.Tensor:
    """``p[..., pos[i] G + t]`` as ``[B, H, R, n, G]``."""
    b, h, r = p.shape[:3]
    if n and int(pos[n - 1]) == n - 1 and int(pos[0]) == 0:
        return p[..., : n * group].reshape(b, h, r, n, group)
    cols = (pos[:n].view(n, 1) * group + torch.arange(group, device=pos.device)).reshape(-1)
    return p.index_select(-1, cols).view(b, h, r, n, group)


def _value_accum_torch(p, codes, scale, zero, pos, n, bits, group, out) -> None:
    b, h, r, d = out.shape
    comp = out.dtype
    ng = scale.shape[-1]
    gv = d // ng
    c = unpack_float(codes[:, :n], bits, h * group * d, comp).view(b, n, h, group, ng, gv)
    s = scale[:, :n].to(comp)  # [B, n, H, G, ng]
    z = zero[:, :n].to(comp)
    pb = _gather_blocks(p, pos, group, n).to(comp).permute(0, 3, 1, 2, 4)  # [B, n, H, R, G]
    ps = pb.unsqueeze(-1) * s.unsqueeze(-3)  # [B, n, H, R, G, ng]
    # sum_t (p s)_{t,k} c_{t,k,v}: one [R, G] x [G, Gv] product per (B, n, H, k)
    prod = torch.matmul(ps.permute(0, 1, 2, 5, 3, 4), c.permute(0, 1, 2, 4, 3, 5))  # [B, n, H, ng, R, Gv]
    zsum = (pb.unsqueeze(-1) * z.unsqueeze(-3)).sum(-2)  # [B, n, H, R, ng]
    tot = prod.sum(1).permute(0, 1, 3, 2, 4) + zsum.sum(1).unsqueeze(-1)  # [B, H, R, ng, Gv]
    out += tot.reshape(b, h, r, d)


def key_scores(q, codes, scale, zero, pos, n: int, bits: int, group: int, out) -> None:
    """Write the scores of the ``n`` stored key blocks into ``out`` (see the module docstring)."""
    if n == 0:
        return
    if _use_kernel(q, bits):
        torch.ops.neurips26_kv.key_scores(q.contiguous(), codes, scale, zero, pos, n, bits, group, out)
    else:
        _key_scores_torch(q, codes, scale, zero, pos, n, bits, group, out)


def value_accum(p, codes, scale, zero, pos, n: int, bits: int, group: int, out) -> None:
    """Add the probability-weighted sum of the ``n`` stored value blocks into ``out``."""
    if n == 0:
        return
    if _use_kernel(out, bits) and p.dtype == torch.float32 and p.stride(-1) == 1:
        torch.ops.neurips26_kv.value_accum(p, codes, scale, zero, pos, n, bits, group, out)
    else:
        _value_accum_torch(p, codes, scale, zero, pos, n, bits, group, out)


def full_precision_scores(q, data, pos, n: int, group: int, out) -> None:
    """Scores of ``n`` 16-bit blocks ``data [B, cap, H, G, d]`` (model dtype): ``q . K_t``."""
    if n == 0:
        return
    k = data[:, :n].to(q.dtype).permute(0, 2, 1, 3, 4)  # [B, H, n, G, d]
    b, h = k.shape[:2]
    sc = torch.matmul(q.unsqueeze(2), k.transpose(-1, -2))  # [B, H, n, R, G]
    _scatter_blocks(out, sc.permute(0, 1, 3, 2, 4), pos[:n], group)


def full_precision_values(p, data, pos, n: int, group: int, out) -> None:
    """Add ``sum_t p_t V_t`` of ``n`` 16-bit blocks ``data [B, cap, H, G, d]`` into ``out``."""
    if n == 0:
        return
    v = data[:, :n].to(out.dtype).permute(0, 2, 1, 3, 4)  # [B, H, n, G, d]
    pb = _gather_blocks(p, pos, group, n).to(out.dtype).permute(0, 1, 3, 2, 4)  # [B, H, n, R, G]
    out += torch.matmul(pb, v).sum(2)
