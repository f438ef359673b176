// CumSum along one axis: the runtime views the input as [outer, n, inner] and runs one thread per
// (outer, inner) line, adding the line's n elements in order (forward, or backward for `reverse`),
// writing each running sum (after the element, or before it for `exclusive`). The order is ONNX
// Runtime's CPU EP's (and numpy's accumulate), so f32 sums are bit-identical to it; f16/bf16 add in
// f32 and round each output once; integers wrap in their own type. Lines are independent, so the
// loads of a line are issued ahead of the adds that need them.
#include "hipep_device.h"

struct hipep_scan_args {
  hipep_i64 lines;  // outer * inner
  hipep_i64 n;      // the scanned extent
  hipep_i64 inner;  // elements after the axis
  int exclusive;
  int reverse;
};

template <typename T> struct hipep_scan_traits;
template <> struct hipep_scan_traits<float> {
  typedef float acc;
  static HIPEP_DEVICE float add(float a, float v) { return a + v; }
  static HIPEP_DEVICE float widen(float v) { return v; }
  static HIPEP_DEVICE float narrow(float v) { return v; }
};
template <> struct hipep_scan_traits<hipep_half> {
  typedef float acc;
  static HIPEP_DEVICE float add(float a, float v) { return a + v; }
  static HIPEP_DEVICE float widen(hipep_half v) { return __half2float(v); }
  static HIPEP_DEVICE hipep_half narrow(float v) { return __float2half_rn(v); }
};
template <> struct hipep_scan_traits<int> {
  typedef int acc;
  static HIPEP_DEVICE int add(int a, int v) { return (int)((unsigned)a + (unsigned)v); }  // wraps
  static HIPEP_DEVICE int widen(int v) { return v; }
  static HIPEP_DEVICE int narrow(int v) { return v; }
};
template <> struct hipep_scan_traits<hipep_i64> {
  typedef hipep_i64 acc;
  static HIPEP_DEVICE hipep_i64 add(hipep_i64 a, hipep_i64 v) {
    return (hipep_i64)((unsigned long long)a + (unsigned long long)v);  // wraps
  }
  static HIPEP_DEVICE hipep_i64 widen(hipep_i64 v) { return v; }
  static HIPEP_DEVICE hipep_i64 narrow(hipep_i64 v) { return v; }
};

template <typename T>
HIPEP_DEVICE void hipep_cumsum(const T* HIPEP_RESTRICT x, T* HIPEP_RESTRICT y, const hipep_scan_args a) {
  typedef hipep_scan_traits<T> tr;
  typedef typename tr::acc A;
  const hipep_i64 step = (hipep_i64)gridDim.x * blockDim.x;
  for (hipep_i64 line = (hipep_i64)blockIdx.x * blockDim.x + threadIdx.x; line < a.lines; line += step) {
    const hipep_i64 outer = line / a.inner, k = line - outer * a.inner;
    const hipep_i64 base = outer * a.n * a.inner + k;
    A acc = A(0);
    for (hipep_i64 i = 0; i < a.n; ++i) {
      const hipep_i64 at = base + (a.reverse ? a.n - 1 - i : i) * a.inner;
      const A v = tr::widen(x[at]);
      if (a.exclusive) {
        y[at] = tr::narrow(acc);
        acc = tr::add(acc, v);
      } else {
        acc = tr::add(acc, v);
        y[at] = tr::narrow(acc);
      }
    }
  }
}

#define HIPEP_CUMSUM(NAME, T)                                                                         \
  HIPEP_KERNEL void hipep_cumsum_##NAME(const T* HIPEP_RESTRICT x, T* HIPEP_RESTRICT y, const hipep_scan_args a) { \
    hipep_grid_release();                                                                             \
    hipep_cumsum<T>(x, y, a);                                                                         \
  }

HIPEP_CUMSUM(f32, float)
HIPEP_CUMSUM(f16, hipep_half)
HIPEP_CUMSUM(i32, int)
HIPEP_CUMSUM(i64, hipep_i64)
