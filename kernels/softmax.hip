// Softmax and LogSoftmax over the last axis (the runtime views the input as [rows, cols]; opsets
// 1 and 11 flatten at `axis`, which is the same view), and ReduceLogSumExp over the last axes
// (the same first pass: max + log(sum of exp(x - max)) per row, one output each).
//
// One row per block of blockDim.x threads, or for short rows one row per warp with blockDim.y
// rows per block. Two passes over the row: an online pass keeps each thread's running maximum m
// and sum s of exp(x - m) (rescaling s whenever m grows), the pairs are merged across the warp
// and the block; then each element is written as exp(x - m) * (1 / s), or for LogSoftmax as
// (x - m) - log(s) (MLAS's LogSoftmax output kernel's form). Math in f32 (f16/bf16
// widened, the result rounded once), as ONNX Runtime's kernels compute; NaN anywhere in a row
// gives a row of NaN, as the reference does.
#include "hipep_device.h"

struct hipep_softmax_args {
  hipep_i64 rows;
  hipep_i64 cols;
};

HIPEP_DEVICE void hipep_online_add(float& m, float& s, float x) {
  if (x > m) {
    s = s * expf(m - x) + 1.0f;
    m = x;
  } else if (!(x == -HIPEP_INF_F && m == -HIPEP_INF_F)) {
    s += expf(x - m);  // NaN x makes s NaN
  }
}

HIPEP_DEVICE void hipep_online_merge(float& m, float& s, float m2, float s2) {
  const float mm = m > m2 ? m : m2;
  if (mm == -HIPEP_INF_F) {
    s = s + s2;
  } else {
    s = s * expf(m - mm) + s2 * expf(m2 - mm);
  }
  m = mm;
}

HIPEP_DEVICE void hipep_online_reduce(float& m, float& s, float* scratch) {
#pragma unroll
  for (int k = HIPEP_WARP_SIZE / 2; k > 0; k >>= 1) {
    const float m2 = HIPEP_SHFL_XOR(m, k), s2 = HIPEP_SHFL_XOR(s, k);
    hipep_online_merge(m, s, m2, s2);
  }
  const int warps = (blockDim.x + HIPEP_WARP_SIZE - 1) / HIPEP_WARP_SIZE;
  if (warps == 1) return;
  const int lane = threadIdx.x % HIPEP_WARP_SIZE, warp = threadIdx.x / HIPEP_WARP_SIZE;
  if (lane == 0) {
    scratch[warp] = m;
    scratch[HIPEP_MAX_WARPS + warp] = s;
  }
  __syncthreads();
  m = lane < warps ? scratch[lane] : -HIPEP_INF_F;
  s = lane < warps ? scratch[HIPEP_MAX_WARPS + lane] : 0.0f;
#pragma unroll
  for (int k = HIPEP_WARP_SIZE / 2; k > 0; k >>= 1) {
    const float m2 = HIPEP_SHFL_XOR(m, k), s2 = HIPEP_SHFL_XOR(s, k);
    hipep_online_merge(m, s, m2, s2);
  }
}

template <typename T, int VEC> struct alignas(sizeof(T) * VEC) hipep_softmax_vec { T v[VEC]; };

template <typename T, int VEC, bool LOG>
HIPEP_DEVICE void hipep_softmax(const T* HIPEP_RESTRICT x, T* HIPEP_RESTRICT y, const hipep_softmax_args a) {
  __shared__ float scratch[2 * HIPEP_MAX_WARPS];
  const hipep_i64 row = (hipep_i64)blockIdx.x * blockDim.y + threadIdx.y;
  if (row >= a.rows) return;  // only when blockDim.x is one warp: no block barrier below
  const T* px = x + row * a.cols;
  T* py = y + row * a.cols;
  const hipep_i64 nvec = a.cols / VEC;
  typedef hipep_softmax_vec<T, VEC> V;
  float m = -HIPEP_INF_F, s = 0.0f;
  for (hipep_i64 i = threadIdx.x; i < nvec; i += blockDim.x) {
    const V v = reinterpret_cast<const V*>(px)[i];
#pragma unroll
    for (int k = 0; k < VEC; ++k) hipep_online_add(m, s, hipep_to_float(v.v[k]));
  }
  for (hipep_i64 i = nvec * VEC + threadIdx.x; i < a.cols; i += blockDim.x) hipep_online_add(m, s, hipep_to_float(px[i]));
  hipep_online_reduce(m, s, scratch);
  const float inv = 1.0f / s, log_s = logf(s);
  for (hipep_i64 i = threadIdx.x; i < nvec; i += blockDim.x) {
    const V v = reinterpret_cast<const V*>(px)[i];
    V o;
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      const float d = hipep_to_float(v.v[k]) - m;
      o.v[k] = hipep_from_float<T>(LOG ? d - log_s : expf(d) * inv);
    }
    reinterpret_cast<V*>(py)[i] = o;
  }
  for (hipep_i64 i = nvec * VEC + threadIdx.x; i < a.cols; i += blockDim.x) {
    const float d = hipep_to_float(px[i]) - m;
    py[i] = hipep_from_float<T>(LOG ? d - log_s : expf(d) * inv);
  }
}

template <typename T, int VEC>
HIPEP_DEVICE void hipep_logsumexp(const T* HIPEP_RESTRICT x, T* HIPEP_RESTRICT y, const hipep_softmax_args a) {
  __shared__ float scratch[2 * HIPEP_MAX_WARPS];
  const hipep_i64 row = (hipep_i64)blockIdx.x * blockDim.y + threadIdx.y;
  if (row >= a.rows) return;  // only when blockDim.x is one warp: no block barrier below
  const T* px = x + row * a.cols;
  const hipep_i64 nvec = a.cols / VEC;
  typedef hipep_softmax_vec<T, VEC> V;
  float m = -HIPEP_INF_F, s = 0.0f;
  for (hipep_i64 i = threadIdx.x; i < nvec; i += blockDim.x) {
    const V v = reinterpret_cast<const V*>(px)[i];
#pragma unroll
    for (int k = 0; k < VEC; ++k) hipep_online_add(m, s, hipep_to_float(v.v[k]));
  }
  for (hipep_i64 i = nvec * VEC + threadIdx.x; i < a.cols; i += blockDim.x) hipep_online_add(m, s, hipep_to_float(px[i]));
  hipep_online_reduce(m, s, scratch);
  if (threadIdx.x == 0) y[row] = hipep_from_float<T>(m + logf(s));  // an empty or all -inf row: -inf
}

#define HIPEP_SOFTMAX(NAME, T, VEC)                                                                   \
  HIPEP_KERNEL void hipep_softmax_##NAME(const T* HIPEP_RESTRICT x, T* HIPEP_RESTRICT y,             \
                                         const hipep_softmax_args a) {                                \
    hipep_softmax<T, 1, false>(x, y, a);                                                              \
  }                                                                                                   \
  HIPEP_KERNEL void hipep_softmax_##NAME##_vec(const T* HIPEP_RESTRICT x, T* HIPEP_RESTRICT y,       \
                                               const hipep_softmax_args a) {                          \
    hipep_softmax<T, VEC, false>(x, y, a);                                                            \
  }                                                                                                   \
  HIPEP_KERNEL void hipep_log_softmax_##NAME(const T* HIPEP_RESTRICT x, T* HIPEP_RESTRICT y,         \
                                             const hipep_softmax_args a) {                            \
    hipep_softmax<T, 1, true>(x, y, a);                                                               \
  }                                                                                                   \
  HIPEP_KERNEL void hipep_log_softmax_##NAME##_vec(const T* HIPEP_RESTRICT x, T* HIPEP_RESTRICT y,   \
                                                   const hipep_softmax_args a) {                      \
    hipep_softmax<T, VEC, true>(x, y, a);                                                             \
  }                                                                                                   \
  HIPEP_KERNEL void hipep_reduce_logsumexp_##NAME##_rows(const T* HIPEP_RESTRICT x, T* HIPEP_RESTRICT y, \
                                                         const hipep_softmax_args a) {                \
    hipep_logsumexp<T, 1>(x, y, a);                                                                   \
  }                                                                                                   \
  HIPEP_KERNEL void hipep_reduce_logsumexp_##NAME##_rows_vec(const T* HIPEP_RESTRICT x, T* HIPEP_RESTRICT y, \
                                                             const hipep_softmax_args a) {            \
    hipep_logsumexp<T, VEC>(x, y, a);                                                                 \
  }

HIPEP_SOFTMAX(f32, float, 4)
HIPEP_SOFTMAX(f16, hipep_half, 8)
HIPEP_SOFTMAX(bf16, hipep_bf16, 8)
