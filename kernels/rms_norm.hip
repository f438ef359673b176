// RMS normalization: SimplifiedLayerNormalization / RMSNormalization, and
// com.microsoft::SkipSimplifiedLayerNormalization.
//
// f32 rows have kernels of their own, bit-identical to ONNX Runtime's CPU EP (the section at the
// end of this file). What follows is the f16/bf16 kernel, which sums in the fastest order.
//
// The runtime views X as [rows, n] (n: the product of the normalized axes). One row per block of
// blockDim.x threads, or for short rows one row per warp with blockDim.y rows per block. Pass 1
// sums squares in f32 (warp shuffles, then across warps); pass 2 reads the row again (from L1/L2)
// and writes it scaled. f16/bf16 inputs are widened to f32 and every output is rounded once, as
// ONNX Runtime's CPU kernels do:
//   simplified:  inv = 1 / sqrt(sum(x^2) / n + eps),  y = x * inv * scale,  inv_std_var = inv;
//   skip:        v = x + skip (+ bias) in f32,  y = v / sqrt(sum(v^2) / n + eps) * gamma,
//                mean = 0 (the simplified form has none), inv_std_var = 1 / that root, and
//                input_skip_bias_sum = v rounded to T.
// Optional outputs come as null pointers and are skipped. The skip input may be [S, H] or
// [1, S, H] against a [B, S, H] input: row r reads skip row r % skip_rows.
// VEC > 1: every row pointer is 16-byte aligned and n a multiple of VEC (the runtime checks).
#include "hipep_device.h"

struct hipep_rms_args {
  hipep_i64 rows;
  hipep_i64 n;
  hipep_i64 skip_rows;  // skip variant only
  float eps;
};

template <typename T, int VEC> struct alignas(sizeof(T) * VEC) hipep_norm_vec { T v[VEC]; };

template <typename T, int VEC>
HIPEP_DEVICE void hipep_rms_norm(const T* HIPEP_RESTRICT x, const T* HIPEP_RESTRICT scale, T* HIPEP_RESTRICT y,
                                 float* HIPEP_RESTRICT inv_std, const hipep_rms_args a) {
  __shared__ float scratch[HIPEP_MAX_WARPS];
  const hipep_i64 row = (hipep_i64)blockIdx.x * blockDim.y + threadIdx.y;
  if (row >= a.rows) return;  // only when blockDim.x is one warp: no block barrier below
  typedef hipep_norm_vec<T, VEC> V;
  const V* px = reinterpret_cast<const V*>(x + row * a.n);
  const V* ps = reinterpret_cast<const V*>(scale);
  V* py = reinterpret_cast<V*>(y + row * a.n);
  const hipep_i64 nv = a.n / VEC;
  float sq = 0.0f;
  for (hipep_i64 i = threadIdx.x; i < nv; i += blockDim.x) {
    const V v = px[i];
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      const float f = hipep_to_float(v.v[k]);
      sq = fmaf(f, f, sq);
    }
  }
  sq = hipep_block_sum(sq, scratch);
  const float inv = 1.0f / sqrtf(sq / (float)a.n + a.eps);
  for (hipep_i64 i = threadIdx.x; i < nv; i += blockDim.x) {
    const V v = px[i], s = ps[i];
    V o;
#pragma unroll
    for (int k = 0; k < VEC; ++k) o.v[k] = hipep_from_float<T>(hipep_to_float(v.v[k]) * inv * hipep_to_float(s.v[k]));
    py[i] = o;
  }
  if (inv_std != 0 && threadIdx.x == 0) inv_std[row] = inv;
}

template <typename T, int VEC>
HIPEP_DEVICE void hipep_skip_rms_norm(const T* HIPEP_RESTRICT x, const T* HIPEP_RESTRICT skip,
                                      const T* HIPEP_RESTRICT gamma, const T* HIPEP_RESTRICT bias,
                                      T* HIPEP_RESTRICT y, float* HIPEP_RESTRICT mean, float* HIPEP_RESTRICT inv_std,
                                      T* HIPEP_RESTRICT sum_out, const hipep_rms_args a) {
  __shared__ float scratch[HIPEP_MAX_WARPS];
  const hipep_i64 row = (hipep_i64)blockIdx.x * blockDim.y + threadIdx.y;
  if (row >= a.rows) return;
  typedef hipep_norm_vec<T, VEC> V;
  const V* px = reinterpret_cast<const V*>(x + row * a.n);
  const V* pk = reinterpret_cast<const V*>(skip + (row % a.skip_rows) * a.n);
  const V* pg = reinterpret_cast<const V*>(gamma);
  const V* pb = reinterpret_cast<const V*>(bias);
  V* py = reinterpret_cast<V*>(y + row * a.n);
  V* pv = sum_out != 0 ? reinterpret_cast<V*>(sum_out + row * a.n) : 0;
  const hipep_i64 nv = a.n / VEC;
  float sq = 0.0f;
  for (hipep_i64 i = threadIdx.x; i < nv; i += blockDim.x) {
    const V u = px[i], w = pk[i];
    V b;
    if (pb != 0) b = pb[i];
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      float f = hipep_to_float(u.v[k]) + hipep_to_float(w.v[k]);
      if (pb != 0) f += hipep_to_float(b.v[k]);
      sq = fmaf(f, f, sq);
    }
  }
  sq = hipep_block_sum(sq, scratch);
  const float root = sqrtf(sq / (float)a.n + a.eps);
  for (hipep_i64 i = threadIdx.x; i < nv; i += blockDim.x) {
    const V u = px[i], w = pk[i], g = pg[i];
    V b, o, s;
    if (pb != 0) b = pb[i];
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      float f = hipep_to_float(u.v[k]) + hipep_to_float(w.v[k]);
      if (pb != 0) f += hipep_to_float(b.v[k]);
      o.v[k] = hipep_from_float<T>(f / root * hipep_to_float(g.v[k]));
      s.v[k] = hipep_from_float<T>(f);
    }
    py[i] = o;
    if (pv != 0) pv[i] = s;
  }
  if (threadIdx.x == 0) {
    if (mean != 0) mean[row] = 0.0f;
    if (inv_std != 0) inv_std[row] = 1.0f / root;
  }
}

// The skip form for rows of at most one 16-byte vector a thread, a block per row (a decode step's
// [1, hidden]), launched to overlap the kernel ahead of it (KernelOp.overlaps_previous;
// hipep_device.h): gamma and bias, the session's weights, are requested before hipep_grid_wait(),
// the rows after it, so the block starts and fetches its weights while the GEMV ahead finishes.
// The arithmetic is hipep_skip_rms_norm's, in the same order. x and skip are read through
// hipep_ld_produced (never the read-only path, which the compiler may move above the wait).
template <typename T, int VEC>
HIPEP_DEVICE void hipep_skip_rms_norm_overlap(const T* x, const T* skip, const T* HIPEP_RESTRICT gamma,
                                              const T* HIPEP_RESTRICT bias, T* y, float* mean, float* inv_std,
                                              T* sum_out, const hipep_rms_args a) {
  static_assert(sizeof(T) * VEC == 16, "one 16-byte vector a thread");
  __shared__ float scratch[HIPEP_MAX_WARPS];
  typedef hipep_norm_vec<T, VEC> V;
  const hipep_i64 row = blockIdx.x, nv = a.n / VEC;
  const int i = threadIdx.x;
  const bool on = i < nv;
  const uint4* pg = reinterpret_cast<const uint4*>(gamma);
  const uint4* pb = reinterpret_cast<const uint4*>(bias);
  uint4 g = make_uint4(0u, 0u, 0u, 0u), bb = g;
  if (on) {
    g = hipep_ld_stream(pg + i);
    if (pb != 0) bb = hipep_ld_stream(pb + i);
  }
  hipep_grid_wait();  // x and skip, and y's memory, belong to earlier kernels of the stream
  uint4 xu = make_uint4(0u, 0u, 0u, 0u), wu = xu;
  if (on) {
    xu = hipep_ld_produced(reinterpret_cast<const uint4*>(x + row * a.n) + i);
    wu = hipep_ld_produced(reinterpret_cast<const uint4*>(skip + (row % a.skip_rows) * a.n) + i);
  }
  const V u = *reinterpret_cast<const V*>(&xu), w = *reinterpret_cast<const V*>(&wu);
  const V gv = *reinterpret_cast<const V*>(&g), b = *reinterpret_cast<const V*>(&bb);
  float f[VEC];
  float sq = 0.0f;
#pragma unroll
  for (int k = 0; k < VEC; ++k) {
    f[k] = hipep_to_float(u.v[k]) + hipep_to_float(w.v[k]);
    if (pb != 0) f[k] += hipep_to_float(b.v[k]);
    sq = fmaf(f[k], f[k], sq);
  }
  sq = hipep_block_sum(sq, scratch);
  const float root = sqrtf(sq / (float)a.n + a.eps);
  if (on) {
    V o, sv;
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      o.v[k] = hipep_from_float<T>(f[k] / root * hipep_to_float(gv.v[k]));
      sv.v[k] = hipep_from_float<T>(f[k]);
    }
    reinterpret_cast<V*>(y + row * a.n)[i] = o;
    if (sum_out != 0) reinterpret_cast<V*>(sum_out + row * a.n)[i] = sv;
  }
  if (threadIdx.x == 0) {
    if (mean != 0) mean[row] = 0.0f;
    if (inv_std != 0) inv_std[row] = 1.0f / root;
  }
}

#define HIPEP_RMS(NAME, T, VEC)                                                                       \
  HIPEP_KERNEL void hipep_rms_norm_##NAME(const T* HIPEP_RESTRICT x, const T* HIPEP_RESTRICT scale,  \
                                          T* HIPEP_RESTRICT y, float* HIPEP_RESTRICT inv_std,         \
                                          const hipep_rms_args a) {                                   \
    hipep_grid_release();                                                                             \
    hipep_rms_norm<T, 1>(x, scale, y, inv_std, a);                                                    \
  }                                                                                                   \
  HIPEP_KERNEL void hipep_rms_norm_##NAME##_vec(const T* HIPEP_RESTRICT x, const T* HIPEP_RESTRICT scale, \
                                                T* HIPEP_RESTRICT y, float* HIPEP_RESTRICT inv_std,   \
                                                const hipep_rms_args a) {                             \
    hipep_grid_release();                                                                             \
    hipep_rms_norm<T, VEC>(x, scale, y, inv_std, a);                                                  \
  }                                                                                                   \
  HIPEP_KERNEL void hipep_skip_rms_norm_##NAME(                                                      \
      const T* HIPEP_RESTRICT x, const T* HIPEP_RESTRICT skip, const T* HIPEP_RESTRICT gamma,        \
      const T* HIPEP_RESTRICT bias, T* HIPEP_RESTRICT y, float* HIPEP_RESTRICT mean,                  \
      float* HIPEP_RESTRICT inv_std, T* HIPEP_RESTRICT sum_out, const hipep_rms_args a) {             \
    hipep_grid_release();                                                                             \
    hipep_skip_rms_norm<T, 1>(x, skip, gamma, bias, y, mean, inv_std, sum_out, a);                    \
  }                                                                                                   \
  HIPEP_KERNEL void hipep_skip_rms_norm_##NAME##_vec(                                                \
      const T* HIPEP_RESTRICT x, const T* HIPEP_RESTRICT skip, const T* HIPEP_RESTRICT gamma,        \
      const T* HIPEP_RESTRICT bias, T* HIPEP_RESTRICT y, float* HIPEP_RESTRICT mean,                  \
      float* HIPEP_RESTRICT inv_std, T* HIPEP_RESTRICT sum_out, const hipep_rms_args a) {             \
    hipep_grid_release();                                                                             \
    hipep_skip_rms_norm<T, VEC>(x, skip, gamma, bias, y, mean, inv_std, sum_out, a);                  \
  }                                                                                                   \
  HIPEP_KERNEL void hipep_skip_rms_norm_##NAME##_overlap(                                            \
      const T* x, const T* skip, const T* HIPEP_RESTRICT gamma, const T* HIPEP_RESTRICT bias, T* y,   \
      float* mean, float* inv_std, T* sum_out, const hipep_rms_args a) {                              \
    hipep_grid_release();                                                                             \
    hipep_skip_rms_norm_overlap<T, VEC>(x, skip, gamma, bias, y, mean, inv_std, sum_out, a);          \
  }

HIPEP_RMS(f16, hipep_half, 8)
HIPEP_RMS(bf16, hipep_bf16, 8)

// ---- f32: ONNX Runtime's CPU EP bit for bit --------------------------------------------------------
// An int4 decoder quantizes the norm's output to int8 per block (MatMulNBits at accuracy_level 4),
// where values sit on rounding ties: one ulp of difference flips a code. So f32 rows replay the CPU
// EP's operations in its order (hipep/ops/mlas.py `_rms_rows`, hipep/ops/contrib_norm.py
// `_skip_rows`):
//   simplified, n >= 16 (MLAS's AVX2 kernel): lane l of 8 runs an FMA chain over x[8j + l] for the
//     full groups of 8; the lanes fold as ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)); then
//     the tail in order: with 4 or more left the first 4 squares rounded before adding, the rest
//     fused. inv = 1 / sqrt(sum / n + eps), y = (x * inv) * scale, inv_std_var = inv;
//   simplified, n < 16 (ORT's scalar loop): the rounded squares added in order, rms =
//     sqrt(sum / n + eps), y = (x / rms) * scale, inv_std_var = 1 / rms;
//   skip: v = (x + skip) + bias, the rounded squares added in order, std = sqrt(sum / n + eps),
//     y = (v / std) * gamma, mean = 0, inv_std_var = 1 / std, input_skip_bias_sum = v.
// Every rounding step is a round-to-nearest intrinsic (compilers never contract those into an FMA),
// fmaf where the CPU EP fuses; division and square root are IEEE's.
//
// Threads: blockDim = (8, R): a group of 8 threads per row (threadIdx.x is the lane), R rows per
// block, 8 R a multiple of the warp size. Groups past the last row only take part in the shuffles
// and barriers. A row's sum is sequential, so prefill runs its rows in parallel, one per group;
// the output pass is shared by all threads of the block and reads VEC elements at a time.
#define HIPEP_RMS_GROUP 8
#define HIPEP_RMS_MAX_ROWS 16    // R at most: blocks of up to 128 threads
#define HIPEP_RMS_CHAIN_LOADS 32  // loads in flight per lane of an FMA chain
#define HIPEP_SKIP_CHUNK 256      // elements per row whose squares the skip kernel stages at once
// The staged squares' row stride: float4-aligned, and the groups' summing threads (one per row,
// reading the same column) land in different banks.
#define HIPEP_SKIP_STRIDE (HIPEP_SKIP_CHUNK + 4)

// Calls f(r, c) for every row r < rows_here of the block and vector c < nv of it, spread over all
// the block's threads: by row for long rows, through one flat index for short ones (rows_here * nv
// < 16 * 128 then, so 32-bit arithmetic holds it).
template <typename F>
HIPEP_DEVICE void hipep_rms_block_rows(const hipep_i64 rows_here, const hipep_i64 nv, F f) {
  const unsigned tid = threadIdx.y * blockDim.x + threadIdx.x, threads = blockDim.x * blockDim.y;
  if (nv >= (hipep_i64)threads) {
    for (hipep_i64 r = 0; r < rows_here; ++r)
      for (hipep_i64 c = tid; c < nv; c += threads) f(r, c);
  } else {
    const unsigned total = (unsigned)(rows_here * nv), width = (unsigned)nv;
    for (unsigned i = tid; i < total; i += threads) f((hipep_i64)(i / width), (hipep_i64)(i % width));
  }
}

template <int VEC>
HIPEP_DEVICE void hipep_rms_exact_rows(const float* HIPEP_RESTRICT x, const float* HIPEP_RESTRICT scale,
                                           float* HIPEP_RESTRICT y, float* HIPEP_RESTRICT inv_std,
                                           const hipep_rms_args a) {
  __shared__ float row_factor[HIPEP_RMS_MAX_ROWS];  // rms (n < 16: y divides) or inv (y multiplies)
  const int lane = threadIdx.x;
  const hipep_i64 first_row = (hipep_i64)blockIdx.x * blockDim.y, row = first_row + threadIdx.y;
  const bool live = row < a.rows;
  const hipep_i64 n = a.n;
  const float* xr = x + (live ? row : 0) * n;
  const bool scalar_loop = n < 16;
  float sq = 0.0f;
  if (scalar_loop) {
    if (live)
      for (hipep_i64 i = 0; i < n; ++i) sq = __fadd_rn(sq, __fmul_rn(xr[i], xr[i]));
  } else {
    const hipep_i64 groups = n / HIPEP_RMS_GROUP;
    float acc = 0.0f;
    if (live) {
      const float* p = xr + lane;
      hipep_i64 j = 0;
      for (; j + HIPEP_RMS_CHAIN_LOADS <= groups; j += HIPEP_RMS_CHAIN_LOADS) {
        float v[HIPEP_RMS_CHAIN_LOADS];
#pragma unroll
        for (int k = 0; k < HIPEP_RMS_CHAIN_LOADS; ++k) v[k] = p[(j + k) * HIPEP_RMS_GROUP];
#pragma unroll
        for (int k = 0; k < HIPEP_RMS_CHAIN_LOADS; ++k) acc = fmaf(v[k], v[k], acc);
      }
      for (; j < groups; ++j) {
        const float f = p[j * HIPEP_RMS_GROUP];
        acc = fmaf(f, f, acc);
      }
    }
    // MLAS's horizontal sum as a butterfly: every lane ends with the same bits (a + b == b + a).
    acc = __fadd_rn(acc, HIPEP_SHFL_XOR(acc, 4));
    acc = __fadd_rn(acc, HIPEP_SHFL_XOR(acc, 2));
    sq = __fadd_rn(acc, HIPEP_SHFL_XOR(acc, 1));
    if (live) {
      const hipep_i64 full = groups * HIPEP_RMS_GROUP;
      const hipep_i64 rounded_end = full + (n - full >= 4 ? 4 : 0);
      hipep_i64 i = full;
      for (; i < rounded_end; ++i) sq = __fadd_rn(sq, __fmul_rn(xr[i], xr[i]));
      for (; i < n; ++i) sq = fmaf(xr[i], xr[i], sq);
    }
  }
  const float root = __fsqrt_rn(__fadd_rn(__fdiv_rn(sq, (float)n), a.eps));
  const float inv = __fdiv_rn(1.0f, root);
  if (live && lane == 0) {
    row_factor[threadIdx.y] = scalar_loop ? root : inv;
    if (inv_std != 0) inv_std[row] = inv;
  }
  __syncthreads();
  typedef hipep_norm_vec<float, VEC> V;
  const V* ps = reinterpret_cast<const V*>(scale);
  const hipep_i64 rows_left = a.rows - first_row;
  const hipep_i64 rows_here = rows_left < (hipep_i64)blockDim.y ? rows_left : (hipep_i64)blockDim.y;
  const hipep_i64 nv = n / VEC;
  hipep_rms_block_rows(rows_here, nv, [&](hipep_i64 r, hipep_i64 c) {
    const V v = reinterpret_cast<const V*>(x + (first_row + r) * n)[c], s = ps[c];
    const float f = row_factor[r];
    V o;
#pragma unroll
    for (int k = 0; k < VEC; ++k)
      o.v[k] = __fmul_rn(scalar_loop ? __fdiv_rn(v.v[k], f) : __fmul_rn(v.v[k], f), s.v[k]);
    reinterpret_cast<V*>(y + (first_row + r) * n)[c] = o;
  });
}

// One chunk of a skip row as a lane of its group holds it: vectors u * 8 + lane of the chunk.
template <int VEC>
HIPEP_DEVICE void hipep_skip_chunk_load(hipep_norm_vec<float, VEC> (&xs)[HIPEP_SKIP_CHUNK / 8 / VEC],
                                        hipep_norm_vec<float, VEC> (&ks)[HIPEP_SKIP_CHUNK / 8 / VEC],
                                        hipep_norm_vec<float, VEC> (&bs)[HIPEP_SKIP_CHUNK / 8 / VEC],
                                        const hipep_norm_vec<float, VEC>* px, const hipep_norm_vec<float, VEC>* pk,
                                        const hipep_norm_vec<float, VEC>* pb, const hipep_i64 first, const hipep_i64 nv,
                                        const bool live) {
#pragma unroll
  for (int u = 0; u < HIPEP_SKIP_CHUNK / 8 / VEC; ++u) {
    const hipep_i64 i = first + u * HIPEP_RMS_GROUP + threadIdx.x;
    if (live && i < nv) {
      xs[u] = px[i];
      ks[u] = pk[i];
      if (pb != 0) bs[u] = pb[i];
    }
  }
}

template <int VEC>
HIPEP_DEVICE void hipep_skip_rms_exact_rows(const float* HIPEP_RESTRICT x, const float* HIPEP_RESTRICT skip,
                                                const float* HIPEP_RESTRICT gamma, const float* HIPEP_RESTRICT bias,
                                                float* HIPEP_RESTRICT y, float* HIPEP_RESTRICT mean,
                                                float* HIPEP_RESTRICT inv_std, float* HIPEP_RESTRICT sum_out,
                                                const hipep_rms_args a) {
  constexpr int U = HIPEP_SKIP_CHUNK / HIPEP_RMS_GROUP / VEC;  // vectors per lane and chunk
  typedef hipep_norm_vec<float, VEC> V;
  typedef hipep_norm_vec<float, 4> V4;
  __shared__ V4 squares[HIPEP_RMS_MAX_ROWS * HIPEP_SKIP_STRIDE / 4];
  __shared__ float row_root[HIPEP_RMS_MAX_ROWS];
  __shared__ hipep_i64 skip_offset[HIPEP_RMS_MAX_ROWS];
  const int lane = threadIdx.x;
  const hipep_i64 first_row = (hipep_i64)blockIdx.x * blockDim.y, row = first_row + threadIdx.y;
  const bool live = row < a.rows;
  const hipep_i64 n = a.n, nv = n / VEC;
  const hipep_i64 skip_at = (live ? row % a.skip_rows : 0) * n;
  const V* px = reinterpret_cast<const V*>(x + (live ? row : 0) * n);
  const V* pk = reinterpret_cast<const V*>(skip + skip_at);
  const V* pb = reinterpret_cast<const V*>(bias);
  float* staged = reinterpret_cast<float*>(squares + threadIdx.y * (HIPEP_SKIP_STRIDE / 4));
  V xs[U], ks[U], bs[U];
#pragma unroll
  for (int u = 0; u < U; ++u)
#pragma unroll
    for (int k = 0; k < VEC; ++k) xs[u].v[k] = ks[u].v[k] = bs[u].v[k] = 0.0f;
  hipep_skip_chunk_load<VEC>(xs, ks, bs, px, pk, pb, 0, nv, live);
  float sum = 0.0f;
  for (hipep_i64 first = 0; first < nv; first += U * HIPEP_RMS_GROUP) {
    // The group's lanes stage the chunk's rounded squares; past the row's end they stage +0, which
    // leaves the sum's bits alone (the sum is +0 or more, or NaN).
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const bool inside = live && first + u * HIPEP_RMS_GROUP + lane < nv;
      V q;
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        float v = __fadd_rn(xs[u].v[k], ks[u].v[k]);
        if (pb != 0) v = __fadd_rn(v, bs[u].v[k]);
        q.v[k] = inside ? __fmul_rn(v, v) : 0.0f;
      }
      *reinterpret_cast<V*>(staged + (u * HIPEP_RMS_GROUP + lane) * VEC) = q;
    }
    __syncthreads();
    // The next chunk's loads are in flight while one thread per row adds this chunk in order.
    if (first + U * HIPEP_RMS_GROUP < nv)
      hipep_skip_chunk_load<VEC>(xs, ks, bs, px, pk, pb, first + U * HIPEP_RMS_GROUP, nv, live);
    if (live && lane == 0) {
      const hipep_i64 left = (nv - first) * VEC;
      const int count = left < HIPEP_SKIP_CHUNK ? (int)((left + 3) / 4) : HIPEP_SKIP_CHUNK / 4;
      const V4* q = reinterpret_cast<const V4*>(staged);
#pragma unroll 8
      for (int i = 0; i < count; ++i) {
        const V4 s = q[i];
        sum = __fadd_rn(sum, s.v[0]);
        sum = __fadd_rn(sum, s.v[1]);
        sum = __fadd_rn(sum, s.v[2]);
        sum = __fadd_rn(sum, s.v[3]);
      }
    }
    __syncthreads();
  }
  if (live && lane == 0) {
    const float root = __fsqrt_rn(__fadd_rn(__fdiv_rn(sum, (float)n), a.eps));
    row_root[threadIdx.y] = root;
    skip_offset[threadIdx.y] = skip_at;
    if (mean != 0) mean[row] = 0.0f;
    if (inv_std != 0) inv_std[row] = __fdiv_rn(1.0f, root);
  }
  __syncthreads();
  const V* pg = reinterpret_cast<const V*>(gamma);
  const hipep_i64 rows_left = a.rows - first_row;
  const hipep_i64 rows_here = rows_left < (hipep_i64)blockDim.y ? rows_left : (hipep_i64)blockDim.y;
  hipep_rms_block_rows(rows_here, nv, [&](hipep_i64 r, hipep_i64 c) {
    const hipep_i64 at = (first_row + r) * n;
    const V u = reinterpret_cast<const V*>(x + at)[c], w = reinterpret_cast<const V*>(skip + skip_offset[r])[c];
    const V g = pg[c];
    V b, o, s;
    if (pb != 0) b = pb[c];
    const float root = row_root[r];
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      float v = __fadd_rn(u.v[k], w.v[k]);
      if (pb != 0) v = __fadd_rn(v, b.v[k]);
      o.v[k] = __fmul_rn(__fdiv_rn(v, root), g.v[k]);
      s.v[k] = v;
    }
    reinterpret_cast<V*>(y + at)[c] = o;
    if (sum_out != 0) reinterpret_cast<V*>(sum_out + at)[c] = s;
  });
}

HIPEP_KERNEL void hipep_rms_norm_f32_exact(const float* HIPEP_RESTRICT x, const float* HIPEP_RESTRICT scale,
                                           float* HIPEP_RESTRICT y, float* HIPEP_RESTRICT inv_std,
                                           const hipep_rms_args a) {
  hipep_grid_release();
  hipep_rms_exact_rows<1>(x, scale, y, inv_std, a);
}
HIPEP_KERNEL void hipep_rms_norm_f32_exact_vec(const float* HIPEP_RESTRICT x, const float* HIPEP_RESTRICT scale,
                                               float* HIPEP_RESTRICT y, float* HIPEP_RESTRICT inv_std,
                                               const hipep_rms_args a) {
  hipep_grid_release();
  hipep_rms_exact_rows<4>(x, scale, y, inv_std, a);
}
HIPEP_KERNEL void hipep_skip_rms_norm_f32_exact(const float* HIPEP_RESTRICT x, const float* HIPEP_RESTRICT skip,
                                                const float* HIPEP_RESTRICT gamma, const float* HIPEP_RESTRICT bias,
                                                float* HIPEP_RESTRICT y, float* HIPEP_RESTRICT mean,
                                                float* HIPEP_RESTRICT inv_std, float* HIPEP_RESTRICT sum_out,
                                                const hipep_rms_args a) {
  hipep_grid_release();
  hipep_skip_rms_exact_rows<1>(x, skip, gamma, bias, y, mean, inv_std, sum_out, a);
}
HIPEP_KERNEL void hipep_skip_rms_norm_f32_exact_vec(const float* HIPEP_RESTRICT x, const float* HIPEP_RESTRICT skip,
                                                    const float* HIPEP_RESTRICT gamma, const float* HIPEP_RESTRICT bias,
                                                    float* HIPEP_RESTRICT y, float* HIPEP_RESTRICT mean,
                                                    float* HIPEP_RESTRICT inv_std, float* HIPEP_RESTRICT sum_out,
                                                    const hipep_rms_args a) {
  hipep_grid_release();
  hipep_skip_rms_exact_rows<4>(x, skip, gamma, bias, y, mean, inv_std, sum_out, a);
}

// ---- f32, one row per block: decode's rows and short prefills ----------------------------------
// The same operations in the same order as the kernels above (so the same bits), laid out for rows
// that stand alone: all the block's threads load the whole row at once into dynamic shared memory
// (n floats: x, or the skip kernel's v = (x + skip) + bias), so its loads are in flight together
// instead of one chunk at a time behind a sequential sum; then the sum runs from shared memory (the
// skip kernel's one thread adding the rounded squares in order, the simplified kernel's 8 MLAS
// lanes), and the output pass reads the staged row again. The threads prefetch their first gamma /
// scale vectors while the sum runs. n % 4 == 0, 16-byte aligned rows, n >= 16 (the simplified
// kernel's lane form), blockDim.x a multiple of the warp size, one block per row.
#define HIPEP_RMS_ROW_PREFETCH 4  // scale vectors per thread loaded before the sum

HIPEP_DEVICE void hipep_rms_row_prefetch(const float4* HIPEP_RESTRICT p, const int nv,
                                         float4 (&pre)[HIPEP_RMS_ROW_PREFETCH]) {
#pragma unroll
  for (int k = 0; k < HIPEP_RMS_ROW_PREFETCH; ++k) {
    const int i = threadIdx.x + k * blockDim.x;
    if (i < nv) pre[k] = p[i];
  }
}

// Calls f(i, scale vector i) for the thread's vectors i of the row: the prefetched ones first (a
// constant index each, so they stay in registers), then the rest loaded as they come.
template <typename F>
HIPEP_DEVICE void hipep_rms_row_out(const float4* HIPEP_RESTRICT p, const int nv,
                                    const float4 (&pre)[HIPEP_RMS_ROW_PREFETCH], F f) {
#pragma unroll
  for (int k = 0; k < HIPEP_RMS_ROW_PREFETCH; ++k) {
    const int i = threadIdx.x + k * blockDim.x;
    if (i < nv) f(i, pre[k]);
  }
  for (int i = threadIdx.x + HIPEP_RMS_ROW_PREFETCH * blockDim.x; i < nv; i += blockDim.x) f(i, p[i]);
}

HIPEP_KERNEL void hipep_rms_norm_f32_exact_row(const float* HIPEP_RESTRICT x, const float* HIPEP_RESTRICT scale,
                                               float* HIPEP_RESTRICT y, float* HIPEP_RESTRICT inv_std,
                                               const hipep_rms_args a) {
  hipep_grid_release();
  HIPEP_DYNAMIC_SHARED(float4, row_s4);
  __shared__ float inv_s;
  const hipep_i64 row = blockIdx.x, n = a.n;
  const int nv = (int)(n / 4);
  const float4* px = reinterpret_cast<const float4*>(x + row * n);
  for (int i = threadIdx.x; i < nv; i += blockDim.x) row_s4[i] = px[i];
  float4 pre[HIPEP_RMS_ROW_PREFETCH];
  const float4* ps = reinterpret_cast<const float4*>(scale);
  hipep_rms_row_prefetch(ps, nv, pre);
  __syncthreads();
  if (threadIdx.x < HIPEP_WARP_SIZE) {  // the first warp: lanes 0-7 of it are MLAS's 8 lanes
    const float* xr = reinterpret_cast<const float*>(row_s4);
    const int lane = threadIdx.x;
    const hipep_i64 groups = n / HIPEP_RMS_GROUP;
    float acc = 0.0f;
    if (lane < HIPEP_RMS_GROUP) {
#pragma unroll 8
      for (hipep_i64 j = 0; j < groups; ++j) {
        const float f = xr[j * HIPEP_RMS_GROUP + lane];
        acc = fmaf(f, f, acc);
      }
    }
    acc = __fadd_rn(acc, HIPEP_SHFL_XOR(acc, 4));
    acc = __fadd_rn(acc, HIPEP_SHFL_XOR(acc, 2));
    float sq = __fadd_rn(acc, HIPEP_SHFL_XOR(acc, 1));
    if (lane == 0) {
      const hipep_i64 full = groups * HIPEP_RMS_GROUP;
      const hipep_i64 rounded_end = full + (n - full >= 4 ? 4 : 0);
      hipep_i64 i = full;
      for (; i < rounded_end; ++i) sq = __fadd_rn(sq, __fmul_rn(xr[i], xr[i]));
      for (; i < n; ++i) sq = fmaf(xr[i], xr[i], sq);
      const float inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(sq, (float)n), a.eps)));
      inv_s = inv;
      if (inv_std != 0) inv_std[row] = inv;
    }
  }
  __syncthreads();
  const float inv = inv_s;
  float4* py = reinterpret_cast<float4*>(y + row * n);
  hipep_rms_row_out(ps, nv, pre, [&](int i, const float4 s) {
    const float4 v = row_s4[i];
    py[i] = make_float4(__fmul_rn(__fmul_rn(v.x, inv), s.x), __fmul_rn(__fmul_rn(v.y, inv), s.y),
                        __fmul_rn(__fmul_rn(v.z, inv), s.z), __fmul_rn(__fmul_rn(v.w, inv), s.w));
  });
}

HIPEP_KERNEL void hipep_skip_rms_norm_f32_exact_row(const float* HIPEP_RESTRICT x, const float* HIPEP_RESTRICT skip,
                                                    const float* HIPEP_RESTRICT gamma, const float* HIPEP_RESTRICT bias,
                                                    float* HIPEP_RESTRICT y, float* HIPEP_RESTRICT mean,
                                                    float* HIPEP_RESTRICT inv_std, float* HIPEP_RESTRICT sum_out,
                                                    const hipep_rms_args a) {
  hipep_grid_release();
  HIPEP_DYNAMIC_SHARED(float4, row_s4);
  __shared__ float root_s;
  const hipep_i64 row = blockIdx.x, n = a.n;
  const int nv = (int)(n / 4);
  const float4* px = reinterpret_cast<const float4*>(x + row * n);
  const float4* pk = reinterpret_cast<const float4*>(skip + (row % a.skip_rows) * n);
  const float4* pb = reinterpret_cast<const float4*>(bias);
  for (int i = threadIdx.x; i < nv; i += blockDim.x) {
    const float4 u = px[i], w = pk[i];
    float4 v = make_float4(__fadd_rn(u.x, w.x), __fadd_rn(u.y, w.y), __fadd_rn(u.z, w.z), __fadd_rn(u.w, w.w));
    if (pb != 0) {
      const float4 b = pb[i];
      v = make_float4(__fadd_rn(v.x, b.x), __fadd_rn(v.y, b.y), __fadd_rn(v.z, b.z), __fadd_rn(v.w, b.w));
    }
    row_s4[i] = v;
  }
  float4 pre[HIPEP_RMS_ROW_PREFETCH];
  const float4* pg = reinterpret_cast<const float4*>(gamma);
  hipep_rms_row_prefetch(pg, nv, pre);
  __syncthreads();
  if (threadIdx.x == 0) {
    float sum = 0.0f;
#pragma unroll 8
    for (int i = 0; i < nv; ++i) {
      const float4 v = row_s4[i];
      sum = __fadd_rn(sum, __fmul_rn(v.x, v.x));
      sum = __fadd_rn(sum, __fmul_rn(v.y, v.y));
      sum = __fadd_rn(sum, __fmul_rn(v.z, v.z));
      sum = __fadd_rn(sum, __fmul_rn(v.w, v.w));
    }
    const float root = __fsqrt_rn(__fadd_rn(__fdiv_rn(sum, (float)n), a.eps));
    root_s = root;
    if (mean != 0) mean[row] = 0.0f;
    if (inv_std != 0) inv_std[row] = __fdiv_rn(1.0f, root);
  }
  __syncthreads();
  const float root = root_s;
  float4* py = reinterpret_cast<float4*>(y + row * n);
  float4* pv = sum_out != 0 ? reinterpret_cast<float4*>(sum_out + row * n) : 0;
  hipep_rms_row_out(pg, nv, pre, [&](int i, const float4 g) {
    const float4 v = row_s4[i];
    py[i] = make_float4(__fmul_rn(__fdiv_rn(v.x, root), g.x), __fmul_rn(__fdiv_rn(v.y, root), g.y),
                        __fmul_rn(__fdiv_rn(v.z, root), g.z), __fmul_rn(__fdiv_rn(v.w, root), g.w));
    if (pv != 0) pv[i] = v;
  });
}
