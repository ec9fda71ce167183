r"""ADKV decode on the codes: the attention reads the delta-code stream once per step, replaying the
recurrence inside the two attention reductions, without building the reconstructed keys and values.

The reconstruction of token ``t`` of channel ``c`` (:mod:`~neurips26.inference.adkv.quantizer`) is

.. math::
    \hat x_t = z_t + d_t s_t,\quad z_t = z_1 + \eta_z \sum_{j<t} d_j s_j,\quad
    s_{t+1} = \max(s_t\, G(q_t),\ s_{min}),\quad s_1 = \max(\gamma a_1 / o, 10^{-6})

with ``G(q) = exp(m(q))`` the per-code step gain (:meth:`ADKVQuantizer.log_gain_table`) and
``s_min = s_1 \cdot s_{min,rel}``. This multiplicative form equals the reference's log-domain scan
``s_t = exp(acc_t + cmax_t)`` (cumulative sum and cumulative max) in exact arithmetic; both run in float64.
The C++ operator streams over the tokens of one (batch, KV head) with the per-channel state ``(s, dsum)``
in registers, casts each ``\hat x_t`` to float32 (as the reference does before SDPA) and immediately

- writes the scores ``q_r \cdot \hat K_t`` (float32, eight-lane partial sums), or
- adds ``p_{r,t} \hat V_t`` into the output (float32),

so a decode step costs one pass over the packed codes per stream (no ``O(T d)`` float64 buffers, no
cumulative sums, no logarithms or exponentials per token).

Equality bound (tests/inference/test_adkv.py): the float64 recurrence differs from the reference's
log-domain scan by a relative ``O(T u_{64})`` in ``s_t`` and ``z_t`` (``u_{64} = 2^{-53}``), far below one
float32 rounding, so the float32 ``\hat x_t`` agree to within ``|\hat x_t| 2^{-23}`` (one ulp of the cast,
when the float64 values straddle a rounding boundary); on top of that, the scores and the weighted value
sums are float32 dot products of length ``d`` and ``T`` grouped differently from SDPA's, which
:func:`neurips26.inference.quant.attention.equality_bound` covers.

Shapes
------
- ``qp``: the scaled queries ``[B, H, R, D]`` (``mode=0``) or the probabilities ``[B, H, R, T]``
  (``mode=1``), float32, contiguous.
- ``codes``: ``uint8 [B, T, nbytes]`` (rows contiguous; batch and token strides free), token-major (the layer's packed stream: channel ``c`` of head ``h`` at
  bit ``(h D + c) b``, little-endian).
- ``gain`` float64 ``[H, L, D]``; ``level`` float64 ``[L]``; ``z1, s1, smin`` float64 ``[B, H, D]``;
  ``eta_z`` float64 ``[H, D]``.
- ``out``: scores ``[B, H, R, >= T]`` float32 (any row stride; ``mode=0`` writes columns ``0..T-1``) or the
  output ``[B, H, R, D]`` float32 contiguous (``mode=1`` adds into it).
"""

from __future__ import annotations

import torch

from neurips26.inference.quant.cpp_op import InlineCppOp

__all__ = ["available", "load", "replay_attend", "replay_attend_reference"]

_NAME = "neurips26_adkv_replay_v3"

_CPP = r"""
#include <torch/library.h>
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <cstdint>
#include <cstring>
#include <vector>
#include <algorithm>

namespace {

constexpr int64_t LANES = 8;

__attribute__((target_clones("avx512f", "avx2", "default")))
void run_task(int64_t b, int64_t h, int64_t mode, const float* qp, const uint8_t* codes, const double* gain,
              const double* level, const double* z1, const double* s1, const double* smin, const double* etaz,
              int64_t H, int64_t T, int64_t D, int64_t R, int64_t L, int64_t nbytes, int64_t cs0, int64_t cs1,
              int64_t bits, float* out, int64_t os0, int64_t os1, int64_t os2) {
  const int64_t bh = b * H + h;
  std::vector<double> s(s1 + bh * D, s1 + bh * D + D), dsum(D, 0.0), z0(z1 + bh * D, z1 + bh * D + D);
  const double* sm = smin + bh * D;
  const double* ez = etaz + h * D;
  const double* g = gain + h * L * D;
  std::vector<int32_t> q(D + 8);
  std::vector<double> dv(D), gv(D);
  std::vector<float> xh(D + LANES, 0.f);
  std::vector<float> acc(R * D, 0.f);
  const int64_t mask = (1 << bits) - 1;
  const bool aligned = (8 % bits == 0) && ((h * D * bits) % 8 == 0);
  const int64_t per = 8 / bits;
  for (int64_t t = 0; t < T; ++t) {
    const uint8_t* row = codes + b * cs0 + t * cs1;
    if (aligned) {
      const uint8_t* src = row + (h * D * bits) / 8;
      const int64_t nb = (D + per - 1) / per;
      for (int64_t j = 0; j < nb; ++j) {
        const uint32_t v = src[j];
        for (int64_t k = 0; k < per; ++k) q[j * per + k] = (v >> (k * bits)) & mask;
      }
    } else {
      for (int64_t c = 0; c < D; ++c) {
        const int64_t bit = (h * D + c) * bits, byte = bit >> 3;
        uint32_t v = row[byte];
        if (byte + 1 < nbytes) v |= uint32_t(row[byte + 1]) << 8;
        q[c] = (v >> (bit & 7)) & mask;
      }
    }
    for (int64_t c = 0; c < D; ++c) {  // look-ups first, so the recurrence below vectorises
      dv[c] = level[q[c]];
      gv[c] = g[q[c] * D + c];
    }
    double* sp = s.data();
    double* dp = dsum.data();
    for (int64_t c = 0; c < D; ++c) {
      const double st = sp[c];
      const double z = z0[c] + ez[c] * dp[c];
      const double ds = dv[c] * st;
      xh[c] = float(z + ds);
      dp[c] += ds;
      const double nx = st * gv[c];
      sp[c] = nx < sm[c] ? sm[c] : nx;
    }
    if (mode == 0) {
      for (int64_t r = 0; r < R; ++r) {
        const float* qr = qp + (bh * R + r) * D;
        float part[LANES] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
        int64_t c = 0;
        for (; c + LANES <= D; c += LANES)
          for (int64_t k = 0; k < LANES; ++k) part[k] += qr[c + k] * xh[c + k];
        float tail = 0.f;
        for (; c < D; ++c) tail += qr[c] * xh[c];
        float sum = tail;
        for (int64_t k = 0; k < LANES; ++k) sum += part[k];
        out[b * os0 + h * os1 + r * os2 + t] = sum;
      }
    } else {
      for (int64_t r = 0; r < R; ++r) {
        const float pr = qp[(bh * R + r) * T + t];
        float* ar = acc.data() + r * D;
        for (int64_t c = 0; c < D; ++c) ar[c] += pr * xh[c];
      }
    }
  }
  if (mode == 1) {
    float* o = out + bh * R * D;
    for (int64_t e = 0; e < R * D; ++e) o[e] += acc[e];
  }
}

void replay_attend(const at::Tensor& qp, const at::Tensor& codes, const at::Tensor& gain, const at::Tensor& level,
                   const at::Tensor& z1, const at::Tensor& s1, const at::Tensor& smin, const at::Tensor& etaz,
                   int64_t bits, int64_t mode, at::Tensor& out) {
  TORCH_CHECK(qp.scalar_type() == at::kFloat && qp.is_contiguous(), "qp must be contiguous float32");
  TORCH_CHECK(codes.scalar_type() == at::kByte && codes.stride(2) == 1, "codes must be uint8 with contiguous rows");
  TORCH_CHECK(out.scalar_type() == at::kFloat, "out must be float32");
  for (const at::Tensor* x : {&gain, &level, &z1, &s1, &smin, &etaz})
    TORCH_CHECK(x->scalar_type() == at::kDouble && x->is_contiguous(), "state tensors must be contiguous float64");
  const int64_t B = codes.size(0), T = codes.size(1), nbytes = codes.size(2);
  const int64_t H = gain.size(0), L = gain.size(1), D = gain.size(2), R = qp.size(2);
  TORCH_CHECK(out.stride(3) == 1, "out rows must be contiguous");
  if (mode == 1) TORCH_CHECK(out.is_contiguous(), "out must be contiguous for mode 1");
  const float* qd = qp.data_ptr<float>();
  const uint8_t* cd = codes.data_ptr<uint8_t>();
  float* od = out.data_ptr<float>();
  const int64_t os0 = out.stride(0), os1 = out.stride(1), os2 = out.stride(2);
  const int64_t cs0 = codes.stride(0), cs1 = codes.stride(1);
  at::parallel_for(0, B * H, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)
      run_task(i / H, i % H, mode, qd, cd, gain.data_ptr<double>(), level.data_ptr<double>(), z1.data_ptr<double>(),
               s1.data_ptr<double>(), smin.data_ptr<double>(), etaz.data_ptr<double>(), H, T, D, R, L, nbytes, cs0, cs1,
               bits, od, os0, os1, os2);
  });
}

}  // namespace

TORCH_LIBRARY(neurips26_adkv, m) {
  m.def("replay_attend(Tensor qp, Tensor codes, Tensor gain, Tensor level, Tensor z1, Tensor s1, Tensor smin, Tensor etaz, int bits, int mode, Tensor(a!) out) -> ()");
}

TORCH_LIBRARY_IMPL(neurips26_adkv, CPU, m) {
  m.impl("replay_attend", &replay_attend);
}
"""

_OP = InlineCppOp(_NAME, _CPP, namespace="neurips26_adkv", probe="replay_attend", label="ADKV replay kernel")


def load() -> bool:
    """Build (first time, then cached) and load the C++ operator; ``False`` where it cannot be built.

    ``NEURIPS26_KV_KERNEL=0`` disables it (every call then takes the torch path). A failed build is
    warned about once and not retried in this process (:class:`~neurips26.inference.quant.cpp_op.InlineCppOp`).
    """
    return _OP.load()


def available() -> bool:
    """Whether the C++ operator is loaded (building it on first call)."""
    return load()


def replay_attend(
    qp, codes, gain, level, z1, s1, smin, eta_z, bits: int, mode: int, out: torch.Tensor
) -> None:
    """Scores (``mode=0``) or weighted values (``mode=1``) of one packed ADKV stream (module docstring)."""
    if load() and out.device.type == "cpu":
        torch.ops.neurips26_adkv.replay_attend(qp, codes, gain, level, z1, s1, smin, eta_z, bits, mode, out)
        return
    replay_attend_reference(qp, codes, gain, level, z1, s1, smin, eta_z, bits, mode, out)


def replay_attend_reference(qp, codes, gain, level, z1, s1, smin, eta_z, bits: int, mode: int, out) -> None:
    """The same contract in torch ops (sequential over tokens, float64 state): the fallback and the
    test oracle of the operator's arithmetic."""
    from neurips26.inference.quant import unpack_bits

    B, T, _ = codes.shape
    H, _, D = gain.shape
    q = unpack_bits(codes, bits, H * D).reshape(B, T, H, D).permute(0, 2, 1, 3).long()  # [B, H, T, D]
    s, dsum = s1.clone(), torch.zeros_like(s1)
    g = gain.unsqueeze(0).expand(B, H, *gain.shape[1:])
    xs = []
    for t in range(T):
        qt = q[..., t, :]
        d = level[qt]
        ds = d * s
        xs.append((z1 + eta_z * dsum + ds).to(torch.float32))
        dsum = dsum + ds
        s = torch.maximum(s * g.gather(-2, qt.unsqueeze(-2)).squeeze(-2), smin)
    xh = torch.stack(xs, -2) if xs else torch.zeros(B, H, 0, D)
    if mode == 0:
        out[..., :T] = qp @ xh.transpose(-1, -2)
    else:
        out += qp @ xh
