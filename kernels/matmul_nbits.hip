// com.microsoft::MatMulNBits: Y[m, n] = sum_k A[m, k] * W[n, k] (+ bias[n]), W dequantized from
// blockwise `BITS`-bit weights: B is [N, n_blocks, blob] bytes (row n holds K_pad = n_blocks *
// block_size values, least significant bits first), scales [N, n_blocks] of A's type T, zero
// points packed like B (uint8, `BITS` per value, rows of zp_row bytes), floats of T, or absent
// (2^(BITS-1)). W[n, k] = (q - zp) * scale of k's block. Math in f32; the output rounds once.
//
// Two kernels here, picked by the runtime from M = the rows of A (one row of decode, where the
// weights allow, runs the GEMV in packed arithmetic of matmul_nbits_row.hip instead):
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
#include "matmul_nbits.h"

// ---- GEMV ---------------------------------------------------------------------------------------

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

// ---- entry points ---------------------------------------------------------------------------------

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
    hipep_grid_release();                                                                             \
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

// Each element type's kernels apart (HIPEP_TYPE_*, hipep_device.h): the runtime compiles this
// module for the model's type only, a third of the whole module's NVRTC time.
#if HIPEP_TYPE_f32
HIPEP_MNB_A_INT8(f32, float)
HIPEP_MNB_TYPE(f32, float, 4)
HIPEP_MNB_TYPE(f32, float, 8)
#endif
#if HIPEP_TYPE_f16
HIPEP_MNB_A_INT8(f16, hipep_half)
HIPEP_MNB_TYPE(f16, hipep_half, 4)
HIPEP_MNB_TYPE(f16, hipep_half, 8)
#endif
#if HIPEP_TYPE_bf16
HIPEP_MNB_A_INT8(bf16, hipep_bf16)
HIPEP_MNB_TYPE(bf16, hipep_bf16, 4)
HIPEP_MNB_TYPE(bf16, hipep_bf16, 8)
#endif
