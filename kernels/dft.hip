// ONNX DFT and STFT: a thread per output element (a complex bin, or a real sample for the inverse of a
// one-sided spectrum), summing over the transform's length in double as the CPU device's reference
// does (numpy's FFT). O(n) work a bin: for the short transforms of signal front ends and the
// conformance suite; a long transform would want an FFT. Each angle is 2 pi (j k mod n) / n, the
// product reduced in integers so that it stays exact for any bin.
//
// DFT: the runtime views the input as [outer, in_len, inner, 1 or 2] (the signal axis in the middle)
// and the output as [outer, out_len, inner, 2], or [..., 1] for the inverse of a one-sided spectrum.
// STFT: the signal is [batch, length, 1 or 2], the output [batch, frames, bins, 2]; frame f is the
// signal from f * step on, times the window (none: ones), through a forward DFT of its length.
// The window functions (HannWindow, HammingWindow, BlackmanWindow): a thread a sample of the
// cosine sum a0 - a1 cos(n step) + a2 cos(2 n step), in double, its products and sums rounded one by
// one as ONNX Runtime's CPU kernel's are (no fused multiply-add), rounded to T once.
#include "hipep_device.h"

struct hipep_dft_args {
  hipep_i64 outer, inner;  // elements before and after the signal axis (the last axis apart)
  hipep_i64 in_len;        // the input's extent along the signal axis
  hipep_i64 out_len;       // the output's
  hipep_i64 n;             // the transform's length (dft_length)
  int complex_in;          // the input's last axis holds (real, imaginary) (else: real only)
  int mode;                // 0: forward; 1: inverse (scaled by 1 / n); 2: inverse of a one-sided spectrum
};

HIPEP_DEVICE void hipep_dft_twiddle(hipep_i64 m, hipep_i64 n, double& c, double& s) {
  const double angle = 6.283185307179586476925286766559 * (double)m / (double)n;
  c = cos(angle);
  s = sin(angle);
}

// Bin k of the length-n transform of a signal's first `len` elements, each times its window weight
// (window null: 1): sum_t w_t x_t e^{sign 2 pi i t k / n}, element t at base[t * stride] and, where
// ci is 2, its imaginary part beside it. Added into (re, im).
template <typename T>
HIPEP_DEVICE void hipep_dft_bin(const T* base, hipep_i64 stride, hipep_i64 ci, const T* window, hipep_i64 len,
                                hipep_i64 k, hipep_i64 n, double sign, double& re, double& im) {
  double c, s;
  for (hipep_i64 t = 0; t < len; ++t) {
    const double w = window != nullptr ? (double)window[t] : 1.0;
    const double xr = w * (double)base[t * stride], xi = ci == 2 ? w * (double)base[t * stride + 1] : 0.0;
    hipep_dft_twiddle((t * k) % n, n, c, s);
    s *= sign;
    re += xr * c - xi * s;
    im += xr * s + xi * c;
  }
}

template <typename T>
HIPEP_DEVICE void hipep_dft(const T* HIPEP_RESTRICT x, T* HIPEP_RESTRICT y, const hipep_dft_args a) {
  const hipep_i64 total = a.outer * a.out_len * a.inner, ci = a.complex_in ? 2 : 1, stride = a.inner * ci;
  const hipep_i64 step = (hipep_i64)gridDim.x * blockDim.x;
  for (hipep_i64 i = (hipep_i64)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += step) {
    const hipep_i64 r = i % a.inner, j = i / a.inner, k = j % a.out_len, o = j / a.out_len;
    const T* base = x + (o * a.in_len * a.inner + r) * ci;  // element t of the signal: base[t * stride]
    double re = 0.0, im = 0.0, c, s;
    if (a.mode == 2) {
      // numpy's irfft: y_k = (1 / n) sum_f Re(X_f e^{+2 pi i f k / n}), X_f for f >= n / 2 + 1 the
      // conjugate of X_{n - f}, bins past the input zero.
      const hipep_i64 half = a.n / 2 + 1;
      for (hipep_i64 f = 0; f < a.n; ++f) {
        const hipep_i64 src = f < half ? f : a.n - f;
        if (src >= a.in_len) continue;
        const double xr = (double)base[src * stride];
        const double xi = ci == 2 ? (f < half ? 1.0 : -1.0) * (double)base[src * stride + 1] : 0.0;
        hipep_dft_twiddle((f * k) % a.n, a.n, c, s);
        re += xr * c - xi * s;
      }
      y[i] = (T)(re / (double)a.n);
      continue;
    }
    hipep_dft_bin<T>(base, stride, ci, nullptr, a.in_len < a.n ? a.in_len : a.n, k, a.n, a.mode == 1 ? 1.0 : -1.0,
                     re, im);
    if (a.mode == 1) {
      re /= (double)a.n;
      im /= (double)a.n;
    }
    y[2 * i] = (T)re;
    y[2 * i + 1] = (T)im;
  }
}

struct hipep_stft_args {
  hipep_i64 batch, length;  // the signal's
  hipep_i64 frames, n;      // frames, and the frame length (the DFT's)
  hipep_i64 bins;           // bins a frame keeps (n, or n / 2 + 1 one-sided)
  hipep_i64 step;           // frame_step
  int complex_in;
};

template <typename T>
HIPEP_DEVICE void hipep_stft(const T* HIPEP_RESTRICT x, const T* HIPEP_RESTRICT window, T* HIPEP_RESTRICT y,
                             const hipep_stft_args a) {
  const hipep_i64 total = a.batch * a.frames * a.bins, ci = a.complex_in ? 2 : 1;
  const hipep_i64 step = (hipep_i64)gridDim.x * blockDim.x;
  for (hipep_i64 i = (hipep_i64)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += step) {
    const hipep_i64 k = i % a.bins, j = i / a.bins, f = j % a.frames, b = j / a.frames;
    double re = 0.0, im = 0.0;
    hipep_dft_bin<T>(x + (b * a.length + f * a.step) * ci, ci, ci, window, a.n, k, a.n, -1.0, re, im);
    y[2 * i] = (T)re;
    y[2 * i + 1] = (T)im;
  }
}

HIPEP_KERNEL void hipep_dft_f32(const float* HIPEP_RESTRICT x, float* HIPEP_RESTRICT y, const hipep_dft_args a) {
  hipep_dft<float>(x, y, a);
}
HIPEP_KERNEL void hipep_dft_f64(const double* HIPEP_RESTRICT x, double* HIPEP_RESTRICT y, const hipep_dft_args a) {
  hipep_dft<double>(x, y, a);
}
HIPEP_KERNEL void hipep_stft_f32(const float* HIPEP_RESTRICT x, const float* HIPEP_RESTRICT window,
                                 float* HIPEP_RESTRICT y, const hipep_stft_args a) {
  hipep_stft<float>(x, window, y, a);
}
HIPEP_KERNEL void hipep_stft_f64(const double* HIPEP_RESTRICT x, const double* HIPEP_RESTRICT window,
                                 double* HIPEP_RESTRICT y, const hipep_stft_args a) {
  hipep_stft<double>(x, window, y, a);
}

template <typename T>
HIPEP_DEVICE void hipep_cosine_window(T* HIPEP_RESTRICT y, hipep_i64 size, double step, double a0, double a1,
                                      double a2) {
  const hipep_i64 stride = (hipep_i64)gridDim.x * blockDim.x;
  for (hipep_i64 i = (hipep_i64)blockIdx.x * blockDim.x + threadIdx.x; i < size; i += stride) {
    const double n = (double)i;
    double w = __dsub_rn(a0, __dmul_rn(a1, cos(__dmul_rn(step, n))));
    if (a2 != 0.0) w = __dadd_rn(w, __dmul_rn(a2, cos(__dmul_rn(__dmul_rn(2.0, step), n))));
    y[i] = (T)w;
  }
}

HIPEP_KERNEL void hipep_cosine_window_f32(float* HIPEP_RESTRICT y, hipep_i64 size, double step, double a0, double a1,
                                          double a2) {
  hipep_cosine_window<float>(y, size, step, a0, a1, a2);
}
HIPEP_KERNEL void hipep_cosine_window_f64(double* HIPEP_RESTRICT y, hipep_i64 size, double step, double a0,
                                          double a1, double a2) {
  hipep_cosine_window<double>(y, size, step, a0, a1, a2);
}

// MelWeightMatrix: a thread an element (j, i) of the [bins, num_mel_bins] matrix. The host places the
// triangles' num_mel_bins + 2 corners (spectrogram bins, in double as ONNX Runtime's CPU kernel does:
// hipep.ops.signal.mel_bins) and hands them in the arguments; mel bin i rises from corner i to
// corner i + 1 and falls to corner i + 2. Each weight is ORT's quotient in T: (j - left) / (center -
// left) rising, (right - j) / (right - center) falling (written after the rising edge, so it wins
// at the center), a one-bin rise (center == left) a 1 at the center; integer T divides as integers.
#define HIPEP_MEL_MAX_CORNERS 1000
struct hipep_mel_args {
  hipep_i64 bins, num;                     // the output's [bins, num] extents
  int corners[HIPEP_MEL_MAX_CORNERS];      // num + 2 of them used
};

// Float T: (T)a / (T)b, correctly rounded for float (NVRTC's default -prec-div=true, HIP's default
// correctly rounded divide) and double alike, as the CPU's division. Integer T: the quotient of the
// two non-negative widths in int, then T (0 or 1), as hipep's reference divides them.
template <typename T>
HIPEP_DEVICE T hipep_mel_quotient(int a, int b) {
  return (T)(a / b);
}
template <>
HIPEP_DEVICE float hipep_mel_quotient<float>(int a, int b) {
  return (float)a / (float)b;
}
template <>
HIPEP_DEVICE double hipep_mel_quotient<double>(int a, int b) {
  return (double)a / (double)b;
}

template <typename T>
HIPEP_DEVICE void hipep_mel_weight_matrix(T* HIPEP_RESTRICT y, const hipep_mel_args& a) {
  const hipep_i64 total = a.bins * a.num, stride = (hipep_i64)gridDim.x * blockDim.x;
  for (hipep_i64 e = (hipep_i64)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += stride) {
    const int j = (int)(e / a.num), i = (int)(e % a.num);
    const int left = a.corners[i], center = a.corners[i + 1], right = a.corners[i + 2];
    T w = (T)0;
    if (center == left) {
      if (j == center) w = (T)1;
    } else if (left <= j && j <= center) {
      w = hipep_mel_quotient<T>(j - left, center - left);
    }
    if (center <= j && j < right) w = hipep_mel_quotient<T>(right - j, right - center);
    y[e] = w;
  }
}

#define HIPEP_MEL_ENTRY(name, T)                                                                   \
  HIPEP_KERNEL void hipep_mel_weight_matrix_##name(T* HIPEP_RESTRICT y, const hipep_mel_args a) { \
    hipep_mel_weight_matrix<T>(y, a);                                                              \
  }
HIPEP_MEL_ENTRY(f32, float)
HIPEP_MEL_ENTRY(f64, double)
HIPEP_MEL_ENTRY(i8, signed char)
HIPEP_MEL_ENTRY(i16, short)
HIPEP_MEL_ENTRY(i32, int)
HIPEP_MEL_ENTRY(i64, long long)
HIPEP_MEL_ENTRY(u8, unsigned char)
HIPEP_MEL_ENTRY(u16, unsigned short)
HIPEP_MEL_ENTRY(u32, unsigned int)
HIPEP_MEL_ENTRY(u64, unsigned long long)
