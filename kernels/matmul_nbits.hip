// com.microsoft::MatMulNBits: Y[m, n] = sum_k A[m, k] * W[n, k] (+ bias[n]), W dequantized from
// blockwise `BITS`-bit weights: B is [N, n_blocks, blob] bytes (row n holds K_pad = n_blocks *
// block_size values, least significant bits first), scales [N, n_blocks] of A's type T, zero
// points packed like B (uint8, `BITS` per value, rows of zp_row bytes), floats of T, or absent
// (2^(BITS-1)). W[n, k] = (q - zp) * scale of k's block. Math in f32; the output rounds once.
//
// Two kernels, picked by the runtime from M = the rows of A:
//
// * GEMV (M <= 8, decode; memory-bound). Each warp owns C output columns (2, or 4 for the "wide"
//   one-row variant) and streams their rows of B with 16-byte loads (one "chunk" per lane: 32 4-bit
//   or 16 8-bit values), U chunks per column in flight per lane (C * U = 8 loads for one row). Where N alone gives too few blocks to fill the GPU, the
//   8 warps of a block split K `k_split` ways (adding their sums through shared memory at the
//   end). A, converted to f32, sits in shared memory in tiles of `k_tile` values (the first
//   step's loads of B are issued before A is staged, so the two overlap), laid out chunk by
//   chunk with 4 floats of padding after each chunk so that the lanes' 16-byte reads (lane l
//   reads chunk l) fall in distinct banks. Each 8-byte half of a chunk
//   lies inside one quantization block (block_size >= 16), so its scale and zero point are read
//   once: dq_j = q_j - zp (exact in f32: q is put into a float's mantissa with one byte permute
//   and the bias 2^23 + zp subtracted), p_m = sum_j A[m, j] * dq_j, acc[m] += scale * p_m.
//   Lanes then reduce by shuffles; lane 0 adds the bias and writes. M_T (1, 2, 4, 8) is M rounded
//   up: the rows past M are zeros in shared memory and are not written.
//   Rows of B whose length is not a multiple of 16 bytes (4 bits, block_size 16, odd n_blocks) are
//   read as two 8-byte halves; the last half of a row past K_pad is not read.
//
// * GEMM (M > 8, prefill): 64 x 64 output tiles, 256 threads each computing 4 x 4; per K step of
//   32 values an A tile (to f32) and a dequantized B tile go to shared memory, then the
//   outer-product loop runs from there while the next step's operands load into registers. No
//   tensor cores.
//
// Float zero points (zp_mode 2): dq = q - zp in f32 (one rounding), as the dequantize-then-multiply
// the reference does up to the order of roundings; a branch uniform over the launch picks it.
//
// accuracy_level 4 with integer (or no) zero points (`int8_a`): the op computes with A quantized
// to int8, as ONNX Runtime's CPU EP does (MLAS's QuantizeARow_CompInt8): each row of A is cut into
// blocks of block_size values along K; per block amax = max |a|, scale = amax / 127,
// q = rint(a * (127 / amax)) (0 for an all-zero block). The kernels use a' = q * scale in f32 in
// place of a (one rounding of the exact product), so they agree with the CPU EP up to f32
// summation order. The GEMV quantizes its tile of A while staging it (the tile holds whole
// blocks); the GEMM reads each block's (scale, 127 / amax) from a small first kernel's output.
#include "hipep_device.h"

struct hipep_mnb_args {
  hipep_i64 m;          // rows of A (product of A's leading dims)
  hipep_i64 n;          // N
  hipep_i64 k;          // K: A's row length
  hipep_i64 k_pad;      // n_blocks * block_size: B's row length in values
  hipep_i64 row_bytes;  // n_blocks * blob
  hipep_i64 nb;         // n_blocks
  hipep_i64 zp_row;     // bytes per row of packed zero points
  int log2_bs;          // log2(block_size)
  int k_tile;           // GEMV: values of K per shared-memory tile (a multiple of a chunk's values)
  int zp_mode;          // 0: none (2^(BITS-1)), 1: packed uint8, 2: floats of T
  int aligned16;        // GEMV: every row of B starts 16-byte aligned (one 16-byte load per chunk)
  int k_split;          // GEMV: warps sharing a column group, each on every k_split-th run of chunks
  int a_vec;            // GEMV: K % 4 == 0 and A aligned to 4 elements (A staged 4 values at a time)
  int int8_a;           // accuracy_level 4, integer zero points: A quantized to int8 per block (above)
};

#define MNB_WARPS 8
#define MNB_COLS 2       // output columns per warp (MNB_COLS_WIDE: the wide one-row variant)
#define MNB_COLS_WIDE 4
#define MNB_PAD 4

// The float 2^23 + v for the byte `b` (0..3) of w: its bits 0x4B0000vv.
HIPEP_DEVICE float hipep_mnb_byte_float(unsigned int w, int b) {
  return __uint_as_float(__byte_perm(w, 0x4B000000u, 0x7440u | (unsigned)b));
}

// q - bias for the values of one 32-bit word of B (8 4-bit values or 4 8-bit values, in order).
template <int BITS> HIPEP_DEVICE void hipep_mnb_word(unsigned int w, float bias, float* out);

template <> HIPEP_DEVICE void hipep_mnb_word<4>(unsigned int w, float bias, float* out) {
  const unsigned int lo = w & 0x0F0F0F0Fu, hi = (w >> 4) & 0x0F0F0F0Fu;
#pragma unroll
  for (int b = 0; b < 4; ++b) {
    out[2 * b] = hipep_mnb_byte_float(lo, b) - bias;
    out[2 * b + 1] = hipep_mnb_byte_float(hi, b) - bias;
  }
}

template <> HIPEP_DEVICE void hipep_mnb_word<8>(unsigned int w, float bias, float* out) {
#pragma unroll
  for (int b = 0; b < 4; ++b) out[b] = hipep_mnb_byte_float(w, b) - bias;
}

// The zero point of block `blk` of row n as a float.
template <typename T, int BITS>
HIPEP_DEVICE float hipep_mnb_zero_point(const void* zp, hipep_i64 n, hipep_i64 blk, const hipep_mnb_args& a) {
  if (a.zp_mode == 0) return (float)(1 << (BITS - 1));
  if (a.zp_mode == 2) return hipep_to_float(static_cast<const T*>(zp)[n * a.nb + blk]);
  const unsigned char* z = static_cast<const unsigned char*>(zp) + n * a.zp_row;
  if (BITS == 8) return (float)z[blk];
  return (float)((z[blk >> 1] >> ((blk & 1) * 4)) & 0xF);
}

// ---- int8 quantization of A (accuracy_level 4) --------------------------------------------------

// (scale, inverse) of a block of A with max |a| = amax, as MLAS computes them (IEEE divisions).
HIPEP_DEVICE float2 hipep_mnb_int8_params(float amax) {
  return make_float2(amax / 127.0f, amax != 0.0f ? 127.0f / amax : 0.0f);
}

// a' = q * scale with q = rint(a * inverse): the value the int8 code stands for.
HIPEP_DEVICE float hipep_mnb_int8_value(float v, float2 p) { return rintf(v * p.y) * p.x; }

// The maximum over an aligned group of `lanes` lanes (a power of two up to the warp size); every
// lane of the warp calls it with the same `lanes`.
HIPEP_DEVICE float hipep_mnb_group_max(float v, int lanes) {
  for (int o = lanes >> 1; o > 0; o >>= 1) v = fmaxf(v, HIPEP_SHFL_XOR(v, o));
  return v;
}

// ---- GEMV ---------------------------------------------------------------------------------------

template <typename T> struct alignas(4 * sizeof(T)) hipep_mnb_vec4 { T v[4]; };


// Loads of one step of a lane: chunks ch0 + u * step (u < U) of the tile at kt, for the warp's
// columns (zeros past the tile or past N), with the scale and zero point of each chunk's first
// half, all issued before any is used, so that none of them waits for another.
template <typename T, int BITS, int C, int U>
HIPEP_DEVICE void hipep_mnb_load_step(uint4 (&q)[U][C], float (&s)[U][C],
                                      float (&z)[U][C], const unsigned char* HIPEP_RESTRICT B,
                                      const T* HIPEP_RESTRICT scales, const void* HIPEP_RESTRICT zp, int ch0,
                                      int step, hipep_i64 kt, int tile_chunks, hipep_i64 col0,
                                      const hipep_mnb_args& a) {
  constexpr int VPL = 128 / BITS, VPH = VPL / 2;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int ch = ch0 + u * step;
    const hipep_i64 kv = kt + (hipep_i64)ch * VPL;  // first value of the chunk
#pragma unroll
    for (int c = 0; c < C; ++c) {
      const hipep_i64 n = col0 + c;
      q[u][c] = make_uint4(0u, 0u, 0u, 0u);
      s[u][c] = 0.0f;
      z[u][c] = 0.0f;
      if (ch < tile_chunks && n < a.n) {
        const hipep_i64 blk = kv >> a.log2_bs;
        s[u][c] = hipep_to_float(scales[n * a.nb + blk]);
        z[u][c] = hipep_mnb_zero_point<T, BITS>(zp, n, blk, a);
        const unsigned char* row = B + n * a.row_bytes + kv * BITS / 8;
        if (a.aligned16) {
          q[u][c] = *reinterpret_cast<const uint4*>(row);
        } else {
          const uint2 h0 = *reinterpret_cast<const uint2*>(row);
          uint2 h1 = make_uint2(0u, 0u);
          if (kv + VPH < a.k_pad) h1 = *reinterpret_cast<const uint2*>(row + 8);
          q[u][c] = make_uint4(h0.x, h0.y, h1.x, h1.y);
        }
      }
    }
  }
}

// 4 values of row m of A from column k as floats (zeros past M or K); a_vec: one aligned load.
template <typename T>
HIPEP_DEVICE float4 hipep_mnb_load_a4(const T* HIPEP_RESTRICT A, int m, hipep_i64 k, const hipep_mnb_args& a) {
  float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  if (m >= a.m || k >= a.k) return v;
  const T* p = A + (hipep_i64)m * a.k + k;
  if (a.a_vec) {  // k % 4 == 0 and K % 4 == 0: all four are in the row
    const hipep_mnb_vec4<T> x = *reinterpret_cast<const hipep_mnb_vec4<T>*>(p);
    return make_float4(hipep_to_float(x.v[0]), hipep_to_float(x.v[1]), hipep_to_float(x.v[2]), hipep_to_float(x.v[3]));
  }
  v.x = hipep_to_float(p[0]);
  if (k + 1 < a.k) v.y = hipep_to_float(p[1]);
  if (k + 2 < a.k) v.z = hipep_to_float(p[2]);
  if (k + 3 < a.k) v.w = hipep_to_float(p[3]);
  return v;
}

// Loads of 4 values a lane needs for one block of A: block_size 256 with 32 lanes takes two.
#define MNB_QA_LOADS ((256 / 4 + HIPEP_WARP_SIZE - 1) / HIPEP_WARP_SIZE)

// The GEMV's staging of A's tile at kt for int8_a: the f32 staging's layout, holding a' (above).
// A group of `lanes` lanes (block_size / 4, at most the warp) holds one block of one row in
// registers, 4 values a lane per load, finds the block's amax by shuffles and writes a'. The tile
// holds whole blocks (k_tile and fill_vals are multiples of block_size); every thread makes the
// same trips (groups past the last block read zeros and write nothing), so the shuffles see the
// whole warp.
template <typename T, int M_T, int VPL>
HIPEP_DEVICE void hipep_mnb_stage_a_int8(float* As, const T* HIPEP_RESTRICT A, hipep_i64 kt, int fill_vals,
                                         int row_stride, const hipep_mnb_args& a) {
  constexpr int STRIDE = VPL + MNB_PAD;
  const int quarter = 1 << (a.log2_bs - 2);  // loads of 4 values per block
  const int lanes = quarter < HIPEP_WARP_SIZE ? quarter : HIPEP_WARP_SIZE;
  const int loads = quarter / lanes;
  const int lane = threadIdx.x % lanes, groups = blockDim.x / lanes;
  const int per_row = fill_vals >> a.log2_bs, total = M_T * per_row;
  // The group's block g = m * per_row + blk, stepped by `groups` without a division per trip.
  int m = (threadIdx.x / lanes) / per_row, blk = (threadIdx.x / lanes) - m * per_row;
  for (int g0 = 0; g0 < total; g0 += groups) {
    const int g = g0 + threadIdx.x / lanes;  // m >= M_T >= a.m past the last block: zeros
    float4 v[MNB_QA_LOADS];
    float amax = 0.0f;
#pragma unroll
    for (int r = 0; r < MNB_QA_LOADS; ++r) {
      v[r] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (r < loads) {
        v[r] = hipep_mnb_load_a4(A, m, kt + (blk << a.log2_bs) + (lane + r * lanes) * 4, a);
        amax = fmaxf(amax, fmaxf(fmaxf(fabsf(v[r].x), fabsf(v[r].y)), fmaxf(fabsf(v[r].z), fabsf(v[r].w))));
      }
    }
    const float2 p = hipep_mnb_int8_params(hipep_mnb_group_max(amax, lanes));
    if (g < total) {
#pragma unroll
      for (int r = 0; r < MNB_QA_LOADS; ++r) {
        if (r < loads) {
          const int j = (blk << a.log2_bs) + (lane + r * lanes) * 4;
          const float4 q = make_float4(hipep_mnb_int8_value(v[r].x, p), hipep_mnb_int8_value(v[r].y, p),
                                       hipep_mnb_int8_value(v[r].z, p), hipep_mnb_int8_value(v[r].w, p));
          *reinterpret_cast<float4*>(As + m * row_stride + (j / VPL) * STRIDE + (j % VPL)) = q;
        }
      }
    }
    for (blk += groups; blk >= per_row; blk -= per_row) ++m;
  }
}

// C columns per warp, U chunks per column in flight per lane (the entry points below pick them).
template <typename T, int BITS, int M_T, int C, int U>
HIPEP_DEVICE void hipep_mnb_gemv(const T* HIPEP_RESTRICT A, const unsigned char* HIPEP_RESTRICT B,
                                 const T* HIPEP_RESTRICT scales, const void* HIPEP_RESTRICT zp,
                                 const T* HIPEP_RESTRICT bias, T* HIPEP_RESTRICT Y, const hipep_mnb_args a) {
  constexpr int VPL = 128 / BITS;  // values per 16-byte chunk
  constexpr int VPH = VPL / 2;     // values per 8-byte half
  constexpr int STRIDE = VPL + MNB_PAD;
  HIPEP_DYNAMIC_SHARED(float4, hipep_mnb_smem4);
  float* As = reinterpret_cast<float*>(hipep_mnb_smem4);
  __shared__ float partial[MNB_WARPS][M_T][C];

  // Warp w works on column group w % groups and on every k_split-th lane-width of chunks from
  // w / groups: a block covers groups * C columns, its warps splitting K k_split ways.
  const int lane = threadIdx.x % HIPEP_WARP_SIZE, warp = threadIdx.x / HIPEP_WARP_SIZE;
  const int groups = MNB_WARPS / a.k_split, group = warp % groups, split = warp / groups;
  const hipep_i64 col0 = ((hipep_i64)blockIdx.x * groups + group) * C;
  const int first = split * HIPEP_WARP_SIZE + lane;  // the lane's first chunk of a tile
  const int step = HIPEP_WARP_SIZE * a.k_split;      // chunks between the lane's consecutive chunks
  const int tile_chunks_max = a.k_tile / VPL;

  float acc[M_T][C];
#pragma unroll
  for (int m = 0; m < M_T; ++m)
#pragma unroll
    for (int c = 0; c < C; ++c) acc[m][c] = 0.0f;

  uint4 q[U][C];
  float qs[U][C], qz[U][C];
  for (hipep_i64 kt = 0; kt < a.k_pad; kt += a.k_tile) {
    const int tile_vals = (int)((a.k_pad - kt) < a.k_tile ? (a.k_pad - kt) : a.k_tile);
    const int tile_chunks = (tile_vals + VPL - 1) / VPL;
    const int fill_vals = tile_chunks * VPL;
    // The first step's loads of B do not depend on A: they are in flight while A is staged.
    hipep_mnb_load_step<T, BITS, C, U>(q, qs, qz, B, scales, zp, first, step, kt, tile_chunks, col0, a);
    __syncthreads();  // the previous tile's readers are done
    if (a.int8_a) {
      hipep_mnb_stage_a_int8<T, M_T, VPL>(As, A, kt, fill_vals, tile_chunks_max * STRIDE, a);
    } else if (a.a_vec) {  // K % 4 == 0 and A 4-element aligned: 4 values per load and per 16-byte store
      for (int i = threadIdx.x; i < M_T * fill_vals / 4; i += blockDim.x) {
        const int m = i / (fill_vals / 4), j = (i - m * (fill_vals / 4)) * 4;
        const hipep_i64 k = kt + j;
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (m < a.m && k < a.k) {
          const hipep_mnb_vec4<T> x = *reinterpret_cast<const hipep_mnb_vec4<T>*>(A + (hipep_i64)m * a.k + k);
          v = make_float4(hipep_to_float(x.v[0]), hipep_to_float(x.v[1]), hipep_to_float(x.v[2]),
                          hipep_to_float(x.v[3]));
        }
        *reinterpret_cast<float4*>(As + m * tile_chunks_max * STRIDE + (j / VPL) * STRIDE + (j % VPL)) = v;
      }
    } else {
      for (int i = threadIdx.x; i < M_T * fill_vals; i += blockDim.x) {
        const int m = i / fill_vals, j = i - m * fill_vals;
        const hipep_i64 k = kt + j;
        float v = 0.0f;
        if (m < a.m && k < a.k) v = hipep_to_float(A[(hipep_i64)m * a.k + k]);
        As[m * tile_chunks_max * STRIDE + (j / VPL) * STRIDE + (j % VPL)] = v;
      }
    }
    __syncthreads();

    for (int c0 = first; c0 < tile_chunks; c0 += step * U) {
      if (c0 != first) hipep_mnb_load_step<T, BITS, C, U>(q, qs, qz, B, scales, zp, c0, step, kt, tile_chunks, col0, a);
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int ch = c0 + u * step;
        if (ch >= tile_chunks) break;
        const hipep_i64 kv = kt + (hipep_i64)ch * VPL;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const hipep_i64 kh = kv + h * VPH;
          if (kh >= a.k_pad) break;  // the short last chunk of a row that is not 16-byte aligned
          const hipep_i64 blk = kh >> a.log2_bs;
          // The second half is in the first's block unless blocks are shorter than a chunk (4 bits,
          // block_size 16); a column past N has a zero scale and computes zeros, unwritten.
          const bool same_block = h == 0 || blk == (kv >> a.log2_bs);
          // Column c's values q - zp of this half into dq, and its scale.
          auto dequant = [&](int c, float* dq) -> float {
            const hipep_i64 n = col0 + c;
            float z = qz[u][c], sc = qs[u][c];
            if (!same_block && n < a.n) {
              sc = hipep_to_float(scales[n * a.nb + blk]);
              z = hipep_mnb_zero_point<T, BITS>(zp, n, blk, a);
            }
            const unsigned int w0 = h == 0 ? q[u][c].x : q[u][c].z, w1 = h == 0 ? q[u][c].y : q[u][c].w;
            if (a.zp_mode == 2) {
              hipep_mnb_word<BITS>(w0, 8388608.0f, dq);
              hipep_mnb_word<BITS>(w1, 8388608.0f, dq + VPH / 2);
#pragma unroll
              for (int j = 0; j < VPH; ++j) dq[j] -= z;
            } else {
              hipep_mnb_word<BITS>(w0, 8388608.0f + z, dq);  // 2^23 + zp: exact
              hipep_mnb_word<BITS>(w1, 8388608.0f + z, dq + VPH / 2);
            }
            return sc;
          };
          const float* arow = As + ch * STRIDE + h * VPH;
          if constexpr (M_T == 1) {
            // One row: its half of A in registers, then column by column (only one column's
            // values live at a time, which lets 4 columns of loads be in flight without spills).
            float x[VPH];
#pragma unroll
            for (int j4 = 0; j4 < VPH / 4; ++j4) {
              const float4 t = reinterpret_cast<const float4*>(arow)[j4];
              x[4 * j4] = t.x;
              x[4 * j4 + 1] = t.y;
              x[4 * j4 + 2] = t.z;
              x[4 * j4 + 3] = t.w;
            }
#pragma unroll
            for (int c = 0; c < C; ++c) {
              float dq[VPH];
              const float sc = dequant(c, dq);
              float p = 0.0f;
#pragma unroll
              for (int j = 0; j < VPH; ++j) p = fmaf(x[j], dq[j], p);
              acc[0][c] = fmaf(sc, p, acc[0][c]);
            }
          } else {
            // Several rows: every column's values once, each row's A read once from shared memory.
            float dq[C][VPH];
            float s[C];
#pragma unroll
            for (int c = 0; c < C; ++c) s[c] = dequant(c, dq[c]);
#pragma unroll
            for (int m = 0; m < M_T; ++m) {
              const float4* av = reinterpret_cast<const float4*>(arow + m * tile_chunks_max * STRIDE);
              float p[C];
#pragma unroll
              for (int c = 0; c < C; ++c) p[c] = 0.0f;
#pragma unroll
              for (int j4 = 0; j4 < VPH / 4; ++j4) {
                const float4 x = av[j4];
#pragma unroll
                for (int c = 0; c < C; ++c) {
                  p[c] = fmaf(x.x, dq[c][4 * j4], p[c]);
                  p[c] = fmaf(x.y, dq[c][4 * j4 + 1], p[c]);
                  p[c] = fmaf(x.z, dq[c][4 * j4 + 2], p[c]);
                  p[c] = fmaf(x.w, dq[c][4 * j4 + 3], p[c]);
                }
              }
#pragma unroll
              for (int c = 0; c < C; ++c) acc[m][c] = fmaf(s[c], p[c], acc[m][c]);
            }
          }
        }
      }
    }
  }

#pragma unroll
  for (int m = 0; m < M_T; ++m)
#pragma unroll
    for (int c = 0; c < C; ++c) acc[m][c] = hipep_warp_sum(acc[m][c]);
  if (a.k_split > 1) {  // the warps of a column group add their parts of K
    if (lane == 0) {
#pragma unroll
      for (int m = 0; m < M_T; ++m)
#pragma unroll
        for (int c = 0; c < C; ++c) partial[warp][m][c] = acc[m][c];
    }
    __syncthreads();
    if (split != 0) return;
#pragma unroll
    for (int m = 0; m < M_T; ++m)
#pragma unroll
      for (int c = 0; c < C; ++c)
        for (int s = 1; s < a.k_split; ++s) acc[m][c] += partial[s * groups + group][m][c];
  }
  if (lane == 0) {
#pragma unroll
    for (int c = 0; c < C; ++c) {
      const hipep_i64 n = col0 + c;
      if (n >= a.n) break;
      const float b = bias != 0 ? hipep_to_float(bias[n]) : 0.0f;
#pragma unroll
      for (int m = 0; m < M_T; ++m)
        if (m < a.m) Y[(hipep_i64)m * a.n + n] = hipep_from_float<T>(acc[m][c] + b);
    }
  }
}

// ---- GEMM ---------------------------------------------------------------------------------------

#define MNB_BM 64
#define MNB_BN 64
#define MNB_BK 32
#define MNB_GEMM_THREADS 256

// int8_a before the GEMM: each block of each row of A gets its (scale, inverse) in
// qp[m * n_blocks + blk] (the stream's workspace); the GEMM quantizes A as it loads it. A group of
// `lanes` lanes (block_size, at most the warp) per block, lane l on values l, l + lanes, ...
template <typename T>
HIPEP_DEVICE void hipep_mnb_a_int8_params(const T* HIPEP_RESTRICT A, float2* HIPEP_RESTRICT qp,
                                          const hipep_mnb_args a) {
  const int bs = 1 << a.log2_bs;
  const int lanes = bs < HIPEP_WARP_SIZE ? bs : HIPEP_WARP_SIZE;
  const int lane = threadIdx.x % lanes;
  const hipep_i64 g = (hipep_i64)blockIdx.x * (blockDim.x / lanes) + threadIdx.x / lanes;
  const hipep_i64 m = g / a.nb, k0 = (g - m * a.nb) * bs;
  float amax = 0.0f;
  if (m < a.m)
    for (int j = lane; j < bs && k0 + j < a.k; j += lanes)
      amax = fmaxf(amax, fabsf(hipep_to_float(A[m * a.k + k0 + j])));
  amax = hipep_mnb_group_max(amax, lanes);  // every lane of the warp gets here
  if (m < a.m && lane == 0) qp[g] = hipep_mnb_int8_params(amax);
}

template <typename T, int BITS>
HIPEP_DEVICE void hipep_mnb_gemm(const T* HIPEP_RESTRICT A, const unsigned char* HIPEP_RESTRICT B,
                                 const T* HIPEP_RESTRICT scales, const void* HIPEP_RESTRICT zp,
                                 const T* HIPEP_RESTRICT bias, T* HIPEP_RESTRICT Y,
                                 const float2* HIPEP_RESTRICT qp, const hipep_mnb_args a) {
  constexpr int VPW = 32 / BITS;                                        // values per 32-bit word of B
  constexpr int WORDS_PER_ROW = MNB_BK / VPW;                           // words of one B row in a K step
  constexpr int A_PER_THREAD = MNB_BM * MNB_BK / MNB_GEMM_THREADS;      // 8
  constexpr int B_PER_THREAD = MNB_BN * WORDS_PER_ROW / MNB_GEMM_THREADS;  // 1 (4 bits) or 2 (8 bits)
  __shared__ float4 As4[MNB_BK][MNB_BM / 4 + 1];  // As[k][m]; one float4 of padding per row
  __shared__ float4 Bs4[MNB_BK][MNB_BN / 4 + 1];  // Bs[k][n]
  float* As = reinterpret_cast<float*>(As4);
  float* Bs = reinterpret_cast<float*>(Bs4);
  constexpr int AST = MNB_BM + 4, BST = MNB_BN + 4;

  const int tid = threadIdx.x;
  const int tx = tid % 16, ty = tid / 16;
  const hipep_i64 m0 = (hipep_i64)blockIdx.y * MNB_BM, n0 = (hipep_i64)blockIdx.x * MNB_BN;
  float acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;

  // The next K step's operands, loaded into registers while the current step computes: A values
  // (consecutive threads along K: coalesced), and per word of B its bits, scale and zero point.
  float a_reg[A_PER_THREAD];
  unsigned int b_reg[B_PER_THREAD];
  float s_reg[B_PER_THREAD], z_reg[B_PER_THREAD];
  auto load = [&](hipep_i64 k0) {
#pragma unroll
    for (int r = 0; r < A_PER_THREAD; ++r) {
      const int i = tid + r * MNB_GEMM_THREADS;
      const hipep_i64 gm = m0 + i / MNB_BK, gk = k0 + i % MNB_BK;
      a_reg[r] = 0.0f;
      if (gm < a.m && gk < a.k) {
        a_reg[r] = hipep_to_float(A[gm * a.k + gk]);
        if (a.int8_a) a_reg[r] = hipep_mnb_int8_value(a_reg[r], qp[gm * a.nb + (gk >> a.log2_bs)]);
      }
    }
#pragma unroll
    for (int r = 0; r < B_PER_THREAD; ++r) {
      const int i = tid + r * MNB_GEMM_THREADS;
      const hipep_i64 gn = n0 + i / WORDS_PER_ROW, gk = k0 + (hipep_i64)(i % WORDS_PER_ROW) * VPW;
      b_reg[r] = 0u;
      s_reg[r] = 0.0f;
      z_reg[r] = 0.0f;
      if (gn < a.n && gk < a.k_pad) {
        const hipep_i64 blk = gk >> a.log2_bs;
        b_reg[r] = *reinterpret_cast<const unsigned int*>(B + gn * a.row_bytes + gk * BITS / 8);
        s_reg[r] = hipep_to_float(scales[gn * a.nb + blk]);
        z_reg[r] = hipep_mnb_zero_point<T, BITS>(zp, gn, blk, a);
      }
    }
  };

  load(0);
  for (hipep_i64 k0 = 0; k0 < a.k_pad; k0 += MNB_BK) {
#pragma unroll
    for (int r = 0; r < A_PER_THREAD; ++r) {
      const int i = tid + r * MNB_GEMM_THREADS;
      As[(i % MNB_BK) * AST + i / MNB_BK] = a_reg[r];
    }
#pragma unroll
    for (int r = 0; r < B_PER_THREAD; ++r) {
      const int i = tid + r * MNB_GEMM_THREADS;
      const int nn = i / WORDS_PER_ROW, wi = i % WORDS_PER_ROW;
      float v[VPW];
      if (a.zp_mode == 2) {
        hipep_mnb_word<BITS>(b_reg[r], 8388608.0f, v);
#pragma unroll
        for (int j = 0; j < VPW; ++j) v[j] = (v[j] - z_reg[r]) * s_reg[r];
      } else {
        hipep_mnb_word<BITS>(b_reg[r], 8388608.0f + z_reg[r], v);
#pragma unroll
        for (int j = 0; j < VPW; ++j) v[j] *= s_reg[r];  // zero past N or K_pad: the scale is 0
      }
#pragma unroll
      for (int j = 0; j < VPW; ++j) Bs[(wi * VPW + j) * BST + nn] = v[j];
    }
    __syncthreads();
    if (k0 + MNB_BK < a.k_pad) load(k0 + MNB_BK);  // in flight during the outer products below
#pragma unroll 8
    for (int kk = 0; kk < MNB_BK; ++kk) {
      const float4 av = As4[kk][ty];
      const float4 bv = Bs4[kk][tx];
      const float ar[4] = {av.x, av.y, av.z, av.w}, br[4] = {bv.x, bv.y, bv.z, bv.w};
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(ar[i], br[j], acc[i][j]);
    }
    __syncthreads();
  }

#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const hipep_i64 gn = n0 + tx * 4 + j;
    if (gn >= a.n) break;
    const float b = bias != 0 ? hipep_to_float(bias[gn]) : 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const hipep_i64 gm = m0 + ty * 4 + i;
      if (gm < a.m) Y[gm * a.n + gn] = hipep_from_float<T>(acc[i][j] + b);
    }
  }
}

// ---- one-row GEMV in packed arithmetic (decode) -------------------------------------------------
//
// The GEMV above spends ~5 instructions per weight (a byte permute and a subtraction to an f32,
// then an FMA); for one row of A that is more than the SMs issue while HBM delivers the weights, so
// it runs at a quarter of the copy bandwidth. For the common decode case -- one row, 4 bits,
// block_size >= 32 (a 16-byte chunk, 32 values, lies in one block), rows 16-byte aligned, integer
// or no zero points -- these variants cost ~2 instructions per weight or less:
//
// * q8 (accuracy_level 4, any T): A is quantized per block as MLAS does (hipep_mnb_int8_params,
//   codes rint(a * inverse)) while it is staged, and kept as int8 codes: per word of A the codes
//   of its even values (a0, a2, a4, a6) in one int and of its odd ones in another, the planes a
//   lane reads as two 16-byte loads. A word of B (8 values) is then two dp4a against its low and
//   high nibbles: sum_j qa_j * (qw_j - zp) = dp4a(lo) + dp4a(hi) - zp * sum_j qa_j, exact in
//   int32, and acc += isum * (scale_b * scale_a) in f32 -- the integer dot product the CPU EP's
//   CompInt8 kernels compute, where the general GEMV rounds q * scale first.
// * h2 (fp16 A, no int8 quantization): A is staged as half2 pairs in the order the nibble
//   extraction yields them ((a0, a4), (a1, a5), (a2, a6), (a3, a7) per word). Two nibbles become
//   the halves 1024 + q of a half2 by one AND/OR (1024's exponent OR'd above the nibble: exact),
//   q - zp is one HSUB2 (or HFMA2 by 1/16 for the high nibbles, exact), and 4 HFMA2 sum a word's
//   8 products into a half2 (at most 4 products per half: |sum| <= 32 |a|, no overflow while
//   |a| < 2000), which adds to the f32 accumulator with the block's scale.
//
// Launch shape: a warp per output column (8 a block), its lanes on every 32nd chunk of the row with
// MNB_ROW_U chunks in flight each; A's tile is staged once per block after the first loads of B
// are issued. One column a warp keeps each warp's registers few (four blocks reside per SM), which
// hides the latency of the shared-memory reads and HFMA2/dp4a chains that two columns a warp at
// two blocks per SM left exposed (measured on the H200: 4096 x 4096 fp16 at 5.3 us against 8.3).

// Signed byte dot product with accumulate (dp4a): sum of a.bytes[i] * b.bytes[i] + c.
HIPEP_DEVICE int hipep_dp4a(int a, int b, int c) {
#if defined(HIPEP_AMD)
#if __has_builtin(__builtin_amdgcn_sdot4)
  return __builtin_amdgcn_sdot4(a, b, c, false);
#else
#pragma unroll
  for (int i = 0; i < 4; ++i) c += (int)(signed char)(a >> (8 * i)) * (int)(signed char)(b >> (8 * i));
  return c;
#endif
#else
  return __dp4a(a, b, c);
#endif
}

#define MNB_ROW_U 4  // chunks per column in flight per lane

// Shared memory of the row GEMV for a tile of `tile_chunks` chunks: q8 -- the even and odd code
// planes (16 bytes a chunk each), each block's scale of A (4 bytes per block of 32+ values) and
// each chunk's code sum; h2 -- four planes of half2 pairs (16 bytes a chunk each).
// Words of A (8 values) a thread loads before it stores any: the tile's loads are in flight
// together rather than one round trip per word (K = 4096 with 256 threads is one pass).
#define MNB_ROW_STAGE_Q8 2
#define MNB_ROW_STAGE_H2 2

// q8 staging: thread t takes word w = t, t + blockDim.x, ... (8 values); the bs / 8 threads of a
// block of A (an aligned group of lanes, bs <= 256) find its amax and code sum by shuffles.
template <typename T>
HIPEP_DEVICE void hipep_mnb_row_stage_q8(unsigned char* smem, const T* HIPEP_RESTRICT A, hipep_i64 kt,
                                         int tile_chunks, const hipep_mnb_args& a) {
  constexpr int P = MNB_ROW_STAGE_Q8;
  int4* even = reinterpret_cast<int4*>(smem);
  int4* odd = even + tile_chunks;
  float* a_scale = reinterpret_cast<float*>(odd + tile_chunks);
  int* chunk_sum = reinterpret_cast<int*>(a_scale + (tile_chunks * 32 >> a.log2_bs) + 1);
  const int words = tile_chunks * 4;
  const int group = 1 << (a.log2_bs - 3);  // threads per block of A: 4 .. 32
  for (int w0 = 0; w0 < words; w0 += P * blockDim.x) {  // the same trips for every thread (shuffles)
    float v[P][8];
#pragma unroll
    for (int i = 0; i < P; ++i) {
      const int w = w0 + i * blockDim.x + threadIdx.x;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const hipep_i64 k = kt + (hipep_i64)w * 8 + j;
        v[i][j] = (w < words && k < a.k) ? hipep_to_float(A[k]) : 0.0f;
      }
    }
#pragma unroll
    for (int i = 0; i < P; ++i) {
      const int w = w0 + i * blockDim.x + threadIdx.x;
      float amax = 0.0f;
#pragma unroll
      for (int j = 0; j < 8; ++j) amax = fmaxf(amax, fabsf(v[i][j]));
      const float2 p = hipep_mnb_int8_params(hipep_mnb_group_max(amax, group));
      int lo = 0, hi = 0, sum = 0;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int q = (int)rintf(v[i][j] * p.y);
        sum += q;
        if (j % 2 == 0) lo |= (q & 0xFF) << (8 * (j / 2));
        else hi |= (q & 0xFF) << (8 * (j / 2));
      }
      for (int o = 1; o < 4; o <<= 1) sum += HIPEP_SHFL_XOR(sum, o);  // the chunk's 4 words
      if (w < words) {
        reinterpret_cast<int*>(even)[w] = lo;
        reinterpret_cast<int*>(odd)[w] = hi;
        if (w % 4 == 0) chunk_sum[w / 4] = sum;
        if (w % group == 0) a_scale[(w * 8) >> a.log2_bs] = p.x;
      }
    }
  }
}

// 8 halves of A from k0 (zeros past K): one 16-byte load where A allows it.
HIPEP_DEVICE uint4 hipep_mnb_row_a8(const hipep_half* HIPEP_RESTRICT A, hipep_i64 k0, const hipep_mnb_args& a) {
  if (a.a_vec && k0 + 8 <= a.k && (a.k % 8) == 0) return *reinterpret_cast<const uint4*>(A + k0);
  uint4 raw;
  hipep_half* h = reinterpret_cast<hipep_half*>(&raw);
#pragma unroll
  for (int j = 0; j < 8; ++j) h[j] = (k0 + j < a.k) ? A[k0 + j] : __float2half(0.0f);
  return raw;
}

// h2 staging: thread t takes word w (8 halves) and writes its 4 pairs to plane w % 4, chunk w / 4.
HIPEP_DEVICE void hipep_mnb_row_stage_h2(unsigned char* smem, const hipep_half* HIPEP_RESTRICT A, hipep_i64 kt,
                                         int tile_chunks, const hipep_mnb_args& a) {
  constexpr int P = MNB_ROW_STAGE_H2;
  uint4* planes = reinterpret_cast<uint4*>(smem);
  const int words = tile_chunks * 4;
  for (int w0 = 0; w0 < words; w0 += P * blockDim.x) {
    uint4 raw[P];
#pragma unroll
    for (int i = 0; i < P; ++i) {
      const int w = w0 + i * blockDim.x + threadIdx.x;
      if (w < words) raw[i] = hipep_mnb_row_a8(A, kt + (hipep_i64)w * 8, a);
    }
#pragma unroll
    for (int i = 0; i < P; ++i) {
      const int w = w0 + i * blockDim.x + threadIdx.x;
      if (w >= words) break;
      const hipep_half* h = reinterpret_cast<const hipep_half*>(&raw[i]);
      uint4 out;
      __half2 pr[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) pr[j] = __halves2half2(h[j], h[j + 4]);
      out.x = *reinterpret_cast<unsigned int*>(&pr[0]);
      out.y = *reinterpret_cast<unsigned int*>(&pr[1]);
      out.z = *reinterpret_cast<unsigned int*>(&pr[2]);
      out.w = *reinterpret_cast<unsigned int*>(&pr[3]);
      planes[(w % 4) * tile_chunks + w / 4] = out;
    }
  }
}

HIPEP_DEVICE __half2 hipep_u32_half2(unsigned int v) { return *reinterpret_cast<__half2*>(&v); }

// The h2 sum over one word x of B (8 values) against its pairs of A: a half2 of partial sums.
HIPEP_DEVICE __half2 hipep_mnb_row_word_h2(unsigned int x, uint4 pairs, __half2 c_lo, __half2 c_hi) {
  const __half2 sixteenth = __float2half2_rn(0.0625f);
  const unsigned int x8 = x >> 8;
  const __half2 d0 = __hsub2(hipep_u32_half2((x & 0x000F000Fu) | 0x64006400u), c_lo);               // (v0, v4)
  const __half2 d1 = __hfma2(hipep_u32_half2((x & 0x00F000F0u) | 0x64006400u), sixteenth, c_hi);   // (v1, v5)
  const __half2 d2 = __hsub2(hipep_u32_half2((x8 & 0x000F000Fu) | 0x64006400u), c_lo);              // (v2, v6)
  const __half2 d3 = __hfma2(hipep_u32_half2((x8 & 0x00F000F0u) | 0x64006400u), sixteenth, c_hi);  // (v3, v7)
  __half2 p = __hmul2(d0, hipep_u32_half2(pairs.x));
  p = __hfma2(d1, hipep_u32_half2(pairs.y), p);
  p = __hfma2(d2, hipep_u32_half2(pairs.z), p);
  return __hfma2(d3, hipep_u32_half2(pairs.w), p);
}

template <typename T, bool Q8>
HIPEP_DEVICE void hipep_mnb_gemv_row(const T* HIPEP_RESTRICT A, const unsigned char* HIPEP_RESTRICT B,
                                     const T* HIPEP_RESTRICT scales, const void* HIPEP_RESTRICT zp,
                                     const T* HIPEP_RESTRICT bias, T* HIPEP_RESTRICT Y, const hipep_mnb_args a) {
  constexpr int C = 1, U = MNB_ROW_U;
  HIPEP_DYNAMIC_SHARED(float4, hipep_mnb_smem4);
  unsigned char* smem = reinterpret_cast<unsigned char*>(hipep_mnb_smem4);

  // A warp per output column, its lanes on every warp-width-th chunk of the row.
  const int lane = threadIdx.x % HIPEP_WARP_SIZE, warp = threadIdx.x / HIPEP_WARP_SIZE;
  const hipep_i64 col0 = (hipep_i64)blockIdx.x * MNB_WARPS + warp;
  const int first = lane, step = HIPEP_WARP_SIZE;
  const int tile_chunks_max = a.k_tile / 32;

  float acc[C];
#pragma unroll
  for (int c = 0; c < C; ++c) acc[c] = 0.0f;
  uint4 q[U][C];
  float qs[U][C], qz[U][C];
  for (hipep_i64 kt = 0; kt < a.k_pad; kt += a.k_tile) {
    const int tile_vals = (int)((a.k_pad - kt) < a.k_tile ? (a.k_pad - kt) : a.k_tile);
    const int tile_chunks = tile_vals / 32;
    hipep_mnb_load_step<T, 4, C, U>(q, qs, qz, B, scales, zp, first, step, kt, tile_chunks, col0, a);
    if (kt != 0) __syncthreads();  // the previous tile's readers are done
    if constexpr (Q8) {
      hipep_mnb_row_stage_q8<T>(smem, A, kt, tile_chunks_max, a);
    } else {
      hipep_mnb_row_stage_h2(smem, reinterpret_cast<const hipep_half*>(A), kt, tile_chunks_max, a);
    }
    __syncthreads();
    for (int c0 = first; c0 < tile_chunks; c0 += step * U) {
      if (c0 != first) hipep_mnb_load_step<T, 4, C, U>(q, qs, qz, B, scales, zp, c0, step, kt, tile_chunks, col0, a);
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int ch = c0 + u * step;
        if (ch >= tile_chunks) break;
        if constexpr (Q8) {
          const int4* even = reinterpret_cast<const int4*>(smem);
          const int4* odd = even + tile_chunks_max;
          const float* a_scale = reinterpret_cast<const float*>(odd + tile_chunks_max);
          const int* chunk_sum = reinterpret_cast<const int*>(a_scale + (tile_chunks_max * 32 >> a.log2_bs) + 1);
          const int4 ae = even[ch], ao = odd[ch];
          const float sa = a_scale[(ch * 32) >> a.log2_bs];
          const int csum = chunk_sum[ch];
#pragma unroll
          for (int c = 0; c < C; ++c) {
            const unsigned int w[4] = {q[u][c].x, q[u][c].y, q[u][c].z, q[u][c].w};
            const int ev[4] = {ae.x, ae.y, ae.z, ae.w}, od[4] = {ao.x, ao.y, ao.z, ao.w};
            int isum = -(int)qz[u][c] * csum;
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              isum = hipep_dp4a((int)(w[i] & 0x0F0F0F0Fu), ev[i], isum);
              isum = hipep_dp4a((int)((w[i] >> 4) & 0x0F0F0F0Fu), od[i], isum);
            }
            acc[c] = fmaf((float)isum, qs[u][c] * sa, acc[c]);
          }
        } else {
          const uint4* planes = reinterpret_cast<const uint4*>(smem);
          const uint4 p0 = planes[ch], p1 = planes[tile_chunks_max + ch], p2 = planes[2 * tile_chunks_max + ch],
                      p3 = planes[3 * tile_chunks_max + ch];
#pragma unroll
          for (int c = 0; c < C; ++c) {
            const __half2 c_lo = __float2half2_rn(1024.0f + qz[u][c]);
            const __half2 c_hi = __float2half2_rn(-64.0f - qz[u][c]);
            float2 f = __half22float2(hipep_mnb_row_word_h2(q[u][c].x, p0, c_lo, c_hi));
            float part = f.x + f.y;
            f = __half22float2(hipep_mnb_row_word_h2(q[u][c].y, p1, c_lo, c_hi));
            part += f.x + f.y;
            f = __half22float2(hipep_mnb_row_word_h2(q[u][c].z, p2, c_lo, c_hi));
            part += f.x + f.y;
            f = __half22float2(hipep_mnb_row_word_h2(q[u][c].w, p3, c_lo, c_hi));
            part += f.x + f.y;
            acc[c] = fmaf(qs[u][c], part, acc[c]);
          }
        }
      }
    }
  }

#pragma unroll
  for (int c = 0; c < C; ++c) acc[c] = hipep_warp_sum(acc[c]);
  if (lane == 0) {
#pragma unroll
    for (int c = 0; c < C; ++c) {
      const hipep_i64 n = col0 + c;
      if (n >= a.n) break;
      const float b = bias != 0 ? hipep_to_float(bias[n]) : 0.0f;
      Y[n] = hipep_from_float<T>(acc[c] + b);
    }
  }
}

// ---- entry points ---------------------------------------------------------------------------------

#define HIPEP_MNB_PARAMS(T)                                                                           \
  const T *HIPEP_RESTRICT A, const unsigned char *HIPEP_RESTRICT B, const T *HIPEP_RESTRICT scales,  \
      const void *HIPEP_RESTRICT zp, const T *HIPEP_RESTRICT bias, T *HIPEP_RESTRICT Y, const hipep_mnb_args a

// Register caps keep two blocks of 8 warps per SM resident (128 registers a thread): with 4 chunks
// per column in flight per lane (one or two rows) that is 32 KB of B per block, 64 KB per SM, enough
// to cover memory latency; a cap of three blocks (80 registers) spilled the one-row GEMV.
// Chunks per column in flight per lane: 4 for one row (decode: 8 16-byte loads of B per lane, 4 KB
// per warp), which 128 registers hold without spilling; 2 for more rows, whose accumulators and A
// reads take the registers (4 chunks spill at two rows). The wide one-row variant (suffix _c4)
// holds the same 8 loads as 4 columns of 2 chunks: for rows of K a warp covers in 2 chunks a lane
// (K <= 2048 at 4 bits), where the narrow one would leave half its loads empty (at 4 bits ptxas
// reports 8 bytes of spill stores and 16 of spill loads for it).
#define HIPEP_MNB_GEMV_ENTRY(SUFFIX, NAME, T, BITS, M_T, C, U)                                        \
  HIPEP_KERNEL void __launch_bounds__(MNB_WARPS * HIPEP_WARP_SIZE, 2)                                 \
      hipep_mnb_gemv_##NAME##_b##BITS##_m##M_T##SUFFIX(HIPEP_MNB_PARAMS(T)) {                         \
    hipep_mnb_gemv<T, BITS, M_T, C, U>(A, B, scales, zp, bias, Y, a);                                 \
  }
#define HIPEP_MNB_GEMV(NAME, T, BITS, M_T) HIPEP_MNB_GEMV_ENTRY(, NAME, T, BITS, M_T, MNB_COLS, (M_T == 1 ? 4 : 2))

// The GEMM's qp: the blocks' (scale, inverse) for int8_a (hipep_mnb_a_int8_*), null otherwise.
#define HIPEP_MNB_TYPE(NAME, T, BITS)                                                                 \
  HIPEP_MNB_GEMV(NAME, T, BITS, 1)                                                                    \
  HIPEP_MNB_GEMV_ENTRY(_c4, NAME, T, BITS, 1, MNB_COLS_WIDE, 2)                                       \
  HIPEP_MNB_GEMV(NAME, T, BITS, 2)                                                                    \
  HIPEP_MNB_GEMV(NAME, T, BITS, 4)                                                                    \
  HIPEP_MNB_GEMV(NAME, T, BITS, 8)                                                                    \
  HIPEP_KERNEL void hipep_mnb_gemm_##NAME##_b##BITS(HIPEP_MNB_PARAMS(T), const float2* HIPEP_RESTRICT qp) { \
    hipep_mnb_gemm<T, BITS>(A, B, scales, zp, bias, Y, qp, a);                                        \
  }

#define HIPEP_MNB_A_INT8(NAME, T)                                                                     \
  HIPEP_KERNEL void hipep_mnb_a_int8_##NAME(const T* HIPEP_RESTRICT A, float2* HIPEP_RESTRICT qp,     \
                                            const hipep_mnb_args a) {                                 \
    hipep_mnb_a_int8_params<T>(A, qp, a);                                                             \
  }

HIPEP_MNB_A_INT8(f32, float)
HIPEP_MNB_A_INT8(f16, hipep_half)
HIPEP_MNB_A_INT8(bf16, hipep_bf16)
HIPEP_MNB_TYPE(f32, float, 4)
HIPEP_MNB_TYPE(f32, float, 8)
HIPEP_MNB_TYPE(f16, hipep_half, 4)
HIPEP_MNB_TYPE(f16, hipep_half, 8)
HIPEP_MNB_TYPE(bf16, hipep_bf16, 4)
HIPEP_MNB_TYPE(bf16, hipep_bf16, 8)

// The one-row GEMV in packed arithmetic (see above): q8 for accuracy_level 4, h2 for fp16 A.
#define HIPEP_MNB_ROW(VARIANT, NAME, T, Q8)                                                          \
  HIPEP_KERNEL void __launch_bounds__(MNB_WARPS * HIPEP_WARP_SIZE, 4)                                 \
      hipep_mnb_gemv_row_##VARIANT##_##NAME##_b4(HIPEP_MNB_PARAMS(T)) {                               \
    hipep_mnb_gemv_row<T, Q8>(A, B, scales, zp, bias, Y, a);                                          \
  }
HIPEP_MNB_ROW(q8, f32, float, true)
HIPEP_MNB_ROW(q8, f16, hipep_half, true)
HIPEP_MNB_ROW(q8, bf16, hipep_bf16, true)
HIPEP_MNB_ROW(h2, f16, hipep_half, false)
