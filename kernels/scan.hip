// CumSum and CumProd along one axis: the runtime views the input as [outer, n, inner] and runs one
// thread per (outer, inner) line, combining the line's n elements in order (forward, or backward for
// `reverse`), writing each running sum or product (after the element, or before it for `exclusive`,
// the first being 0 or 1). The order is ONNX Runtime's CPU EP's (and numpy's accumulate), so f32
// and f64 results are bit-identical to it; f16 combines in f32 and rounds each output once; integers wrap in
// their own type. Lines are independent, so the loads of a line are issued ahead of the operations
// that need them.
//
// An axis known only at run time (a graph input) is read from device memory by every thread, which
// views the input as [outer, n, inner] itself from the shape passed by value: one launch serves
// every axis, bound once, with no copy to the host. An axis outside [-rank, rank - 1] is reported to
// the stream's fault record (ONNX Runtime rejects it) and nothing is written.
#include "hipep_device.h"

#define HIPEP_SCAN_MAX_RANK 8

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
template <> struct hipep_scan_traits<double> {
  typedef double acc;
  static HIPEP_DEVICE double add(double a, double v) { return a + v; }
  static HIPEP_DEVICE double mul(double a, double v) { return a * v; }
  static HIPEP_DEVICE double widen(double v) { return v; }
  static HIPEP_DEVICE double narrow(double v) { return v; }
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

struct hipep_scan_axis_args {
  hipep_i64 dims[HIPEP_SCAN_MAX_RANK];  // the input's extents
  hipep_i64 size;                       // its elements (> 0)
  int rank;
  int wide_axis;  // the axis tensor holds an int64 (else an int32)
  int exclusive;
  int reverse;
};

template <typename T, bool PRODUCT>
HIPEP_DEVICE void hipep_scan_device_axis(const T* HIPEP_RESTRICT x, T* HIPEP_RESTRICT y, const void* HIPEP_RESTRICT axis_at,
                                         const hipep_scan_axis_args a, const hipep_fault_site fault) {
  const hipep_i64 axis = a.wide_axis ? *(const hipep_i64*)axis_at : (hipep_i64)*(const int*)axis_at;
  if (axis < -a.rank || axis >= a.rank) {
    if (blockIdx.x == 0 && threadIdx.x == 0) hipep_report_fault(fault, HIPEP_FAULT_AXIS, axis, a.rank);
    return;
  }
  const int d = (int)(axis < 0 ? axis + a.rank : axis);
  hipep_i64 inner = 1;
  for (int k = d + 1; k < a.rank; ++k) inner *= a.dims[k];
  const hipep_scan_args lines = {a.size / a.dims[d], a.dims[d], inner, a.exclusive, a.reverse};
  hipep_scan<T, PRODUCT>(x, y, lines);
}

#define HIPEP_SCAN(OP, NAME, T, PRODUCT)                                                              \
  HIPEP_KERNEL void hipep_##OP##_##NAME(const T* HIPEP_RESTRICT x, T* HIPEP_RESTRICT y, const hipep_scan_args a) { \
    hipep_grid_release();                                                                             \
    hipep_scan<T, PRODUCT>(x, y, a);                                                                  \
  }                                                                                                   \
  HIPEP_KERNEL void hipep_##OP##_device_axis_##NAME(const T* HIPEP_RESTRICT x, T* HIPEP_RESTRICT y,    \
                                                    const void* HIPEP_RESTRICT axis,                    \
                                                    const hipep_scan_axis_args a, const hipep_fault_site fault) { \
    hipep_grid_release();                                                                             \
    hipep_scan_device_axis<T, PRODUCT>(x, y, axis, a, fault);                                         \
  }

HIPEP_SCAN(cumsum, f32, float, false)
HIPEP_SCAN(cumsum, f64, double, false)
HIPEP_SCAN(cumsum, f16, hipep_half, false)
HIPEP_SCAN(cumsum, i32, int, false)
HIPEP_SCAN(cumsum, i64, hipep_i64, false)
HIPEP_SCAN(cumprod, f32, float, true)
HIPEP_SCAN(cumprod, f64, double, true)
HIPEP_SCAN(cumprod, f16, hipep_half, true)
HIPEP_SCAN(cumprod, i32, int, true)
HIPEP_SCAN(cumprod, i64, hipep_i64, true)
