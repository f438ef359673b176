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
  hipep_i64 p;                           // LpPool's exponent
  int storage_order;                     // MaxPool's Indices: 0 row-major, 1 column-major
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
