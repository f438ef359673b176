// Pools read straight from X: one output element a thread (a grid-stride loop), its window's taps
// visited in ONNX Runtime's CPU order (the first spatial axis outermost), taps that fall in the
// padding or past the input skipped. Up to 3 spatial axes; fewer are given as trailing axes of
// extent 1, which change neither the order nor a flat index.
//   * max_pool: Y and, where asked, Indices, as ONNX Runtime's CPU MaxPool computes them for
//     Indices and for integer types: the window's first input tap is taken, and a later tap
//     replaces it only where it is strictly greater, so the first of equal maxima wins and a NaN
//     is the result only where it comes first. Indices are flat positions in X: the plane (image
//     and channel) times the spatial size, plus the position in the plane, row-major
//     (storage_order 0) or column-major (1). A window with no tap inside X gives the lowest value
//     and its first tap's position, as hipep's CPU reference does.
//   * average_pool: the window's inputs summed in f32, divided by the f32 count, rounded once to
//     T, in the order of the ONNX Runtime CPU kernel the node's opset runs (see hipep_pool_order).
//     The count is the window's inputs (count_include_pad=0), or its taps inside X and its
//     explicit padding (count_include_pad=1), so a ceil_mode window running past the padding
//     counts only the taps before the padding's end, as ONNX Runtime's CPU EP divides.
//   * lp_pool: (sum |x|^p)^(1/p) as ONNX Runtime's CPU LpPool: each |x|^p a double power rounded
//     to f32 (std::pow(float, int64_t) promotes to double), added in f32 in tap order; the root a
//     power of the f32 sum by the f32 exponent 1.0f / p, taken in double and rounded once (powf's
//     result within its error).
// f16 is read and written as f16, compared and summed in f32 (ONNX Runtime casts f16 to f32 for
// these ops on its CPU EP).
#include "hipep_device.h"

#define HIPEP_POOL_AXES 3

struct hipep_pool_args {
  hipep_i64 outputs;                     // N * C * out[0] * out[1] * out[2]
  hipep_i64 lengths[HIPEP_POOL_AXES];    // X's spatial extents
  hipep_i64 out[HIPEP_POOL_AXES];        // Y's spatial extents
  hipep_i64 kernel[HIPEP_POOL_AXES];
  hipep_i64 strides[HIPEP_POOL_AXES];
  hipep_i64 dilations[HIPEP_POOL_AXES];
  hipep_i64 pads[HIPEP_POOL_AXES];       // padding before each axis
  hipep_i64 pads_end[HIPEP_POOL_AXES];   // padding after each axis (AveragePool's count_include_pad)
  hipep_i64 p;                           // LpPool's exponent
  int storage_order;                     // MaxPool's Indices: 0 row-major, 1 column-major
  int count_include_pad;                 // AveragePool: 1 counts the explicit padding's taps too
  int order;                             // AveragePool's summation order: a hipep_pool_order
};

// The order AveragePool adds a window's inputs in: ONNX Runtime's CPU EP runs its own loops from
// opset 19 on (and for count_include_pad with ceil_mode at any opset), MLAS's pooling before
// (gpu_pool.py's _average_pool_order picks the kernel MLAS would).
enum hipep_pool_order {
  HIPEP_POOL_WINDOW = 0,        // the taps in window order, from 0 (ORT's loops, MLAS's generic kernels)
  HIPEP_POOL_MLAS_ROWS_2D = 1,  // MLAS's 2-D vector kernel: each column over the rows, then the columns
  HIPEP_POOL_MLAS_ROWS_3D = 2,  // MLAS's 3-D vector kernel: each column over planes and rows, then the columns
  HIPEP_POOL_MLAS_GLOBAL = 3,   // MLAS's global kernel: the plane in 4 lanes, the lanes summed, then the rest
};

// An output element's plane and the position of its window's first tap on each axis.
struct hipep_pool_window {
  hipep_i64 plane;
  hipep_i64 start[HIPEP_POOL_AXES];
};

HIPEP_DEVICE hipep_pool_window hipep_pool_locate(hipep_i64 i, const hipep_pool_args& a) {
  hipep_pool_window w;
  for (int d = HIPEP_POOL_AXES - 1; d >= 0; --d) {
    const hipep_i64 o = i % a.out[d];
    i /= a.out[d];
    w.start[d] = o * a.strides[d] - a.pads[d];
  }
  w.plane = i;
  return w;
}

HIPEP_DEVICE bool hipep_pool_inside(hipep_i64 c, hipep_i64 length) { return c >= 0 && c < length; }

// Calls visit(position in the plane, h, w, d) for each of the window's taps inside X, in order.
template <typename Visit>
HIPEP_DEVICE void hipep_pool_taps(const hipep_pool_window& win, const hipep_pool_args& a, Visit visit) {
  for (hipep_i64 k0 = 0; k0 < a.kernel[0]; ++k0) {
    const hipep_i64 h = win.start[0] + k0 * a.dilations[0];
    if (!hipep_pool_inside(h, a.lengths[0])) continue;
    for (hipep_i64 k1 = 0; k1 < a.kernel[1]; ++k1) {
      const hipep_i64 w = win.start[1] + k1 * a.dilations[1];
      if (!hipep_pool_inside(w, a.lengths[1])) continue;
      for (hipep_i64 k2 = 0; k2 < a.kernel[2]; ++k2) {
        const hipep_i64 d = win.start[2] + k2 * a.dilations[2];
        if (!hipep_pool_inside(d, a.lengths[2])) continue;
        visit((h * a.lengths[1] + w) * a.lengths[2] + d, h, w, d);
      }
    }
  }
}

// ---- MaxPool -----------------------------------------------------------------------------------

HIPEP_DEVICE float hipep_pool_key(float v) { return v; }
HIPEP_DEVICE float hipep_pool_key(hipep_half v) { return hipep_to_float(v); }
HIPEP_DEVICE int hipep_pool_key(signed char v) { return v; }
HIPEP_DEVICE int hipep_pool_key(unsigned char v) { return v; }

template <typename T> HIPEP_DEVICE T hipep_pool_lowest();
template <> HIPEP_DEVICE float hipep_pool_lowest<float>() { return -HIPEP_INF_F; }
template <> HIPEP_DEVICE hipep_half hipep_pool_lowest<hipep_half>() {
  return hipep_from_float<hipep_half>(-HIPEP_INF_F);
}
template <> HIPEP_DEVICE signed char hipep_pool_lowest<signed char>() { return -128; }
template <> HIPEP_DEVICE unsigned char hipep_pool_lowest<unsigned char>() { return 0; }

template <typename T>
HIPEP_DEVICE void hipep_max_pool(const T* HIPEP_RESTRICT x, T* HIPEP_RESTRICT y, hipep_i64* HIPEP_RESTRICT indices,
                                 const hipep_pool_args a) {
  const hipep_i64 plane_size = a.lengths[0] * a.lengths[1] * a.lengths[2];
  const hipep_i64 step = (hipep_i64)gridDim.x * blockDim.x;
  for (hipep_i64 i = (hipep_i64)blockIdx.x * blockDim.x + threadIdx.x; i < a.outputs; i += step) {
    const hipep_pool_window win = hipep_pool_locate(i, a);
    const T* plane = x + win.plane * plane_size;
    T best = hipep_pool_lowest<T>();
    hipep_i64 at[HIPEP_POOL_AXES] = {win.start[0], win.start[1], win.start[2]};
    bool found = false;
    hipep_pool_taps(win, a, [&](hipep_i64 offset, hipep_i64 h, hipep_i64 w, hipep_i64 d) {
      const T v = plane[offset];
      if (!found || hipep_pool_key(v) > hipep_pool_key(best)) {
        best = v;
        at[0] = h;
        at[1] = w;
        at[2] = d;
        found = true;
      }
    });
    if (y != nullptr) y[i] = best;
    if (indices != nullptr) {
      const hipep_i64 spatial = a.storage_order ? at[0] + (at[1] + at[2] * a.lengths[1]) * a.lengths[0]
                                                : (at[0] * a.lengths[1] + at[1]) * a.lengths[2] + at[2];
      indices[i] = win.plane * plane_size + spatial;
    }
  }
}

#define HIPEP_MAX_POOL(NAME, T)                                                                       \
  HIPEP_KERNEL void hipep_max_pool_##NAME(const T* HIPEP_RESTRICT x, T* HIPEP_RESTRICT y,            \
                                          hipep_i64* HIPEP_RESTRICT indices, const hipep_pool_args a) { \
    hipep_max_pool<T>(x, y, indices, a);                                                              \
  }

HIPEP_MAX_POOL(f32, float)
HIPEP_MAX_POOL(f16, hipep_half)
HIPEP_MAX_POOL(i8, signed char)
HIPEP_MAX_POOL(u8, unsigned char)

// ---- AveragePool -------------------------------------------------------------------------------

// The clipped range [lo, hi) of X's positions a window starting at `start` covers on axis d
// (dilation 1: MLAS's kernels, which the MLAS orders follow, have none).
HIPEP_DEVICE void hipep_pool_inputs(hipep_i64 start, int d, const hipep_pool_args& a, hipep_i64& lo, hipep_i64& hi) {
  lo = start > 0 ? start : 0;
  hi = start + a.kernel[d] < a.lengths[d] ? start + a.kernel[d] : a.lengths[d];
  if (hi < lo) hi = lo;
}

// MLAS's vector kernels: the window's column at position `c` of the last axis summed over the
// other axes' clipped ranges (the rows), the 2-D kernel starting from the first row's value, the
// 3-D one from 0; a column in the padding is 0.
template <typename T>
HIPEP_DEVICE float hipep_pool_mlas_column(const T* plane, const hipep_pool_window& win, hipep_i64 c,
                                          const hipep_pool_args& a, bool three_d) {
  if (!hipep_pool_inside(c, a.lengths[three_d ? 2 : 1])) return 0.0f;
  hipep_i64 lo0, hi0, lo1 = 0, hi1 = 1;  // the rows: axis 0, and for 3-D axis 1
  hipep_pool_inputs(win.start[0], 0, a, lo0, hi0);
  if (three_d) hipep_pool_inputs(win.start[1], 1, a, lo1, hi1);
  float column = 0.0f;
  bool first = !three_d;
  for (hipep_i64 p0 = lo0; p0 < hi0; ++p0) {
    for (hipep_i64 p1 = lo1; p1 < hi1; ++p1) {
      const hipep_i64 at = three_d ? (p0 * a.lengths[1] + p1) * a.lengths[2] + c
                                   : (p0 * a.lengths[1] + c) * a.lengths[2];
      const float v = hipep_to_float(plane[at]);
      column = first ? v : column + v;
      first = false;
    }
  }
  return column;
}

template <typename T>
HIPEP_DEVICE float hipep_average_pool_sum(const T* plane, const hipep_pool_window& win, const hipep_pool_args& a,
                                          hipep_i64& inputs) {
  float sum = 0.0f;
  inputs = 0;
  if (a.order == HIPEP_POOL_MLAS_ROWS_2D || a.order == HIPEP_POOL_MLAS_ROWS_3D) {
    const bool three_d = a.order == HIPEP_POOL_MLAS_ROWS_3D;
    const int width = three_d ? 2 : 1;
    hipep_i64 rows = 1, lo, hi;
    for (int d = 0; d < width; ++d) {
      hipep_pool_inputs(win.start[d], d, a, lo, hi);
      rows *= hi - lo;
    }
    hipep_pool_inputs(win.start[width], width, a, lo, hi);
    inputs = rows * (hi - lo);
    for (hipep_i64 k = 0; k < a.kernel[width]; ++k) {
      const float column = hipep_pool_mlas_column(plane, win, win.start[width] + k, a, three_d);
      sum = k == 0 ? column : sum + column;
    }
    return sum;
  }
  if (a.order == HIPEP_POOL_MLAS_GLOBAL) {  // the window is the whole plane
    const hipep_i64 size = a.lengths[0] * a.lengths[1] * a.lengths[2];
    float lane[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    hipep_i64 i = 0;
    for (; i + 4 <= size; i += 4)
      for (int l = 0; l < 4; ++l) lane[l] += hipep_to_float(plane[i + l]);
    sum = (lane[0] + lane[2]) + (lane[1] + lane[3]);  // MlasReduceAddFloat32x4 on x86 (SSE)
    for (; i < size; ++i) sum += hipep_to_float(plane[i]);
    inputs = size;
    return sum;
  }
  hipep_pool_taps(win, a, [&](hipep_i64 offset, hipep_i64, hipep_i64, hipep_i64) {
    sum += hipep_to_float(plane[offset]);
    ++inputs;
  });
  return sum;
}

// A window's taps on axis d before the end of the explicit padding (the window never starts before
// the padding; ceil_mode's last window may run past its end).
HIPEP_DEVICE hipep_i64 hipep_pool_padded_taps(hipep_i64 start, int d, const hipep_pool_args& a) {
  const hipep_i64 span = a.lengths[d] + a.pads_end[d] - start;
  if (span <= 0) return 0;
  const hipep_i64 taps = (span + a.dilations[d] - 1) / a.dilations[d];
  return taps < a.kernel[d] ? taps : a.kernel[d];
}

template <typename T>
HIPEP_DEVICE void hipep_average_pool(const T* HIPEP_RESTRICT x, T* HIPEP_RESTRICT y, const hipep_pool_args a) {
  const hipep_i64 plane_size = a.lengths[0] * a.lengths[1] * a.lengths[2];
  const hipep_i64 step = (hipep_i64)gridDim.x * blockDim.x;
  for (hipep_i64 i = (hipep_i64)blockIdx.x * blockDim.x + threadIdx.x; i < a.outputs; i += step) {
    const hipep_pool_window win = hipep_pool_locate(i, a);
    hipep_i64 count;
    const float sum = hipep_average_pool_sum(x + win.plane * plane_size, win, a, count);
    if (a.count_include_pad) {
      count = 1;
      for (int d = 0; d < HIPEP_POOL_AXES; ++d) count *= hipep_pool_padded_taps(win.start[d], d, a);
    }
    // a window with no input (pads of the kernel's length or more, which ORT refuses) gives 0 / 0
    y[i] = hipep_from_float<T>(sum / (float)count);
  }
}

#define HIPEP_AVERAGE_POOL(NAME, T)                                                                   \
  HIPEP_KERNEL void hipep_average_pool_##NAME(const T* HIPEP_RESTRICT x, T* HIPEP_RESTRICT y,        \
                                              const hipep_pool_args a) {                              \
    hipep_average_pool<T>(x, y, a);                                                                   \
  }

HIPEP_AVERAGE_POOL(f32, float)
HIPEP_AVERAGE_POOL(f16, hipep_half)

// ---- LpPool ------------------------------------------------------------------------------------

template <typename T>
HIPEP_DEVICE void hipep_lp_pool(const T* HIPEP_RESTRICT x, T* HIPEP_RESTRICT y, const hipep_pool_args a) {
  const hipep_i64 plane_size = a.lengths[0] * a.lengths[1] * a.lengths[2];
  const double p = (double)a.p;
  const double root = (double)(1.0f / (float)a.p);
  const hipep_i64 step = (hipep_i64)gridDim.x * blockDim.x;
  for (hipep_i64 i = (hipep_i64)blockIdx.x * blockDim.x + threadIdx.x; i < a.outputs; i += step) {
    const hipep_pool_window win = hipep_pool_locate(i, a);
    const T* plane = x + win.plane * plane_size;
    float sum = 0.0f;
    hipep_pool_taps(win, a, [&](hipep_i64 offset, hipep_i64, hipep_i64, hipep_i64) {
      sum += (float)pow((double)fabsf(hipep_to_float(plane[offset])), p);
    });
    y[i] = hipep_from_float<T>((float)pow((double)sum, root));
  }
}

#define HIPEP_LP_POOL(NAME, T)                                                                        \
  HIPEP_KERNEL void hipep_lp_pool_##NAME(const T* HIPEP_RESTRICT x, T* HIPEP_RESTRICT y, const hipep_pool_args a) { \
    hipep_lp_pool<T>(x, y, a);                                                                        \
  }

HIPEP_LP_POOL(f32, float)
HIPEP_LP_POOL(f16, hipep_half)
