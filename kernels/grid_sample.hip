// AffineGrid (opset 20) is at the end of this file.
// GridSample (opsets 16, 20, 22): one thread per output element (n, c, output position), a
// grid-stride loop. X is [N, C, *in] with 2 or 3 spatial axes, the grid [N, *out, r], Y [N, C, *out].
//
// Every operation repeats ONNX Runtime's CPU kernel (the CPU reference, hipep.ops.grid_sample,
// does the same with numpy) through a round-to-nearest intrinsic, so nothing is fused into an FMA
// and the coordinates, tap indices, weights and sums round exactly where the reference's do:
//   * coordinates: GsDenormalize in f32; grid component 0 is x (X's last axis), 1 is y, 2 is z;
//   * nearest: rintf (round half to even, ORT's std::nearbyint) of the coordinate;
//     linear: taps floor(c), floor(c) + 1; cubic: floor(c) - 1 .. floor(c) + 2 with Keys
//     coefficients (a = -0.75) of (c - base) - 1;
//   * padding acts on each tap's integer index: zeros reads 0 outside the axis, border clamps,
//     reflection reflects the index as a float (GsReflect) and truncates it;
//   * sums nest innermost axis first, each left to right, the first term standing alone (so a
//     -0 product stays -0, as in ORT's a * b + c * d). 2-D linear with zeros padding and
//     align_corners=0 follows ORT's precomputed-plan path instead (`weights_first`): the four
//     weights are products dy * dx taken first, summed as w11 * p11 + w12 * p12 + w21 * p21 +
//     w22 * p22, and a point with no tap inside is +0.
// f16 storage (X, grid or both) is read as f32 and the result rounded once, as ORT computes f16
// (it casts to f32 around its float kernel). Float indices are clamped to +-INDEX_BOUND before
// conversion (ORT's static_cast is undefined beyond int64 and for NaN; the reference clamps
// alike), and a one-pixel axis reflects to its pixel (ORT divides by zero there).
#include "hipep_device.h"

#define HIPEP_GRID_SAMPLE_MAX_SPATIAL 3
// mode
#define HIPEP_GRID_SAMPLE_NEAREST 0
#define HIPEP_GRID_SAMPLE_LINEAR 1
#define HIPEP_GRID_SAMPLE_CUBIC 2
// padding_mode
#define HIPEP_GRID_SAMPLE_ZEROS 0
#define HIPEP_GRID_SAMPLE_BORDER 1
#define HIPEP_GRID_SAMPLE_REFLECTION 2

#define HIPEP_GRID_SAMPLE_INDEX_BOUND 9.0e18f  // hipep.ops.grid_sample.INDEX_BOUND

struct hipep_grid_sample_args {
  hipep_i64 n;         // output elements
  hipep_i64 channels;  // C
  hipep_i64 points;    // output positions per (n, c): the product of the grid's spatial extents
  hipep_i64 in_dims[HIPEP_GRID_SAMPLE_MAX_SPATIAL];  // X's spatial extents, outer to inner (D, H, W)
  hipep_i64 in_plane;  // X's elements per (n, c)
  int spatial;         // 2 or 3
  int mode;            // HIPEP_GRID_SAMPLE_NEAREST ...
  int padding;         // HIPEP_GRID_SAMPLE_ZEROS ...
  int align_corners;
  int weights_first;   // ORT's 2-D linear zeros-padding path (see above)
};

// static_cast<int64_t>(f), total: NaN and far values clamped first (fmaxf takes -bound for NaN).
HIPEP_DEVICE hipep_i64 hipep_grid_sample_index(float f) {
  return (hipep_i64)fminf(fmaxf(f, -HIPEP_GRID_SAMPLE_INDEX_BOUND), HIPEP_GRID_SAMPLE_INDEX_BOUND);
}

// ORT's GsDenormalize: the normalized coordinate g in pixels of an axis of `len` pixels.
HIPEP_DEVICE float hipep_grid_sample_denormalize(float g, hipep_i64 len, int align_corners) {
  if (align_corners) return __fmul_rn(__fdiv_rn(__fadd_rn(g, 1.0f), 2.0f), (float)(len - 1));
  return __fdiv_rn(__fsub_rn(__fmul_rn(__fadd_rn(g, 1.0f), (float)len), 1.0f), 2.0f);
}

// ORT's GsReflect of tap index c (as a float) between its borders, truncated back to an index;
// the clamp to the axis only matters where ORT's arithmetic is undefined.
HIPEP_DEVICE hipep_i64 hipep_grid_sample_reflect(hipep_i64 c, hipep_i64 len, int align_corners) {
  const float lo = align_corners ? 0.0f : -0.5f;
  const float hi = __fsub_rn((float)len, align_corners ? 1.0f : 0.5f);
  const float span = __fsub_rn(hi, lo);
  if (span == 0.0f) return 0;  // one pixel with align_corners=1
  float f = (float)c;
  if (f < lo) {
    const float dx = __fsub_rn(lo, f);
    const hipep_i64 turns = (hipep_i64)__fdiv_rn(dx, span);
    const float rest = __fsub_rn(dx, __fmul_rn((float)turns, span));
    f = turns % 2 == 0 ? __fadd_rn(lo, rest) : __fsub_rn(hi, rest);
  } else if (f > hi) {
    const float dx = __fsub_rn(f, hi);
    const hipep_i64 turns = (hipep_i64)__fdiv_rn(dx, span);
    const float rest = __fsub_rn(dx, __fmul_rn((float)turns, span));
    f = turns % 2 == 0 ? __fsub_rn(hi, rest) : __fadd_rn(lo, rest);
  }
  const hipep_i64 i = (hipep_i64)f;  // truncation, as ORT's static_cast
  return i < 0 ? 0 : (i > len - 1 ? len - 1 : i);
}

// ORT's GsGetCubicCoeffs of the fraction t, in its evaluation order (5a = -3.75, 8a = -6, 4a = -3,
// a + 2 = 1.25 and a + 3 = 2.25 are exact).
HIPEP_DEVICE void hipep_grid_sample_cubic_coeffs(float t, float* w) {
  const float a = -0.75f;
  const float s = fabsf(t);
  const float s1 = __fadd_rn(s, 1.0f), u = __fsub_rn(1.0f, s), s2 = __fsub_rn(2.0f, s);
  w[0] = __fsub_rn(__fmul_rn(__fadd_rn(__fmul_rn(__fsub_rn(__fmul_rn(a, s1), -3.75f), s1), -6.0f), s1), -3.0f);
  w[1] = __fadd_rn(__fmul_rn(__fmul_rn(__fsub_rn(__fmul_rn(1.25f, s), 2.25f), s), s), 1.0f);
  w[2] = __fadd_rn(__fmul_rn(__fmul_rn(__fsub_rn(__fmul_rn(1.25f, u), 2.25f), u), u), 1.0f);
  w[3] = __fsub_rn(__fmul_rn(__fadd_rn(__fmul_rn(__fsub_rn(__fmul_rn(a, s2), -3.75f), s2), -6.0f), s2), -3.0f);
}

// One output point's taps along every axis: `at[k][j]` the element index of tap j of axis k
// (after padding), `inside[k][j]` whether the tap lies on the axis (zeros padding reads 0 else),
// `w[k][j]` its weight; `taps` per axis (1, 2 or 4).
struct hipep_grid_sample_taps {
  hipep_i64 at[HIPEP_GRID_SAMPLE_MAX_SPATIAL][4];
  bool inside[HIPEP_GRID_SAMPLE_MAX_SPATIAL][4];
  float w[HIPEP_GRID_SAMPLE_MAX_SPATIAL][4];
  int taps;
};

template <typename G>
HIPEP_DEVICE void hipep_grid_sample_plan(const G* HIPEP_RESTRICT g, const hipep_grid_sample_args& a,
                                         hipep_grid_sample_taps& t) {
  t.taps = a.mode == HIPEP_GRID_SAMPLE_NEAREST ? 1 : (a.mode == HIPEP_GRID_SAMPLE_LINEAR ? 2 : 4);
  for (int k = 0; k < a.spatial; ++k) {
    const hipep_i64 len = a.in_dims[k];
    const float c = hipep_grid_sample_denormalize(hipep_to_float(g[a.spatial - 1 - k]), len, a.align_corners);
    hipep_i64 first;
    if (a.mode == HIPEP_GRID_SAMPLE_NEAREST) {
      first = hipep_grid_sample_index(rintf(c));
      t.w[k][0] = 1.0f;
    } else if (a.mode == HIPEP_GRID_SAMPLE_LINEAR) {
      first = hipep_grid_sample_index(floorf(c));
      t.w[k][0] = __fsub_rn((float)(first + 1), c);  // the lower tap's weight: its distance to the upper
      t.w[k][1] = __fsub_rn(c, (float)first);
    } else {
      first = hipep_grid_sample_index(floorf(c)) - 1;
      hipep_grid_sample_cubic_coeffs(__fsub_rn(__fsub_rn(c, (float)first), 1.0f), t.w[k]);
    }
    for (int j = 0; j < t.taps; ++j) {
      hipep_i64 i = first + j;
      t.inside[k][j] = i >= 0 && i < len;
      if (a.padding == HIPEP_GRID_SAMPLE_REFLECTION) {
        i = hipep_grid_sample_reflect(i, len, a.align_corners);
      } else {  // border clamps; zeros clamps too, only to keep the (unused) address in the axis
        i = i < 0 ? 0 : (i > len - 1 ? len - 1 : i);
      }
      t.at[k][j] = i;
    }
  }
}

// The pixel at taps (jd, jh, jw) of the depth, height and width axes (jd unused for 2-D).
template <typename T>
HIPEP_DEVICE float hipep_grid_sample_pixel(const T* HIPEP_RESTRICT image, const hipep_grid_sample_args& a,
                                           const hipep_grid_sample_taps& t, int jd, int jh, int jw) {
  const int kh = a.spatial - 2, kw = a.spatial - 1;
  bool inside = t.inside[kh][jh] && t.inside[kw][jw];
  hipep_i64 off = t.at[kh][jh] * a.in_dims[kw] + t.at[kw][jw];
  if (a.spatial == 3) {
    inside = inside && t.inside[0][jd];
    off += t.at[0][jd] * a.in_dims[1] * a.in_dims[2];
  }
  if (a.padding == HIPEP_GRID_SAMPLE_ZEROS && !inside) return 0.0f;
  return hipep_to_float(image[off]);
}

template <typename T, typename G>
HIPEP_DEVICE void hipep_grid_sample(const T* HIPEP_RESTRICT x, const G* HIPEP_RESTRICT grid, T* HIPEP_RESTRICT y,
                                    const hipep_grid_sample_args& a) {
  const hipep_i64 step = (hipep_i64)gridDim.x * blockDim.x;
  const int kh = a.spatial - 2, kw = a.spatial - 1;
  for (hipep_i64 i = (hipep_i64)blockIdx.x * blockDim.x + threadIdx.x; i < a.n; i += step) {
    const hipep_i64 p = i % a.points, nc = i / a.points, batch = nc / a.channels;
    const T* image = x + nc * a.in_plane;
    hipep_grid_sample_taps t;
    hipep_grid_sample_plan(grid + (batch * a.points + p) * a.spatial, a, t);
    float total = 0.0f;
    if (a.mode == HIPEP_GRID_SAMPLE_NEAREST) {
      total = hipep_grid_sample_pixel(image, a, t, 0, 0, 0);
    } else if (a.weights_first) {
      bool any = false;
      for (int jh = 0; jh < 2; ++jh) {
        for (int jw = 0; jw < 2; ++jw) {
          const float weight = __fmul_rn(t.w[kh][jh], t.w[kw][jw]);  // ORT's w11 = dy2 * dx2, ...
          const float term = __fmul_rn(weight, hipep_grid_sample_pixel(image, a, t, 0, jh, jw));
          total = jh == 0 && jw == 0 ? term : __fadd_rn(total, term);
          any = any || (t.inside[kh][jh] && t.inside[kw][jw]);
        }
      }
      if (!any) total = 0.0f;
    } else {
      // Rows (width taps) into planes (height taps) into the depth sum; 2-D has one plane.
      const int depth_taps = a.spatial == 3 ? t.taps : 1;
      for (int jd = 0; jd < depth_taps; ++jd) {
        float plane = 0.0f;
        for (int jh = 0; jh < t.taps; ++jh) {
          float row = 0.0f;
          for (int jw = 0; jw < t.taps; ++jw) {
            const float term = __fmul_rn(t.w[kw][jw], hipep_grid_sample_pixel(image, a, t, jd, jh, jw));
            row = jw == 0 ? term : __fadd_rn(row, term);
          }
          const float term = __fmul_rn(t.w[kh][jh], row);
          plane = jh == 0 ? term : __fadd_rn(plane, term);
        }
        if (a.spatial == 2) {
          total = plane;
        } else {
          const float term = __fmul_rn(t.w[0][jd], plane);
          total = jd == 0 ? term : __fadd_rn(total, term);
        }
      }
    }
    y[i] = hipep_from_float<T>(total);
  }
}

#define HIPEP_GRID_SAMPLE_ENTRY(XNAME, T, GNAME, G)                                                         \
  HIPEP_KERNEL void hipep_grid_sample_##XNAME##_##GNAME(const T* HIPEP_RESTRICT x, const G* HIPEP_RESTRICT grid, \
                                                        T* HIPEP_RESTRICT y, const hipep_grid_sample_args a) {    \
    hipep_grid_sample<T, G>(x, grid, y, a);                                                                \
  }

HIPEP_GRID_SAMPLE_ENTRY(f32, float, f32, float)
HIPEP_GRID_SAMPLE_ENTRY(f32, float, f16, hipep_half)
HIPEP_GRID_SAMPLE_ENTRY(f16, hipep_half, f32, float)
HIPEP_GRID_SAMPLE_ENTRY(f16, hipep_half, f16, hipep_half)

// ---- AffineGrid (opset 20) -----------------------------------------------------------------------
// A thread per grid point (n, d, h, w): its base coordinates x (along W), y (H) and z (D, 3-D only)
// and theta[n]'s rows applied to them, each operation rounded in T as ONNX Runtime's CPU kernel
// (hipep.ops.grid_sample, the CPU reference) rounds it: the base is -1 + i * (2 / (L - 1)), its
// last point 1 and a one-point axis 1, times (L - 1) / L without align_corners; a component is
// (r0 * x + r1 * y) + t in 2-D, and in 3-D (r0 * x + (r1 * y + r2 * z)) + t for f32 but
// ((r0 * x + r1 * y) + r2 * z) + t for f64. The grid is [N, (D,) H, W, r], theta [N, r, r + 1].
struct hipep_affine_grid_args {
  hipep_i64 points;   // N * D * H * W
  hipep_i64 dims[3];  // the spatial extents, outer to inner (D, H, W; 2-D: 1, H, W)
  int spatial;        // r: 2 or 3
  int align_corners;
};

HIPEP_DEVICE float hipep_affine_add(float a, float b) { return __fadd_rn(a, b); }
HIPEP_DEVICE float hipep_affine_mul(float a, float b) { return __fmul_rn(a, b); }
HIPEP_DEVICE float hipep_affine_div(float a, float b) { return __fdiv_rn(a, b); }
HIPEP_DEVICE double hipep_affine_add(double a, double b) { return __dadd_rn(a, b); }
HIPEP_DEVICE double hipep_affine_mul(double a, double b) { return __dmul_rn(a, b); }
HIPEP_DEVICE double hipep_affine_div(double a, double b) { return __ddiv_rn(a, b); }

template <typename T>
HIPEP_DEVICE T hipep_affine_base(hipep_i64 i, hipep_i64 length, int align_corners) {
  T v = (T)1;
  if (length != 1 && i != length - 1)
    v = hipep_affine_add((T)-1, hipep_affine_mul((T)i, hipep_affine_div((T)2, (T)(length - 1))));
  if (!align_corners) v = hipep_affine_div(hipep_affine_mul(v, (T)(length - 1)), (T)length);
  return v;
}

template <typename T>
HIPEP_DEVICE void hipep_affine_grid(const T* HIPEP_RESTRICT theta, T* HIPEP_RESTRICT grid,
                                    const hipep_affine_grid_args& a) {
  const hipep_i64 stride = (hipep_i64)gridDim.x * blockDim.x;
  const hipep_i64 per_n = a.dims[0] * a.dims[1] * a.dims[2];
  const int r = a.spatial;
  for (hipep_i64 e = (hipep_i64)blockIdx.x * blockDim.x + threadIdx.x; e < a.points; e += stride) {
    const hipep_i64 n = e / per_n, p = e % per_n;
    const T x = hipep_affine_base<T>(p % a.dims[2], a.dims[2], a.align_corners);
    const T y = hipep_affine_base<T>((p / a.dims[2]) % a.dims[1], a.dims[1], a.align_corners);
    const T z = r == 3 ? hipep_affine_base<T>(p / (a.dims[2] * a.dims[1]), a.dims[0], a.align_corners) : (T)0;
    const T* rows = theta + n * r * (r + 1);
    for (int c = 0; c < r; ++c) {
      const T* row = rows + c * (r + 1);
      const T px = hipep_affine_mul(row[0], x), py = hipep_affine_mul(row[1], y);
      T sum;
      if (r == 2) {
        sum = hipep_affine_add(px, py);
      } else {
        const T pz = hipep_affine_mul(row[2], z);
        sum = sizeof(T) == 4 ? hipep_affine_add(px, hipep_affine_add(py, pz))
                             : hipep_affine_add(hipep_affine_add(px, py), pz);
      }
      grid[e * r + c] = hipep_affine_add(sum, row[r]);
    }
  }
}

HIPEP_KERNEL void hipep_affine_grid_f32(const float* HIPEP_RESTRICT theta, float* HIPEP_RESTRICT grid,
                                        const hipep_affine_grid_args a) {
  hipep_affine_grid<float>(theta, grid, a);
}
HIPEP_KERNEL void hipep_affine_grid_f64(const double* HIPEP_RESTRICT theta, double* HIPEP_RESTRICT grid,
                                        const hipep_affine_grid_args a) {
  hipep_affine_grid<double>(theta, grid, a);
}
