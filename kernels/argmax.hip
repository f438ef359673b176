// ArgMax / ArgMin along one axis: the runtime views the input as [outer, r, inner] and writes one
// int64 index per (outer, inner). The answer is ONNX Runtime's CPU EP's scan: the first (with
// select_last_index, the last) position holding the maximum (minimum) of the line's non-NaN values;
// a NaN at position 0 gives 0 (nothing compares past it there) and later NaNs are skipped.
//
// Candidates (value, index) combine by "larger (smaller) value wins, equal values keep the smaller
// (larger) index", which is associative and commutative, so a line may be split among threads in any
// order; NaNs never become candidates (index -1: none yet). f16 compares as f32 (exact), 8-bit
// integers as int.
//
// * rows (inner = 1, e.g. the last axis of logits): a block per line; each thread scans a strided
//   part of it, then the warps and the block combine their candidates.
// * cols (inner > 1): a thread per output, scanning its line in order (stride `inner`, so the
//   threads of a warp read consecutive elements).
#include "hipep_device.h"

struct hipep_arg_args {
  hipep_i64 outputs;  // outer * inner
  hipep_i64 r;        // the reduced extent (>= 1)
  hipep_i64 inner;    // elements after the axis
  int is_max;         // ArgMax (1) or ArgMin (0)
  int last;           // select_last_index
};

HIPEP_DEVICE float hipep_arg_value(float v) { return v; }
HIPEP_DEVICE float hipep_arg_value(hipep_half v) { return hipep_to_float(v); }
HIPEP_DEVICE int hipep_arg_value(signed char v) { return v; }
HIPEP_DEVICE int hipep_arg_value(unsigned char v) { return v; }
HIPEP_DEVICE int hipep_arg_value(int v) { return v; }
HIPEP_DEVICE hipep_i64 hipep_arg_value(hipep_i64 v) { return v; }

// Whether candidate (b, j) replaces (a, i); j < 0 is no candidate.
template <typename V>
HIPEP_DEVICE void hipep_arg_combine(V& a, hipep_i64& i, V b, hipep_i64 j, int is_max, int last) {
  if (j < 0) return;
  const bool take = i < 0 || (is_max ? b > a : b < a) || (b == a && (last ? j > i : j < i));
  if (take) {
    a = b;
    i = j;
  }
}

// The line's answer from its best candidate: 0 where position 0 holds NaN or nothing was found.
template <typename V> HIPEP_DEVICE hipep_i64 hipep_arg_answer(V first, hipep_i64 best) {
  return (first != first || best < 0) ? 0 : best;
}

template <typename T, typename V>
HIPEP_DEVICE void hipep_arg_rows(const T* HIPEP_RESTRICT x, hipep_i64* HIPEP_RESTRICT y, const hipep_arg_args a) {
  __shared__ V warp_value[1024 / 32];
  __shared__ hipep_i64 warp_index[1024 / 32];
  const int lane = threadIdx.x % HIPEP_WARP_SIZE, warp = threadIdx.x / HIPEP_WARP_SIZE;
  const int warps = (blockDim.x + HIPEP_WARP_SIZE - 1) / HIPEP_WARP_SIZE;
  for (hipep_i64 row = blockIdx.x; row < a.outputs; row += gridDim.x) {
    const T* p = x + row * a.r;
    V best = V();
    hipep_i64 at = -1;
    for (hipep_i64 k = threadIdx.x; k < a.r; k += blockDim.x) {
      const V v = hipep_arg_value(p[k]);
      if (v == v) hipep_arg_combine(best, at, v, k, a.is_max, a.last);
    }
    for (int o = HIPEP_WARP_SIZE / 2; o > 0; o >>= 1) {
      const V b = HIPEP_SHFL_XOR(best, o);
      const hipep_i64 j = HIPEP_SHFL_XOR(at, o);
      hipep_arg_combine(best, at, b, j, a.is_max, a.last);
    }
    if (lane == 0) {
      warp_value[warp] = best;
      warp_index[warp] = at;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 1; w < warps; ++w) hipep_arg_combine(best, at, warp_value[w], warp_index[w], a.is_max, a.last);
      y[row] = hipep_arg_answer(hipep_arg_value(p[0]), at);
    }
    __syncthreads();  // the scratch is rewritten for the block's next line
  }
}

template <typename T, typename V>
HIPEP_DEVICE void hipep_arg_cols(const T* HIPEP_RESTRICT x, hipep_i64* HIPEP_RESTRICT y, const hipep_arg_args a) {
  const hipep_i64 step = (hipep_i64)gridDim.x * blockDim.x;
  for (hipep_i64 o = (hipep_i64)blockIdx.x * blockDim.x + threadIdx.x; o < a.outputs; o += step) {
    const hipep_i64 outer = o / a.inner, in = o - outer * a.inner;
    const T* p = x + outer * a.r * a.inner + in;
    V best = V();
    hipep_i64 at = -1;
    for (hipep_i64 k = 0; k < a.r; ++k) {
      const V v = hipep_arg_value(p[k * a.inner]);
      if (v == v) hipep_arg_combine(best, at, v, k, a.is_max, a.last);
    }
    y[o] = hipep_arg_answer(hipep_arg_value(p[0]), at);
  }
}

#define HIPEP_ARG(NAME, T, V)                                                                         \
  HIPEP_KERNEL void hipep_arg_##NAME##_rows(const T* HIPEP_RESTRICT x, hipep_i64* HIPEP_RESTRICT y,   \
                                            const hipep_arg_args a) {                                 \
    hipep_grid_release();                                                                             \
    hipep_arg_rows<T, V>(x, y, a);                                                                    \
  }                                                                                                   \
  HIPEP_KERNEL void hipep_arg_##NAME##_cols(const T* HIPEP_RESTRICT x, hipep_i64* HIPEP_RESTRICT y,   \
                                            const hipep_arg_args a) {                                 \
    hipep_grid_release();                                                                             \
    hipep_arg_cols<T, V>(x, y, a);                                                                    \
  }

HIPEP_ARG(f32, float, float)
HIPEP_ARG(f16, hipep_half, float)
HIPEP_ARG(i8, signed char, int)
HIPEP_ARG(u8, unsigned char, int)
HIPEP_ARG(i32, int, int)
HIPEP_ARG(i64, hipep_i64, hipep_i64)
