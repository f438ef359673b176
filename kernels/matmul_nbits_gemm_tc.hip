// com.microsoft::MatMulNBits for short prompts on tensor cores: Y = A W^T (+ bias) with fp16 or bf16 A
// and 4-bit weights, the weights dequantized in shared memory on their way to mma.sync, never
// written to device memory.
//
// Why: without it, up to 32 rows run the GEMV once per 8 rows, which reads every weight once per 8
// rows, and longer prompts go through the vendor BLAS (matmul_nbits_dequant.hip), which first writes
// every weight as a [N, K] matrix of A's type and reads it back, 4.5 bytes a weight beside the packed
// half byte. Here each weight is read once a block of 64 rows, as packed, and the product's work
// stays on the tensor cores. On the H100 that is 2.7-6.4x faster than the GEMV at 16-32 rows and level
// with cuBLASLt at 64, behind it from 128 (benchmarks/results/2026-12-06-prompt-gemm-tc-h100.md), so
// the binding takes it up to gpu_quant.GEMM_TC_MAX_ROWS rows.
//
// * A block takes a tile of MNB_GTC_BM rows of A by MNB_GTC_BN output columns, 4 warps each a
//   32 x 32 part of it (2 x 4 mma tiles of m16n8k16), over K in steps of MNB_GTC_BK values.
// * Per step every thread loads its share of the next step into registers (A: 4 16-byte words;
//   B: one 16-byte chunk, 32 weights of one column, with its block's scale and zero point) before it
//   computes the current one from shared memory, then stores it: one memory round trip a step,
//   under the step's mmas.
// * A chunk's weights get the values matmul_nbits_dequant.hip writes, (q - zp) * scale rounded once
//   to A's type, so W's values are those the BLAS path multiplies. fp16 with integer zero points
//   (the builder's int4-f16 form) forms them in packed arithmetic, 13 instructions a word of 8
//   (hipep_gtc_dequant_h2, exact up to that one rounding), and keeps K in the order the nibble pairs
//   come out, A's staged words permuted to match; otherwise in f32. Products and sums are the mma's,
//   in f32.
// * The fragments come out of shared memory by ldmatrix.x4, four per 16 values of K a warp. Staged
//   rows are padded by 8 elements (MNB_GTC_LD), so each 8-row phase of it hits 8 different 16-byte
//   bank groups.
// * Where the tiles alone would leave SMs idle (few rows, narrow N), blockIdx.z splits K: each split
//   writes its f32 sums to `partial` ([splits, M, N]) and counts itself in at its tile's arrival
//   counter (`counters`, one per tile, zero between launches); the tile's last split to arrive adds
//   them in split order with the bias (a deterministic result, whatever order the blocks run in) and
//   zeroes the counter again. So a split product is one launch, not two: a prompt's first run issues
//   its launches one by one, each costing the host tens of microseconds. Without counters (null),
//   hipep_mnb_gemm_tc_sum_* adds the splits in a second launch, the same way.
//   a.k_split is the number of splits and a.k_tile the values of K a split covers.
// * Not the limit, as measured on the H200 (benchmarks/results/2026-12-06-prompt-gemm-pipeline-h200.md):
//   the loads' latency (two or three steps of loads in flight, with two shared buffers and one barrier
//   a step, took 9 % less to 16 % more time than this one step), and the weights' dequantization per
//   block of rows (blocks of 128 rows and 8 warps, each weight dequantized half as often but one
//   block an SM, took 4 % less to 38 % more from 128 rows).
//
// Needs (the binding checks): 4-bit weights, block size >= 32 (a chunk lies in one block), rows of B
// and of A 16-byte aligned (K % 8 == 0), NVIDIA compute capability 8.0 or newer (HIPEP_HAS_MMA).
#include "matmul_nbits.h"

#define MNB_GTC_BM 64
#define MNB_GTC_BN 64
#define MNB_GTC_BK 64
#define MNB_GTC_THREADS 128
#define MNB_GTC_LD (MNB_GTC_BK + 8)

template <typename T> struct hipep_gtc_is_half { static constexpr bool value = false; };
template <> struct hipep_gtc_is_half<hipep_half> { static constexpr bool value = true; };

// Four 8 x 8 matrices of 16-bit values from shared memory, as mma's fragments hold them: matrix j's row
// i starts at row(8 j + i), and lane l gets in r[j] matrix j's row l / 4 at values 2 (l % 4) and
// 2 (l % 4) + 1. One ldmatrix.x4 on NVIDIA (four 16-byte rows a lane group, where 4-byte loads
// would take sixteen instructions); elsewhere the same words read one by one.
template <typename Row> HIPEP_DEVICE void hipep_gtc_ldmatrix_x4(unsigned int (&r)[4], Row row) {
  const int lane = threadIdx.x % 32;
#if defined(HIPEP_NVIDIA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 750
  const unsigned int addr = (unsigned int)__cvta_generic_to_shared(row(lane));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
#else
#pragma unroll
  for (int j = 0; j < 4; ++j) r[j] = reinterpret_cast<const unsigned int*>(row(8 * j + lane / 4))[lane % 4];
#endif
}

// fp16 chunks with integer zero points take the packed path (hipep_gtc_dequant_h2); it stores each
// group of 8 values of K in the order its nibble pairs come out of a word, (k0, k4), (k1, k5),
// (k2, k6), (k3, k7), and A's 16-byte words are staged in the same order, so the products pair up.
HIPEP_DEVICE uint4 hipep_gtc_pair_order(uint4 x) {
  return make_uint4(__byte_perm(x.x, x.z, 0x5410u), __byte_perm(x.x, x.z, 0x7632u), __byte_perm(x.y, x.w, 0x5410u),
                    __byte_perm(x.y, x.w, 0x7632u));
}

// A word of 8 nibbles as four fp16 pairs (q - zp) * scale: one LOP3 makes each pair 1024 + q (low
// nibbles) or 1024 + 16 q (high ones), exact in fp16; a subtraction (a multiply by 1 / 16 and a
// subtraction) leaves q - zp exactly, and the multiply by the scale rounds once: the value
// matmul_nbits_dequant.hip rounds from f32, where q - zp and the product are exact too.
HIPEP_DEVICE uint4 hipep_gtc_dequant_h2(unsigned int w, __half2 c_lo, __half2 c_hi, __half2 s2) {
  const __half2 sixteenth = __float2half2_rn(0.0625f);
  const unsigned int w8 = w >> 8;
  unsigned int p0 = hipep_and_or<0x000F000Fu, 0x64006400u>(w), p1 = hipep_and_or<0x00F000F0u, 0x64006400u>(w);
  unsigned int p2 = hipep_and_or<0x000F000Fu, 0x64006400u>(w8), p3 = hipep_and_or<0x00F000F0u, 0x64006400u>(w8);
  const __half2 d0 = __hmul2(__hsub2(*reinterpret_cast<__half2*>(&p0), c_lo), s2);
  const __half2 d1 = __hmul2(__hfma2(*reinterpret_cast<__half2*>(&p1), sixteenth, c_hi), s2);
  const __half2 d2 = __hmul2(__hsub2(*reinterpret_cast<__half2*>(&p2), c_lo), s2);
  const __half2 d3 = __hmul2(__hfma2(*reinterpret_cast<__half2*>(&p3), sixteenth, c_hi), s2);
  return make_uint4(*reinterpret_cast<const unsigned int*>(&d0), *reinterpret_cast<const unsigned int*>(&d1),
                    *reinterpret_cast<const unsigned int*>(&d2), *reinterpret_cast<const unsigned int*>(&d3));
}

// Element `at` (column c) of Y: the K splits' f32 sums in `partial` added in split order, the bias,
// rounded once to T. Both forms of a split product (the tile's last split, the second launch) add
// them here, so they give the same bits; the sums are read from L2 (other blocks wrote them).
template <typename T>
HIPEP_DEVICE void hipep_gtc_add_splits(const float* partial, const T* bias, T* Y, const hipep_mnb_args& a,
                                       hipep_i64 at, hipep_i64 c) {
  const hipep_i64 mn = a.m * a.n;
  float sum = hipep_ld_produced(partial + at);
  for (int z = 1; z < a.k_split; ++z) sum += hipep_ld_produced(partial + z * mn + at);
  if (bias != 0) sum += hipep_to_float(bias[c]);
  Y[at] = hipep_from_float<T>(sum);
}

template <typename T>
HIPEP_DEVICE void hipep_mnb_gemm_tc(const T* HIPEP_RESTRICT A, const unsigned char* HIPEP_RESTRICT B,
                                    const T* HIPEP_RESTRICT scales, const void* HIPEP_RESTRICT zp,
                                    const T* HIPEP_RESTRICT bias, T* HIPEP_RESTRICT Y, float* HIPEP_RESTRICT partial,
                                    unsigned int* counters, const hipep_mnb_args a) {
  constexpr int BM = MNB_GTC_BM, BN = MNB_GTC_BN, BK = MNB_GTC_BK, LD = MNB_GTC_LD;
  constexpr int A_WORDS = BM * BK / 8 / MNB_GTC_THREADS;  // 16-byte words of A a thread stages a step
  __shared__ uint4 a_s4[BM * LD * sizeof(T) / 16];
  __shared__ uint4 w_s4[BN * LD * sizeof(T) / 16];
  T* a_s = reinterpret_cast<T*>(a_s4);
  T* w_s = reinterpret_cast<T*>(w_s4);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, g = lane / 4, t = lane % 4;
  const int wm = (warp / 2) * 32, wn = (warp % 2) * 32;  // the warp's part of the tile
  const hipep_i64 m0 = (hipep_i64)blockIdx.y * BM, n0 = (hipep_i64)blockIdx.x * BN;
  const hipep_i64 k_begin = (hipep_i64)blockIdx.z * a.k_tile;
  const hipep_i64 k_end = min(k_begin + (hipep_i64)a.k_tile, a.k_pad);
  hipep_grid_release();

  // What this thread stages: A's rows a_row + 16 i at word a_col (8 values), and chunk w_chunk of the
  // step in column n0 + w_col of B.
  const int a_row = tid / (BK / 8), a_col = tid % (BK / 8);
  const int w_col = tid / (BK / 32), w_chunk = tid % (BK / 32);
  const hipep_i64 n_w = n0 + w_col;
  const bool w_live = n_w < a.n;
  const unsigned char* w_row = B + (w_live ? n_w : 0) * a.row_bytes;
  // fp16 with integer (or no) zero points: the packed dequantization, K in pair order (above).
  constexpr bool HALF = hipep_gtc_is_half<T>::value;
  const bool packed = HALF && a.zp_mode != 2;
  uint4 ra[A_WORDS], rw;
  float rs, rz;
  auto load = [&](hipep_i64 k0) {
#pragma unroll
    for (int i = 0; i < A_WORDS; ++i) {
      const hipep_i64 r = m0 + a_row + 16 * i, kk = k0 + 8 * a_col;
      ra[i] = make_uint4(0u, 0u, 0u, 0u);
      if (r < a.m && kk < a.k) ra[i] = *reinterpret_cast<const uint4*>(A + r * a.k + kk);
    }
    const hipep_i64 kc = k0 + 32 * w_chunk;
    rw = make_uint4(0u, 0u, 0u, 0u);
    rs = 0.0f;
    rz = 0.0f;
    if (w_live && kc < k_end) {
      rw = *reinterpret_cast<const uint4*>(w_row + kc / 2);
      const hipep_i64 blk = kc >> a.log2_bs;
      rs = hipep_to_float(scales[n_w * a.nb + blk]);
      rz = hipep_mnb_zero_point<T, 4>(zp, n_w, blk, a);
    }
  };
  auto store = [&]() {
#pragma unroll
    for (int i = 0; i < A_WORDS; ++i)
      reinterpret_cast<uint4*>(a_s + (a_row + 16 * i) * LD)[a_col] = packed ? hipep_gtc_pair_order(ra[i]) : ra[i];
    const unsigned int words[4] = {rw.x, rw.y, rw.z, rw.w};
    uint4* dst = reinterpret_cast<uint4*>(w_s + w_col * LD + 32 * w_chunk);
    if constexpr (HALF) {
      if (packed) {
        const __half2 s2 = __float2half2_rn(rs), c_lo = __float2half2_rn(1024.0f + rz),
                      c_hi = __float2half2_rn(-64.0f - rz);
#pragma unroll
        for (int q = 0; q < 4; ++q) dst[q] = hipep_gtc_dequant_h2(words[q], c_lo, c_hi, s2);
        return;
      }
    }
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      float v[8];
      if (a.zp_mode == 2) {
        hipep_mnb_word<4>(words[q], 8388608.0f, v);
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] = (v[j] - rz) * rs;
      } else {
        hipep_mnb_word<4>(words[q], 8388608.0f + rz, v);
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] *= rs;
      }
      union {
        T t[8];
        uint4 u;
      } run;
#pragma unroll
      for (int j = 0; j < 8; ++j) run.t[j] = hipep_from_float<T>(v[j]);
      dst[q] = run.u;
    }
  };

  float acc[2][4][4];
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int ni = 0; ni < 4; ++ni)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mi][ni][e] = 0.0f;

  if (k_begin < k_end) load(k_begin);
  for (hipep_i64 k0 = k_begin; k0 < k_end; k0 += BK) {
    __syncthreads();  // the previous step's tiles are no longer read
    store();
    __syncthreads();
    if (k0 + BK < k_end) load(k0 + BK);
#pragma unroll
    for (int ks = 0; ks < BK / 16; ++ks) {
      // A: rows 0-7 and 8-15 at k 0-7, then at k 8-15 (a0..a3); B: two column tiles' k 0-7 and 8-15.
      unsigned int af[2][4], bf[2][4];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
        hipep_gtc_ldmatrix_x4(af[mi], [&](int l) {
          return a_s + (wm + 16 * mi + 8 * ((l / 8) % 2) + l % 8) * LD + 16 * ks + 8 * (l / 16);
        });
#pragma unroll
      for (int nj = 0; nj < 2; ++nj)
        hipep_gtc_ldmatrix_x4(bf[nj], [&](int l) {
          return w_s + (wn + 16 * nj + 8 * (l / 16) + l % 8) * LD + 16 * ks + 8 * ((l / 8) % 2);
        });
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int ni = 0; ni < 4; ++ni)
          hipep_mma_of<T>::m16n8k16(acc[mi][ni], af[mi], bf[ni / 2][2 * (ni % 2)], bf[ni / 2][2 * (ni % 2) + 1]);
    }
  }

  // D's element e of tile (mi, ni): row g (+ 8 for e >= 2), column 2t + (e & 1).
  const bool whole = a.k_split == 1;
  float* part = partial + (hipep_i64)blockIdx.z * a.m * a.n;
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int ni = 0; ni < 4; ++ni)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const hipep_i64 r = m0 + wm + 16 * mi + g + 8 * (e / 2), c = n0 + wn + 8 * ni + 2 * t + (e % 2);
        if (r >= a.m || c >= a.n) continue;
        if (whole)
          Y[r * a.n + c] = hipep_from_float<T>(acc[mi][ni][e] + (bias != 0 ? hipep_to_float(bias[c]) : 0.0f));
        else
          part[r * a.n + c] = acc[mi][ni][e];
      }
  if (whole || counters == 0) return;

  // Count this split in at the tile's counter; the last of the tile's splits to arrive adds them all.
  __shared__ unsigned int last_s;
  unsigned int* counter = &counters[(hipep_i64)blockIdx.y * gridDim.x + blockIdx.x];
  __threadfence();  // this split's sums visible device-wide before it is counted
  __syncthreads();
  if (tid == 0) last_s = hipep_atomic_inc(counter) == (unsigned int)a.k_split - 1u;
  __syncthreads();
  if (!last_s) return;
  __threadfence();  // every other split's sums seen
  if (tid == 0) *counter = 0u;  // every split has arrived: zero again for the next launch
  for (int i = tid; i < BM * BN; i += MNB_GTC_THREADS) {
    const hipep_i64 r = m0 + i / BN, c = n0 + i % BN;
    if (r < a.m && c < a.n) hipep_gtc_add_splits<T>(partial, bias, Y, a, r * a.n + c, c);
  }
}

// The K splits' sums added in split order, the bias, rounded to T: a thread an element of Y (the
// second launch of a split product whose launch has no arrival counters).
template <typename T>
HIPEP_DEVICE void hipep_mnb_gemm_tc_sum(const float* HIPEP_RESTRICT partial, const T* HIPEP_RESTRICT bias,
                                        T* HIPEP_RESTRICT Y, const hipep_mnb_args a) {
  const hipep_i64 i = (hipep_i64)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < a.m * a.n) hipep_gtc_add_splits<T>(partial, bias, Y, a, i, i % a.n);
}

#define HIPEP_MNB_GEMM_TC(NAME, T)                                                                           \
  HIPEP_KERNEL void __launch_bounds__(MNB_GTC_THREADS) hipep_mnb_gemm_tc_##NAME##_b4(                        \
      const T* A, const unsigned char* B, const T* scales, const void* zp, const T* bias, T* Y, float* partial, \
      unsigned int* counters, const hipep_mnb_args a) {                                                      \
    hipep_mnb_gemm_tc<T>(A, B, scales, zp, bias, Y, partial, counters, a);                                   \
  }                                                                                                          \
  HIPEP_KERNEL void hipep_mnb_gemm_tc_sum_##NAME(const float* partial, const T* bias, T* Y,                  \
                                                 const hipep_mnb_args a) {                                   \
    hipep_mnb_gemm_tc_sum<T>(partial, bias, Y, a);                                                           \
  }
#if HIPEP_WARP_SIZE == 32  // the mma's fragments are a 32-lane warp's
HIPEP_MNB_GEMM_TC(f16, hipep_half)
HIPEP_MNB_GEMM_TC(bf16, hipep_bf16)
#endif
