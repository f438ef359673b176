// Tensor-core candidates for the one-row int4 GEMV (4 bits, block 32, no zero points, fp16 A and
// scales), timed by benchmarks/gemv_study.py beside gemv_study.hip's. The row GEMVs spend ~17
// instructions on a word of B (8 weights: 4 LOP3 and a shift making halves of the nibbles, 4
// subtractions of the offsets, 4 HFMA2, 2 conversions and 2 adds into f32); mma.sync takes the
// nibbles' halves as they come and sums in f32, so the offsets come off once a chunk. Kept apart
// from gemv_study.hip so that the tests' host stand-in (tests/unit/host_cuda, which emulates a
// warp's mma) runs these on the CPU against numpy: that file's other kernels declare their shared
// memory in ways the stand-in does not take.
#include "matmul_nbits_tc.h"
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
// A staged for h2_mma: word w (8 halves) as the four pairs hipep's tensor-core kernel stages
// (hipep_mnb_tc_layout: the low nibbles' k slots, then the high ones' against x / 16) or, FRAG, as the
// two mma A operands they make, {pair, 0, pair, 0} each; and after them each chunk's corr = 1024
// sum(x even) + 64 sum(x odd) + 8 sum(x), the halves' offsets and the zero point (8).
template <bool FRAG>
__device__ void stage_pairs(uint4* planes, float* corr, const __half* __restrict__ A, int chunks) {
  for (int w0 = 0; w0 < chunks * 4; w0 += blockDim.x) {  // the same trips for every thread (shuffles)
    const int w = w0 + threadIdx.x;
    float c = 0.0f;
    if (w < chunks * 4) {
      const uint4 raw = hipep_ld_produced(reinterpret_cast<const uint4*>(A) + w);
      const __half* h = reinterpret_cast<const __half*>(&raw);
      uint4 pr;  // the word's four pairs as hipep's tensor-core kernel stages them
      hipep_mnb_tc_layout::put(reinterpret_cast<unsigned char*>(&pr), 0, 0, h);
      if constexpr (FRAG) {
        planes[2 * w] = make_uint4(pr.x, 0u, pr.y, 0u);
        planes[2 * w + 1] = make_uint4(pr.z, 0u, pr.w, 0u);
      } else {
        planes[w] = pr;
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
//   h2_tc          hipep's tensor-core row GEMV (kernels/matmul_nbits_tc.h: a quad's two columns are the
//                  mma's A rows g and g + 8, A's pairs on the quads' diagonal as B) at more rounds in flight
//                  and warps a column group than hipep instantiates; block 32, no zero points, hipep's
//                  parameters (gemv_study.py passes the binding's MatMulNBitsArgs).
#define PT(U, SPLIT)                                                                                  \
  HIPEP_KERNEL void __launch_bounds__(MNB_WARPS * HIPEP_WARP_SIZE, 2)                                \
      h2_tc_u##U##_s##SPLIT(HIPEP_MNB_PARAMS(hipep_half)) {                                           \
    hipep_mnb_gemv_tc<U, SPLIT, false, true>(hipep_mnb_a_loaded<hipep_half>{A},                       \
                                             hipep_mnb_tc_plain<hipep_half>{B, scales, zp, bias, Y}, a);\
  }
PT(2, 2) PT(4, 2) PT(2, 4) PT(4, 4) PT(2, 8) PT(4, 8)
