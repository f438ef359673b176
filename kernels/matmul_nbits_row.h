// com.microsoft::MatMulNBits, one row of A (decode): the GEMV in packed arithmetic, as templates.
// kernels/matmul_nbits_row.hip instantiates them for MatMulNBits; the runtime renders the gated
// variant (hipep::GatedMatMulNBits: two weights of one A and a pointwise program joining their
// results) with each program's epilogue. The operands' layout and the general GEMV and GEMM are in
// matmul_nbits.hip; what both use is in matmul_nbits.h.
#ifndef HIPEP_MATMUL_NBITS_ROW_H
#define HIPEP_MATMUL_NBITS_ROW_H

#include "matmul_nbits.h"

// ---- one-row GEMV in packed arithmetic (decode) -------------------------------------------------
//
// The general GEMV (matmul_nbits.hip) spends ~5 instructions per weight (a byte permute and a subtraction to an f32,
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

// 8 values of A from k0 as floats (zeros past K, or all zeros where !live). A comes from the kernel
// ahead, which may still run when this one starts: coherent loads after the wait
// (hipep_ld_produced), which reach L2 only. So a word is one or two 16-byte loads where A allows it
// (a_vec: K % 8 == 0 and A 16-byte aligned, so every word is): eight 4-byte loads of one word would
// each fetch the word's sector from L2 again, and every block stages all of A.
template <typename T>
HIPEP_DEVICE void hipep_mnb_row_load8(float v[8], const T* HIPEP_RESTRICT A, hipep_i64 k0, bool live,
                                      const hipep_mnb_args& a) {
  static_assert((sizeof(T) * 8) % 16 == 0, "a word of A is whole 16-byte loads");
  if (live && a.a_vec && k0 + 8 <= a.k) {
    constexpr int loads = (int)(sizeof(T) * 8 / 16);
    uint4 raw[loads];
#pragma unroll
    for (int i = 0; i < loads; ++i) raw[i] = hipep_ld_produced(reinterpret_cast<const uint4*>(A + k0) + i);
    const T* t = reinterpret_cast<const T*>(raw);
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = hipep_to_float(t[j]);
    return;
  }
#pragma unroll
  for (int j = 0; j < 8; ++j) v[j] = (live && k0 + j < a.k) ? hipep_to_float(hipep_ld_produced(A + k0 + j)) : 0.0f;
}

// q8 staging: thread t takes word w = t, t + blockDim.x, ... (8 values); the bs / 8 threads of a
// block of A (an aligned group of lanes, bs <= 256) find its amax and code sum by shuffles.
template <typename T, int P = MNB_ROW_STAGE_Q8>
HIPEP_DEVICE void hipep_mnb_row_stage_q8(unsigned char* smem, const T* HIPEP_RESTRICT A, hipep_i64 kt,
                                         int tile_chunks, const hipep_mnb_args& a) {
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
      hipep_mnb_row_load8(v[i], A, kt + (hipep_i64)w * 8, w < words, a);
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

// 8 16-bit values of A (E: fp16, or bf16 for the tensor-core kernel) from k0 (zeros past K): one
// 16-byte load where A allows it. A comes from the kernel ahead, which may still run when this one
// starts: coherent loads after the wait (hipep_ld_produced).
template <typename E>
HIPEP_DEVICE uint4 hipep_mnb_row_a8(const E* HIPEP_RESTRICT A, hipep_i64 k0, const hipep_mnb_args& a) {
  static_assert(sizeof(E) == 2, "8 values of A are one 16-byte load");
  if (a.a_vec && k0 + 8 <= a.k && (a.k % 8) == 0) return hipep_ld_produced(reinterpret_cast<const uint4*>(A + k0));
  uint4 raw;
  E* h = reinterpret_cast<E*>(&raw);
#pragma unroll
  for (int j = 0; j < 8; ++j) h[j] = (k0 + j < a.k) ? hipep_ld_produced(A + k0 + j) : hipep_from_float<E>(0.0f);
  return raw;
}

// Where a staged word w of fp16 A (8 halves) goes in shared memory. The row GEMVs' h2 layout: its
// pairs (a_j, a_j+4), j = 0..3, as one 16-byte store to plane w % 4, chunk w / 4 (the pairs a lane
// reads for one chunk lie 16 bytes apart in four planes). kernels/matmul_nbits_tc.h has the
// tensor-core kernel's.
struct hipep_mnb_h2_layout {
  HIPEP_DEVICE static void put(unsigned char* smem, int w, int tile_chunks, const hipep_half* h) {
    __half2 pr[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) pr[j] = __halves2half2(h[j], h[j + 4]);
    reinterpret_cast<uint4*>(smem)[(w % 4) * tile_chunks + w / 4] = *reinterpret_cast<const uint4*>(pr);
  }
};

// h2 staging: thread t takes word w (8 values of E, fp16 but for the tensor-core kernel's bf16) and
// puts it where Layout says; P words a thread in flight.
template <int P = MNB_ROW_STAGE_H2, typename Layout = hipep_mnb_h2_layout, typename E = hipep_half>
HIPEP_DEVICE void hipep_mnb_row_stage_h2(unsigned char* smem, const E* HIPEP_RESTRICT A, hipep_i64 kt,
                                         int tile_chunks, const hipep_mnb_args& a) {
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
      Layout::put(smem, w, tile_chunks, reinterpret_cast<const E*>(&raw[i]));
    }
  }
}

// ---- where the row GEMV's A comes from ----------------------------------------------------------
// A source stages A's tile into shared memory after hipep_grid_wait(): `stage<Q8, P, Layout>(smem,
// kt, tile_chunks, a)` (P: words of A a thread in flight; Layout: where an fp16 word goes, h2 only).
//
// hipep_mnb_a_loaded: A in memory, the output of an earlier kernel of the stream.
template <typename T> struct hipep_mnb_a_loaded {
  const T* A;
  template <bool Q8, int P, typename Layout = hipep_mnb_h2_layout>
  HIPEP_DEVICE void stage(unsigned char* smem, hipep_i64 kt, int tile_chunks, const hipep_mnb_args& a) const {
    if constexpr (Q8) {
      hipep_mnb_row_stage_q8<T, P>(smem, A, kt, tile_chunks, a);
    } else {
      hipep_mnb_row_stage_h2<P, Layout, T>(smem, A, kt, tile_chunks, a);
    }
  }
};

// hipep_mnb_skip_norm_src (hipep::SkipNormMatMulNBits): A is the fp16 or bf16 (T) row that
// com.microsoft::SkipSimplifiedLayerNormalization makes of x and skip (+ bias), computed by every
// block from the rows themselves, so the norm is no launch of its own. The arithmetic is the skip
// norm kernel's (kernels/rms_norm.hip hipep_skip_rms_norm, and its _overlap form) in the same order:
// thread t sums the squares of vectors t, t + blockDim.x, ... (8 values each, f32, fmaf), the block
// sums the threads' parts (hipep_block_sum), y = (v / root) * gamma rounded once; with the norm
// kernel's 256 threads a row, the same bits. The normalized row stays in shared memory (only the
// GEMV reads it); block 0 writes the norm's other outputs the plan keeps (mean, inv_std,
// input_skip_bias_sum; null: dropped), the others only stage. W: vectors a thread (the row is at
// most W * blockDim.x vectors of 8). One row (decode); K % 8 == 0, 16-byte
// aligned rows, A's tile one tile (the binding checks). T: A's type, fp16 for the packed-arithmetic
// GEMVs; bf16 only as the tensor-core kernel's source (matmul_nbits_tc.h), bf16 having no h2 form.
template <int W, typename T = hipep_half> struct hipep_mnb_skip_norm_src {
  const T* x;
  const T* skip;
  const T* gamma;
  const T* bias;  // null: none
  float* mean;
  float* inv_std;
  T* sum_out;
  float eps;

  template <bool Q8, int P, typename Layout = hipep_mnb_h2_layout>
  HIPEP_DEVICE void stage(unsigned char* smem, hipep_i64, int tile_chunks, const hipep_mnb_args& a) const {
    static_assert(!Q8, "the fused norm stages 16-bit pairs only");
    __shared__ float scratch[HIPEP_MAX_WARPS];
    const int nv = (int)(a.k >> 3), words = tile_chunks * 4;
    // Every load of the row in flight at once: x and skip come from earlier kernels (coherent
    // loads after the wait), gamma and bias are weights.
    uint4 xu[W], su[W], gu[W], bu[W];
#pragma unroll
    for (int i = 0; i < W; ++i) {
      const int w = threadIdx.x + i * blockDim.x;
      xu[i] = su[i] = gu[i] = bu[i] = make_uint4(0u, 0u, 0u, 0u);
      if (w < nv) {
        xu[i] = hipep_ld_produced(reinterpret_cast<const uint4*>(x) + w);
        su[i] = hipep_ld_produced(reinterpret_cast<const uint4*>(skip) + w);
        gu[i] = hipep_ld_stream(reinterpret_cast<const uint4*>(gamma) + w);
        if (bias != 0) bu[i] = hipep_ld_stream(reinterpret_cast<const uint4*>(bias) + w);
      }
    }
    float f[W][8];
    float sq = 0.0f;
#pragma unroll
    for (int i = 0; i < W; ++i) {
      const T* xh = reinterpret_cast<const T*>(&xu[i]);
      const T* sh = reinterpret_cast<const T*>(&su[i]);
      const T* bh = reinterpret_cast<const T*>(&bu[i]);
      const bool on = (int)(threadIdx.x + i * blockDim.x) < nv;
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        f[i][k] = hipep_to_float(xh[k]) + hipep_to_float(sh[k]);
        if (bias != 0) f[i][k] += hipep_to_float(bh[k]);
        if (on) sq = fmaf(f[i][k], f[i][k], sq);
      }
    }
    sq = hipep_block_sum(sq, scratch);
    const float root = sqrtf(sq / (float)a.k + eps);
    const bool writer = blockIdx.x == 0;
#pragma unroll
    for (int i = 0; i < W; ++i) {
      const int w = threadIdx.x + i * blockDim.x;
      if (w >= words) break;
      const T* gh = reinterpret_cast<const T*>(&gu[i]);
      T o[8], s[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        o[k] = hipep_from_float<T>(w < nv ? f[i][k] / root * hipep_to_float(gh[k]) : 0.0f);
        s[k] = hipep_from_float<T>(f[i][k]);
      }
      Layout::put(smem, w, tile_chunks, o);
      if (writer && w < nv && sum_out != 0) reinterpret_cast<uint4*>(sum_out)[w] = *reinterpret_cast<const uint4*>(s);
    }
    if (writer && threadIdx.x == 0) {
      if (mean != 0) *mean = 0.0f;
      if (inv_std != 0) *inv_std = 1.0f / root;
    }
  }
};

HIPEP_DEVICE __half2 hipep_u32_half2(unsigned int v) { return *reinterpret_cast<__half2*>(&v); }

// The h2 sum over one word x of B (8 values) against its pairs of A: a half2 of partial sums.
HIPEP_DEVICE __half2 hipep_mnb_row_word_h2(unsigned int x, uint4 pairs, __half2 c_lo, __half2 c_hi) {
  const __half2 sixteenth = __float2half2_rn(0.0625f);
  const unsigned int x8 = x >> 8;
  const __half2 d0 = __hsub2(hipep_u32_half2(hipep_and_or<0x000F000Fu, 0x64006400u>(x)), c_lo);               // (v0, v4)
  const __half2 d1 = __hfma2(hipep_u32_half2(hipep_and_or<0x00F000F0u, 0x64006400u>(x)), sixteenth, c_hi);   // (v1, v5)
  const __half2 d2 = __hsub2(hipep_u32_half2(hipep_and_or<0x000F000Fu, 0x64006400u>(x8)), c_lo);              // (v2, v6)
  const __half2 d3 = __hfma2(hipep_u32_half2(hipep_and_or<0x00F000F0u, 0x64006400u>(x8)), sixteenth, c_hi);  // (v3, v7)
  __half2 p = __hmul2(d0, hipep_u32_half2(pairs.x));
  p = __hfma2(d1, hipep_u32_half2(pairs.y), p);
  p = __hfma2(d2, hipep_u32_half2(pairs.z), p);
  return __hfma2(d3, hipep_u32_half2(pairs.w), p);
}

// One chunk (32 values) of B against A's staged tile, chunk `ch` of `tile_chunks`.
// q8: the exact integer sum over the chunk of qa_j * (q_j - zp) and A's block scale (`sa`).
HIPEP_DEVICE int hipep_mnb_row_chunk_q8(uint4 q, const unsigned char* smem, int tile_chunks, int ch, float zp,
                                        int log2_bs, float& sa) {
  const int4* even = reinterpret_cast<const int4*>(smem);
  const int4* odd = even + tile_chunks;
  const float* a_scale = reinterpret_cast<const float*>(odd + tile_chunks);
  const int* chunk_sum = reinterpret_cast<const int*>(a_scale + ((tile_chunks << 5) >> log2_bs) + 1);
  const int4 ae = even[ch], ao = odd[ch];
  sa = a_scale[(ch << 5) >> log2_bs];
  const unsigned int w[4] = {q.x, q.y, q.z, q.w};
  const int ev[4] = {ae.x, ae.y, ae.z, ae.w}, od[4] = {ao.x, ao.y, ao.z, ao.w};
  int isum = -(int)zp * chunk_sum[ch];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    isum = hipep_dp4a((int)(w[i] & 0x0F0F0F0Fu), ev[i], isum);
    isum = hipep_dp4a((int)((w[i] >> 4) & 0x0F0F0F0Fu), od[i], isum);
  }
  return isum;
}

// h2: the chunk's sum of (q_j - zp) * a_j, four words of half2 partial sums added in f32.
HIPEP_DEVICE float hipep_mnb_row_chunk_h2(uint4 q, const unsigned char* smem, int tile_chunks, int ch, float zp) {
  const uint4* planes = reinterpret_cast<const uint4*>(smem);
  const __half2 c_lo = __float2half2_rn(1024.0f + zp);
  const __half2 c_hi = __float2half2_rn(-64.0f - zp);
  float2 f = __half22float2(hipep_mnb_row_word_h2(q.x, planes[ch], c_lo, c_hi));
  float part = f.x + f.y;
  f = __half22float2(hipep_mnb_row_word_h2(q.y, planes[tile_chunks + ch], c_lo, c_hi));
  part += f.x + f.y;
  f = __half22float2(hipep_mnb_row_word_h2(q.z, planes[2 * tile_chunks + ch], c_lo, c_hi));
  part += f.x + f.y;
  f = __half22float2(hipep_mnb_row_word_h2(q.w, planes[3 * tile_chunks + ch], c_lo, c_hi));
  return part + (f.x + f.y);
}

// acc plus a chunk's contribution: q8 -- isum * (scale_b * scale_a), as MLAS's CompInt8 kernels;
// h2 -- scale_b * the chunk's sum.
template <bool Q8>
HIPEP_DEVICE float hipep_mnb_row_chunk(float acc, uint4 q, float qs, float qz, const unsigned char* smem,
                                       int tile_chunks, int ch, int log2_bs) {
  if constexpr (Q8) {
    float sa;
    const int isum = hipep_mnb_row_chunk_q8(q, smem, tile_chunks, ch, qz, log2_bs, sa);
    return fmaf((float)isum, qs * sa, acc);
  } else {
    return fmaf(qs, hipep_mnb_row_chunk_h2(q, smem, tile_chunks, ch, qz), acc);
  }
}

// A warp's column of B, scales and zero points, located once (the loads below index them by chunk
// with 32-bit offsets instead of recomputing 64-bit addresses per load).
template <typename T> struct hipep_mnb_row_col {
  const uint4* b;          // the column's row of B in 16-byte chunks (32 values each)
  const T* scale;          // its block scales
  const unsigned char* zp; // its packed 4-bit zero points (zp_mode 1), else null
  bool live;               // the column is < N (a warp past N loads nothing and writes nothing)
};

template <typename T>
HIPEP_DEVICE hipep_mnb_row_col<T> hipep_mnb_row_col_at(const unsigned char* B, const T* scales, const void* zp,
                                                       hipep_i64 col, const hipep_mnb_args& a) {
  hipep_mnb_row_col<T> c;
  c.live = col < a.n;
  const hipep_i64 n = c.live ? col : 0;
  c.b = reinterpret_cast<const uint4*>(B + n * a.row_bytes);
  c.scale = scales + n * a.nb;
  c.zp = a.zp_mode == 1 ? static_cast<const unsigned char*>(zp) + n * a.zp_row : nullptr;
  hipep_materialize(c.b);
  hipep_materialize(c.scale);
  hipep_materialize(c.zp);
  return c;
}

// A lane's U chunks ch0 + u * warp size (below `end`) of its column: the weights, each chunk's
// block scale and zero point (8 without zero points), all issued before any is used. They read
// only the session's weights, so the first call may come before hipep_grid_wait(); they go
// through hipep_ld_stream so that they really are issued before it (see there).
template <typename T, int U>
HIPEP_DEVICE void hipep_mnb_row_load(uint4 (&q)[U], float (&s)[U], float (&z)[U], const hipep_mnb_row_col<T>& c,
                                     int ch0, int end, int log2_bs) {
  // The lane's first chunk located once; chunk u is warp-size chunks on, (warp size * 32) >> log2_bs
  // blocks on (log2_bs <= 10), so each load is a constant or one multiple away from the first.
  const uint4* b = c.b + ch0;
  const int blk0 = (ch0 << 5) >> log2_bs, blk_step = (HIPEP_WARP_SIZE << 5) >> log2_bs;
  const T* scale = c.scale + blk0;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int ch = ch0 + u * HIPEP_WARP_SIZE;
    q[u] = make_uint4(0u, 0u, 0u, 0u);
    s[u] = 0.0f;
    z[u] = 8.0f;
    if (c.live && ch < end) {
      q[u] = hipep_ld_stream(b + u * HIPEP_WARP_SIZE);
      s[u] = hipep_to_float(hipep_ld_stream(scale + u * blk_step));
      if (c.zp != nullptr) {
        const int blk = blk0 + u * blk_step;
        z[u] = (float)((hipep_ld_stream(c.zp + (blk >> 1)) >> ((blk & 1) * 4)) & 0xF);
      }
    }
  }
}

template <typename T, bool Q8, typename Src = hipep_mnb_a_loaded<T>>
HIPEP_DEVICE void hipep_mnb_gemv_row(const Src src, const unsigned char* HIPEP_RESTRICT B,
                                     const T* HIPEP_RESTRICT scales, const void* HIPEP_RESTRICT zp,
                                     const T* HIPEP_RESTRICT bias, T* HIPEP_RESTRICT Y, const hipep_mnb_args a) {
  constexpr int U = MNB_ROW_U, STEP = HIPEP_WARP_SIZE;
  hipep_grid_release();  // the next kernel may load its weights while this one works
  HIPEP_DYNAMIC_SHARED(float4, hipep_mnb_smem4);
  unsigned char* smem = reinterpret_cast<unsigned char*>(hipep_mnb_smem4);

  // A warp per output column, its lanes on every warp-width-th chunk of the row; A staged in
  // tiles of tile_chunks chunks (one tile for K up to ~20k values).
  const int lane = threadIdx.x % HIPEP_WARP_SIZE, warp = threadIdx.x / HIPEP_WARP_SIZE;
  const hipep_mnb_row_col<T> col = hipep_mnb_row_col_at<T>(B, scales, zp, (hipep_i64)blockIdx.x * MNB_WARPS + warp, a);
  const int chunks = (int)(a.k_pad >> 5), tile_chunks = a.k_tile >> 5;

  uint4 q[U];
  float qs[U], qz[U];
  hipep_mnb_row_load<T, U>(q, qs, qz, col, lane, tile_chunks < chunks ? tile_chunks : chunks, a.log2_bs);
  hipep_grid_wait();  // A, and Y's memory, belong to earlier kernels of the stream

  float acc = 0.0f;
  for (int t0 = 0; t0 < chunks; t0 += tile_chunks) {
    const int end = chunks - t0 < tile_chunks ? chunks : t0 + tile_chunks;
    if (t0 != 0) {
      hipep_mnb_row_load<T, U>(q, qs, qz, col, t0 + lane, end, a.log2_bs);
      __syncthreads();  // the previous tile's readers are done
    }
    src.template stage<Q8, (Q8 ? MNB_ROW_STAGE_Q8 : MNB_ROW_STAGE_H2)>(smem, (hipep_i64)t0 << 5, tile_chunks, a);
    __syncthreads();
    for (int c0 = t0 + lane; c0 < end; c0 += STEP * U) {
      if (c0 != t0 + lane) hipep_mnb_row_load<T, U>(q, qs, qz, col, c0, end, a.log2_bs);
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int ch = c0 + u * STEP - t0;  // the chunk within the tile
        if (ch >= end - t0) break;
        acc = hipep_mnb_row_chunk<Q8>(acc, q[u], qs[u], qz[u], smem, tile_chunks, ch, a.log2_bs);
      }
    }
  }

  acc = hipep_warp_sum(acc);
  if (lane == 0 && col.live) {
    const hipep_i64 n = (hipep_i64)blockIdx.x * MNB_WARPS + warp;
    const float b = bias != 0 ? hipep_to_float(hipep_ld_stream(bias + n)) : 0.0f;
    Y[n] = hipep_from_float<T>(acc + b);
  }
}

// All of A (rows one round of U chunks a lane covers) staged for the block, then a barrier: one
// word of A a thread in flight where a block's threads cover the row in one pass (U <= 2).
template <bool Q8, int U, typename Src>
HIPEP_DEVICE void hipep_mnb_row_stage_whole(unsigned char* smem, const Src& src, int chunks, const hipep_mnb_args& a) {
  src.template stage<Q8, (U <= 2 ? 1 : (Q8 ? MNB_ROW_STAGE_Q8 : MNB_ROW_STAGE_H2))>(smem, 0, chunks, a);
  __syncthreads();
}

// ---- the row GEMV for grids of several waves ------------------------------------------------------
//
// The kernel above holds 64 registers a thread (the tile loop, per-chunk zero points, U = 4 loads
// whatever the row's length), so 4 blocks reside per SM. Where the grid is more than one wave of
// those (the FFN's up projections, the LM head: N past 4 * 8 * SMs columns), each further wave
// pays a whole load round trip with half the loads in flight that the SM could hold. This variant
// takes rows one tile long that a warp covers in one round of U chunks a lane (U * warp size
// chunks at most), stages A whole, and carries zero points only where the node has them: 32-48
// registers for h2, 6-8 blocks per SM (measured on the H200, 2048 -> 32000 fp16: 15.5 us against
// 21.5). Within one wave the kernel above is faster (its launches overlap better: 4096 x 4096,
// 4.9 us against 5.9), so the binding picks this one only past a wave. The sums are the kernel
// above's, chunk for chunk in the same order (hipep_mnb_row_chunk): the same bits.
//
// SPLIT > 1 (h2, grids of at most half a wave: the ~1.1B model's down and o projections, 256 blocks
// on 132 SMs): SPLIT warps share a column, each on its own run of U * warp size chunks, so twice
// the loads are in flight on an SM that would otherwise hold two blocks; the warps' sums meet in
// shared memory, in warp order (measured on the H200, down 8192 -> 2048 fp16: 5.6 us against the
// tiled kernel's 7.7, benchmarks/results/2026-12-02-gemv-study-h200.md). Its sums are the tiled
// kernel's over other groupings of the chunks: not the same bits.
//
// COLS > 1: a warp (or SPLIT warps) takes COLS adjacent output columns, one round of loads of each,
// and every pair of A it reads from shared memory serves all of them; the grid is COLS times
// smaller, so the next kernel's blocks find room beside this one's (matmul_nbits_row.hip has what
// that was measured to be worth). Each column's sum is the COLS = 1 kernel's, chunk for chunk: the
// same bits.
template <typename T, bool Q8, int U, bool ZP, int SPLIT = 1, typename Src = hipep_mnb_a_loaded<T>, int COLS = 1>
HIPEP_DEVICE void hipep_mnb_gemv_row1(const Src src, const unsigned char* HIPEP_RESTRICT B,
                                      const T* HIPEP_RESTRICT scales, const void* HIPEP_RESTRICT zp,
                                      const T* HIPEP_RESTRICT bias, T* HIPEP_RESTRICT Y, const hipep_mnb_args a) {
  hipep_grid_release();
  HIPEP_DYNAMIC_SHARED(float4, hipep_mnb_smem4);
  unsigned char* smem = reinterpret_cast<unsigned char*>(hipep_mnb_smem4);
  const int lane = threadIdx.x % HIPEP_WARP_SIZE, warp = threadIdx.x / HIPEP_WARP_SIZE;
  const int part = warp % SPLIT;  // this warp's run of chunks within its column
  const hipep_i64 n0 = ((hipep_i64)blockIdx.x * (MNB_WARPS / SPLIT) + warp / SPLIT) * COLS;
  hipep_mnb_row_col<T> col[COLS];
#pragma unroll
  for (int c = 0; c < COLS; ++c) {
    col[c] = hipep_mnb_row_col_at<T>(B, scales, zp, n0 + c, a);
    if (!ZP) col[c].zp = nullptr;  // known when compiling: no zero-point loads, no registers for them
  }
  const int chunks = (int)(a.k_pad >> 5);
  const int first = part * U * HIPEP_WARP_SIZE + lane;
  uint4 q[COLS][U];
  float qs[COLS][U], qz[COLS][U];
#pragma unroll
  for (int c = 0; c < COLS; ++c)  // the warp's share of the row: one round
    hipep_mnb_row_load<T, U>(q[c], qs[c], qz[c], col[c], first, chunks, a.log2_bs);
  hipep_grid_wait();  // A, and Y's memory, belong to earlier kernels of the stream
  hipep_mnb_row_stage_whole<Q8, U>(smem, src, chunks, a);
  float acc[COLS];
#pragma unroll
  for (int c = 0; c < COLS; ++c) acc[c] = 0.0f;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int ch = first + u * HIPEP_WARP_SIZE;
#pragma unroll
    for (int c = 0; c < COLS; ++c)
      if (ch < chunks) acc[c] = hipep_mnb_row_chunk<Q8>(acc[c], q[c][u], qs[c][u], qz[c][u], smem, chunks, ch, a.log2_bs);
  }
#pragma unroll
  for (int c = 0; c < COLS; ++c) acc[c] = hipep_warp_sum(acc[c]);
  if constexpr (SPLIT > 1) {
    __shared__ float partial[MNB_WARPS][COLS];
    if (lane == 0) {
#pragma unroll
      for (int c = 0; c < COLS; ++c) partial[warp][c] = acc[c];
    }
    __syncthreads();
    if (part != 0) return;
#pragma unroll
    for (int p = 1; p < SPLIT; ++p)
#pragma unroll
      for (int c = 0; c < COLS; ++c) acc[c] += partial[warp + p][c];
  }
#pragma unroll
  for (int c = 0; c < COLS; ++c) {
    if (lane == 0 && col[c].live) {
      const float b = bias != 0 ? hipep_to_float(hipep_ld_stream(bias + n0 + c)) : 0.0f;
      Y[n0 + c] = hipep_from_float<T>(acc[c] + b);
    }
  }
}

// ---- gated: two weights of one A, their results joined by a pointwise program ------------------
//
// hipep::GatedMatMulNBits (a gated MLP's gate and up projections and its activation). A warp
// takes output column n of both weights: it issues one round of loads of both columns (U chunks a
// lane each, as hipep_mnb_gemv_row1 does for one), waits for the previous kernel, stages A once
// for both, sums each column's products exactly as the row1 kernel does (so each projection's sum
// has the same bits as hipep_mnb_gemv_row1's), rounds the two sums to T as the projections' outputs
// are, and writes Epilogue()(first, second): the pointwise program, rendered by the runtime. The
// two results never reach memory. ZP: both weights have packed 4-bit zero points (a.zp_mode 1).
template <typename T, typename TO, bool Q8, int U, bool ZP, typename Epilogue, typename Src = hipep_mnb_a_loaded<T>>
HIPEP_DEVICE void hipep_mnb_gemv_row1_gated(const Src src, const unsigned char* HIPEP_RESTRICT B0,
                                            const T* HIPEP_RESTRICT scales0, const void* HIPEP_RESTRICT zp0,
                                            const unsigned char* HIPEP_RESTRICT B1,
                                            const T* HIPEP_RESTRICT scales1, const void* HIPEP_RESTRICT zp1,
                                            TO* HIPEP_RESTRICT Y, const hipep_mnb_args a) {
  hipep_grid_release();
  HIPEP_DYNAMIC_SHARED(float4, hipep_mnb_smem4);
  unsigned char* smem = reinterpret_cast<unsigned char*>(hipep_mnb_smem4);
  const int lane = threadIdx.x % HIPEP_WARP_SIZE, warp = threadIdx.x / HIPEP_WARP_SIZE;
  const hipep_i64 n = (hipep_i64)blockIdx.x * MNB_WARPS + warp;
  hipep_mnb_row_col<T> col0 = hipep_mnb_row_col_at<T>(B0, scales0, zp0, n, a);
  hipep_mnb_row_col<T> col1 = hipep_mnb_row_col_at<T>(B1, scales1, zp1, n, a);
  if (!ZP) col0.zp = col1.zp = nullptr;
  const int chunks = (int)(a.k_pad >> 5);
  uint4 q0[U], q1[U];
  float qs0[U], qz0[U], qs1[U], qz1[U];
  hipep_mnb_row_load<T, U>(q0, qs0, qz0, col0, lane, chunks, a.log2_bs);
  hipep_mnb_row_load<T, U>(q1, qs1, qz1, col1, lane, chunks, a.log2_bs);
  hipep_grid_wait();  // A, and Y's memory, belong to earlier kernels of the stream
  hipep_mnb_row_stage_whole<Q8, U>(smem, src, chunks, a);
  float acc0 = 0.0f, acc1 = 0.0f;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int ch = lane + u * HIPEP_WARP_SIZE;
    if (ch < chunks) {
      acc0 = hipep_mnb_row_chunk<Q8>(acc0, q0[u], qs0[u], qz0[u], smem, chunks, ch, a.log2_bs);
      acc1 = hipep_mnb_row_chunk<Q8>(acc1, q1[u], qs1[u], qz1[u], smem, chunks, ch, a.log2_bs);
    }
  }
  acc0 = hipep_warp_sum(acc0);
  acc1 = hipep_warp_sum(acc1);
  if (lane == 0 && col0.live) Y[n] = Epilogue()(hipep_from_float<T>(acc0), hipep_from_float<T>(acc1));
}

// The gated kernel's parameters after A (a rendered kernel whose A is another source, e.g. the
// fused norm, puts that source first).
#define HIPEP_MNB_GATED_WEIGHTS(T, TO)                                                                \
  const unsigned char *HIPEP_RESTRICT B0, const T *HIPEP_RESTRICT scales0,                            \
      const void *HIPEP_RESTRICT zp0, const unsigned char *HIPEP_RESTRICT B1,                            \
      const T *HIPEP_RESTRICT scales1, const void *HIPEP_RESTRICT zp1, TO *HIPEP_RESTRICT Y,             \
      const hipep_mnb_args a
#define HIPEP_MNB_GATED_PARAMS(T, TO) const T *HIPEP_RESTRICT A, HIPEP_MNB_GATED_WEIGHTS(T, TO)
// The row GEMV's parameters after A.
#define HIPEP_MNB_WEIGHTS(T)                                                                          \
  const unsigned char *HIPEP_RESTRICT B, const T *HIPEP_RESTRICT scales, const void *HIPEP_RESTRICT zp, \
      const T *HIPEP_RESTRICT bias, T *HIPEP_RESTRICT Y, const hipep_mnb_args a

#endif  // HIPEP_MATMUL_NBITS_ROW_H
