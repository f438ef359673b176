// Layer normalization: ONNX LayerNormalization and com.microsoft::SkipLayerNormalization.
//
// The runtime views X as [rows, n] (n: the product of the normalized axes). One row per block of
// blockDim.x threads, or for short rows one row per warp with blockDim.y rows per block. Three
// passes over the row, the second and third reading it again from L1/L2: the f32 sum gives the
// mean, the sum of squared deviations from it the variance (centered, as ONNX Runtime computes
// it: no cancellation for rows far from zero), then each element is written. f16/bf16 are widened
// to f32 and every output is rounded once:
//   layer_norm:  mean = sum(x) / n,  inv = 1 / sqrt(sum((x - mean)^2) / n + eps),
//                y = (x - mean) * inv * scale (+ bias);  mean and inv_std_dev outputs in f32;
//   skip:        v = x + skip (+ bias) in f32, normalized as above with gamma (+ beta);
//                input_skip_bias_sum = v rounded to T.
// Optional inputs and outputs come as null pointers. LayerNormalization's scale and bias hold
// one value per element of the row (step 1) or one value for all (step 0). The skip input may be
// [S, H] or [1, S, H] against a [B, S, H] input: row r reads skip row r % skip_rows.
// VEC > 1: every row pointer is 16-byte aligned, n a multiple of VEC and the steps 1 (the runtime
// checks).
#include "hipep_device.h"

struct hipep_layer_norm_args {
  hipep_i64 rows;
  hipep_i64 n;
  hipep_i64 skip_rows;   // skip variant only
  hipep_i64 scale_step;  // LayerNormalization: 1 per element, 0 one value
  hipep_i64 bias_step;
  float eps;
};

template <typename T, int VEC> struct alignas(sizeof(T) * VEC) hipep_ln_vec { T v[VEC]; };

// The row's element i (vector i when VEC > 1) as f32: x (+ skip + bias for the skip variant).
template <typename T, int VEC> struct hipep_ln_row {
  typedef hipep_ln_vec<T, VEC> V;
  const V* x;
  const V* skip;  // null: plain layer norm
  const V* bias;  // skip variant's bias
  HIPEP_DEVICE void at(hipep_i64 i, float (&f)[VEC]) const {
    const V u = x[i];
#pragma unroll
    for (int k = 0; k < VEC; ++k) f[k] = hipep_to_float(u.v[k]);
    if (skip != 0) {
      const V w = skip[i];
#pragma unroll
      for (int k = 0; k < VEC; ++k) f[k] += hipep_to_float(w.v[k]);
      if (bias != 0) {
        const V b = bias[i];
#pragma unroll
        for (int k = 0; k < VEC; ++k) f[k] += hipep_to_float(b.v[k]);
      }
    }
  }
};

// mean and 1 / sqrt(var + eps) of the row, in every thread of the row.
template <typename T, int VEC>
HIPEP_DEVICE void hipep_ln_stats(const hipep_ln_row<T, VEC>& row, hipep_i64 nv, hipep_i64 n, float eps, float* scratch,
                                 float& mean, float& inv) {
  float s = 0.0f;
  for (hipep_i64 i = threadIdx.x; i < nv; i += blockDim.x) {
    float f[VEC];
    row.at(i, f);
#pragma unroll
    for (int k = 0; k < VEC; ++k) s += f[k];
  }
  mean = hipep_block_sum(s, scratch) / (float)n;
  float sq = 0.0f;
  for (hipep_i64 i = threadIdx.x; i < nv; i += blockDim.x) {
    float f[VEC];
    row.at(i, f);
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      const float d = f[k] - mean;
      sq = fmaf(d, d, sq);
    }
  }
  inv = 1.0f / sqrtf(hipep_block_sum(sq, scratch) / (float)n + eps);
}

template <typename T, int VEC>
HIPEP_DEVICE void hipep_layer_norm(const T* HIPEP_RESTRICT x, const T* HIPEP_RESTRICT scale,
                                   const T* HIPEP_RESTRICT bias, T* HIPEP_RESTRICT y, float* HIPEP_RESTRICT mean_out,
                                   float* HIPEP_RESTRICT inv_out, const hipep_layer_norm_args a) {
  __shared__ float scratch[HIPEP_MAX_WARPS];
  const hipep_i64 r = (hipep_i64)blockIdx.x * blockDim.y + threadIdx.y;
  if (r >= a.rows) return;  // only when blockDim.x is one warp: no block barrier below
  typedef hipep_ln_vec<T, VEC> V;
  hipep_ln_row<T, VEC> row;
  row.x = reinterpret_cast<const V*>(x + r * a.n);
  row.skip = 0;
  row.bias = 0;
  const hipep_i64 nv = a.n / VEC;
  float mean, inv;
  hipep_ln_stats(row, nv, a.n, a.eps, scratch, mean, inv);
  V* py = reinterpret_cast<V*>(y + r * a.n);
  for (hipep_i64 i = threadIdx.x; i < nv; i += blockDim.x) {
    float f[VEC];
    row.at(i, f);
    // VEC > 1: the steps are 1 and scale/bias are read as vectors too.
    V sv, bv, o;
    if (VEC > 1) {
      sv = reinterpret_cast<const V*>(scale)[i];
      if (bias != 0) bv = reinterpret_cast<const V*>(bias)[i];
    } else {
      sv.v[0] = scale[i * a.scale_step];
      if (bias != 0) bv.v[0] = bias[i * a.bias_step];
    }
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      float v = (f[k] - mean) * inv * hipep_to_float(sv.v[k]);
      if (bias != 0) v += hipep_to_float(bv.v[k]);
      o.v[k] = hipep_from_float<T>(v);
    }
    py[i] = o;
  }
  if (threadIdx.x == 0) {
    if (mean_out != 0) mean_out[r] = mean;
    if (inv_out != 0) inv_out[r] = inv;
  }
}

template <typename T, int VEC>
HIPEP_DEVICE void hipep_skip_layer_norm(const T* HIPEP_RESTRICT x, const T* HIPEP_RESTRICT skip,
                                        const T* HIPEP_RESTRICT gamma, const T* HIPEP_RESTRICT beta,
                                        const T* HIPEP_RESTRICT bias, T* HIPEP_RESTRICT y,
                                        float* HIPEP_RESTRICT mean_out, float* HIPEP_RESTRICT inv_out,
                                        T* HIPEP_RESTRICT sum_out, const hipep_layer_norm_args a) {
  __shared__ float scratch[HIPEP_MAX_WARPS];
  const hipep_i64 r = (hipep_i64)blockIdx.x * blockDim.y + threadIdx.y;
  if (r >= a.rows) return;
  typedef hipep_ln_vec<T, VEC> V;
  hipep_ln_row<T, VEC> row;
  row.x = reinterpret_cast<const V*>(x + r * a.n);
  row.skip = reinterpret_cast<const V*>(skip + (r % a.skip_rows) * a.n);
  row.bias = reinterpret_cast<const V*>(bias);
  const hipep_i64 nv = a.n / VEC;
  float mean, inv;
  hipep_ln_stats(row, nv, a.n, a.eps, scratch, mean, inv);
  const V* pg = reinterpret_cast<const V*>(gamma);
  const V* pb = reinterpret_cast<const V*>(beta);
  V* py = reinterpret_cast<V*>(y + r * a.n);
  V* ps = sum_out != 0 ? reinterpret_cast<V*>(sum_out + r * a.n) : 0;
  for (hipep_i64 i = threadIdx.x; i < nv; i += blockDim.x) {
    float f[VEC];
    row.at(i, f);
    const V g = pg[i];
    V b, o, s;
    if (pb != 0) b = pb[i];
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      float v = (f[k] - mean) * inv * hipep_to_float(g.v[k]);
      if (pb != 0) v += hipep_to_float(b.v[k]);
      o.v[k] = hipep_from_float<T>(v);
      s.v[k] = hipep_from_float<T>(f[k]);
    }
    py[i] = o;
    if (ps != 0) ps[i] = s;
  }
  if (threadIdx.x == 0) {
    if (mean_out != 0) mean_out[r] = mean;
    if (inv_out != 0) inv_out[r] = inv;
  }
}

#define HIPEP_LAYER_NORM(NAME, T, VEC)                                                                   \
  HIPEP_KERNEL void hipep_layer_norm_##NAME(const T* HIPEP_RESTRICT x, const T* HIPEP_RESTRICT scale,   \
                                            const T* HIPEP_RESTRICT bias, T* HIPEP_RESTRICT y,           \
                                            float* HIPEP_RESTRICT mean, float* HIPEP_RESTRICT inv,        \
                                            const hipep_layer_norm_args a) {                              \
    hipep_layer_norm<T, 1>(x, scale, bias, y, mean, inv, a);                                             \
  }                                                                                                      \
  HIPEP_KERNEL void hipep_layer_norm_##NAME##_vec(const T* HIPEP_RESTRICT x, const T* HIPEP_RESTRICT scale, \
                                                  const T* HIPEP_RESTRICT bias, T* HIPEP_RESTRICT y,     \
                                                  float* HIPEP_RESTRICT mean, float* HIPEP_RESTRICT inv,  \
                                                  const hipep_layer_norm_args a) {                        \
    hipep_layer_norm<T, VEC>(x, scale, bias, y, mean, inv, a);                                           \
  }                                                                                                      \
  HIPEP_KERNEL void hipep_skip_layer_norm_##NAME(                                                       \
      const T* HIPEP_RESTRICT x, const T* HIPEP_RESTRICT skip, const T* HIPEP_RESTRICT gamma,           \
      const T* HIPEP_RESTRICT beta, const T* HIPEP_RESTRICT bias, T* HIPEP_RESTRICT y,                   \
      float* HIPEP_RESTRICT mean, float* HIPEP_RESTRICT inv, T* HIPEP_RESTRICT sum_out,                  \
      const hipep_layer_norm_args a) {                                                                   \
    hipep_skip_layer_norm<T, 1>(x, skip, gamma, beta, bias, y, mean, inv, sum_out, a);                   \
  }                                                                                                      \
  HIPEP_KERNEL void hipep_skip_layer_norm_##NAME##_vec(                                                 \
      const T* HIPEP_RESTRICT x, const T* HIPEP_RESTRICT skip, const T* HIPEP_RESTRICT gamma,           \
      const T* HIPEP_RESTRICT beta, const T* HIPEP_RESTRICT bias, T* HIPEP_RESTRICT y,                   \
      float* HIPEP_RESTRICT mean, float* HIPEP_RESTRICT inv, T* HIPEP_RESTRICT sum_out,                  \
      const hipep_layer_norm_args a) {                                                                   \
    hipep_skip_layer_norm<T, VEC>(x, skip, gamma, beta, bias, y, mean, inv, sum_out, a);                 \
  }

HIPEP_LAYER_NORM(f32, float, 4)
HIPEP_LAYER_NORM(f16, hipep_half, 8)
HIPEP_LAYER_NORM(bf16, hipep_bf16, 8)
