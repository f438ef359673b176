// com.microsoft::MatMulNBits, one row of fp16 A (decode), on tensor cores: 4-bit weights, block_size
// >= 32, 16-byte aligned rows, packed 4-bit or no zero points, fp16 scales.
//
// The row GEMV in packed arithmetic (matmul_nbits_row.h) spends ~17 instructions on a word of B (8
// weights): a LOP3 a nibble pair to halves 1024 + q, a subtraction of the offset and zero point each,
// four HFMA2, and two conversions and two adds to carry the word's half2 sum into f32. At a single
// op's size the warps issue for longer than HBM takes to deliver the weights (ncu at 4096 x 4096,
// benchmarks/results/2026-12-04-gemv-study-cols-h200.md). Here the LOP3's halves go into mma.sync
// as they are, summed in f32 by the tensor cores, and the offsets come off once a chunk:
//
// * A warp takes 16 output columns: quad g (lanes 4g..4g+3) columns g and g + 8 of its group, the
//   mma's A rows g and g + 8. In round r thread t of the quad loads chunk 4r + t (16 bytes, 32
//   weights) of both; word i of each gives, by one LOP3 a register, the A operand of two mmas: the
//   low nibbles (v0, v4) at k 2t, 2t + 1 and (v2, v6) at 2t + 8, 2t + 9 as halves 1024 + q, and the
//   high ones (v1, v5), (v3, v7) as 1024 + 16 q. So one mma takes two words a lane.
// * B holds A's values on the quads' diagonal: lane (g, t) gives its thread's pairs where g == t and
//   zeros elsewhere, so B's column n has thread n's values at thread n's k slots, and D[m][n] is
//   thread n's chunk's sum for column m. Lanes t = 0, 1 of a quad hold D's columns 0..3, one chunk
//   each: the block scale and zero point apply there, after the chunk's 8 mmas.
// * A is staged once per block as each word's four pairs (a0, a4), (a2, a6) and, against the high
//   nibbles' 16 q, (a1 / 16, a5 / 16), (a3 / 16, a7 / 16) (a power of two: exact but in fp16's
//   subnormal range); a word's pairs are one 16-byte shared load, both its mmas' B operands. With
//   each chunk: off = 1024 sum(a even) + 64 sum(a odd) and sx = sum(a), so that a chunk's sum of
//   (q - zp) a is D - off - zp sx.
// * SPLIT warps share a column group, each on its own run of chunks (a multiple of 4: whole rounds;
//   A and the weights past K_pad are zeros), their sums meeting in shared memory in warp order.
//
// The sums are in f32 throughout (the h2 kernels round each word's four products to fp16), in another
// order: not the h2 kernels' bits. NVIDIA compute capability 8.0 and newer (HIPEP_HAS_MMA; the binding
// asks Target.tensor_cores); a 64-lane build has no entry points.
// Like the row GEMVs it loads its first weights before it waits for the kernel ahead.

#include "matmul_nbits_row.h"

// Chunks a warp's run covers: whole rounds of 4 (a thread's chunk each), SPLIT runs over the row.
HIPEP_DEVICE int hipep_mnb_tc_run(int chunks, int split) { return ((chunks + 4 * split - 1) / (4 * split)) * 4; }

// A's staging: word w (8 values from k0 = 8 w; zeros past K) as its four pairs, then each chunk's
// off and sx. `staged` chunks: every run's (past K_pad: zeros).
HIPEP_DEVICE void hipep_mnb_tc_stage(uint4* planes, float* off, float* sx, const hipep_half* HIPEP_RESTRICT A,
                                     int staged, const hipep_mnb_args& a) {
  const int words = staged * 4;
  for (int w0 = 0; w0 < words; w0 += blockDim.x) {  // the same trips for every thread (shuffles)
    const int w = w0 + threadIdx.x;
    float even = 0.0f, odd = 0.0f;
    if (w < words) {
      const hipep_i64 k0 = (hipep_i64)w * 8;
      uint4 raw = make_uint4(0u, 0u, 0u, 0u);
      if (k0 < a.k) raw = hipep_mnb_row_a8(A, k0, a);
      const hipep_half* h = reinterpret_cast<const hipep_half*>(&raw);
      __half2 pr[4];
      pr[0] = __halves2half2(h[0], h[4]);
      pr[1] = __halves2half2(h[2], h[6]);
      pr[2] = __halves2half2(__float2half(__half2float(h[1]) * 0.0625f), __float2half(__half2float(h[5]) * 0.0625f));
      pr[3] = __halves2half2(__float2half(__half2float(h[3]) * 0.0625f), __float2half(__half2float(h[7]) * 0.0625f));
      planes[w] = *reinterpret_cast<const uint4*>(pr);
#pragma unroll
      for (int j = 0; j < 8; j += 2) {
        even += __half2float(h[j]);
        odd += __half2float(h[j + 1]);
      }
    }
    float o = 1024.0f * even + 64.0f * odd, s = even + odd;
    for (int m = 1; m < 4; m <<= 1) {  // the chunk's 4 words: lanes 4c .. 4c + 3
      o += HIPEP_SHFL_XOR(o, m);
      s += HIPEP_SHFL_XOR(s, m);
    }
    if (w < words && (w & 3) == 0) {
      off[w >> 2] = o;
      sx[w >> 2] = s;
    }
  }
}

template <int U, int SPLIT, bool ZP, bool PAIRED>
HIPEP_DEVICE void hipep_mnb_gemv_tc(const hipep_half* HIPEP_RESTRICT A, const unsigned char* HIPEP_RESTRICT B,
                                    const hipep_half* HIPEP_RESTRICT scales, const void* HIPEP_RESTRICT zp,
                                    const hipep_half* HIPEP_RESTRICT bias, hipep_half* HIPEP_RESTRICT Y,
                                    const hipep_mnb_args a) {
  constexpr int GROUPS = MNB_WARPS / SPLIT;
  hipep_grid_release();
  HIPEP_DYNAMIC_SHARED(float4, hipep_mnb_smem4);
  __shared__ uint4 zeros[4];
  __shared__ float partial[MNB_WARPS][16];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane >> 2, t = lane & 3;
  const int part = warp % SPLIT;
  const int chunks = (int)(a.k_pad >> 5), run = hipep_mnb_tc_run(chunks, SPLIT), rounds = run / 4;
  const int cbase = part * run;
  const hipep_i64 n0 = ((hipep_i64)blockIdx.x * GROUPS + warp / SPLIT) * 16;
  hipep_mnb_row_col<hipep_half> col[2] = {hipep_mnb_row_col_at<hipep_half>(B, scales, zp, n0 + g, a),
                                          hipep_mnb_row_col_at<hipep_half>(B, scales, zp, n0 + g + 8, a)};
  if (!ZP) col[0].zp = col[1].zp = nullptr;
  const bool owner = t < 2;  // D's columns 2t, 2t + 1: threads 2t, 2t + 1's chunks
  // Round r's loads: chunk cbase + 4r + t of both columns, and an owner's scales and zero points of
  // chunks c0 = cbase + 4r + 2t and c0 + 1 (c0 even): PAIRED (block 32, an even number of blocks a
  // row) their two blocks' scales as one 4-byte load, else (block >= 64) the one block both lie in;
  // their zero points one byte either way. Weights only: issued before the wait. Kept as loaded
  // (a half2's bits, a byte): half the registers of their floats.
  uint4 q[2][U];
  unsigned int s[2][U], z[2][U];
  auto load = [&](int r0) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int r = r0 + u, ch = cbase + 4 * r + t, c0 = cbase + 4 * r + 2 * t;
      const int blk = (c0 << 5) >> a.log2_bs;
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        q[c][u] = make_uint4(0u, 0u, 0u, 0u);
        s[c][u] = 0u;
        z[c][u] = 0x88u;
        if (r < rounds && col[c].live && ch < chunks) q[c][u] = hipep_ld_stream(col[c].b + ch);
        if (owner && r < rounds && col[c].live && c0 < chunks) {
          if constexpr (PAIRED) {
            s[c][u] = hipep_ld_stream(reinterpret_cast<const unsigned int*>(col[c].scale + blk));
          } else {
            const unsigned int h = hipep_ld_stream(reinterpret_cast<const unsigned short*>(col[c].scale + blk));
            s[c][u] = h | (h << 16);
          }
          if (ZP) {
            const unsigned int b = hipep_ld_stream(col[c].zp + (blk >> 1));
            z[c][u] = PAIRED ? b : ((b >> ((blk & 1) * 4)) & 0xFu) * 0x11u;
          }
        }
      }
    }
  };
  load(0);
  hipep_grid_wait();  // A, and Y's memory, belong to earlier kernels of the stream
  const int staged = run * SPLIT;
  uint4* planes = reinterpret_cast<uint4*>(hipep_mnb_smem4);
  float* off = reinterpret_cast<float*>(planes + staged * 4);
  float* sx = off + staged;
  if (threadIdx.x < 4) zeros[threadIdx.x] = make_uint4(0u, 0u, 0u, 0u);
  hipep_mnb_tc_stage(planes, off, sx, A, staged, a);
  __syncthreads();
  float acc[2] = {0.0f, 0.0f};
  for (int r0 = 0; r0 < rounds; r0 += U) {
    if (r0 != 0) load(r0);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int r = r0 + u;
      if (r >= rounds) break;
      const uint4* x = (g == t) ? planes + (cbase + 4 * r + t) * 4 : zeros;  // B: the quads' diagonal
      float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      const unsigned int wa[4] = {q[0][u].x, q[0][u].y, q[0][u].z, q[0][u].w};
      const unsigned int wb[4] = {q[1][u].x, q[1][u].y, q[1][u].z, q[1][u].w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const unsigned int va = wa[i], vb = wb[i], va8 = va >> 8, vb8 = vb >> 8;
        const uint4 p = x[i];
        hipep_mma_m16n8k16(d, hipep_and_or<0x000F000Fu, 0x64006400u>(va), hipep_and_or<0x000F000Fu, 0x64006400u>(vb),
                           hipep_and_or<0x000F000Fu, 0x64006400u>(va8), hipep_and_or<0x000F000Fu, 0x64006400u>(vb8),
                           p.x, p.y);
        hipep_mma_m16n8k16(d, hipep_and_or<0x00F000F0u, 0x64006400u>(va), hipep_and_or<0x00F000F0u, 0x64006400u>(vb),
                           hipep_and_or<0x00F000F0u, 0x64006400u>(va8), hipep_and_or<0x00F000F0u, 0x64006400u>(vb8),
                           p.z, p.w);
      }
      if (owner) {
        const int c0 = cbase + 4 * r + 2 * t;  // even: 8-byte aligned pairs of off and sx
        const float2 o = *reinterpret_cast<const float2*>(off + c0), m = *reinterpret_cast<const float2*>(sx + c0);
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const float2 sc = __half22float2(hipep_u32_half2(s[c][u]));
          const float z0 = (float)(z[c][u] & 0xFu), z1 = (float)((z[c][u] >> 4) & 0xFu);
          acc[c] = fmaf(sc.x, d[2 * c] - fmaf(z0, m.x, o.x), acc[c]);
          acc[c] = fmaf(sc.y, d[2 * c + 1] - fmaf(z1, m.y, o.y), acc[c]);
        }
      }
    }
  }
#pragma unroll
  for (int c = 0; c < 2; ++c) acc[c] += HIPEP_SHFL_XOR(acc[c], 1);  // threads 0 and 1 of the quad
  if constexpr (SPLIT > 1) {
    if (t == 0) {
      partial[warp][g] = acc[0];
      partial[warp][g + 8] = acc[1];
    }
    __syncthreads();
    if (part != 0) return;
#pragma unroll
    for (int p = 1; p < SPLIT; ++p) {
      acc[0] += partial[warp + p][g];
      acc[1] += partial[warp + p][g + 8];
    }
  }
#pragma unroll
  for (int c = 0; c < 2; ++c) {
    if (t == 0 && col[c].live) {
      const hipep_i64 n = n0 + g + 8 * c;
      const float b = bias != 0 ? hipep_to_float(hipep_ld_stream(bias + n)) : 0.0f;
      Y[n] = hipep_from_float<hipep_half>(acc[c] + b);
    }
  }
}

// Instances: U rounds of loads in flight a lane, SPLIT warps a column group of 16, zero points or
// not, block 32 (`_b32`: scales read in pairs) or 64 and more (`_bw`); two blocks per SM (128
// registers a thread at most). Not yet timed against the h2 forms on a GPU: selected only with
// HIPEP_MNB_GEMV_TC=1 (hipep/runtime/gpu_quant.py row_tc_form).
#define HIPEP_MNB_TC_ONE(U, SPLIT, ZP, ZSUFFIX, PAIRED, BSUFFIX)                                       \
  HIPEP_KERNEL void __launch_bounds__(MNB_WARPS * HIPEP_WARP_SIZE, 2)                                \
      hipep_mnb_gemv_tc_f16_##BSUFFIX##_u##U##_s##SPLIT##ZSUFFIX(HIPEP_MNB_PARAMS(hipep_half)) {     \
    hipep_mnb_gemv_tc<U, SPLIT, ZP, PAIRED>(A, B, scales, zp, bias, Y, a);                            \
  }
#define HIPEP_MNB_TC(U, SPLIT)                                                                        \
  HIPEP_MNB_TC_ONE(U, SPLIT, false, , true, b32) HIPEP_MNB_TC_ONE(U, SPLIT, true, _zp, true, b32)     \
  HIPEP_MNB_TC_ONE(U, SPLIT, false, , false, bw) HIPEP_MNB_TC_ONE(U, SPLIT, true, _zp, false, bw)
#if HIPEP_WARP_SIZE == 32  // the mma's fragments are a 32-lane warp's
HIPEP_MNB_TC(4, 4) HIPEP_MNB_TC(4, 8)
#endif
