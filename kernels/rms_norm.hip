// RMS normalization: SimplifiedLayerNormalization / RMSNormalization, and
// com.microsoft::SkipSimplifiedLayerNormalization.
//
// The runtime views X as [rows, n] (n: the product of the normalized axes). One row per block of
// blockDim.x threads, or for short rows one row per warp with blockDim.y rows per block. Pass 1
// sums squares in f32 (warp shuffles, then across warps); pass 2 reads the row again (from L1/L2)
// and writes it scaled. f16/bf16 inputs are widened to f32 and every output is rounded once, as
// ONNX Runtime's CPU kernels do:
//   simplified:  inv = 1 / sqrt(sum(x^2) / n + eps),  y = x * inv * scale,  inv_std_var = inv;
//   skip:        v = x + skip (+ bias) in f32,  y = v / sqrt(sum(v^2) / n + eps) * gamma,
//                mean = 0 (the simplified form has none), inv_std_var = 1 / that root, and
//                input_skip_bias_sum = v rounded to T.
// Optional outputs come as null pointers and are skipped. The skip input may be [S, H] or
// [1, S, H] against a [B, S, H] input: row r reads skip row r % skip_rows.
// VEC > 1: every row pointer is 16-byte aligned and n a multiple of VEC (the runtime checks).
#include "hipep_device.h"

struct hipep_rms_args {
  hipep_i64 rows;
  hipep_i64 n;
  hipep_i64 skip_rows;  // skip variant only
  float eps;
};

template <typename T, int VEC> struct alignas(sizeof(T) * VEC) hipep_norm_vec { T v[VEC]; };

template <typename T, int VEC>
HIPEP_DEVICE void hipep_rms_norm(const T* HIPEP_RESTRICT x, const T* HIPEP_RESTRICT scale, T* HIPEP_RESTRICT y,
                                 float* HIPEP_RESTRICT inv_std, const hipep_rms_args a) {
  __shared__ float scratch[HIPEP_MAX_WARPS];
  const hipep_i64 row = (hipep_i64)blockIdx.x * blockDim.y + threadIdx.y;
  if (row >= a.rows) return;  // only when blockDim.x is one warp: no block barrier below
  typedef hipep_norm_vec<T, VEC> V;
  const V* px = reinterpret_cast<const V*>(x + row * a.n);
  const V* ps = reinterpret_cast<const V*>(scale);
  V* py = reinterpret_cast<V*>(y + row * a.n);
  const hipep_i64 nv = a.n / VEC;
  float sq = 0.0f;
  for (hipep_i64 i = threadIdx.x; i < nv; i += blockDim.x) {
    const V v = px[i];
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      const float f = hipep_to_float(v.v[k]);
      sq = fmaf(f, f, sq);
    }
  }
  sq = hipep_block_sum(sq, scratch);
  const float inv = 1.0f / sqrtf(sq / (float)a.n + a.eps);
  for (hipep_i64 i = threadIdx.x; i < nv; i += blockDim.x) {
    const V v = px[i], s = ps[i];
    V o;
#pragma unroll
    for (int k = 0; k < VEC; ++k) o.v[k] = hipep_from_float<T>(hipep_to_float(v.v[k]) * inv * hipep_to_float(s.v[k]));
    py[i] = o;
  }
  if (inv_std != 0 && threadIdx.x == 0) inv_std[row] = inv;
}

template <typename T, int VEC>
HIPEP_DEVICE void hipep_skip_rms_norm(const T* HIPEP_RESTRICT x, const T* HIPEP_RESTRICT skip,
                                      const T* HIPEP_RESTRICT gamma, const T* HIPEP_RESTRICT bias,
                                      T* HIPEP_RESTRICT y, float* HIPEP_RESTRICT mean, float* HIPEP_RESTRICT inv_std,
                                      T* HIPEP_RESTRICT sum_out, const hipep_rms_args a) {
  __shared__ float scratch[HIPEP_MAX_WARPS];
  const hipep_i64 row = (hipep_i64)blockIdx.x * blockDim.y + threadIdx.y;
  if (row >= a.rows) return;
  typedef hipep_norm_vec<T, VEC> V;
  const V* px = reinterpret_cast<const V*>(x + row * a.n);
  const V* pk = reinterpret_cast<const V*>(skip + (row % a.skip_rows) * a.n);
  const V* pg = reinterpret_cast<const V*>(gamma);
  const V* pb = reinterpret_cast<const V*>(bias);
  V* py = reinterpret_cast<V*>(y + row * a.n);
  V* pv = sum_out != 0 ? reinterpret_cast<V*>(sum_out + row * a.n) : 0;
  const hipep_i64 nv = a.n / VEC;
  float sq = 0.0f;
  for (hipep_i64 i = threadIdx.x; i < nv; i += blockDim.x) {
    const V u = px[i], w = pk[i];
    V b;
    if (pb != 0) b = pb[i];
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      float f = hipep_to_float(u.v[k]) + hipep_to_float(w.v[k]);
      if (pb != 0) f += hipep_to_float(b.v[k]);
      sq = fmaf(f, f, sq);
    }
  }
  sq = hipep_block_sum(sq, scratch);
  const float root = sqrtf(sq / (float)a.n + a.eps);
  for (hipep_i64 i = threadIdx.x; i < nv; i += blockDim.x) {
    const V u = px[i], w = pk[i], g = pg[i];
    V b, o, s;
    if (pb != 0) b = pb[i];
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      float f = hipep_to_float(u.v[k]) + hipep_to_float(w.v[k]);
      if (pb != 0) f += hipep_to_float(b.v[k]);
      o.v[k] = hipep_from_float<T>(f / root * hipep_to_float(g.v[k]));
      s.v[k] = hipep_from_float<T>(f);
    }
    py[i] = o;
    if (pv != 0) pv[i] = s;
  }
  if (threadIdx.x == 0) {
    if (mean != 0) mean[row] = 0.0f;
    if (inv_std != 0) inv_std[row] = 1.0f / root;
  }
}

#define HIPEP_RMS(NAME, T, VEC)                                                                       \
  HIPEP_KERNEL void hipep_rms_norm_##NAME(const T* HIPEP_RESTRICT x, const T* HIPEP_RESTRICT scale,  \
                                          T* HIPEP_RESTRICT y, float* HIPEP_RESTRICT inv_std,         \
                                          const hipep_rms_args a) {                                   \
    hipep_rms_norm<T, 1>(x, scale, y, inv_std, a);                                                    \
  }                                                                                                   \
  HIPEP_KERNEL void hipep_rms_norm_##NAME##_vec(const T* HIPEP_RESTRICT x, const T* HIPEP_RESTRICT scale, \
                                                T* HIPEP_RESTRICT y, float* HIPEP_RESTRICT inv_std,   \
                                                const hipep_rms_args a) {                             \
    hipep_rms_norm<T, VEC>(x, scale, y, inv_std, a);                                                  \
  }                                                                                                   \
  HIPEP_KERNEL void hipep_skip_rms_norm_##NAME(                                                      \
      const T* HIPEP_RESTRICT x, const T* HIPEP_RESTRICT skip, const T* HIPEP_RESTRICT gamma,        \
      const T* HIPEP_RESTRICT bias, T* HIPEP_RESTRICT y, float* HIPEP_RESTRICT mean,                  \
      float* HIPEP_RESTRICT inv_std, T* HIPEP_RESTRICT sum_out, const hipep_rms_args a) {             \
    hipep_skip_rms_norm<T, 1>(x, skip, gamma, bias, y, mean, inv_std, sum_out, a);                    \
  }                                                                                                   \
  HIPEP_KERNEL void hipep_skip_rms_norm_##NAME##_vec(                                                \
      const T* HIPEP_RESTRICT x, const T* HIPEP_RESTRICT skip, const T* HIPEP_RESTRICT gamma,        \
      const T* HIPEP_RESTRICT bias, T* HIPEP_RESTRICT y, float* HIPEP_RESTRICT mean,                  \
      float* HIPEP_RESTRICT inv_std, T* HIPEP_RESTRICT sum_out, const hipep_rms_args a) {             \
    hipep_skip_rms_norm<T, VEC>(x, skip, gamma, bias, y, mean, inv_std, sum_out, a);                  \
  }

HIPEP_RMS(f32, float, 4)
HIPEP_RMS(f16, hipep_half, 8)
HIPEP_RMS(bf16, hipep_bf16, 8)
