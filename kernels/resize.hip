// Resize and Upsample: one thread per output element (a grid-stride loop).
//
// Each resized axis maps the output coordinate to a source coordinate with ONNX Runtime's f32
// expressions (the CPU reference, hipep.ops.resize, computes the same operations with numpy):
// every operation goes through a round-to-nearest intrinsic, so no multiply and add are fused and
// the coordinates, the nearest indices and the interpolation weights are bit-identical to the
// reference's. Axes the runtime marks as not resized read the output coordinate itself.
//   * nearest: one source element, moved as a word of the element's size (any element type);
//   * linear / cubic (f32, f16; math in f32): 2 or 4 taps per resized axis. The reference
//     interpolates one axis at a time, innermost first, each pass rounding to f32; the kernel
//     evaluates the same nested sums: the taps are visited as the digits of a counter whose
//     lowest digit is the innermost resized axis, and a per-axis accumulator takes
//     w_0 * v_0, then + w_1 * v_1, ..., and hands its total to the next axis out when its digit
//     wraps. So the result rounds exactly where the axis-by-axis passes do.
//   * tf_crop_and_resize: an output element whose source coordinate on a resized axis lies
//     outside [0, extent - 1] is the extrapolation value (nearest: its bits in the element type;
//     linear, cubic: its f32 value, rounded to the element type as the reference rounds it).
#include "hipep_device.h"

#define HIPEP_RESIZE_MAX_RANK 8

// coordinate_transformation_mode
#define HIPEP_RESIZE_HALF_PIXEL 0
#define HIPEP_RESIZE_HALF_PIXEL_SYMMETRIC 1
#define HIPEP_RESIZE_PYTORCH_HALF_PIXEL 2
#define HIPEP_RESIZE_ALIGN_CORNERS 3
#define HIPEP_RESIZE_ASYMMETRIC 4
#define HIPEP_RESIZE_TF_HALF_PIXEL_FOR_NN 5
#define HIPEP_RESIZE_TF_CROP_AND_RESIZE 6
// nearest_mode (LEGACY: Resize-10 and Upsample, ceil when downsampling, else truncation)
#define HIPEP_RESIZE_ROUND_PREFER_FLOOR 0
#define HIPEP_RESIZE_ROUND_PREFER_CEIL 1
#define HIPEP_RESIZE_FLOOR 2
#define HIPEP_RESIZE_CEIL 3
#define HIPEP_RESIZE_LEGACY 4

struct hipep_resize_args {
  hipep_i64 n;  // output elements
  hipep_i64 in_dims[HIPEP_RESIZE_MAX_RANK];
  hipep_i64 out_dims[HIPEP_RESIZE_MAX_RANK];
  hipep_i64 in_strides[HIPEP_RESIZE_MAX_RANK];  // source elements per step
  float scale[HIPEP_RESIZE_MAX_RANK];
  float roi_start[HIPEP_RESIZE_MAX_RANK];
  float roi_end[HIPEP_RESIZE_MAX_RANK];
  int resized[HIPEP_RESIZE_MAX_RANK];  // 0: the axis reads the output coordinate itself
  hipep_u64 fill;                      // nearest: the extrapolation value's bits in the element type
  float fill_value;                    // linear, cubic: the extrapolation value in f32
  float cubic_a;
  int rank;
  int coord;       // HIPEP_RESIZE_HALF_PIXEL ...
  int nearest;     // HIPEP_RESIZE_ROUND_PREFER_FLOOR ...
  int taps;        // 2: linear, 4: cubic (the interpolating kernels)
  int extrapolate;  // tf_crop_and_resize: outside coordinates give `fill`
  int exclude_outside;
};

// ORT's get_original_coordinate for output index x of an axis, in f32.
HIPEP_DEVICE float hipep_resize_coordinate(int mode, hipep_i64 x_index, hipep_i64 out_len, hipep_i64 in_len,
                                           float scale, float roi_start, float roi_end) {
  const float x = (float)x_index, lr = (float)out_len, lo = (float)in_len;
  switch (mode) {
    case HIPEP_RESIZE_HALF_PIXEL:
      return __fsub_rn(__fdiv_rn(__fadd_rn(x, 0.5f), scale), 0.5f);
    case HIPEP_RESIZE_HALF_PIXEL_SYMMETRIC: {
      // ORT adds the f32 offset in double precision.
      const float adjustment = __fdiv_rn(lr, __fmul_rn(scale, lo));
      const float offset = __fmul_rn(__fdiv_rn(lo, 2.0f), __fsub_rn(1.0f, adjustment));
      const double orig = __dsub_rn(__dadd_rn((double)offset, __ddiv_rn(__dadd_rn((double)x, 0.5), (double)scale)), 0.5);
      return (float)orig;
    }
    case HIPEP_RESIZE_PYTORCH_HALF_PIXEL:
      return out_len > 1 ? __fsub_rn(__fdiv_rn(__fadd_rn(x, 0.5f), scale), 0.5f) : 0.0f;
    case HIPEP_RESIZE_ALIGN_CORNERS:
      return out_len == 1 ? 0.0f : __fdiv_rn(__fmul_rn(x, __fsub_rn(lo, 1.0f)), __fsub_rn(lr, 1.0f));
    case HIPEP_RESIZE_TF_HALF_PIXEL_FOR_NN:
      return __fdiv_rn(__fadd_rn(x, 0.5f), scale);
    case HIPEP_RESIZE_TF_CROP_AND_RESIZE:
      if (out_len > 1) {
        const float lo1 = __fsub_rn(lo, 1.0f);
        const float span = __fdiv_rn(__fmul_rn(__fmul_rn(x, __fsub_rn(roi_end, roi_start)), lo1), __fsub_rn(lr, 1.0f));
        return __fadd_rn(__fmul_rn(roi_start, lo1), span);
      }
      return (float)__dmul_rn(__dmul_rn(0.5, __dadd_rn((double)roi_start, (double)roi_end)), __dsub_rn((double)lo, 1.0));
    default:  // asymmetric (and the legacy forms)
      return __fdiv_rn(x, scale);
  }
}

// numpy's sign(c) * floor(|c| + 0.5) in f32.
HIPEP_DEVICE float hipep_resize_round_away(float c) {
  const float r = floorf(__fadd_rn(fabsf(c), 0.5f));
  return c > 0.0f ? r : (c < 0.0f ? -r : 0.0f);
}

// The nearest source index along an axis, clamped to [0, in_len - 1].
HIPEP_DEVICE hipep_i64 hipep_resize_nearest_index(int mode, float c, float scale, hipep_i64 in_len) {
  float r;
  switch (mode) {
    case HIPEP_RESIZE_ROUND_PREFER_FLOOR:
      // A tie is c == trunc(c) + 0.5 (so only non-negative halves round down, as in ORT).
      r = ((double)c == __dadd_rn((double)truncf(c), 0.5)) ? floorf(c) : hipep_resize_round_away(c);
      break;
    case HIPEP_RESIZE_ROUND_PREFER_CEIL: r = hipep_resize_round_away(c); break;
    case HIPEP_RESIZE_FLOOR: r = floorf(c); break;
    case HIPEP_RESIZE_CEIL: r = ceilf(c); break;
    default: r = scale < 1.0f ? ceilf(c) : truncf(c); break;
  }
  // Clamped as a float first: converting an out-of-range float to an integer is undefined (NaN -> 0).
  r = fminf(fmaxf(r, 0.0f), (float)(in_len - 1));
  return (hipep_i64)r;
}

HIPEP_DEVICE bool hipep_resize_outside(float c, hipep_i64 in_len) {
  return c < 0.0f || c > (float)(in_len - 1);
}

template <typename W>
HIPEP_DEVICE void hipep_resize_nearest(const W* HIPEP_RESTRICT x, W* HIPEP_RESTRICT y, const hipep_resize_args& a) {
  const hipep_i64 step = (hipep_i64)gridDim.x * blockDim.x;
  const W fill = (W)a.fill;
  for (hipep_i64 i = (hipep_i64)blockIdx.x * blockDim.x + threadIdx.x; i < a.n; i += step) {
    hipep_i64 rem = i, off = 0;
    bool outside = false;
    for (int d = a.rank - 1; d >= 0; --d) {
      const hipep_i64 o = rem % a.out_dims[d];
      rem /= a.out_dims[d];
      hipep_i64 s = o;
      if (a.resized[d]) {
        const float c = hipep_resize_coordinate(a.coord, o, a.out_dims[d], a.in_dims[d], a.scale[d], a.roi_start[d],
                                                a.roi_end[d]);
        if (a.extrapolate && hipep_resize_outside(c, a.in_dims[d])) outside = true;
        s = hipep_resize_nearest_index(a.nearest, c, a.scale[d], a.in_dims[d]);
      }
      off += s * a.in_strides[d];
    }
    y[i] = outside ? fill : x[off];
  }
}

// ORT's cubic coefficients for the fraction s (GetCubicCoeffs), in f32.
HIPEP_DEVICE void hipep_resize_cubic_coeffs(float s, float ca, float* w) {
  s = fabsf(s);
  const float a5 = __fmul_rn(5.0f, ca), a8 = __fmul_rn(8.0f, ca), a4 = __fmul_rn(4.0f, ca);
  const float ap2 = __fadd_rn(ca, 2.0f), ap3 = __fadd_rn(ca, 3.0f);
  const float s1 = __fadd_rn(s, 1.0f), t = __fsub_rn(1.0f, s), t2 = __fsub_rn(2.0f, s);
  w[0] = __fsub_rn(__fmul_rn(__fadd_rn(__fmul_rn(__fsub_rn(__fmul_rn(ca, s1), a5), s1), a8), s1), a4);
  w[1] = __fadd_rn(__fmul_rn(__fmul_rn(__fsub_rn(__fmul_rn(ap2, s), ap3), s), s), 1.0f);
  w[2] = __fadd_rn(__fmul_rn(__fmul_rn(__fsub_rn(__fmul_rn(ap2, t), ap3), t), t), 1.0f);
  w[3] = __fsub_rn(__fmul_rn(__fadd_rn(__fmul_rn(__fsub_rn(__fmul_rn(ca, t2), a5), t2), a8), t2), a4);
}

// The taps (source offsets along the axis, already times its stride) and weights of coordinate c.
HIPEP_DEVICE void hipep_resize_taps(const hipep_resize_args& a, int d, float c, hipep_i64* tap, float* w) {
  const hipep_i64 in_len = a.in_dims[d];
  if (a.taps == 2) {
    const float cc = fminf(fmaxf(c, 0.0f), (float)(in_len - 1));
    hipep_i64 i1 = (hipep_i64)cc;
    if (i1 > in_len - 1) i1 = in_len - 1;
    const hipep_i64 i2 = i1 + 1 < in_len - 1 ? i1 + 1 : in_len - 1;
    float d1 = fabsf(__fsub_rn(cc, (float)i1)), d2 = fabsf(__fsub_rn(cc, (float)i2));
    if (i1 == i2) d1 = d2 = 0.5f;
    tap[0] = i1 * a.in_strides[d];
    tap[1] = i2 * a.in_strides[d];
    w[0] = d2;  // the weight of the lower tap is the distance to the upper one
    w[1] = d1;
    return;
  }
  const float base_f = floorf(c);
  const hipep_i64 base = (hipep_i64)base_f;
  hipep_resize_cubic_coeffs(__fsub_rn(c, base_f), a.cubic_a, w);
  if (a.exclude_outside) {
    for (int j = 0; j < 4; ++j)
      if (base - 1 + j < 0 || base - 1 + j >= in_len) w[j] = 0.0f;
    // numpy's sum of four f32 values: left to right.
    float total = __fadd_rn(__fadd_rn(__fadd_rn(w[0], w[1]), w[2]), w[3]);
    if (total == 0.0f) total = 1.0f;
    for (int j = 0; j < 4; ++j) w[j] = __fdiv_rn(w[j], total);
  }
  for (int j = 0; j < 4; ++j) {
    hipep_i64 k = base - 1 + j;
    k = k < 0 ? 0 : (k > in_len - 1 ? in_len - 1 : k);
    tap[j] = k * a.in_strides[d];
  }
}

template <typename T>
HIPEP_DEVICE void hipep_resize_interp(const T* HIPEP_RESTRICT x, T* HIPEP_RESTRICT y, const hipep_resize_args& a) {
  const hipep_i64 step = (hipep_i64)gridDim.x * blockDim.x;
  const T fill = hipep_from_float<T>(a.fill_value);
  const int k = a.taps;
  for (hipep_i64 i = (hipep_i64)blockIdx.x * blockDim.x + threadIdx.x; i < a.n; i += step) {
    hipep_i64 rem = i, base = 0;
    bool outside = false;
    // Resized axes innermost first: level 0 is the innermost one.
    hipep_i64 tap[HIPEP_RESIZE_MAX_RANK][4];
    float w[HIPEP_RESIZE_MAX_RANK][4];
    int levels = 0;
    for (int d = a.rank - 1; d >= 0; --d) {
      const hipep_i64 o = rem % a.out_dims[d];
      rem /= a.out_dims[d];
      if (!a.resized[d]) {
        base += o * a.in_strides[d];
        continue;
      }
      const float c = hipep_resize_coordinate(a.coord, o, a.out_dims[d], a.in_dims[d], a.scale[d], a.roi_start[d],
                                              a.roi_end[d]);
      if (a.extrapolate && hipep_resize_outside(c, a.in_dims[d])) outside = true;
      hipep_resize_taps(a, d, c, tap[levels], w[levels]);
      ++levels;
    }
    if (outside) {
      y[i] = fill;
      continue;
    }
    if (levels == 0) {
      y[i] = x[base];
      continue;
    }
    int digit[HIPEP_RESIZE_MAX_RANK];
    float acc[HIPEP_RESIZE_MAX_RANK];
    for (int l = 0; l < levels; ++l) digit[l] = 0;
    float result = 0.0f;
    for (bool done = false; !done;) {
      hipep_i64 off = base;
      for (int l = 0; l < levels; ++l) off += tap[l][digit[l]];
      float v = hipep_to_float(x[off]);
      // Fold v into the innermost accumulator; a completed axis passes its total outward.
      for (int l = 0;; ++l) {
        const float term = __fmul_rn(w[l][digit[l]], v);
        acc[l] = digit[l] == 0 ? term : __fadd_rn(acc[l], term);
        if (digit[l] != k - 1) break;
        v = acc[l];
        if (l == levels - 1) {
          result = v;
          done = true;
          break;
        }
      }
      for (int l = 0; l < levels; ++l) {  // the next tap: increment the counter
        if (++digit[l] < k) break;
        digit[l] = 0;
      }
    }
    y[i] = hipep_from_float<T>(result);
  }
}

#define HIPEP_RESIZE_NEAREST(WNAME, W)                                                                    \
  HIPEP_KERNEL void hipep_resize_nearest_##WNAME(const W* HIPEP_RESTRICT x, W* HIPEP_RESTRICT y,          \
                                                 const hipep_resize_args a) {                             \
    hipep_resize_nearest<W>(x, y, a);                                                                     \
  }

HIPEP_RESIZE_NEAREST(w1, unsigned char)
HIPEP_RESIZE_NEAREST(w2, unsigned short)
HIPEP_RESIZE_NEAREST(w4, unsigned int)

HIPEP_KERNEL void hipep_resize_interp_f32(const float* HIPEP_RESTRICT x, float* HIPEP_RESTRICT y,
                                          const hipep_resize_args a) {
  hipep_resize_interp<float>(x, y, a);
}

HIPEP_KERNEL void hipep_resize_interp_f16(const hipep_half* HIPEP_RESTRICT x, hipep_half* HIPEP_RESTRICT y,
                                          const hipep_resize_args a) {
  hipep_resize_interp<hipep_half>(x, y, a);
}

// ---- antialias (Resize-18+, linear and cubic): one pass per resized axis -------------------------
// The runtime runs one launch per resized axis, innermost first (hipep/runtime/gpu_resize.py), over
// the tensor viewed as [outer, in_len, inner] -> [outer, out_len, inner]; the passes between hold
// f32 (f16 is computed in f32 and rounded once, as ONNX Runtime casts it around its float kernel).
// One thread per output element recomputes its window's weights with ORT's f32 operations
// (SetupUpsampleFilterAntiAlias; the CPU reference hipep.ops.resize.antialias_weights does the
// same): center = 0.5 + coordinate(i) (i where the axis' scale is 1); the window runs from
// floor(center - support + 0.5) to floor(center + support + 0.5), support = 1 (linear) or 2 (cubic)
// times 1 / scale when shrinking; weights filter((j - center + 0.5) * stretch); with exclude_outside=0
// the weights past either end fold into the end's (in ORT's order); each weight times 1 / their sum;
// the window summed left to right.

struct hipep_resize_aa_args {
  hipep_i64 n;  // output elements
  hipep_i64 in_len, out_len, inner;
  float scale, roi_start, roi_end, cubic_a;
  int coord;
  int cubic;
  int exclude_outside;
};

HIPEP_DEVICE float hipep_resize_aa_filter(float t, int cubic, float a) {
  t = fabsf(t);
  if (!cubic) return t < 1.0f ? __fsub_rn(1.0f, t) : 0.0f;
  if (t < 1.0f) {
    const float u = __fmul_rn(__fmul_rn(__fsub_rn(__fmul_rn(__fadd_rn(a, 2.0f), t), __fadd_rn(a, 3.0f)), t), t);
    return __fadd_rn(u, 1.0f);
  }
  if (t < 2.0f) return __fmul_rn(__fsub_rn(__fmul_rn(__fadd_rn(__fmul_rn(__fsub_rn(t, 5.0f), t), 8.0f), t), 4.0f), a);
  return 0.0f;
}

HIPEP_DEVICE float hipep_resize_aa_load(float v) { return v; }
HIPEP_DEVICE float hipep_resize_aa_load(hipep_half v) { return hipep_to_float(v); }

template <typename S, typename D>
HIPEP_DEVICE void hipep_resize_antialias(const S* HIPEP_RESTRICT x, D* HIPEP_RESTRICT y, const hipep_resize_aa_args a) {
  const hipep_i64 step = (hipep_i64)gridDim.x * blockDim.x;
  const float inv = __fdiv_rn(1.0f, a.scale);  // ORT's `scale`: input pixels per output pixel
  const float support = __fmul_rn(a.cubic ? 2.0f : 1.0f, inv >= 1.0f ? inv : 1.0f);
  const float stretch = inv >= 1.0f ? __fdiv_rn(1.0f, inv) : 1.0f;
  for (hipep_i64 idx = (hipep_i64)blockIdx.x * blockDim.x + threadIdx.x; idx < a.n; idx += step) {
    const hipep_i64 r = idx % a.inner, rest = idx / a.inner;
    const hipep_i64 i = rest % a.out_len, o = rest / a.out_len;
    const float center = __fadd_rn(
        0.5f, inv == 1.0f ? (float)i
                          : hipep_resize_coordinate(a.coord, i, a.out_len, a.in_len, a.scale, a.roi_start, a.roi_end));
    const hipep_i64 lo = (hipep_i64)floorf(__fadd_rn(__fsub_rn(center, support), 0.5f));
    const hipep_i64 hi = (hipep_i64)floorf(__fadd_rn(__fadd_rn(center, support), 0.5f));
    const hipep_i64 lo_cut = lo > 0 ? lo : 0, hi_cut = hi < a.in_len ? hi : a.in_len;
    const hipep_i64 first = a.exclude_outside ? lo_cut : lo, last = a.exclude_outside ? hi_cut : hi;
#define HIPEP_AA_WEIGHT(j) \
  hipep_resize_aa_filter(__fmul_rn(__fadd_rn(__fsub_rn((float)(j), center), 0.5f), stretch), a.cubic, a.cubic_a)
    float total = 0.0f;
    for (hipep_i64 j = first; j < last; ++j) total = __fadd_rn(total, HIPEP_AA_WEIGHT(j));
    const float total_inv = total == 0.0f ? 1.0f : __fdiv_rn(1.0f, total);
    const S* src = x + o * a.in_len * a.inner + r;
    float acc = 0.0f;
    for (hipep_i64 j = lo_cut; j < hi_cut; ++j) {
      float w = HIPEP_AA_WEIGHT(j);
      if (!a.exclude_outside && j == lo_cut)  // the weights before index 0 fold into index 0's
        for (hipep_i64 k = first; k < 0; ++k) w = __fadd_rn(w, HIPEP_AA_WEIGHT(k));
      if (!a.exclude_outside && j == a.in_len - 1)  // and those past the end into the last index's
        for (hipep_i64 k = a.in_len; k < last; ++k) w = __fadd_rn(w, HIPEP_AA_WEIGHT(k));
      acc = __fadd_rn(acc, __fmul_rn(hipep_resize_aa_load(src[j * a.inner]), __fmul_rn(w, total_inv)));
    }
#undef HIPEP_AA_WEIGHT
    y[idx] = hipep_from_float<D>(acc);
  }
}

#define HIPEP_RESIZE_ANTIALIAS(NAME, S, D)                                                                     \
  HIPEP_KERNEL void hipep_resize_antialias_##NAME(const S* x, D* y, const hipep_resize_aa_args a) {            \
    hipep_resize_antialias<S, D>(x, y, a);                                                                     \
  }

HIPEP_RESIZE_ANTIALIAS(f32_f32, float, float)
HIPEP_RESIZE_ANTIALIAS(f16_f32, hipep_half, float)
HIPEP_RESIZE_ANTIALIAS(f32_f16, float, hipep_half)
HIPEP_RESIZE_ANTIALIAS(f16_f16, hipep_half, hipep_half)
