// The one-row GEMV of fp16 or bf16 A (decode) on tensor cores, as templates: 4-bit weights, block_size
// >= 32, 16-byte aligned rows, packed 4-bit or no zero points, scales of A's type.
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
//   subnormal range); a word's pairs are one 16-byte shared load, both its mmas' B operands. Then,
//   from the staged halves, each chunk's off = 1024 sum(a even) + 1024 sum(a odd / 16) and sx =
//   sum(a) (hipep_mnb_tc_sums), so that a chunk's sum of (q - zp) a is D - off - zp sx.
// * SPLIT warps share a column group, each on its own run of chunks (a multiple of 4: whole rounds;
//   A and the weights past K_pad are zeros), their sums meeting in shared memory in warp order.
// * bf16 A (hipep_mnb_tc_type): bf16 has 7 mantissa bits, so a high nibble cannot stay at bits 4..7
//   (bit 7 is the exponent's): the high nibbles are shifted down to bits 0..3 first (one more shift
//   a register) and both become halves 128 + q, exact; the odd values are staged as they are, the
//   bf16 mma runs, and off takes 128 in place of 1024. It is the only packed form for bf16, whose
//   8-bit significand makes products rounded to bf16 (as the h2 kernels' are to fp16) an error the
//   size of the result's own rounding.
//
// The sums are in f32 throughout (the h2 kernels round each word's four products to fp16), in another
// order: not the h2 kernels' bits. NVIDIA compute capability 8.0 and newer (HIPEP_HAS_MMA; the binding
// asks Target.tensor_cores). Like the row GEMVs it loads its first weights before it waits for the
// kernel ahead. matmul_nbits_tc.hip instantiates it for MatMulNBits; the runtime renders it with the
// fused skip norm as A's source (hipep::SkipNormMatMulNBits) and for a gated pair
// (hipep::GatedMatMulNBits: rows g and g + 8 of a quad are column n of the two weights).

#ifndef HIPEP_MATMUL_NBITS_TC_H
#define HIPEP_MATMUL_NBITS_TC_H

#include "matmul_nbits_row.h"

// Chunks a warp's run covers: whole rounds of 4 (a thread's chunk each), SPLIT runs over the row.
HIPEP_DEVICE int hipep_mnb_tc_run(int chunks, int split) { return ((chunks + 4 * split - 1) / (4 * split)) * 4; }

// What the kernel takes from A's type: MAGIC, the bits OR'd above a nibble pair that make the
// halves OFFSET + q (low nibbles), and, from a register shifted right by HI_SHIFT and masked by
// HI_MASK, OFFSET + HI q (high nibbles), exactly; the odd values of A are staged times 1 / HI, so
// that each product is OFFSET a + q a; a register's two values as floats (the low one first); the
// mma of that type.
template <typename T> struct hipep_mnb_tc_type;
template <> struct hipep_mnb_tc_type<hipep_half> {
  static constexpr unsigned int MAGIC = 0x64006400u, HI_MASK = 0x00F000F0u;
  static constexpr int HI_SHIFT = 0;
  static constexpr float OFFSET = 1024.0f, HI = 16.0f;
  HIPEP_DEVICE static float2 pair(unsigned int v) { return __half22float2(hipep_u32_half2(v)); }
  HIPEP_DEVICE static void mma(float (&d)[4], unsigned int a0, unsigned int a1, unsigned int a2, unsigned int a3,
                               unsigned int b0, unsigned int b1) {
    hipep_mma_m16n8k16(d, a0, a1, a2, a3, b0, b1);
  }
};
template <> struct hipep_mnb_tc_type<hipep_bf16> {
  static constexpr unsigned int MAGIC = 0x43004300u, HI_MASK = 0x000F000Fu;
  static constexpr int HI_SHIFT = 4;
  static constexpr float OFFSET = 128.0f, HI = 1.0f;
  HIPEP_DEVICE static float2 pair(unsigned int v) { return make_float2(__uint_as_float(v << 16), __uint_as_float(v & 0xFFFF0000u)); }
  HIPEP_DEVICE static void mma(float (&d)[4], unsigned int a0, unsigned int a1, unsigned int a2, unsigned int a3,
                               unsigned int b0, unsigned int b1) {
    hipep_mma_m16n8k16_bf16(d, a0, a1, a2, a3, b0, b1);
  }
};

// The tensor-core kernel's layout of a staged word w of A's type T: its four pairs (a0, a4), (a2, a6),
// (a1 / HI, a5 / HI), (a3 / HI, a7 / HI) as one 16-byte store at w (a chunk's four words: 64 bytes). A
// source stages through it (stage<false, P, hipep_mnb_tc_layout>), whatever it computes A from.
template <typename T> struct hipep_mnb_tc_layout_of {
  HIPEP_DEVICE static T odd(T v) {
    constexpr float hi = hipep_mnb_tc_type<T>::HI;
    return hi == 1.0f ? v : hipep_from_float<T>(hipep_to_float(v) * (1.0f / hi));
  }
  HIPEP_DEVICE static void put(unsigned char* smem, int w, int, const T* h) {
    const T pr[8] = {h[0], h[4], h[2], h[6], odd(h[1]), odd(h[5]), odd(h[3]), odd(h[7])};
    reinterpret_cast<uint4*>(smem)[w] = *reinterpret_cast<const uint4*>(pr);
  }
};
typedef hipep_mnb_tc_layout_of<hipep_half> hipep_mnb_tc_layout;

// Each staged chunk's off and sx, from the staged halves themselves (so they are what the mmas
// multiply: an odd value's a / HI rounded as staged): off = OFFSET (sum of all 32 staged halves), the
// products' offsets (OFFSET a even, OFFSET (a / HI) odd); sx = sum(a even) + HI sum(a / HI odd). Without
// zero points (8) off takes 8 sx too. A thread a chunk; between two barriers of the block.
template <typename T, bool ZP>
HIPEP_DEVICE void hipep_mnb_tc_sums(const uint4* planes, float* off, float* sx, int staged) {
  typedef hipep_mnb_tc_type<T> Ty;
  for (int c = threadIdx.x; c < staged; c += blockDim.x) {
    float even = 0.0f, odd = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint4 p = planes[c * 4 + i];
      const float2 e0 = Ty::pair(p.x), e1 = Ty::pair(p.y);
      const float2 o0 = Ty::pair(p.z), o1 = Ty::pair(p.w);
      even += (e0.x + e0.y) + (e1.x + e1.y);
      odd += (o0.x + o0.y) + (o1.x + o1.y);
    }
    const float s = even + Ty::HI * odd;
    off[c] = Ty::OFFSET * (even + odd) + (ZP ? 0.0f : 8.0f * s);
    sx[c] = s;
  }
}

// What a warp's quads compute and where it goes. Rows g and g + 8 of a quad's mma are the columns
// col(0) and col(1); write() takes their two sums (in lane t = 0 of the quad).
// MatMulNBits: 16 columns a warp, n0 + g and n0 + g + 8, and the bias; T: A's (and Y's) type.
template <typename T = hipep_half> struct hipep_mnb_tc_plain {
  typedef T Elem;
  const unsigned char* B;
  const T* scales;
  const void* zp;
  const T* bias;  // null: none
  T* Y;
  static constexpr int COLUMNS = 16;
  HIPEP_DEVICE hipep_mnb_row_col<T> col(int c, hipep_i64 n0, int g, const hipep_mnb_args& a) const {
    return hipep_mnb_row_col_at<T>(B, scales, zp, n0 + g + 8 * c, a);
  }
  HIPEP_DEVICE void write(hipep_i64 n0, int g, const float (&acc)[2], const hipep_mnb_args& a) const {
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const hipep_i64 n = n0 + g + 8 * c;
      if (n < a.n) Y[n] = hipep_from_float<T>(acc[c] + (bias != 0 ? hipep_to_float(hipep_ld_stream(bias + n)) : 0.0f));
    }
  }
};

// hipep::GatedMatMulNBits: 8 columns a warp, column n0 + g of both weights; the two sums rounded to
// A's type T (fp16 or bf16) as the projections' outputs are, joined by the pointwise program (Epilogue).
template <typename TO, typename Epilogue, typename T = hipep_half> struct hipep_mnb_tc_gated {
  typedef T Elem;
  const unsigned char* B0;
  const T* scales0;
  const void* zp0;
  const unsigned char* B1;
  const T* scales1;
  const void* zp1;
  TO* Y;
  static constexpr int COLUMNS = 8;
  HIPEP_DEVICE hipep_mnb_row_col<T> col(int c, hipep_i64 n0, int g, const hipep_mnb_args& a) const {
    return c == 0 ? hipep_mnb_row_col_at<T>(B0, scales0, zp0, n0 + g, a)
                  : hipep_mnb_row_col_at<T>(B1, scales1, zp1, n0 + g, a);
  }
  HIPEP_DEVICE void write(hipep_i64 n0, int g, const float (&acc)[2], const hipep_mnb_args& a) const {
    const hipep_i64 n = n0 + g;
    if (n < a.n) Y[n] = Epilogue()(hipep_from_float<T>(acc[0]), hipep_from_float<T>(acc[1]));
  }
};

template <int U, int SPLIT, bool ZP, bool PAIRED, typename Out, typename Src = hipep_mnb_a_loaded<hipep_half>>
HIPEP_DEVICE void hipep_mnb_gemv_tc(const Src src, const Out out, const hipep_mnb_args a) {
  typedef typename Out::Elem T;
  typedef hipep_mnb_tc_type<T> Ty;
  constexpr int GROUPS = MNB_WARPS / SPLIT;
  hipep_grid_release();
  HIPEP_DYNAMIC_SHARED(float4, hipep_mnb_smem4);
  __shared__ uint4 zeros[4];
  __shared__ float partial[MNB_WARPS][16];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane >> 2, t = lane & 3;
  const int part = warp % SPLIT;
  const int chunks = (int)(a.k_pad >> 5), run = hipep_mnb_tc_run(chunks, SPLIT), rounds = run / 4;
  const int cbase = part * run;
  const hipep_i64 n0 = ((hipep_i64)blockIdx.x * GROUPS + warp / SPLIT) * Out::COLUMNS;
  hipep_mnb_row_col<T> col[2] = {out.col(0, n0, g, a), out.col(1, n0, g, a)};
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
  unsigned char* smem = reinterpret_cast<unsigned char*>(hipep_mnb_smem4);
  const uint4* planes = reinterpret_cast<const uint4*>(smem);
  float* off = reinterpret_cast<float*>(smem + staged * 64);
  float* sx = off + staged;
  if (threadIdx.x < 4) zeros[threadIdx.x] = make_uint4(0u, 0u, 0u, 0u);
  src.template stage<false, MNB_ROW_STAGE_H2, hipep_mnb_tc_layout_of<T>>(smem, 0, staged, a);
  __syncthreads();
  hipep_mnb_tc_sums<T, ZP>(planes, off, sx, staged);
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
        Ty::mma(d, hipep_and_or<0x000F000Fu, Ty::MAGIC>(va), hipep_and_or<0x000F000Fu, Ty::MAGIC>(vb),
                hipep_and_or<0x000F000Fu, Ty::MAGIC>(va8), hipep_and_or<0x000F000Fu, Ty::MAGIC>(vb8), p.x, p.y);
        constexpr int hs = Ty::HI_SHIFT;
        Ty::mma(d, hipep_and_or<Ty::HI_MASK, Ty::MAGIC>(va >> hs), hipep_and_or<Ty::HI_MASK, Ty::MAGIC>(vb >> hs),
                hipep_and_or<Ty::HI_MASK, Ty::MAGIC>(va8 >> hs), hipep_and_or<Ty::HI_MASK, Ty::MAGIC>(vb8 >> hs), p.z, p.w);
      }
      if (owner) {
        const int c0 = cbase + 4 * r + 2 * t;  // even: 8-byte aligned pairs of off and sx
        const float2 o = *reinterpret_cast<const float2*>(off + c0), m = *reinterpret_cast<const float2*>(sx + c0);
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const float2 sc = Ty::pair(s[c][u]);
          if (ZP) {
            const float z0 = (float)(z[c][u] & 0xFu), z1 = (float)((z[c][u] >> 4) & 0xFu);
            acc[c] = fmaf(sc.x, d[2 * c] - fmaf(z0, m.x, o.x), acc[c]);
            acc[c] = fmaf(sc.y, d[2 * c + 1] - fmaf(z1, m.y, o.y), acc[c]);
          } else {  // off holds 8 sx
            acc[c] = fmaf(sc.x, d[2 * c] - o.x, acc[c]);
            acc[c] = fmaf(sc.y, d[2 * c + 1] - o.y, acc[c]);
          }
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
  if (t == 0) out.write(n0, g, acc, a);
}

#endif  // HIPEP_MATMUL_NBITS_TC_H
