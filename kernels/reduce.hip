// ReduceSum / ReduceMean / ReduceMax over a contiguous block of axes.
//
// The runtime views the input as [outer, r, inner] (r: the reduced extent, the product of the
// reduced axes, which must be adjacent) and the output as [outer, inner]:
//   * rows (inner == 1: the last axes, or all of them): one row per block of blockDim.x threads,
//     or, for short rows, one row per warp with blockDim.y rows per block; the row is read in
//     strided passes (16-byte loads where the row allows: VEC elements at a time) and combined
//     with warp shuffles;
//   * cols (inner > 1): 32 neighbouring outputs per block (coalesced loads), the r extent split
//     among row groups of the block, partial results combined in shared memory.
// Arithmetic as ONNX Runtime's CPU EP: float sums and means accumulate in f32 (f16/bf16 widened)
// and round once; the mean divides the f32 sum by the f32 count; integer sums and means
// accumulate in double and convert back saturating (out of range: the type's min/max, NaN: min);
// max propagates NaN. Empty reductions give sum 0, mean 0, max -inf / the type's minimum.
#include "hipep_device.h"

struct hipep_reduce_args {
  hipep_i64 rows;   // outer * inner: output elements
  hipep_i64 r;      // reduced extent
  hipep_i64 inner;  // elements after the reduced block (1 for the row kernels)
};

enum { HIPEP_SUM = 0, HIPEP_MEAN = 1, HIPEP_MAX = 2 };

// The accumulator and its identity per element type and operation.
template <typename T> struct hipep_reduce_traits;
template <> struct hipep_reduce_traits<float> {
  typedef float acc;
  static HIPEP_DEVICE float lowest() { return -HIPEP_INF_F; }
  static HIPEP_DEVICE float widen(float v) { return v; }
  static HIPEP_DEVICE float narrow(float v) { return v; }
};
template <> struct hipep_reduce_traits<hipep_half> {
  typedef float acc;
  static HIPEP_DEVICE float lowest() { return -HIPEP_INF_F; }
  static HIPEP_DEVICE float widen(hipep_half v) { return __half2float(v); }
  static HIPEP_DEVICE hipep_half narrow(float v) { return __float2half_rn(v); }
};
template <> struct hipep_reduce_traits<hipep_bf16> {
  typedef float acc;
  static HIPEP_DEVICE float lowest() { return -HIPEP_INF_F; }
  static HIPEP_DEVICE float widen(hipep_bf16 v) { return __bfloat162float(v); }
  static HIPEP_DEVICE hipep_bf16 narrow(float v) { return __float2bfloat16(v); }
};
template <> struct hipep_reduce_traits<int> {
  typedef double acc;
  static HIPEP_DEVICE double lowest() { return -2147483648.0; }
  static HIPEP_DEVICE double widen(int v) { return (double)v; }
  static HIPEP_DEVICE int narrow(double v) {
    if (v != v || v < -2147483648.0) return (int)(-2147483647 - 1);
    if (v >= 2147483648.0) return 2147483647;
    return (int)v;  // truncates toward zero
  }
};
template <> struct hipep_reduce_traits<hipep_i64> {
  typedef double acc;
  static HIPEP_DEVICE double lowest() { return -9223372036854775808.0; }
  static HIPEP_DEVICE double widen(hipep_i64 v) { return (double)v; }
  static HIPEP_DEVICE hipep_i64 narrow(double v) {
    if (v != v || v < -9223372036854775808.0) return (hipep_i64)(-9223372036854775807LL - 1);
    if (v >= 9223372036854775808.0) return 9223372036854775807LL;
    return (hipep_i64)v;
  }
};

HIPEP_DEVICE float hipep_combine(float a, float b, int op) { return op == HIPEP_MAX ? hipep_fmax_nan(a, b) : a + b; }
HIPEP_DEVICE double hipep_combine(double a, double b, int op) { return op == HIPEP_MAX ? hipep_dmax_nan(a, b) : a + b; }

// Integer max does not go through double (int64 values past 2^53 would round): it keeps the
// element type.
template <typename T> HIPEP_DEVICE T hipep_warp_imax(T v) {
#pragma unroll
  for (int m = HIPEP_WARP_SIZE / 2; m > 0; m >>= 1) {
    T o = HIPEP_SHFL_XOR(v, m);
    v = o > v ? o : v;
  }
  return v;
}

template <typename T> HIPEP_DEVICE T hipep_block_imax(T v, T* scratch, T lowest) {
  const int lane = threadIdx.x % HIPEP_WARP_SIZE, warp = threadIdx.x / HIPEP_WARP_SIZE;
  const int warps = (blockDim.x + HIPEP_WARP_SIZE - 1) / HIPEP_WARP_SIZE;
  v = hipep_warp_imax(v);
  if (warps == 1) return v;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T r = lane < warps ? scratch[lane] : lowest;
  r = hipep_warp_imax(r);
  __syncthreads();
  return r;
}

template <typename T> HIPEP_DEVICE T hipep_int_lowest();
template <> HIPEP_DEVICE int hipep_int_lowest<int>() { return (int)(-2147483647 - 1); }
template <> HIPEP_DEVICE hipep_i64 hipep_int_lowest<hipep_i64>() { return (hipep_i64)(-9223372036854775807LL - 1); }

// Loads VEC consecutive elements as one 16-byte (or smaller) transaction.
template <typename T, int VEC> struct alignas(sizeof(T) * VEC) hipep_vec { T v[VEC]; };

template <typename T, int OP, int VEC>
HIPEP_DEVICE void hipep_reduce_rows(const T* HIPEP_RESTRICT x, T* HIPEP_RESTRICT y, const hipep_reduce_args a) {
  typedef hipep_reduce_traits<T> tr;
  typedef typename tr::acc A;
  __shared__ A scratch[HIPEP_MAX_WARPS];
  const hipep_i64 row = (hipep_i64)blockIdx.x * blockDim.y + threadIdx.y;
  if (row >= a.rows) return;  // only when blockDim.x is one warp: no block barrier below
  const T* p = x + row * a.r;
  const A init = OP == HIPEP_MAX ? tr::lowest() : A(0);
  A acc = init;
  const hipep_i64 nvec = a.r / VEC;
  const hipep_vec<T, VEC>* pv = reinterpret_cast<const hipep_vec<T, VEC>*>(p);
  for (hipep_i64 i = threadIdx.x; i < nvec; i += blockDim.x) {
    const hipep_vec<T, VEC> v = pv[i];
#pragma unroll
    for (int k = 0; k < VEC; ++k) acc = hipep_combine(acc, tr::widen(v.v[k]), OP);
  }
  for (hipep_i64 i = nvec * VEC + threadIdx.x; i < a.r; i += blockDim.x) acc = hipep_combine(acc, tr::widen(p[i]), OP);
  if (OP == HIPEP_MAX) {
    if (sizeof(A) == 4) acc = (A)hipep_block_max((float)acc, (float*)scratch);
    else acc = (A)hipep_block_dmax((double)acc, (double*)scratch);
  } else {
    acc = hipep_block_sum(acc, scratch);
  }
  if (threadIdx.x == 0) {
    if (OP == HIPEP_MEAN) acc = a.r == 0 ? A(0) : acc / (A)a.r;
    y[row] = tr::narrow(acc);
  }
}

template <typename T, int VEC>
HIPEP_DEVICE void hipep_reduce_rows_imax(const T* HIPEP_RESTRICT x, T* HIPEP_RESTRICT y, const hipep_reduce_args a) {
  __shared__ T scratch[HIPEP_MAX_WARPS];
  const hipep_i64 row = (hipep_i64)blockIdx.x * blockDim.y + threadIdx.y;
  if (row >= a.rows) return;
  const T* p = x + row * a.r;
  const T lowest = hipep_int_lowest<T>();
  T acc = lowest;
  for (hipep_i64 i = threadIdx.x; i < a.r; i += blockDim.x) acc = p[i] > acc ? p[i] : acc;
  acc = hipep_block_imax(acc, scratch, lowest);
  if (threadIdx.x == 0) y[row] = acc;
}

// Columns: a block covers 32 adjacent outputs (threadIdx.x, coalesced) and splits the reduced
// extent among blockDim.y row groups; each thread keeps four independent accumulators, so four
// loads are in flight per thread (a single running sum would wait for every load in turn); the
// row groups combine through shared memory. blockIdx.y walks the outer index.
template <typename T, int OP>
HIPEP_DEVICE void hipep_reduce_cols(const T* HIPEP_RESTRICT x, T* HIPEP_RESTRICT y, const hipep_reduce_args a) {
  typedef hipep_reduce_traits<T> tr;
  typedef typename tr::acc A;
  __shared__ A part[32][33];
  const A init = OP == HIPEP_MAX ? tr::lowest() : A(0);
  const hipep_i64 col = (hipep_i64)blockIdx.x * 32 + threadIdx.x;
  const hipep_i64 outers = a.rows / a.inner, step = blockDim.y;
  for (hipep_i64 outer = blockIdx.y; outer < outers; outer += gridDim.y) {
    A acc0 = init, acc1 = init, acc2 = init, acc3 = init;
    if (col < a.inner) {
      const T* p = x + outer * a.r * a.inner + col;
      hipep_i64 i = threadIdx.y;
      for (; i + 3 * step < a.r; i += 4 * step) {
        acc0 = hipep_combine(acc0, tr::widen(p[i * a.inner]), OP);
        acc1 = hipep_combine(acc1, tr::widen(p[(i + step) * a.inner]), OP);
        acc2 = hipep_combine(acc2, tr::widen(p[(i + 2 * step) * a.inner]), OP);
        acc3 = hipep_combine(acc3, tr::widen(p[(i + 3 * step) * a.inner]), OP);
      }
      for (; i < a.r; i += step) acc0 = hipep_combine(acc0, tr::widen(p[i * a.inner]), OP);
    }
    A acc = hipep_combine(hipep_combine(acc0, acc1, OP), hipep_combine(acc2, acc3, OP), OP);
    part[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && col < a.inner) {
      for (int k = 1; k < (int)blockDim.y; ++k) acc = hipep_combine(acc, part[k][threadIdx.x], OP);
      if (OP == HIPEP_MEAN) acc = a.r == 0 ? A(0) : acc / (A)a.r;
      y[outer * a.inner + col] = tr::narrow(acc);
    }
    __syncthreads();
  }
}

template <typename T>
HIPEP_DEVICE void hipep_reduce_cols_imax(const T* HIPEP_RESTRICT x, T* HIPEP_RESTRICT y, const hipep_reduce_args a) {
  const hipep_i64 step = (hipep_i64)gridDim.x * blockDim.x;
  for (hipep_i64 o = (hipep_i64)blockIdx.x * blockDim.x + threadIdx.x; o < a.rows; o += step) {
    const hipep_i64 outer = o / a.inner, k = o - outer * a.inner;
    const T* p = x + outer * a.r * a.inner + k;
    T acc = hipep_int_lowest<T>();
    for (hipep_i64 i = 0; i < a.r; ++i) acc = p[i * a.inner] > acc ? p[i * a.inner] : acc;
    y[o] = acc;
  }
}

#define HIPEP_REDUCE_FLOAT(NAME, T, OP, VEC)                                                          \
  HIPEP_KERNEL void hipep_reduce_##NAME##_rows(const T* HIPEP_RESTRICT x, T* HIPEP_RESTRICT y,       \
                                               const hipep_reduce_args a) {                           \
    hipep_reduce_rows<T, OP, 1>(x, y, a);                                                             \
  }                                                                                                   \
  HIPEP_KERNEL void hipep_reduce_##NAME##_rows_vec(const T* HIPEP_RESTRICT x, T* HIPEP_RESTRICT y,   \
                                                   const hipep_reduce_args a) {                       \
    hipep_reduce_rows<T, OP, VEC>(x, y, a);                                                           \
  }                                                                                                   \
  HIPEP_KERNEL void hipep_reduce_##NAME##_cols(const T* HIPEP_RESTRICT x, T* HIPEP_RESTRICT y,       \
                                               const hipep_reduce_args a) {                           \
    hipep_reduce_cols<T, OP>(x, y, a);                                                                \
  }

HIPEP_REDUCE_FLOAT(sum_f32, float, HIPEP_SUM, 4)
HIPEP_REDUCE_FLOAT(mean_f32, float, HIPEP_MEAN, 4)
HIPEP_REDUCE_FLOAT(max_f32, float, HIPEP_MAX, 4)
HIPEP_REDUCE_FLOAT(sum_f16, hipep_half, HIPEP_SUM, 8)
HIPEP_REDUCE_FLOAT(mean_f16, hipep_half, HIPEP_MEAN, 8)
HIPEP_REDUCE_FLOAT(max_f16, hipep_half, HIPEP_MAX, 8)
HIPEP_REDUCE_FLOAT(sum_bf16, hipep_bf16, HIPEP_SUM, 8)
HIPEP_REDUCE_FLOAT(mean_bf16, hipep_bf16, HIPEP_MEAN, 8)
HIPEP_REDUCE_FLOAT(max_bf16, hipep_bf16, HIPEP_MAX, 8)

// Integer sums and means: double accumulation (no vector loads: the row is read as it is).
#define HIPEP_REDUCE_INT(NAME, T, OP)                                                                 \
  HIPEP_KERNEL void hipep_reduce_##NAME##_rows(const T* HIPEP_RESTRICT x, T* HIPEP_RESTRICT y,       \
                                               const hipep_reduce_args a) {                           \
    hipep_reduce_rows<T, OP, 1>(x, y, a);                                                             \
  }                                                                                                   \
  HIPEP_KERNEL void hipep_reduce_##NAME##_cols(const T* HIPEP_RESTRICT x, T* HIPEP_RESTRICT y,       \
                                               const hipep_reduce_args a) {                           \
    hipep_reduce_cols<T, OP>(x, y, a);                                                                \
  }

HIPEP_REDUCE_INT(sum_i32, int, HIPEP_SUM)
HIPEP_REDUCE_INT(mean_i32, int, HIPEP_MEAN)
HIPEP_REDUCE_INT(sum_i64, hipep_i64, HIPEP_SUM)
HIPEP_REDUCE_INT(mean_i64, hipep_i64, HIPEP_MEAN)

HIPEP_KERNEL void hipep_reduce_max_i32_rows(const int* HIPEP_RESTRICT x, int* HIPEP_RESTRICT y, const hipep_reduce_args a) {
  hipep_reduce_rows_imax<int, 1>(x, y, a);
}
HIPEP_KERNEL void hipep_reduce_max_i32_cols(const int* HIPEP_RESTRICT x, int* HIPEP_RESTRICT y, const hipep_reduce_args a) {
  hipep_reduce_cols_imax<int>(x, y, a);
}
HIPEP_KERNEL void hipep_reduce_max_i64_rows(const hipep_i64* HIPEP_RESTRICT x, hipep_i64* HIPEP_RESTRICT y,
                                            const hipep_reduce_args a) {
  hipep_reduce_rows_imax<hipep_i64, 1>(x, y, a);
}
HIPEP_KERNEL void hipep_reduce_max_i64_cols(const hipep_i64* HIPEP_RESTRICT x, hipep_i64* HIPEP_RESTRICT y,
                                            const hipep_reduce_args a) {
  hipep_reduce_cols_imax<hipep_i64>(x, y, a);
}
