// com.microsoft MoE with float experts (gpt-oss built in fp16 or fp32; the semantics are
// hipep/ops/moe.py's _moe), as five launches over a workspace:
//   hipep_moe_route      a thread per token: the k largest router logits (ties: the larger expert
//                        first), their weights -- the softmax over those k (normalize_routing_weights)
//                        or the softmax over every expert taken at the k -- in f32 as the reference
//                        computes them; a weight <= 1e-8 marks its slot skipped (-1)
//   hipep_moe_fc1        a warp per output row of a (token, slot): x . fc1[e, row] (+ bias)
//   hipep_moe_act        elementwise: the activation (fused interleaved SwiGLU halves the width)
//   hipep_moe_fc2        a warp per output row: act . fc2[e, row] (+ bias)
//   hipep_moe_combine    a thread per output element: the slots' weighted sum
// The GEMV rows and the activations are computed in f64 and rounded to f32 once, as the reference
// does (its GEMMs are f64 dot products, its activations f64 expressions); the combine sums in f64.
//
// com.microsoft QMoE (quant_type 'int', 4- or 8-bit experts; hipep/ops/moe.py's _qmoe) runs the
// same launches with its own routing and GEMVs:
//   hipep_qmoe_route     MoE's routing, the weights softmax over the k or, given router_weights,
//                        router_weights at the k (divided by their sum when normalizing)
//   hipep_qmoe_fc1/fc2   the GEMVs over [E, rows, cols * bits / 8] packed weights (low bits first),
//                        dequantized on the fly: (q - zp) * scale rounded to f32, then f64 dot
//                        products with the f32 input, as the reference's dequantize + GEMM path
//   hipep_qmoe_quant_*   (int8-activation path: block-wise 8-bit, or 4-bit at accuracy_level 4)
//                        each block of block_size input values quantized to int8 as MLAS does
//   hipep_qmoe_fc*_q8    the GEMVs of that path: (q_a * scale_a) . ((q - zp) * scale), both exact
//                        in f64, as the reference evaluates MLAS's int8 GEMM
// Bias is added to the f64 dot product before the one rounding to f32, as in the reference.
#include "hipep_device.h"

#define HIPEP_MOE_ROWS 8  // output rows of a GEMV block: one a warp
#define HIPEP_MOE_MAX_K 32

#define HIPEP_MOE_RELU 0
#define HIPEP_MOE_GELU 1
#define HIPEP_MOE_SILU 2
#define HIPEP_MOE_SWIGLU 3
#define HIPEP_MOE_IDENTITY 4

struct hipep_moe_args {
  int tokens, experts, k, hidden, n1, inter;  // n1: fc1's rows (2 * inter for SwiGLU)
  int normalize, activation, has_limit;
  float limit, alpha, beta;
};

// rw: QMoE's router_weights [tokens, experts] or nullptr (MoE, QMoE without them).
template <typename T>
HIPEP_DEVICE void hipep_moe_route(const T* HIPEP_RESTRICT router, const T* HIPEP_RESTRICT rw,
                                  int* HIPEP_RESTRICT experts, float* HIPEP_RESTRICT weights,
                                  const hipep_moe_args a) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= a.tokens) return;
  const T* r = router + (hipep_i64)t * a.experts;
  int pick[HIPEP_MOE_MAX_K];
  float top[HIPEP_MOE_MAX_K];
  for (int s = 0; s < a.k; ++s) {  // the s-th largest: larger logit first, then the larger index
    int best = -1;
    float bv = 0.0f;
    for (int e = a.experts - 1; e >= 0; --e) {
      bool taken = false;
      for (int p = 0; p < s; ++p) taken = taken || pick[p] == e;
      const float v = hipep_to_float(r[e]);
      if (!taken && (best < 0 || v > bv)) {
        best = e;
        bv = v;
      }
    }
    pick[s] = best;
    top[s] = bv;
  }
  float w[HIPEP_MOE_MAX_K];
  if (rw != nullptr) {  // router_weights at the k; normalized: times 1 / their sequential sum
    const T* p = rw + (hipep_i64)t * a.experts;
    float total = 0.0f;
    for (int s = 0; s < a.k; ++s) {
      w[s] = hipep_to_float(p[pick[s]]);
      total = __fadd_rn(total, w[s]);
    }
    if (a.normalize) {
      const float inv = total == 0.0f ? 0.0f : __fdiv_rn(1.0f, total);
      for (int s = 0; s < a.k; ++s) w[s] = __fmul_rn(w[s], inv);
    }
  } else if (a.normalize) {  // softmax over the k: exp(top - top[0]) / their sequential sum, as 1 / sum times each
    float total = 0.0f;
    for (int s = 0; s < a.k; ++s) {
      w[s] = expf(__fsub_rn(top[s], top[0]));
      total = __fadd_rn(total, w[s]);
    }
    const float inv = total == 0.0f ? 0.0f : 1.0f / total;
    for (int s = 0; s < a.k; ++s) w[s] = __fmul_rn(w[s], inv);
  } else {  // softmax over every expert (max subtracted), taken at the k
    float m = hipep_to_float(r[0]);
    for (int e = 1; e < a.experts; ++e) m = fmaxf(m, hipep_to_float(r[e]));
    float total = 0.0f;
    for (int e = 0; e < a.experts; ++e) total = __fadd_rn(total, expf(__fsub_rn(hipep_to_float(r[e]), m)));
    for (int s = 0; s < a.k; ++s) w[s] = __fdiv_rn(expf(__fsub_rn(top[s], m)), total);
  }
  for (int s = 0; s < a.k; ++s) {
    experts[t * a.k + s] = w[s] > 1e-8f ? pick[s] : -1;
    weights[t * a.k + s] = w[s];
  }
}

// One warp per output row `row` of slot (t, s): in [cols] . w[e, row, :] in f64, + bias, to f32.
template <typename T, typename In>
HIPEP_DEVICE void hipep_moe_gemv(const In* HIPEP_RESTRICT in, const int* HIPEP_RESTRICT experts,
                                 const T* HIPEP_RESTRICT w, const T* HIPEP_RESTRICT bias, float* HIPEP_RESTRICT out,
                                 int rows, int cols, int in_per_token, const hipep_moe_args a) {
  const int slot = blockIdx.x, t = slot / a.k;
  const int row = blockIdx.y * HIPEP_MOE_ROWS + threadIdx.y;
  const int e = experts[slot];
  if (e < 0 || row >= rows) return;  // whole warps leave together: no barrier below
  const In* x = in + (hipep_i64)(in_per_token ? t : slot) * cols;
  const T* wr = w + ((hipep_i64)e * rows + row) * cols;
  double acc = 0.0;
  for (int c = threadIdx.x; c < cols; c += HIPEP_WARP_SIZE)
    acc += (double)hipep_to_float(x[c]) * (double)hipep_to_float(wr[c]);
  acc = hipep_warp_sum(acc);
  if (threadIdx.x == 0) {
    float y = (float)acc;
    if (bias != nullptr) y = __fadd_rn(y, hipep_to_float(bias[(hipep_i64)e * rows + row]));
    out[(hipep_i64)slot * rows + row] = y;
  }
}

HIPEP_DEVICE void hipep_moe_activation(const int* HIPEP_RESTRICT experts, const float* HIPEP_RESTRICT h,
                                       float* HIPEP_RESTRICT act, const hipep_moe_args a) {
  const hipep_i64 n = (hipep_i64)a.tokens * a.k * a.inter;
  for (hipep_i64 i = (hipep_i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (hipep_i64)gridDim.x * blockDim.x) {
    const hipep_i64 slot = i / a.inter;
    const int j = (int)(i % a.inter);
    if (experts[slot] < 0) continue;
    double out;
    if (a.activation == HIPEP_MOE_SWIGLU) {  // fused, interleaved: gate at even columns, linear at odd
      double g = h[slot * a.n1 + 2 * j], l = h[slot * a.n1 + 2 * j + 1];
      if (a.has_limit) {
        g = fmin(g, (double)a.limit);
        l = fmax(fmin(l, (double)a.limit), -(double)a.limit);
      }
      out = g / (1.0 + exp(-(double)a.alpha * g)) * (l + (double)a.beta);
    } else {
      const double v = h[slot * a.n1 + j];
      if (a.activation == HIPEP_MOE_RELU) out = v > 0.0 ? v : 0.0;
      else if (a.activation == HIPEP_MOE_SILU) out = v / (1.0 + exp(-v));
      else if (a.activation == HIPEP_MOE_GELU)
        out = 0.5 * v * (1.0 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
      else out = v;
    }
    act[i] = (float)out;
  }
}

template <typename T>
HIPEP_DEVICE void hipep_moe_combine(const int* HIPEP_RESTRICT experts, const float* HIPEP_RESTRICT weights,
                                    const float* HIPEP_RESTRICT y, T* HIPEP_RESTRICT out, const hipep_moe_args a) {
  const hipep_i64 n = (hipep_i64)a.tokens * a.hidden;
  for (hipep_i64 i = (hipep_i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (hipep_i64)gridDim.x * blockDim.x) {
    const hipep_i64 t = i / a.hidden;
    const int j = (int)(i % a.hidden);
    double acc = 0.0;
    for (int s = 0; s < a.k; ++s) {
      const hipep_i64 slot = t * a.k + s;
      if (experts[slot] >= 0) acc += (double)weights[slot] * (double)y[slot * a.hidden + j];
    }
    out[i] = hipep_from_float<T>((float)acc);
  }
}

#define HIPEP_MOE(NAME, T)                                                                                    \
  HIPEP_KERNEL void hipep_moe_route_##NAME(const T* router, int* experts, float* weights,                     \
                                           const hipep_moe_args a) {                                          \
    hipep_moe_route<T>(router, nullptr, experts, weights, a);                                                 \
  }                                                                                                           \
  HIPEP_KERNEL void hipep_moe_fc1_##NAME(const T* x, const int* experts, const T* w, const T* bias, float* h, \
                                         const hipep_moe_args a) {                                            \
    hipep_moe_gemv<T, T>(x, experts, w, bias, h, a.n1, a.hidden, 1, a);                                       \
  }                                                                                                           \
  HIPEP_KERNEL void hipep_moe_fc2_##NAME(const float* act, const int* experts, const T* w, const T* bias,     \
                                         float* y, const hipep_moe_args a) {                                  \
    hipep_moe_gemv<T, float>(act, experts, w, bias, y, a.hidden, a.inter, 0, a);                              \
  }                                                                                                           \
  HIPEP_KERNEL void hipep_moe_combine_##NAME(const int* experts, const float* weights, const float* y, T* out, \
                                             const hipep_moe_args a) {                                        \
    hipep_moe_combine<T>(experts, weights, y, out, a);                                                        \
  }

HIPEP_MOE(f32, float)
HIPEP_MOE(f16, hipep_half)

HIPEP_KERNEL void hipep_moe_act(const int* experts, const float* h, float* act, const hipep_moe_args a) {
  hipep_moe_activation(experts, h, act, a);
}

// ---- QMoE ----------------------------------------------------------------------------------------

struct hipep_qmoe_args {
  hipep_moe_args m;
  int bits;        // 4 or 8
  int block_size;  // 0: one scale (and zero point) per output row
};

// The zero point of block b of expert e's row `row` (of `rows`, nb blocks a row): block-wise ones
// packed along each row's blocks, row-wise ones along each expert's rows; 2^(bits-1) without any.
HIPEP_DEVICE int hipep_qmoe_zero_point(const unsigned char* HIPEP_RESTRICT zp, hipep_i64 e, int row, int rows,
                                       int b, int nb, const hipep_qmoe_args& a) {
  if (zp == nullptr) return 1 << (a.bits - 1);
  const int per = 8 / a.bits;
  hipep_i64 byte;
  int field;
  if (a.block_size) {
    byte = (e * rows + row) * ((nb + per - 1) / per) + b / per;
    field = b % per;
  } else {
    byte = e * ((rows + per - 1) / per) + row / per;
    field = row % per;
  }
  return (zp[byte] >> (a.bits * field)) & ((1 << a.bits) - 1);
}

HIPEP_DEVICE double hipep_qmoe_in(double v) { return v; }
template <typename In> HIPEP_DEVICE double hipep_qmoe_in(In v) { return (double)hipep_to_float(v); }

// One warp per output row `row` of slot (t, s), as hipep_moe_gemv, over expert e's packed weights
// [rows, cols * bits / 8]. A lane takes whole bytes; the values of a byte share a block (block
// sizes are even). INT8: `in` holds the quantized input (q_a * scale_a) and a weight is
// (q - zp) * scale in f64 (exact: a 9-bit integer times an f32); otherwise the weight is
// (q - zp) * scale rounded to f32 (ORT's dequantization) and `in` the f32 input.
template <typename T, typename In, bool INT8>
HIPEP_DEVICE void hipep_qmoe_gemv(const In* HIPEP_RESTRICT in, const int* HIPEP_RESTRICT experts,
                                  const unsigned char* HIPEP_RESTRICT w, const T* HIPEP_RESTRICT scales,
                                  const unsigned char* HIPEP_RESTRICT zp, const T* HIPEP_RESTRICT bias,
                                  float* HIPEP_RESTRICT out, int rows, int cols, int in_per_token,
                                  const hipep_qmoe_args a) {
  const int slot = blockIdx.x, t = slot / a.m.k;
  const int row = blockIdx.y * HIPEP_MOE_ROWS + threadIdx.y;
  const int e = experts[slot];
  if (e < 0 || row >= rows) return;  // whole warps leave together: no barrier below
  const int per = 8 / a.bits, mask = (1 << a.bits) - 1;
  const int blk = a.block_size ? a.block_size : cols, nb = cols / blk, bytes = cols / per;
  const hipep_i64 r = (hipep_i64)e * rows + row;
  const In* x = in + (hipep_i64)(in_per_token ? t : slot) * cols;
  const unsigned char* wr = w + r * bytes;
  const T* sr = scales + r * nb;
  double acc = 0.0;
  for (int j = threadIdx.x; j < bytes; j += HIPEP_WARP_SIZE) {
    const int c = j * per, b = c / blk;
    const int z = hipep_qmoe_zero_point(zp, e, row, rows, b, nb, a);
    const float s = hipep_to_float(sr[b]);
    const unsigned int packed = wr[j];
    for (int p = 0; p < per; ++p) {
      const int d = (int)((packed >> (a.bits * p)) & mask) - z;
      const double wv = INT8 ? (double)d * (double)s : (double)__fmul_rn((float)d, s);
      acc += hipep_qmoe_in(x[c + p]) * wv;
    }
  }
  acc = hipep_warp_sum(acc);
  if (threadIdx.x == 0) {
    if (bias != nullptr) acc += (double)hipep_to_float(bias[r]);
    out[(hipep_i64)slot * rows + row] = (float)acc;
  }
}

// MLAS's QuantizeARow_CompInt8 as the reference replays it, a thread per block of block_size
// values of a row of `in` [rows, cols]: amax = max |v|, scale = amax / 127, q = rint(v * (127 /
// amax)) in f32 (0 for an all-zero block); out = q * scale, exact in f64. With `experts`, row is a
// slot and skipped slots are left alone.
template <typename In>
HIPEP_DEVICE void hipep_qmoe_quantize(const In* HIPEP_RESTRICT in, const int* HIPEP_RESTRICT experts,
                                      double* HIPEP_RESTRICT out, int rows, int cols, const hipep_qmoe_args a) {
  const int bs = a.block_size, nb = cols / bs;
  const hipep_i64 n = (hipep_i64)rows * nb;
  for (hipep_i64 i = (hipep_i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (hipep_i64)gridDim.x * blockDim.x) {
    const hipep_i64 row = i / nb;
    if (experts != nullptr && experts[row] < 0) continue;
    const hipep_i64 at = row * cols + (i % nb) * bs;
    float amax = 0.0f;
    for (int c = 0; c < bs; ++c) amax = hipep_fmax_nan(amax, fabsf(hipep_to_float(in[at + c])));
    const float scale = __fdiv_rn(amax, 127.0f);
    const float inv = amax != 0.0f ? __fdiv_rn(127.0f, amax) : 0.0f;
    for (int c = 0; c < bs; ++c)
      out[at + c] = (double)rintf(__fmul_rn(hipep_to_float(in[at + c]), inv)) * (double)scale;
  }
}

#define HIPEP_QMOE_GEMVS(NAME, T, SUFFIX, IN1, IN2, INT8)                                                      \
  HIPEP_KERNEL void hipep_qmoe_fc1##SUFFIX##_##NAME(const IN1* x, const int* experts, const unsigned char* w,    \
                                                    const T* scales, const unsigned char* zp, const T* bias,     \
                                                    float* h, const hipep_qmoe_args a) {                         \
    hipep_qmoe_gemv<T, IN1, INT8>(x, experts, w, scales, zp, bias, h, a.m.n1, a.m.hidden, 1, a);                 \
  }                                                                                                             \
  HIPEP_KERNEL void hipep_qmoe_fc2##SUFFIX##_##NAME(const IN2* act, const int* experts, const unsigned char* w,  \
                                                    const T* scales, const unsigned char* zp, const T* bias,     \
                                                    float* y, const hipep_qmoe_args a) {                         \
    hipep_qmoe_gemv<T, IN2, INT8>(act, experts, w, scales, zp, bias, y, a.m.hidden, a.m.inter, 0, a);            \
  }

#define HIPEP_QMOE(NAME, T)                                                                                    \
  HIPEP_KERNEL void hipep_qmoe_route_##NAME(const T* router, const T* rw, int* experts, float* weights,        \
                                            const hipep_moe_args a) {                                         \
    hipep_moe_route<T>(router, rw, experts, weights, a);                                                      \
  }                                                                                                           \
  HIPEP_KERNEL void hipep_qmoe_quant_##NAME(const T* x, double* qx, const hipep_qmoe_args a) {                 \
    hipep_qmoe_quantize<T>(x, nullptr, qx, a.m.tokens, a.m.hidden, a);                                        \
  }                                                                                                           \
  HIPEP_QMOE_GEMVS(NAME, T, , T, float, false)                                                                \
  HIPEP_QMOE_GEMVS(NAME, T, _q8, double, double, true)

HIPEP_QMOE(f32, float)
HIPEP_QMOE(f16, hipep_half)

HIPEP_KERNEL void hipep_qmoe_quant_act(const float* act, const int* experts, double* qa, const hipep_qmoe_args a) {
  hipep_qmoe_quantize<float>(act, experts, qa, a.m.tokens * a.m.k, a.m.inter, a);
}
