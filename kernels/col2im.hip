// Col2Im, and ConvTranspose's second half (its first is a GEMM writing the columns): the columns
// [rows, *kernel, *grid] (rows = images x channels; one value per kernel tap and window position)
// are summed into the image [rows, *out], each window position i and tap k landing on
//   out = i * stride + k * dilation - pad_begin     (per spatial axis).
//
// A gather, not a scatter: one thread per output element visits the taps that land on it, in a
// fixed order (the taps' row-major order), and sums them in f32. No atomics, so the result is
// the same on every run and on every GPU. The bias (ConvTranspose's B, one value per channel) is
// added last, as the reference adds it to the finished sum.
//
// Spatial axes are padded to 3 at the front (extent 1, stride 1, dilation 1, no padding), so one
// kernel serves 1-D to 3-D. Per axis, the taps that can land on `out` are a contiguous range
// of k (0 <= out + pad_begin - k * dilation <= (grid - 1) * stride); within it only those with a
// whole window position count.
#include "hipep_device.h"

#define HIPEP_COL2IM_AXES 3

struct hipep_col2im_args {
  hipep_i64 n;         // output elements: rows * prod(out)
  hipep_i64 channels;  // the bias's extent: row % channels is a row's channel
  hipep_i64 out[HIPEP_COL2IM_AXES];
  hipep_i64 grid[HIPEP_COL2IM_AXES];  // window positions per axis
  hipep_i64 kernel[HIPEP_COL2IM_AXES];
  hipep_i64 stride[HIPEP_COL2IM_AXES];
  hipep_i64 dilation[HIPEP_COL2IM_AXES];
  hipep_i64 pad[HIPEP_COL2IM_AXES];  // pad_begin
};

// The taps of one axis that can land on output coordinate o: [first, last] (empty if first > last).
HIPEP_DEVICE void hipep_col2im_tap_range(const hipep_col2im_args& a, int d, hipep_i64 o, hipep_i64* first,
                                         hipep_i64* last) {
  const hipep_i64 t = o + a.pad[d];  // the coordinate in the full (uncropped) output
  const hipep_i64 dil = a.dilation[d];
  const hipep_i64 beyond = t - (a.grid[d] - 1) * a.stride[d];  // taps below this reach past the last window
  *first = beyond <= 0 ? 0 : (beyond + dil - 1) / dil;
  const hipep_i64 reach = t / dil;
  *last = reach < a.kernel[d] - 1 ? reach : a.kernel[d] - 1;
}

template <typename T>
HIPEP_DEVICE void hipep_col2im(const T* HIPEP_RESTRICT cols, const T* HIPEP_RESTRICT bias, T* HIPEP_RESTRICT y,
                               const hipep_col2im_args a) {
  const hipep_i64 taps = a.kernel[0] * a.kernel[1] * a.kernel[2];
  const hipep_i64 positions = a.grid[0] * a.grid[1] * a.grid[2];
  const hipep_i64 step = (hipep_i64)gridDim.x * blockDim.x;
  for (hipep_i64 e = (hipep_i64)blockIdx.x * blockDim.x + threadIdx.x; e < a.n; e += step) {
    hipep_i64 rem = e, o[HIPEP_COL2IM_AXES];
    for (int d = HIPEP_COL2IM_AXES - 1; d >= 0; --d) {
      o[d] = rem % a.out[d];
      rem /= a.out[d];
    }
    const hipep_i64 row = rem;
    const T* HIPEP_RESTRICT base = cols + row * taps * positions;
    hipep_i64 lo[HIPEP_COL2IM_AXES], hi[HIPEP_COL2IM_AXES];
    for (int d = 0; d < HIPEP_COL2IM_AXES; ++d) hipep_col2im_tap_range(a, d, o[d], &lo[d], &hi[d]);
    float acc = 0.0f;
    for (hipep_i64 k0 = lo[0]; k0 <= hi[0]; ++k0) {
      const hipep_i64 t0 = o[0] + a.pad[0] - k0 * a.dilation[0];
      if (t0 % a.stride[0]) continue;
      const hipep_i64 tap0 = k0 * a.kernel[1], at0 = (t0 / a.stride[0]) * a.grid[1];
      for (hipep_i64 k1 = lo[1]; k1 <= hi[1]; ++k1) {
        const hipep_i64 t1 = o[1] + a.pad[1] - k1 * a.dilation[1];
        if (t1 % a.stride[1]) continue;
        const hipep_i64 tap1 = (tap0 + k1) * a.kernel[2], at1 = (at0 + t1 / a.stride[1]) * a.grid[2];
        for (hipep_i64 k2 = lo[2]; k2 <= hi[2]; ++k2) {
          const hipep_i64 t2 = o[2] + a.pad[2] - k2 * a.dilation[2];
          if (t2 % a.stride[2]) continue;
          acc += hipep_to_float(base[(tap1 + k2) * positions + at1 + t2 / a.stride[2]]);
        }
      }
    }
    if (bias != nullptr) acc += hipep_to_float(bias[row % a.channels]);
    y[e] = hipep_from_float<T>(acc);
  }
}

HIPEP_KERNEL void hipep_col2im_f32(const float* HIPEP_RESTRICT cols, const float* HIPEP_RESTRICT bias,
                                   float* HIPEP_RESTRICT y, const hipep_col2im_args a) {
  hipep_col2im<float>(cols, bias, y, a);
}

HIPEP_KERNEL void hipep_col2im_f16(const hipep_half* HIPEP_RESTRICT cols, const hipep_half* HIPEP_RESTRICT bias,
                                   hipep_half* HIPEP_RESTRICT y, const hipep_col2im_args a) {
  hipep_col2im<hipep_half>(cols, bias, y, a);
}
