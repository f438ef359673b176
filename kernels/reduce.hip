// ReduceSum / ReduceMean / ReduceMax / ReduceMin and, for float types, ReduceProd,
// ReduceSumSquare, ReduceL1, ReduceL2 and ReduceLogSum over a contiguous block of axes.
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
// and round once, f64 ones in double (its double kernels); the mean divides the sum by the count
// in the accumulator's type; integer sums and means accumulate in double and convert back
// saturating (out of range: the type's min/max, NaN: min); max and min propagate NaN; over bool
// they are any and all. Empty reductions give sum 0, mean 0, max -inf / the type's minimum /
// false, min +inf / its maximum / true, prod 1, L1 / L2 / sum of squares 0, log-sum -inf. The
// other float reductions transform each element as it is read (the square, the absolute value)
// and the accumulated value once at the end (L2's square root, LogSum's log), all in f32 (f64:
// in double). ReduceLogSumExp over f64 rows is here too (the f32, f16 and bf16 ones are
// kernels/softmax.hip's online pass, which works in f32).
#include "hipep_device.h"

struct hipep_reduce_args {
  hipep_i64 rows;   // outer * inner: output elements
  hipep_i64 r;      // reduced extent
  hipep_i64 inner;  // elements after the reduced block (1 for the row kernels)
};

enum { HIPEP_SUM = 0, HIPEP_MEAN = 1, HIPEP_MAX = 2, HIPEP_MIN = 3, HIPEP_PROD = 4, HIPEP_SUMSQ = 5, HIPEP_L1 = 6,
       HIPEP_L2 = 7, HIPEP_LOGSUM = 8 };

// The accumulator and its identity per element type and operation.
template <typename T> struct hipep_reduce_traits;
template <> struct hipep_reduce_traits<float> {
  typedef float acc;
  static HIPEP_DEVICE float lowest() { return -HIPEP_INF_F; }
  static HIPEP_DEVICE float highest() { return HIPEP_INF_F; }
  static HIPEP_DEVICE float widen(float v) { return v; }
  static HIPEP_DEVICE float narrow(float v) { return v; }
};
template <> struct hipep_reduce_traits<hipep_half> {
  typedef float acc;
  static HIPEP_DEVICE float lowest() { return -HIPEP_INF_F; }
  static HIPEP_DEVICE float highest() { return HIPEP_INF_F; }
  static HIPEP_DEVICE float widen(hipep_half v) { return __half2float(v); }
  static HIPEP_DEVICE hipep_half narrow(float v) { return __float2half_rn(v); }
};
template <> struct hipep_reduce_traits<hipep_bf16> {
  typedef float acc;
  static HIPEP_DEVICE float lowest() { return -HIPEP_INF_F; }
  static HIPEP_DEVICE float highest() { return HIPEP_INF_F; }
  static HIPEP_DEVICE float widen(hipep_bf16 v) { return __bfloat162float(v); }
  static HIPEP_DEVICE hipep_bf16 narrow(float v) { return __float2bfloat16(v); }
};
template <> struct hipep_reduce_traits<double> {
  typedef double acc;
  static HIPEP_DEVICE double lowest() { return -HIPEP_INF_D; }
  static HIPEP_DEVICE double highest() { return HIPEP_INF_D; }
  static HIPEP_DEVICE double widen(double v) { return v; }
  static HIPEP_DEVICE double narrow(double v) { return v; }
};
template <> struct hipep_reduce_traits<int> {
  typedef double acc;
  static HIPEP_DEVICE double lowest() { return -2147483648.0; }
  static HIPEP_DEVICE double highest() { return 2147483647.0; }
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
  static HIPEP_DEVICE double highest() { return 9223372036854775807.0; }
  static HIPEP_DEVICE double widen(hipep_i64 v) { return (double)v; }
  static HIPEP_DEVICE hipep_i64 narrow(double v) {
    if (v != v || v < -9223372036854775808.0) return (hipep_i64)(-9223372036854775807LL - 1);
    if (v >= 9223372036854775808.0) return 9223372036854775807LL;
    return (hipep_i64)v;
  }
};

HIPEP_DEVICE float hipep_fmin_nan(float a, float b) { return (a != a || a < b) ? a : b; }
HIPEP_DEVICE double hipep_dmin_nan(double a, double b) { return (a != a || a < b) ? a : b; }

HIPEP_DEVICE float hipep_combine(float a, float b, int op) {
  return op == HIPEP_MAX ? hipep_fmax_nan(a, b) : op == HIPEP_MIN ? hipep_fmin_nan(a, b) : op == HIPEP_PROD ? a * b : a + b;
}
HIPEP_DEVICE double hipep_combine(double a, double b, int op) {
  return op == HIPEP_MAX ? hipep_dmax_nan(a, b) : op == HIPEP_MIN ? hipep_dmin_nan(a, b) : op == HIPEP_PROD ? a * b : a + b;
}

// The accumulation's start (its identity) and what each element and the result become.
template <typename A, typename TR> HIPEP_DEVICE A hipep_reduce_init(int op) {
  return op == HIPEP_MAX ? TR::lowest() : op == HIPEP_MIN ? TR::highest() : op == HIPEP_PROD ? A(1) : A(0);
}
template <typename A> HIPEP_DEVICE A hipep_reduce_pre(A v, int op) {
  return (op == HIPEP_SUMSQ || op == HIPEP_L2) ? v * v : op == HIPEP_L1 ? (v < A(0) ? -v : v) : v;
}
HIPEP_DEVICE float hipep_reduce_sqrt(float v) { return sqrtf(v); }
HIPEP_DEVICE double hipep_reduce_sqrt(double v) { return sqrt(v); }
HIPEP_DEVICE float hipep_reduce_log(float v) { return logf(v); }
HIPEP_DEVICE double hipep_reduce_log(double v) { return log(v); }
template <typename A> HIPEP_DEVICE A hipep_reduce_post(A acc, int op, hipep_i64 r) {
  if (op == HIPEP_MEAN) return r == 0 ? A(0) : acc / (A)r;
  if (op == HIPEP_L2) return hipep_reduce_sqrt(acc);
  if (op == HIPEP_LOGSUM) return hipep_reduce_log(acc);
  return acc;
}

// Integer max and min do not go through double (int64 values past 2^53 would round): they keep
// the element type. MAXIMUM: max, else min.
template <bool MAXIMUM, typename T> HIPEP_DEVICE T hipep_iextreme(T a, T b) { return MAXIMUM ? (b > a ? b : a) : (b < a ? b : a); }

template <typename T> HIPEP_DEVICE T hipep_int_lowest();
template <> HIPEP_DEVICE int hipep_int_lowest<int>() { return (int)(-2147483647 - 1); }
template <> HIPEP_DEVICE hipep_i64 hipep_int_lowest<hipep_i64>() { return (hipep_i64)(-9223372036854775807LL - 1); }
template <typename T> HIPEP_DEVICE T hipep_int_highest();
template <> HIPEP_DEVICE int hipep_int_highest<int>() { return 2147483647; }
template <> HIPEP_DEVICE hipep_i64 hipep_int_highest<hipep_i64>() { return (hipep_i64)9223372036854775807LL; }
template <bool MAXIMUM, typename T> HIPEP_DEVICE T hipep_int_identity() {
  return MAXIMUM ? hipep_int_lowest<T>() : hipep_int_highest<T>();
}

// ReduceMax / ReduceMin over bool (one byte each, nonzero true): any and all, kept in an int so
// that the warp shuffles move words; an empty reduction gives false / true (ONNX 20's identities;
// ONNX Runtime's CPU EP refuses it).
template <bool ANY> HIPEP_DEVICE int hipep_bool_combine(int a, int b) { return ANY ? (a | b) : (a & b); }

template <bool ANY>
HIPEP_DEVICE void hipep_reduce_rows_bool(const unsigned char* HIPEP_RESTRICT x, unsigned char* HIPEP_RESTRICT y,
                                         const hipep_reduce_args a) {
  __shared__ int scratch[HIPEP_MAX_WARPS];
  const hipep_i64 row = (hipep_i64)blockIdx.x * blockDim.y + threadIdx.y;
  if (row >= a.rows) return;  // only when blockDim.x is one warp: no block barrier below
  const unsigned char* p = x + row * a.r;
  const int identity = ANY ? 0 : 1;
  int acc = identity;
  for (hipep_i64 i = threadIdx.x; i < a.r; i += blockDim.x) acc = hipep_bool_combine<ANY>(acc, p[i] != 0);
  acc = hipep_block_reduce(acc, scratch, identity, [](int u, int v) { return hipep_bool_combine<ANY>(u, v); });
  if (threadIdx.x == 0) y[row] = (unsigned char)acc;
}

template <bool ANY>
HIPEP_DEVICE void hipep_reduce_cols_bool(const unsigned char* HIPEP_RESTRICT x, unsigned char* HIPEP_RESTRICT y,
                                         const hipep_reduce_args a) {
  const hipep_i64 step = (hipep_i64)gridDim.x * blockDim.x;
  for (hipep_i64 o = (hipep_i64)blockIdx.x * blockDim.x + threadIdx.x; o < a.rows; o += step) {
    const hipep_i64 outer = o / a.inner, k = o - outer * a.inner;
    const unsigned char* p = x + outer * a.r * a.inner + k;
    int acc = ANY ? 0 : 1;
    for (hipep_i64 i = 0; i < a.r; ++i) acc = hipep_bool_combine<ANY>(acc, p[i * a.inner] != 0);
    y[o] = (unsigned char)acc;
  }
}

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
  const A init = hipep_reduce_init<A, tr>(OP);
  A acc = init;
  const hipep_i64 nvec = a.r / VEC;
  const hipep_vec<T, VEC>* pv = reinterpret_cast<const hipep_vec<T, VEC>*>(p);
  for (hipep_i64 i = threadIdx.x; i < nvec; i += blockDim.x) {
    const hipep_vec<T, VEC> v = pv[i];
#pragma unroll
    for (int k = 0; k < VEC; ++k) acc = hipep_combine(acc, hipep_reduce_pre(tr::widen(v.v[k]), OP), OP);
  }
  for (hipep_i64 i = nvec * VEC + threadIdx.x; i < a.r; i += blockDim.x)
    acc = hipep_combine(acc, hipep_reduce_pre(tr::widen(p[i]), OP), OP);
  acc = hipep_block_reduce(acc, scratch, init, [](A x, A y) { return hipep_combine(x, y, OP); });
  if (threadIdx.x == 0) y[row] = tr::narrow(hipep_reduce_post(acc, OP, a.r));
}

template <bool MAXIMUM, typename T>
HIPEP_DEVICE void hipep_reduce_rows_iextreme(const T* HIPEP_RESTRICT x, T* HIPEP_RESTRICT y, const hipep_reduce_args a) {
  __shared__ T scratch[HIPEP_MAX_WARPS];
  const hipep_i64 row = (hipep_i64)blockIdx.x * blockDim.y + threadIdx.y;
  if (row >= a.rows) return;
  const T* p = x + row * a.r;
  const T identity = hipep_int_identity<MAXIMUM, T>();
  T acc = identity;
  for (hipep_i64 i = threadIdx.x; i < a.r; i += blockDim.x) acc = hipep_iextreme<MAXIMUM>(acc, p[i]);
  acc = hipep_block_reduce(acc, scratch, identity, [](T x, T y) { return hipep_iextreme<MAXIMUM>(x, y); });
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
  const A init = hipep_reduce_init<A, tr>(OP);
  const hipep_i64 col = (hipep_i64)blockIdx.x * 32 + threadIdx.x;
  const hipep_i64 outers = a.rows / a.inner, step = blockDim.y;
  for (hipep_i64 outer = blockIdx.y; outer < outers; outer += gridDim.y) {
    A acc0 = init, acc1 = init, acc2 = init, acc3 = init;
    if (col < a.inner) {
      const T* p = x + outer * a.r * a.inner + col;
      hipep_i64 i = threadIdx.y;
      for (; i + 3 * step < a.r; i += 4 * step) {
        acc0 = hipep_combine(acc0, hipep_reduce_pre(tr::widen(p[i * a.inner]), OP), OP);
        acc1 = hipep_combine(acc1, hipep_reduce_pre(tr::widen(p[(i + step) * a.inner]), OP), OP);
        acc2 = hipep_combine(acc2, hipep_reduce_pre(tr::widen(p[(i + 2 * step) * a.inner]), OP), OP);
        acc3 = hipep_combine(acc3, hipep_reduce_pre(tr::widen(p[(i + 3 * step) * a.inner]), OP), OP);
      }
      for (; i < a.r; i += step) acc0 = hipep_combine(acc0, hipep_reduce_pre(tr::widen(p[i * a.inner]), OP), OP);
    }
    A acc = hipep_combine(hipep_combine(acc0, acc1, OP), hipep_combine(acc2, acc3, OP), OP);
    part[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && col < a.inner) {
      for (int k = 1; k < (int)blockDim.y; ++k) acc = hipep_combine(acc, part[k][threadIdx.x], OP);
      y[outer * a.inner + col] = tr::narrow(hipep_reduce_post(acc, OP, a.r));
    }
    __syncthreads();
  }
}

template <bool MAXIMUM, typename T>
HIPEP_DEVICE void hipep_reduce_cols_iextreme(const T* HIPEP_RESTRICT x, T* HIPEP_RESTRICT y, const hipep_reduce_args a) {
  const hipep_i64 step = (hipep_i64)gridDim.x * blockDim.x;
  for (hipep_i64 o = (hipep_i64)blockIdx.x * blockDim.x + threadIdx.x; o < a.rows; o += step) {
    const hipep_i64 outer = o / a.inner, k = o - outer * a.inner;
    const T* p = x + outer * a.r * a.inner + k;
    T acc = hipep_int_identity<MAXIMUM, T>();
    for (hipep_i64 i = 0; i < a.r; ++i) acc = hipep_iextreme<MAXIMUM>(acc, p[i * a.inner]);
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

#define HIPEP_REDUCE_MORE(NAME, T, VEC)                 \
  HIPEP_REDUCE_FLOAT(min_##NAME, T, HIPEP_MIN, VEC)     \
  HIPEP_REDUCE_FLOAT(prod_##NAME, T, HIPEP_PROD, VEC)   \
  HIPEP_REDUCE_FLOAT(sumsq_##NAME, T, HIPEP_SUMSQ, VEC) \
  HIPEP_REDUCE_FLOAT(l1_##NAME, T, HIPEP_L1, VEC)       \
  HIPEP_REDUCE_FLOAT(l2_##NAME, T, HIPEP_L2, VEC)       \
  HIPEP_REDUCE_FLOAT(logsum_##NAME, T, HIPEP_LOGSUM, VEC)

HIPEP_REDUCE_MORE(f32, float, 4)
HIPEP_REDUCE_MORE(f16, hipep_half, 8)
HIPEP_REDUCE_MORE(bf16, hipep_bf16, 8)

// f64: every float reduction in double, two elements (16 bytes) per vector load.
HIPEP_REDUCE_FLOAT(sum_f64, double, HIPEP_SUM, 2)
HIPEP_REDUCE_FLOAT(mean_f64, double, HIPEP_MEAN, 2)
HIPEP_REDUCE_FLOAT(max_f64, double, HIPEP_MAX, 2)
HIPEP_REDUCE_MORE(f64, double, 2)

// ReduceLogSumExp over f64 rows (the runtime moves the reduced axes last): two passes in double,
// the reference's form of ONNX Runtime's double kernel: m, the row's maximum (NaN propagating),
// is taken as 0 where it is not finite, then y = log(sum of exp(x - m)) + m. So a row holding NaN
// gives NaN, an empty or all -inf row log(0) + 0 = -inf, a row holding +inf gives +inf (softmax.hip's
// online pass, which shifts by the running maximum, would give inf - inf = NaN where +inf repeats).
HIPEP_KERNEL void hipep_reduce_logsumexp_f64_rows(const double* HIPEP_RESTRICT x, double* HIPEP_RESTRICT y,
                                                  const hipep_reduce_args a) {
  __shared__ double scratch[HIPEP_MAX_WARPS];
  const hipep_i64 row = (hipep_i64)blockIdx.x * blockDim.y + threadIdx.y;
  if (row >= a.rows) return;  // only when blockDim.x is one warp: no block barrier below
  const double* p = x + row * a.r;
  double m = -HIPEP_INF_D;
  for (hipep_i64 i = threadIdx.x; i < a.r; i += blockDim.x) m = hipep_dmax_nan(m, p[i]);
  m = hipep_block_dmax(m, scratch);
  if (!(m == m && m != HIPEP_INF_D && m != -HIPEP_INF_D)) m = 0.0;
  double s = 0.0;
  for (hipep_i64 i = threadIdx.x; i < a.r; i += blockDim.x) s += exp(p[i] - m);
  s = hipep_block_sum(s, scratch);
  if (threadIdx.x == 0) y[row] = log(s) + m;
}

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

#define HIPEP_REDUCE_IEXTREME(NAME, T, MAXIMUM)                                                      \
  HIPEP_KERNEL void hipep_reduce_##NAME##_rows(const T* HIPEP_RESTRICT x, T* HIPEP_RESTRICT y,       \
                                               const hipep_reduce_args a) {                           \
    hipep_reduce_rows_iextreme<MAXIMUM, T>(x, y, a);                                                  \
  }                                                                                                   \
  HIPEP_KERNEL void hipep_reduce_##NAME##_cols(const T* HIPEP_RESTRICT x, T* HIPEP_RESTRICT y,       \
                                               const hipep_reduce_args a) {                           \
    hipep_reduce_cols_iextreme<MAXIMUM, T>(x, y, a);                                                  \
  }

HIPEP_REDUCE_IEXTREME(max_i32, int, true)
HIPEP_REDUCE_IEXTREME(max_i64, hipep_i64, true)
HIPEP_REDUCE_IEXTREME(min_i32, int, false)
HIPEP_REDUCE_IEXTREME(min_i64, hipep_i64, false)

#define HIPEP_REDUCE_BOOL(NAME, ANY)                                                                  \
  HIPEP_KERNEL void hipep_reduce_##NAME##_rows(const unsigned char* HIPEP_RESTRICT x,                \
                                               unsigned char* HIPEP_RESTRICT y, const hipep_reduce_args a) { \
    hipep_reduce_rows_bool<ANY>(x, y, a);                                                             \
  }                                                                                                   \
  HIPEP_KERNEL void hipep_reduce_##NAME##_cols(const unsigned char* HIPEP_RESTRICT x,                \
                                               unsigned char* HIPEP_RESTRICT y, const hipep_reduce_args a) { \
    hipep_reduce_cols_bool<ANY>(x, y, a);                                                             \
  }

HIPEP_REDUCE_BOOL(max_bool, true)
HIPEP_REDUCE_BOOL(min_bool, false)
