// CumSum and CumProd along one axis: the runtime views the input as [outer, n, inner] and runs one
// thread per (outer, inner) line, combining the line's n elements in order (forward, or backward for
// `reverse`), writing each running sum or product (after the element, or before it for `exclusive`,
// the first being 0 or 1). The order is ONNX Runtime's CPU EP's (and numpy's accumulate), so f32
// results are bit-identical to it; f16 combines in f32 and rounds each output once; integers wrap in
// their own type. Lines are independent, so the loads of a line are issued ahead of the operations
// that need them.
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
  static HIPEP_DEVICE float mul(float a, float v) { return a * v; }
  static HIPEP_DEVICE float widen(float v) { return v; }
  static HIPEP_DEVICE float narrow(float v) { return v; }
};
template <> struct hipep_scan_traits<hipep_half> {
  typedef float acc;
  static HIPEP_DEVICE float add(float a, float v) { return a + v; }
  static HIPEP_DEVICE float mul(float a, float v) { return a * v; }
  static HIPEP_DEVICE float widen(hipep_half v) { return __half2float(v); }
  static HIPEP_DEVICE hipep_half narrow(float v) { return __float2half_rn(v); }
};
template <> struct hipep_scan_traits<int> {
  typedef int acc;
  static HIPEP_DEVICE int add(int a, int v) { return (int)((unsigned)a + (unsigned)v); }  // wraps
  static HIPEP_DEVICE int mul(int a, int v) { return (int)((unsigned)a * (unsigned)v); }  // wraps
  static HIPEP_DEVICE int widen(int v) { return v; }
  static HIPEP_DEVICE int narrow(int v) { return v; }
};
template <> struct hipep_scan_traits<hipep_i64> {
  typedef hipep_i64 acc;
  static HIPEP_DEVICE hipep_i64 add(hipep_i64 a, hipep_i64 v) {
    return (hipep_i64)((unsigned long long)a + (unsigned long long)v);  // wraps
  }
  static HIPEP_DEVICE hipep_i64 mul(hipep_i64 a, hipep_i64 v) {
    return (hipep_i64)((unsigned long long)a * (unsigned long long)v);  // wraps
  }
  static HIPEP_DEVICE hipep_i64 widen(hipep_i64 v) { return v; }
  static HIPEP_DEVICE hipep_i64 narrow(hipep_i64 v) { return v; }
};

template <typename T, bool PRODUCT>
HIPEP_DEVICE void hipep_scan(const T* HIPEP_RESTRICT x, T* HIPEP_RESTRICT y, const hipep_scan_args a) {
  typedef hipep_scan_traits<T> tr;
  typedef typename tr::acc A;
  const hipep_i64 step = (hipep_i64)gridDim.x * blockDim.x;
  for (hipep_i64 line = (hipep_i64)blockIdx.x * blockDim.x + threadIdx.x; line < a.lines; line += step) {
    const hipep_i64 outer = line / a.inner, k = line - outer * a.inner;
    const hipep_i64 base = outer * a.n * a.inner + k;
    A acc = A(PRODUCT ? 1 : 0);
    for (hipep_i64 i = 0; i < a.n; ++i) {
      const hipep_i64 at = base + (a.reverse ? a.n - 1 - i : i) * a.inner;
      const A v = tr::widen(x[at]);
      if (a.exclusive) {
        y[at] = tr::narrow(acc);
        acc = PRODUCT ? tr::mul(acc, v) : tr::add(acc, v);
      } else {
        acc = PRODUCT ? tr::mul(acc, v) : tr::add(acc, v);
        y[at] = tr::narrow(acc);
      }
    }
  }
}

#define HIPEP_SCAN(OP, NAME, T, PRODUCT)                                                              \
  HIPEP_KERNEL void hipep_##OP##_##NAME(const T* HIPEP_RESTRICT x, T* HIPEP_RESTRICT y, const hipep_scan_args a) { \
    hipep_grid_release();                                                                             \
    hipep_scan<T, PRODUCT>(x, y, a);                                                                  \
  }

HIPEP_SCAN(cumsum, f32, float, false)
HIPEP_SCAN(cumsum, f16, hipep_half, false)
HIPEP_SCAN(cumsum, i32, int, false)
HIPEP_SCAN(cumsum, i64, hipep_i64, false)
HIPEP_SCAN(cumprod, f32, float, true)
HIPEP_SCAN(cumprod, f16, hipep_half, true)
HIPEP_SCAN(cumprod, i32, int, true)
HIPEP_SCAN(cumprod, i64, hipep_i64, true)
