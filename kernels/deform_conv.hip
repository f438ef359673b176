// DeformConv's columns: the bilinear samples [N, C, kH * kW, oH * oW] (im2col with learned
// fractional offsets, v2's mask applied) that the runtime then multiplies by W per group with the
// GEMM, as Conv's windows (hipep/runtime/gpu_deform_conv.py). One thread per column element, a
// grid-stride loop.
//
// Tap k = i * kW + j of output position p = y * oW + x, channel c of offset group
// g = c / (C / offset_group) in image n, samples X[n, c] at
//   h = (y * stride_h + (i * dilation_h - pad_h)) + offset[n, g * 2 * taps + 2 * k, y, x]
// and w likewise (channel 2 * k + 1), each operation rounded as ONNX Runtime's CPU kernel rounds it
// (the round-to-nearest intrinsics: nothing fused into an FMA; the CPU reference,
// hipep.ops.deform_conv, computes the same with numpy): zero where h <= -1, h >= H, w <= -1 or
// w >= W (NaN too), else ((t00 + t01) + t10) + t11 with t00 = ((1 - lh) * (1 - lw)) * X[h0, w0],
// t01 = ((1 - lh) * lw) * X[h0, w0 + 1], t10 = (lh * (1 - lw)) * X[h0 + 1, w0], t11 = (lh * lw) *
// X[h0 + 1, w0 + 1] (h0 = floor(h), lh = h - h0), a corner outside X contributing zero; then times
// mask[n, g * taps + k, y, x] where there is a mask. f16 computes in f32, f64 in f64.
#include "hipep_device.h"

struct hipep_deform_conv_args {
  hipep_i64 total;                      // the columns' elements: N * C * taps * positions
  hipep_i64 channels;                   // C
  hipep_i64 height, width;              // X's H, W
  hipep_i64 kernel_w, taps;             // kW, kH * kW
  hipep_i64 out_w, positions;           // oW, oH * oW
  hipep_i64 stride_h, stride_w, dilation_h, dilation_w, pad_h, pad_w;
  hipep_i64 group_channels;             // C / offset_group
  hipep_i64 offset_groups;
  int has_mask;
};

HIPEP_DEVICE float hipep_dc_add(float a, float b) { return __fadd_rn(a, b); }
HIPEP_DEVICE double hipep_dc_add(double a, double b) { return __dadd_rn(a, b); }
HIPEP_DEVICE float hipep_dc_sub(float a, float b) { return __fsub_rn(a, b); }
HIPEP_DEVICE double hipep_dc_sub(double a, double b) { return __dsub_rn(a, b); }
HIPEP_DEVICE float hipep_dc_mul(float a, float b) { return __fmul_rn(a, b); }
HIPEP_DEVICE double hipep_dc_mul(double a, double b) { return __dmul_rn(a, b); }
HIPEP_DEVICE float hipep_dc_floor(float a) { return floorf(a); }
HIPEP_DEVICE double hipep_dc_floor(double a) { return floor(a); }
HIPEP_DEVICE float hipep_dc_load(float v) { return v; }
HIPEP_DEVICE float hipep_dc_load(hipep_half v) { return hipep_to_float(v); }
HIPEP_DEVICE double hipep_dc_load(double v) { return v; }
template <typename T> HIPEP_DEVICE T hipep_dc_store(float v) { return hipep_from_float<T>(v); }
template <typename T> HIPEP_DEVICE T hipep_dc_store(double v) { return v; }

// T: the element type; A: the arithmetic's (f32 for f32 and f16, f64 for f64).
template <typename T, typename A>
HIPEP_DEVICE void hipep_deform_conv_columns(const T* HIPEP_RESTRICT x, const T* HIPEP_RESTRICT offset,
                                            const T* HIPEP_RESTRICT mask, T* HIPEP_RESTRICT cols,
                                            const hipep_deform_conv_args a) {
  const hipep_i64 step = (hipep_i64)gridDim.x * blockDim.x;
  const A zero = (A)0, one = (A)1;
  for (hipep_i64 idx = (hipep_i64)blockIdx.x * blockDim.x + threadIdx.x; idx < a.total; idx += step) {
    const hipep_i64 p = idx % a.positions;
    hipep_i64 rest = idx / a.positions;
    const hipep_i64 k = rest % a.taps;
    rest /= a.taps;
    const hipep_i64 c = rest % a.channels, n = rest / a.channels;
    const hipep_i64 row = (n * a.offset_groups + c / a.group_channels) * a.taps + k;  // the mask's row
    const A off_h = hipep_dc_load(offset[2 * row * a.positions + p]);
    const A off_w = hipep_dc_load(offset[(2 * row + 1) * a.positions + p]);
    const hipep_i64 i = k / a.kernel_w, j = k % a.kernel_w, y = p / a.out_w, xo = p % a.out_w;
    const A h = hipep_dc_add(hipep_dc_add((A)(y * a.stride_h), (A)(i * a.dilation_h - a.pad_h)), off_h);
    const A w = hipep_dc_add(hipep_dc_add((A)(xo * a.stride_w), (A)(j * a.dilation_w - a.pad_w)), off_w);
    A value = zero;
    if (h > -one && h < (A)a.height && w > -one && w < (A)a.width) {
      const A hf = hipep_dc_floor(h), wf = hipep_dc_floor(w);
      const hipep_i64 h0 = (hipep_i64)hf, w0 = (hipep_i64)wf, h1 = h0 + 1, w1 = w0 + 1;
      const A lh = hipep_dc_sub(h, hf), lw = hipep_dc_sub(w, wf);
      const A hh = hipep_dc_sub(one, lh), hw = hipep_dc_sub(one, lw);
      const T* plane = x + (n * a.channels + c) * a.height * a.width;
      const A t00 = (h0 >= 0 && w0 >= 0) ? hipep_dc_mul(hipep_dc_mul(hh, hw), hipep_dc_load(plane[h0 * a.width + w0]))
                                         : zero;
      const A t01 = (h0 >= 0 && w1 < a.width)
                        ? hipep_dc_mul(hipep_dc_mul(hh, lw), hipep_dc_load(plane[h0 * a.width + w1])) : zero;
      const A t10 = (h1 < a.height && w0 >= 0)
                        ? hipep_dc_mul(hipep_dc_mul(lh, hw), hipep_dc_load(plane[h1 * a.width + w0])) : zero;
      const A t11 = (h1 < a.height && w1 < a.width)
                        ? hipep_dc_mul(hipep_dc_mul(lh, lw), hipep_dc_load(plane[h1 * a.width + w1])) : zero;
      value = hipep_dc_add(hipep_dc_add(hipep_dc_add(t00, t01), t10), t11);
    }
    if (a.has_mask) value = hipep_dc_mul(value, hipep_dc_load(mask[row * a.positions + p]));
    cols[idx] = hipep_dc_store<T>(value);
  }
}

#define HIPEP_DEFORM_CONV_COLUMNS(NAME, T, A)                                                                  \
  HIPEP_KERNEL void hipep_deform_conv_columns_##NAME(const T* x, const T* offset, const T* mask, T* cols,     \
                                                     const hipep_deform_conv_args a) {                         \
    hipep_deform_conv_columns<T, A>(x, offset, mask, cols, a);                                                 \
  }

HIPEP_DEFORM_CONV_COLUMNS(f32, float, float)
HIPEP_DEFORM_CONV_COLUMNS(f16, hipep_half, float)
HIPEP_DEFORM_CONV_COLUMNS(f64, double, double)
