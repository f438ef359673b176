// Tensor-core candidates for the one-row int4 GEMV (4 bits, block 32, no zero points, fp16 A and
// scales), timed by benchmarks/gemv_study.py beside gemv_study.hip's. The row GEMVs spend ~17
// instructions on a word of B (8 weights: 4 LOP3 and a shift making halves of the nibbles, 4
// subtractions of the offsets, 4 HFMA2, 2 conversions and 2 adds into f32); mma.sync takes the
// nibbles' halves as they come and sums in f32, so the offsets come off once a chunk. Kept apart
// from gemv_study.hip so that the tests' host stand-in (tests/unit/host_cuda, which emulates a
// warp's mma) runs these on the CPU against numpy: that file's other kernels declare their shared
// memory in ways the stand-in does not take.
#include "hipep_device.h"
typedef long long i64;

// ---- tensor cores: the weights as mma.sync B operands ------------------------------------------------
//   h2_mma         a warp takes 8 columns (quad g of lanes 4g..4g+3 on column g) over its share of the row
//                  (SPLIT warps a column group); in a round thread t of every quad loads chunk 4r + t of its
//                  column (16 bytes, one block of 32). Each word's nibbles become halves 1024 + q (low
//                  nibbles) and 1024 + 16 q (high ones) by one LOP3 each -- no subtraction -- and enter
//                  mma.m16n8k16 (f16 in, f32 accumulate) as B; A's row r holds x only at the k slots thread
//                  r owns (x / 16 against high nibbles: exact), so D[r][n] is thread r's chunk's sum for
//                  column n, whose block scale applies after the 8 mmas of the chunk. The offsets 1024 x and
//                  64 x and the zero point (8) come off per chunk in f32: corr = 1024 sum(x even) + 64
//                  sum(x odd) + 8 sum(x), staged with A. About half the h2 kernels' instructions a weight.
//   FRAG 0: A staged as the 4 pairs of a word (16 bytes), moved into the mma's A registers {pair, 0,
//   pair, 0} per mma (register moves: ~8 a word in the SASS); FRAG 1: A staged as the two A operands
//   of a word's mmas, zeros included (32 bytes a word), each one 16-byte shared load straight into the
//   operand's registers.
//   U: rounds of loads in flight a lane. Only the study's case: block 32, no zero points, chunks a
//   multiple of 4 * SPLIT.
// A staged for the candidates below: word w (8 halves) as its four pairs (a0, a4), (a2, a6), (a1 / 16,
// a5 / 16), (a3 / 16, a7 / 16) -- the low nibbles' k slots, then the high ones' (1024 + 16 q against x / 16:
// exact) -- or, FRAG, as the two mma A operands they make, {pair, 0, pair, 0} each; and after them each
// chunk's corr = 1024 sum(x even) + 64 sum(x odd) + 8 sum(x), the halves' offsets and the zero point (8).
template <bool FRAG>
__device__ void stage_pairs(uint4* planes, float* corr, const __half* __restrict__ A, int chunks) {
  for (int w0 = 0; w0 < chunks * 4; w0 += blockDim.x) {  // the same trips for every thread (shuffles)
    const int w = w0 + threadIdx.x;
    float c = 0.0f;
    if (w < chunks * 4) {
      const uint4 raw = hipep_ld_produced(reinterpret_cast<const uint4*>(A) + w);
      const __half* h = reinterpret_cast<const __half*>(&raw);
      __half2 pr[4];
      pr[0] = __halves2half2(h[0], h[4]);
      pr[1] = __halves2half2(h[2], h[6]);
      pr[2] = __halves2half2(__float2half(__half2float(h[1]) * 0.0625f), __float2half(__half2float(h[5]) * 0.0625f));
      pr[3] = __halves2half2(__float2half(__half2float(h[3]) * 0.0625f), __float2half(__half2float(h[7]) * 0.0625f));
      const unsigned int* u = reinterpret_cast<const unsigned int*>(pr);
      if constexpr (FRAG) {
        planes[2 * w] = make_uint4(u[0], 0u, u[1], 0u);
        planes[2 * w + 1] = make_uint4(u[2], 0u, u[3], 0u);
      } else {
        planes[w] = make_uint4(u[0], u[1], u[2], u[3]);
      }
      float even = 0.0f, odd = 0.0f;
#pragma unroll
      for (int j = 0; j < 8; j += 2) {
        even += __half2float(h[j]);
        odd += __half2float(h[j + 1]);
      }
      c = 1024.0f * even + 64.0f * odd + 8.0f * (even + odd);
    }
    c += __shfl_xor_sync(0xffffffffu, c, 1);
    c += __shfl_xor_sync(0xffffffffu, c, 2);
    if (w < chunks * 4 && (w & 3) == 0) corr[w >> 2] = c;
  }
}

template <int U, int SPLIT, bool FRAG>
__device__ void h2_mma(const __half* __restrict__ A, const unsigned char* __restrict__ B, const __half* __restrict__ S,
                       __half* __restrict__ Y, int n, int row_bytes, int nb, int log2_bs, int k) {
  hipep_grid_release();
  constexpr int PER_WORD = FRAG ? 2 : 1;  // uint4 of A a word of B
  HIPEP_DYNAMIC_SHARED(uint4, mma_smem);  // PER_WORD * 4 uint4 of A a chunk, then a float corr a chunk
  __shared__ uint4 zeros[4 * PER_WORD];
  __shared__ float partial[8][8];      // [warp][column of its group] for SPLIT > 1
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane >> 2, t = lane & 3;
  const int groups = 8 / SPLIT, group = warp / SPLIT, part = warp % SPLIT;
  const int chunks = k / 32, per_warp = chunks / SPLIT, rounds = per_warp / 4;
  const int n0 = (blockIdx.x * groups + group) * 8;
  const int col = n0 + g;
  const uint4* brow = reinterpret_cast<const uint4*>(B + (i64)(col < n ? col : 0) * row_bytes);
  const int cbase = part * per_warp;
  const bool owner = g < 4;  // rows 0..3 of D: the partial sums of thread g of every quad
  const int sc0 = n0 + 2 * t, sc1 = n0 + 2 * t + 1;  // the columns of this lane's D elements
  // the lane's weights and (owners) its two columns' scales, located once
  const uint4* bq = brow + cbase + t;
  const __half* s0row = S + (i64)(owner && sc0 < n ? sc0 : 0) * nb;
  const __half* s1row = S + (i64)(owner && sc1 < n ? sc1 : 0) * nb;
  hipep_materialize(bq);
  hipep_materialize(s0row);
  hipep_materialize(s1row);
  uint4 q[U];
  float s0[U], s1[U];
  auto load = [&](int r0) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int r = r0 + u;
      q[u] = make_uint4(0u, 0u, 0u, 0u);
      s0[u] = s1[u] = 0.0f;
      if (r < rounds) {
        if (col < n) q[u] = hipep_ld_stream(bq + 4 * r);
        const int blk = ((cbase + 4 * r + g) << 5) >> log2_bs;  // the chunk whose sums this lane's D holds
        if (owner && sc0 < n) s0[u] = __half2float(hipep_ld_stream(s0row + blk));
        if (owner && sc1 < n) s1[u] = __half2float(hipep_ld_stream(s1row + blk));
      }
    }
  };
  load(0);
  hipep_grid_wait();
  uint4* planes = mma_smem;
  float* corr = reinterpret_cast<float*>(planes + chunks * 4 * PER_WORD);
  if (threadIdx.x < 4 * PER_WORD) zeros[threadIdx.x] = make_uint4(0u, 0u, 0u, 0u);
  stage_pairs<FRAG>(planes, corr, A, chunks);
  __syncthreads();
  float acc0 = 0.0f, acc1 = 0.0f;
  for (int r0 = 0; r0 < rounds; r0 += U) {
    if (r0 != 0) load(r0);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int r = r0 + u;
      if (r >= rounds) break;
      // the lane on the diagonal of quad g = t (rows 0..3) feeds thread t's x; every other lane zeros
      const uint4* a = (g == t) ? planes + (cbase + 4 * r + t) * 4 * PER_WORD : zeros;
      float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      const unsigned int words[4] = {q[u].x, q[u].y, q[u].z, q[u].w};
#pragma unroll
      for (int wi = 0; wi < 4; ++wi) {
        const unsigned int x = words[wi], x8 = x >> 8;
        const unsigned int b_lo0 = hipep_and_or<0x000F000Fu, 0x64006400u>(x), b_lo1 = hipep_and_or<0x000F000Fu, 0x64006400u>(x8);
        const unsigned int b_hi0 = hipep_and_or<0x00F000F0u, 0x64006400u>(x), b_hi1 = hipep_and_or<0x00F000F0u, 0x64006400u>(x8);
        if constexpr (FRAG) {
          const uint4 lo = a[2 * wi], hi = a[2 * wi + 1];
          hipep_mma_m16n8k16(d, lo.x, lo.y, lo.z, lo.w, b_lo0, b_lo1);
          hipep_mma_m16n8k16(d, hi.x, hi.y, hi.z, hi.w, b_hi0, b_hi1);
        } else {
          const uint4 av = a[wi];
          hipep_mma_m16n8k16(d, av.x, 0u, av.y, 0u, b_lo0, b_lo1);
          hipep_mma_m16n8k16(d, av.z, 0u, av.w, 0u, b_hi0, b_hi1);
        }
      }
      if (owner) {
        const float cc = corr[cbase + 4 * r + g];
        acc0 = fmaf(s0[u], d[0] - cc, acc0);
        acc1 = fmaf(s1[u], d[1] - cc, acc1);
      }
    }
  }
  // the four threads' partial sums of each column: lanes t, 4 + t, 8 + t, 12 + t
  acc0 += __shfl_xor_sync(0xffffffffu, acc0, 4);
  acc1 += __shfl_xor_sync(0xffffffffu, acc1, 4);
  acc0 += __shfl_xor_sync(0xffffffffu, acc0, 8);
  acc1 += __shfl_xor_sync(0xffffffffu, acc1, 8);
  if (SPLIT > 1) {
    if (lane < 4) {
      partial[warp][2 * lane] = acc0;
      partial[warp][2 * lane + 1] = acc1;
    }
    __syncthreads();
    if (part != 0) return;
#pragma unroll
    for (int p = 1; p < SPLIT; ++p) {
      if (lane < 4) {
        acc0 += partial[warp + p][2 * lane];
        acc1 += partial[warp + p][2 * lane + 1];
      }
    }
  }
  if (lane < 4) {
    if (sc0 < n) Y[sc0] = __float2half(acc0);
    if (sc1 < n) Y[sc1] = __float2half(acc1);
  }
}
#define PM(U, SPLIT, LB, FRAG) \
  extern "C" __global__ void __launch_bounds__(256, LB) h2_mma_u##U##_s##SPLIT##_f##FRAG(const __half* A, const unsigned char* B, const __half* S, __half* Y, int n, int rb, int nb, int l, int k) { h2_mma<U, SPLIT, FRAG>(A, B, S, Y, n, rb, nb, l, k); }
PM(4, 1, 2, 0) PM(8, 1, 2, 0) PM(4, 2, 2, 0) PM(8, 2, 2, 0) PM(4, 4, 2, 0) PM(8, 4, 2, 0)
PM(4, 1, 2, 1) PM(8, 1, 2, 1) PM(4, 2, 2, 1) PM(8, 2, 2, 1) PM(4, 4, 2, 1) PM(8, 4, 2, 1)

// ---- tensor cores, the weights as the A operand -------------------------------------------------------
//   h2_tc          a warp takes 16 columns: quad g of lanes 4g..4g+3 columns g and g + 8 of the group, thread
//                  t of the quad chunk 4r + t of both in round r (two 16-byte loads). A word of each column
//                  gives one LOP3 a register of mma.m16n8k16's A operand (rows g and g + 8: the two columns; k
//                  slots 2t, 2t + 1 and 2t + 8, 2t + 9: the word's nibble pairs, halves 1024 + q or 1024 +
//                  16 q), so one mma takes two words a lane, where h2_mma's B operand takes one. B is A's
//                  staged pairs on the diagonal of the quads: column n of B holds thread n's x (lane (g, t)
//                  gives its pairs where g == t, zeros elsewhere), so D[m][n] is thread n's chunk's sum for
//                  column m -- lanes t = 0, 1 of every quad hold D's columns 0..3 -- and each chunk's block
//                  scale applies after its 8 mmas; the offsets come off per chunk as in h2_mma (corr). A's
//                  staged word (its four pairs) is one 16-byte shared load, both mmas' B operands.
//   U: rounds of loads in flight a lane; SPLIT: warps a column group, each on its own run of chunks, their
//   sums meeting in shared memory. Only the study's case: block 32, no zero points, K a multiple of
//   128 * SPLIT, scale rows 4-byte aligned.
template <int U, int SPLIT>
__device__ void h2_tc(const __half* __restrict__ A, const unsigned char* __restrict__ B, const __half* __restrict__ S,
                      __half* __restrict__ Y, int n, int row_bytes, int nb, int log2_bs, int k) {
  hipep_grid_release();
  HIPEP_DYNAMIC_SHARED(uint4, tc_smem);  // 4 uint4 of A's pairs a chunk, then a float corr a chunk
  __shared__ uint4 tc_zeros[4];
  __shared__ float tc_partial[8][16];  // [warp][column of its group] for SPLIT > 1
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane >> 2, t = lane & 3;
  const int groups = 8 / SPLIT, group = warp / SPLIT, part = warp % SPLIT;
  const int chunks = k / 32, per_warp = chunks / SPLIT, rounds = per_warp / 4;
  const int n0 = (blockIdx.x * groups + group) * 16;
  const int col_a = n0 + g, col_b = n0 + g + 8;  // this quad's columns: rows g and g + 8 of the mma's A
  const int cbase = part * per_warp;
  const bool owner = t < 2;  // D's columns 2t, 2t + 1 are threads 2t, 2t + 1's chunks where t < 2
  const uint4* qa_row = reinterpret_cast<const uint4*>(B + (i64)(col_a < n ? col_a : 0) * row_bytes) + cbase + t;
  const uint4* qb_row = reinterpret_cast<const uint4*>(B + (i64)(col_b < n ? col_b : 0) * row_bytes) + cbase + t;
  // an owner's scales: chunks 2t and 2t + 1 of a round's four, both columns (consecutive blocks: one 4-byte load)
  const __half2* sa_row = reinterpret_cast<const __half2*>(S + (i64)(col_a < n ? col_a : 0) * nb + cbase + 2 * t);
  const __half2* sb_row = reinterpret_cast<const __half2*>(S + (i64)(col_b < n ? col_b : 0) * nb + cbase + 2 * t);
  hipep_materialize(qa_row);
  hipep_materialize(qb_row);
  hipep_materialize(sa_row);
  hipep_materialize(sb_row);
  uint4 qa[U], qb[U];
  __half2 sa[U], sb[U];
  auto load = [&](int r0) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int r = r0 + u;
      qa[u] = qb[u] = make_uint4(0u, 0u, 0u, 0u);
      sa[u] = sb[u] = __float2half2_rn(0.0f);
      if (r < rounds) {
        if (col_a < n) qa[u] = hipep_ld_stream(qa_row + 4 * r);
        if (col_b < n) qb[u] = hipep_ld_stream(qb_row + 4 * r);
        if (owner && col_a < n) sa[u] = hipep_ld_stream(sa_row + 2 * r);
        if (owner && col_b < n) sb[u] = hipep_ld_stream(sb_row + 2 * r);
      }
    }
  };
  load(0);
  hipep_grid_wait();
  uint4* planes = tc_smem;
  float* corr = reinterpret_cast<float*>(planes + chunks * 4);
  if (threadIdx.x < 4) tc_zeros[threadIdx.x] = make_uint4(0u, 0u, 0u, 0u);
  stage_pairs<false>(planes, corr, A, chunks);
  __syncthreads();
  float acc_a = 0.0f, acc_b = 0.0f;
  for (int r0 = 0; r0 < rounds; r0 += U) {
    if (r0 != 0) load(r0);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int r = r0 + u;
      if (r >= rounds) break;
      const uint4* x = (g == t) ? planes + (cbase + 4 * r + t) * 4 : tc_zeros;  // B: the quads' diagonal
      float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      const unsigned int wa[4] = {qa[u].x, qa[u].y, qa[u].z, qa[u].w}, wb[4] = {qb[u].x, qb[u].y, qb[u].z, qb[u].w};
#pragma unroll
      for (int wi = 0; wi < 4; ++wi) {
        const unsigned int a = wa[wi], b = wb[wi], a8 = a >> 8, b8 = b >> 8;
        const uint4 p = x[wi];
        hipep_mma_m16n8k16(d, hipep_and_or<0x000F000Fu, 0x64006400u>(a), hipep_and_or<0x000F000Fu, 0x64006400u>(b),
                hipep_and_or<0x000F000Fu, 0x64006400u>(a8), hipep_and_or<0x000F000Fu, 0x64006400u>(b8), p.x, p.y);
        hipep_mma_m16n8k16(d, hipep_and_or<0x00F000F0u, 0x64006400u>(a), hipep_and_or<0x00F000F0u, 0x64006400u>(b),
                hipep_and_or<0x00F000F0u, 0x64006400u>(a8), hipep_and_or<0x00F000F0u, 0x64006400u>(b8), p.z, p.w);
      }
      if (owner) {
        const float2 cc = *reinterpret_cast<const float2*>(corr + cbase + 4 * r + 2 * t);
        const float2 fa = __half22float2(sa[u]), fb = __half22float2(sb[u]);
        acc_a = fmaf(fa.x, d[0] - cc.x, acc_a);
        acc_a = fmaf(fa.y, d[1] - cc.y, acc_a);
        acc_b = fmaf(fb.x, d[2] - cc.x, acc_b);
        acc_b = fmaf(fb.y, d[3] - cc.y, acc_b);
      }
    }
  }
  acc_a += __shfl_xor_sync(0xffffffffu, acc_a, 1);  // threads 0 and 1 of the quad
  acc_b += __shfl_xor_sync(0xffffffffu, acc_b, 1);
  if (SPLIT > 1) {
    if (t == 0) {
      tc_partial[warp][g] = acc_a;
      tc_partial[warp][g + 8] = acc_b;
    }
    __syncthreads();
    if (part != 0) return;
#pragma unroll
    for (int p = 1; p < SPLIT; ++p) {
      if (t == 0) {
        acc_a += tc_partial[warp + p][g];
        acc_b += tc_partial[warp + p][g + 8];
      }
    }
  }
  if (t == 0) {
    if (col_a < n) Y[col_a] = __float2half(acc_a);
    if (col_b < n) Y[col_b] = __float2half(acc_b);
  }
}
#define PT(U, SPLIT, LB) \
  extern "C" __global__ void __launch_bounds__(256, LB) h2_tc_u##U##_s##SPLIT(const __half* A, const unsigned char* B, const __half* S, __half* Y, int n, int rb, int nb, int l, int k) { h2_tc<U, SPLIT>(A, B, S, Y, n, rb, nb, l, k); }
PT(2, 2, 2) PT(4, 2, 2) PT(2, 4, 2) PT(4, 4, 2) PT(2, 8, 2) PT(4, 8, 2)
