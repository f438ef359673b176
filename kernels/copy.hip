// Data movement: strided copies (Transpose, Slice with steps, Expand, Split), a tiled transpose,
// Concat, the copy that fills outside its source, Pad's other modes and Trilu.
//
// Elements are moved as words W of 1 to 16 bytes (the runtime widens the word where the innermost
// run allows: a Slice of whole rows moves 16-byte words).
//   * copy (strided gather): out[i] = src[offset + sum_d coord_d(i) * strides[d]] for the output's
//     row-major coordinates; strides are in words and may be 0 (broadcast) or negative (a Slice
//     with a negative step). The runtime merges axes that stay adjacent, so most copies have rank
//     1 to 4, each compiled with its rank fixed (unrolled index arithmetic); 32-bit index
//     arithmetic where every offset fits.
//   * transpose_tiled: [batch, m, n] -> [batch, n, m] through a 32x33 shared-memory tile, so
//     both the reads and the writes are coalesced (a strided copy would scatter one of them).
//   * concat: up to 8 inputs per launch (blockIdx.y picks one), each [outer, len_k] words copied
//     into columns [offset_k, offset_k + len_k) of the [outer, total] output.
//   * copy_fill: a strided gather that may fall outside its source (Pad's constant mode, the padded
//     windows of Conv and the pools, EyeLike, and plain fills): checked source axes k, each with its
//     coordinate v_k = bias_k + sum_d coef[k][d] * coord_d, must all lie in [0, limit_k), else the
//     output element is the fill value (from `fill_src` where given, a value in device memory;
//     else the bits in the arguments). One element a word, 64-bit indices.
//   * pad: Pad's edge, reflect and wrap modes, a gather whose source coordinate along each axis is
//     the output's mapped back into the kept (cropped) source range: clamped (edge), mirrored about
//     its first and last element (reflect) or taken modulo its extent (wrap), as numpy's pad and
//     ONNX Runtime's CPU kernel read the input after negative pads crop it.
//   * trilu: a copy of a stack of matrices with the elements off the kept triangle zeroed; k is read
//     from device memory (an input the host need not know), so a launch stays bound across runs.
#include "hipep_device.h"

#define HIPEP_COPY_MAX_RANK 8

struct hipep_copy_args {
  hipep_i64 n;       // output words
  hipep_i64 offset;  // source word offset of output element 0
  hipep_i64 dims[HIPEP_COPY_MAX_RANK];
  hipep_i64 strides[HIPEP_COPY_MAX_RANK];  // source words per step along each output axis
  int rank;
};

template <typename W, int RANK, typename I>
HIPEP_DEVICE void hipep_copy(const W* HIPEP_RESTRICT src, W* HIPEP_RESTRICT dst, const hipep_copy_args a) {
  const int rank = RANK > 0 ? RANK : a.rank;
  I dims[HIPEP_COPY_MAX_RANK], strides[HIPEP_COPY_MAX_RANK];
#pragma unroll
  for (int d = 0; d < (RANK > 0 ? RANK : HIPEP_COPY_MAX_RANK); ++d) {
    dims[d] = (I)a.dims[d];
    strides[d] = (I)a.strides[d];
  }
  const I n = (I)a.n, step = (I)gridDim.x * (I)blockDim.x;
  for (I i = (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x; i < n; i += step) {
    I rem = i, off = (I)a.offset;
#pragma unroll
    for (int d = (RANK > 0 ? RANK : HIPEP_COPY_MAX_RANK) - 1; d >= 0; --d) {
      if (RANK == 0 && d >= rank) continue;
      if (d == 0) {
        off += rem * strides[0];
      } else {
        const I c = rem % dims[d];
        rem /= dims[d];
        off += c * strides[d];
      }
    }
    dst[i] = src[off];
  }
}

#define HIPEP_COPY_RANK(WNAME, W, RNAME, RANK)                                                        \
  HIPEP_KERNEL void hipep_copy_##WNAME##_##RNAME##_i32(const W* HIPEP_RESTRICT src, W* HIPEP_RESTRICT dst, \
                                                       const hipep_copy_args a) {                     \
    hipep_copy<W, RANK, int>(src, dst, a);                                                            \
  }                                                                                                   \
  HIPEP_KERNEL void hipep_copy_##WNAME##_##RNAME##_i64(const W* HIPEP_RESTRICT src, W* HIPEP_RESTRICT dst, \
                                                       const hipep_copy_args a) {                     \
    hipep_copy<W, RANK, hipep_i64>(src, dst, a);                                                      \
  }

#define HIPEP_COPY(WNAME, W)                                                                          \
  HIPEP_COPY_RANK(WNAME, W, r1, 1)                                                                    \
  HIPEP_COPY_RANK(WNAME, W, r2, 2)                                                                    \
  HIPEP_COPY_RANK(WNAME, W, r3, 3)                                                                    \
  HIPEP_COPY_RANK(WNAME, W, r4, 4)                                                                    \
  HIPEP_COPY_RANK(WNAME, W, rn, 0)

HIPEP_COPY(w1, unsigned char)
HIPEP_COPY(w2, unsigned short)
HIPEP_COPY(w4, unsigned int)
HIPEP_COPY(w8, hipep_u64)
HIPEP_COPY(w16, uint4)

// ---- tiled transpose -------------------------------------------------------------------------

#define HIPEP_TILE 32
#define HIPEP_TILE_ROWS 8

struct hipep_transpose_args {
  hipep_i64 batch;
  hipep_i64 m;  // source rows
  hipep_i64 n;  // source columns
};

template <typename W>
HIPEP_DEVICE void hipep_transpose_tiled(const W* HIPEP_RESTRICT src, W* HIPEP_RESTRICT dst, const hipep_transpose_args a) {
  __shared__ W tile[HIPEP_TILE][HIPEP_TILE + 1];  // +1: columns read across lanes hit distinct banks
  const hipep_i64 x0 = (hipep_i64)blockIdx.x * HIPEP_TILE, y0 = (hipep_i64)blockIdx.y * HIPEP_TILE;
  for (hipep_i64 b = blockIdx.z; b < a.batch; b += gridDim.z) {
    const W* s = src + b * a.m * a.n;
    W* d = dst + b * a.m * a.n;
#pragma unroll
    for (int j = 0; j < HIPEP_TILE; j += HIPEP_TILE_ROWS) {
      const hipep_i64 y = y0 + threadIdx.y + j, x = x0 + threadIdx.x;
      if (y < a.m && x < a.n) tile[threadIdx.y + j][threadIdx.x] = s[y * a.n + x];
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < HIPEP_TILE; j += HIPEP_TILE_ROWS) {
      const hipep_i64 y = x0 + threadIdx.y + j, x = y0 + threadIdx.x;  // output row (source column), column
      if (y < a.n && x < a.m) d[y * a.m + x] = tile[threadIdx.x][threadIdx.y + j];
    }
    __syncthreads();
  }
}

#define HIPEP_TRANSPOSE(WNAME, W)                                                                     \
  HIPEP_KERNEL void hipep_transpose_tiled_##WNAME(const W* HIPEP_RESTRICT src, W* HIPEP_RESTRICT dst, \
                                                  const hipep_transpose_args a) {                     \
    hipep_transpose_tiled<W>(src, dst, a);                                                            \
  }

HIPEP_TRANSPOSE(w1, unsigned char)
HIPEP_TRANSPOSE(w2, unsigned short)
HIPEP_TRANSPOSE(w4, unsigned int)
HIPEP_TRANSPOSE(w8, hipep_u64)
HIPEP_TRANSPOSE(w16, uint4)

// ---- concat ----------------------------------------------------------------------------------

#define HIPEP_CONCAT_MAX 8

struct hipep_concat_args {
  hipep_u64 src[HIPEP_CONCAT_MAX];      // device pointers of this launch's inputs
  hipep_i64 len[HIPEP_CONCAT_MAX];      // words per outer row of each input
  hipep_i64 offset[HIPEP_CONCAT_MAX];   // its first column in the output row
  hipep_i64 outer;
  hipep_i64 total;                      // words per output row
};

template <typename W>
HIPEP_DEVICE void hipep_concat(W* HIPEP_RESTRICT dst, const hipep_concat_args a) {
  const int k = blockIdx.y;
  const W* HIPEP_RESTRICT s = reinterpret_cast<const W*>(a.src[k]);
  const hipep_i64 len = a.len[k], offset = a.offset[k], count = a.outer * len;
  const hipep_i64 step = (hipep_i64)gridDim.x * blockDim.x;
  for (hipep_i64 j = (hipep_i64)blockIdx.x * blockDim.x + threadIdx.x; j < count; j += step) {
    const hipep_i64 o = j / len;
    dst[o * a.total + offset + (j - o * len)] = s[j];
  }
}

#define HIPEP_CONCAT(WNAME, W)                                                                        \
  HIPEP_KERNEL void hipep_concat_##WNAME(W* HIPEP_RESTRICT dst, const hipep_concat_args a) {         \
    hipep_concat<W>(dst, a);                                                                          \
  }

HIPEP_CONCAT(w1, unsigned char)
HIPEP_CONCAT(w2, unsigned short)
HIPEP_CONCAT(w4, unsigned int)
HIPEP_CONCAT(w8, hipep_u64)
HIPEP_CONCAT(w16, uint4)

// ---- copy with a fill outside the source -----------------------------------------------------

#define HIPEP_COPY_MAX_CHECKS 8

struct hipep_copy_fill_args {
  hipep_i64 n;       // output elements
  hipep_i64 offset;  // source element offset of output coordinate 0 (may be negative)
  hipep_i64 dims[HIPEP_COPY_MAX_RANK];
  hipep_i64 strides[HIPEP_COPY_MAX_RANK];
  hipep_i64 coef[HIPEP_COPY_MAX_CHECKS][HIPEP_COPY_MAX_RANK];
  hipep_i64 bias[HIPEP_COPY_MAX_CHECKS];
  hipep_i64 limit[HIPEP_COPY_MAX_CHECKS];
  hipep_u64 fill;    // the fill element's bits, in the low bytes
  int rank;
  int checks;
};

template <typename W>
HIPEP_DEVICE void hipep_copy_fill(const W* HIPEP_RESTRICT src, const W* HIPEP_RESTRICT fill_src,
                                  W* HIPEP_RESTRICT dst, const hipep_copy_fill_args a) {
  const W fill = fill_src != nullptr ? *fill_src : *reinterpret_cast<const W*>(&a.fill);
  const hipep_i64 step = (hipep_i64)gridDim.x * blockDim.x;
  for (hipep_i64 i = (hipep_i64)blockIdx.x * blockDim.x + threadIdx.x; i < a.n; i += step) {
    hipep_i64 rem = i, off = a.offset;
    hipep_i64 v[HIPEP_COPY_MAX_CHECKS];
    for (int k = 0; k < a.checks; ++k) v[k] = a.bias[k];
    for (int d = a.rank - 1; d >= 0; --d) {
      const hipep_i64 c = d == 0 ? rem : rem % a.dims[d];
      rem = d == 0 ? 0 : rem / a.dims[d];
      off += c * a.strides[d];
      for (int k = 0; k < a.checks; ++k) v[k] += a.coef[k][d] * c;
    }
    bool inside = true;
    for (int k = 0; k < a.checks; ++k) inside = inside && v[k] >= 0 && v[k] < a.limit[k];
    dst[i] = inside ? src[off] : fill;
  }
}

#define HIPEP_COPY_FILL(WNAME, W)                                                                     \
  HIPEP_KERNEL void hipep_copy_fill_##WNAME(const W* HIPEP_RESTRICT src, const W* HIPEP_RESTRICT fill_src, \
                                            W* HIPEP_RESTRICT dst, const hipep_copy_fill_args a) {   \
    hipep_copy_fill<W>(src, fill_src, dst, a);                                                        \
  }

HIPEP_COPY_FILL(w1, unsigned char)
HIPEP_COPY_FILL(w2, unsigned short)
HIPEP_COPY_FILL(w4, unsigned int)
HIPEP_COPY_FILL(w8, hipep_u64)

// ---- Pad's edge, reflect and wrap modes --------------------------------------------------------

#define HIPEP_PAD_EDGE 0
#define HIPEP_PAD_REFLECT 1
#define HIPEP_PAD_WRAP 2

struct hipep_pad_args {
  hipep_i64 n;                             // output words
  hipep_i64 dims[HIPEP_COPY_MAX_RANK];     // output extents
  hipep_i64 strides[HIPEP_COPY_MAX_RANK];  // source words per step along each axis
  hipep_i64 begin[HIPEP_COPY_MAX_RANK];    // output coordinate of the first kept source element
  hipep_i64 first[HIPEP_COPY_MAX_RANK];    // source coordinate of that element (past a crop)
  hipep_i64 kept[HIPEP_COPY_MAX_RANK];     // source elements kept along the axis (at least 1)
  int rank;
  int mode;
};

// Position j (relative to the first kept element) mapped into [0, kept). Reflect is periodic with
// period 2 * (kept - 1), numpy's rule for pads of any width (ONNX Runtime accepts pads up to
// kept - 1 only, which the claim enforces; the general form keeps every read inside the source).
HIPEP_DEVICE hipep_i64 hipep_pad_source(hipep_i64 j, hipep_i64 kept, int mode) {
  if (j >= 0 && j < kept) return j;
  if (mode == HIPEP_PAD_EDGE) return j < 0 ? 0 : kept - 1;
  if (mode == HIPEP_PAD_WRAP) {
    const hipep_i64 r = j % kept;
    return r < 0 ? r + kept : r;
  }
  const hipep_i64 period = 2 * (kept - 1);
  if (period == 0) return 0;
  hipep_i64 r = j % period;
  if (r < 0) r += period;
  return r < kept ? r : period - r;
}

template <typename W>
HIPEP_DEVICE void hipep_pad(const W* HIPEP_RESTRICT src, W* HIPEP_RESTRICT dst, const hipep_pad_args a) {
  const hipep_i64 step = (hipep_i64)gridDim.x * blockDim.x;
  for (hipep_i64 i = (hipep_i64)blockIdx.x * blockDim.x + threadIdx.x; i < a.n; i += step) {
    hipep_i64 rem = i, off = 0;
    for (int d = a.rank - 1; d >= 0; --d) {
      const hipep_i64 c = d == 0 ? rem : rem % a.dims[d];
      rem = d == 0 ? 0 : rem / a.dims[d];
      off += (a.first[d] + hipep_pad_source(c - a.begin[d], a.kept[d], a.mode)) * a.strides[d];
    }
    dst[i] = src[off];
  }
}

#define HIPEP_PAD(WNAME, W)                                                                           \
  HIPEP_KERNEL void hipep_pad_##WNAME(const W* HIPEP_RESTRICT src, W* HIPEP_RESTRICT dst, const hipep_pad_args a) { \
    hipep_pad<W>(src, dst, a);                                                                        \
  }

HIPEP_PAD(w1, unsigned char)
HIPEP_PAD(w2, unsigned short)
HIPEP_PAD(w4, unsigned int)
HIPEP_PAD(w8, hipep_u64)
HIPEP_PAD(w16, uint4)

// ---- Trilu -------------------------------------------------------------------------------------

struct hipep_trilu_args {
  hipep_i64 n;     // elements
  hipep_i64 rows;  // rows of each matrix (the input's second-last axis)
  hipep_i64 cols;  // columns (its last axis)
  int upper;
};

// Element (r, c) is kept where c - r >= k (upper) or c - r <= k (lower): c - r cannot overflow,
// so any k, INT64_MIN and INT64_MAX included, selects what ONNX Runtime's CPU kernel does.
// A null k is the default 0. The zero written elsewhere is all-zero bits, zero in every type.
template <typename W>
HIPEP_DEVICE void hipep_trilu(const W* src, const hipep_i64* k_src, W* dst, const hipep_trilu_args a) {
  const hipep_i64 k = k_src != nullptr ? *k_src : 0;
  const hipep_i64 step = (hipep_i64)gridDim.x * blockDim.x;
  for (hipep_i64 i = (hipep_i64)blockIdx.x * blockDim.x + threadIdx.x; i < a.n; i += step) {
    const hipep_i64 row = i / a.cols;
    const hipep_i64 diagonal = (i - row * a.cols) - row % a.rows;
    const bool keep = a.upper ? diagonal >= k : diagonal <= k;
    dst[i] = keep ? src[i] : W(0);
  }
}

#define HIPEP_TRILU(WNAME, W)                                                                         \
  HIPEP_KERNEL void hipep_trilu_##WNAME(const W* src, const hipep_i64* k, W* dst, const hipep_trilu_args a) { \
    hipep_trilu<W>(src, k, dst, a);                                                                   \
  }

HIPEP_TRILU(w1, unsigned char)
HIPEP_TRILU(w2, unsigned short)
HIPEP_TRILU(w4, unsigned int)
HIPEP_TRILU(w8, hipep_u64)
