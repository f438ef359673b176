// Softmax and LogSoftmax over the last axis (the runtime views the input as [rows, cols]; opsets
// 1 and 11 flatten at `axis`, which is the same view), and ReduceLogSumExp over the last axes
// (the same first pass: max + log(sum of exp(x - max)) per row, one output each).
//
// One row per block of blockDim.x threads, or for short rows one row per warp with blockDim.y
// rows per block. Two passes over the row: an online pass keeps each thread's running maximum m
// and sum s of exp(x - m) (rescaling s whenever m grows), the pairs are merged across the warp
// and the block; then each element is written as exp(x - m) * (1 / s), or for LogSoftmax as
// (x - m) - log(s) (MLAS's LogSoftmax output kernel's form). Math in f32 (f16/bf16
// widened, the result rounded once), as ONNX Runtime's kernels compute, and in f64 for f64
// (hipep_softmax_acc); NaN anywhere in a row gives a row of NaN, as the reference does.
#include "hipep_device.h"

struct hipep_softmax_args {
  hipep_i64 rows;
  hipep_i64 cols;
};

// The accumulator type of an element type (A), its exp and log, and an element's value as A and back.
template <typename T> struct hipep_softmax_acc {
  typedef float A;
  HIPEP_DEVICE static A in(T v) { return hipep_to_float(v); }
  HIPEP_DEVICE static T out(A v) { return hipep_from_float<T>(v); }
};
template <> struct hipep_softmax_acc<double> {
  typedef double A;
  HIPEP_DEVICE static A in(double v) { return v; }
  HIPEP_DEVICE static double out(A v) { return v; }
};
HIPEP_DEVICE float hipep_softmax_exp(float x) { return expf(x); }
HIPEP_DEVICE double hipep_softmax_exp(double x) { return exp(x); }
HIPEP_DEVICE float hipep_softmax_log(float x) { return logf(x); }
HIPEP_DEVICE double hipep_softmax_log(double x) { return log(x); }

template <typename A> HIPEP_DEVICE void hipep_online_add(A& m, A& s, A x) {
  const A inf = (A)HIPEP_INF_F;
  if (x > m) {
    s = s * hipep_softmax_exp(m - x) + (A)1;
    m = x;
  } else if (!(x == -inf && m == -inf)) {
    s += hipep_softmax_exp(x - m);  // NaN x makes s NaN
  }
}

template <typename A> HIPEP_DEVICE void hipep_online_merge(A& m, A& s, A m2, A s2) {
  const A mm = m > m2 ? m : m2;
  if (mm == -(A)HIPEP_INF_F) {
    s = s + s2;
  } else {
    s = s * hipep_softmax_exp(m - mm) + s2 * hipep_softmax_exp(m2 - mm);
  }
  m = mm;
}

template <typename A> HIPEP_DEVICE void hipep_online_reduce(A& m, A& s, A* scratch) {
#pragma unroll
  for (int k = HIPEP_WARP_SIZE / 2; k > 0; k >>= 1) {
    const A m2 = HIPEP_SHFL_XOR(m, k), s2 = HIPEP_SHFL_XOR(s, k);
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
  m = lane < warps ? scratch[lane] : -(A)HIPEP_INF_F;
  s = lane < warps ? scratch[HIPEP_MAX_WARPS + lane] : (A)0;
#pragma unroll
  for (int k = HIPEP_WARP_SIZE / 2; k > 0; k >>= 1) {
    const A m2 = HIPEP_SHFL_XOR(m, k), s2 = HIPEP_SHFL_XOR(s, k);
    hipep_online_merge(m, s, m2, s2);
  }
}

template <typename T, int VEC> struct alignas(sizeof(T) * VEC) hipep_softmax_vec { T v[VEC]; };

template <typename T, int VEC, bool LOG>
HIPEP_DEVICE void hipep_softmax(const T* HIPEP_RESTRICT x, T* HIPEP_RESTRICT y, const hipep_softmax_args a) {
  typedef hipep_softmax_acc<T> Acc;
  typedef typename Acc::A A;
  __shared__ A scratch[2 * HIPEP_MAX_WARPS];
  const hipep_i64 row = (hipep_i64)blockIdx.x * blockDim.y + threadIdx.y;
  if (row >= a.rows) return;  // only when blockDim.x is one warp: no block barrier below
  const T* px = x + row * a.cols;
  T* py = y + row * a.cols;
  const hipep_i64 nvec = a.cols / VEC;
  typedef hipep_softmax_vec<T, VEC> V;
  A m = -(A)HIPEP_INF_F, s = (A)0;
  for (hipep_i64 i = threadIdx.x; i < nvec; i += blockDim.x) {
    const V v = reinterpret_cast<const V*>(px)[i];
#pragma unroll
    for (int k = 0; k < VEC; ++k) hipep_online_add(m, s, Acc::in(v.v[k]));
  }
  for (hipep_i64 i = nvec * VEC + threadIdx.x; i < a.cols; i += blockDim.x) hipep_online_add(m, s, Acc::in(px[i]));
  hipep_online_reduce(m, s, scratch);
  const A inv = (A)1 / s, log_s = hipep_softmax_log(s);
  for (hipep_i64 i = threadIdx.x; i < nvec; i += blockDim.x) {
    const V v = reinterpret_cast<const V*>(px)[i];
    V o;
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      const A d = Acc::in(v.v[k]) - m;
      o.v[k] = Acc::out(LOG ? d - log_s : hipep_softmax_exp(d) * inv);
    }
    reinterpret_cast<V*>(py)[i] = o;
  }
  for (hipep_i64 i = nvec * VEC + threadIdx.x; i < a.cols; i += blockDim.x) {
    const A d = Acc::in(px[i]) - m;
    py[i] = Acc::out(LOG ? d - log_s : hipep_softmax_exp(d) * inv);
  }
}

template <typename T, int VEC>
HIPEP_DEVICE void hipep_logsumexp(const T* HIPEP_RESTRICT x, T* HIPEP_RESTRICT y, const hipep_softmax_args a) {
  static_assert(sizeof(typename hipep_softmax_acc<T>::A) == 4, "f64 rows: kernels/reduce.hip");
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

#define HIPEP_SOFTMAX_ONLY(NAME, T, VEC)                                                              \
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
  }
#define HIPEP_SOFTMAX(NAME, T, VEC)                                                                   \
  HIPEP_SOFTMAX_ONLY(NAME, T, VEC)                                                                    \
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
// f64: Softmax and LogSoftmax in double (ReduceLogSumExp's f64 rows are kernels/reduce.hip's)
HIPEP_SOFTMAX_ONLY(f64, double, 2)
