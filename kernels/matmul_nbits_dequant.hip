// com.microsoft::MatMulNBits for prefill through the vendor BLAS: the weights dequantized into the
// stream's workspace as a row-major [N, K] matrix of A's type T, which one BLAS GEMM (tensor cores,
// f32 accumulation) then multiplies: Y = A W^T (+ bias). The operands' layout is matmul_nbits.hip's.
//
// W[n, k] = (q - zp) * scale in f32 as the own GEMM forms it (q - zp exact through a float's
// mantissa; float zero points: one rounding), rounded once to T. At accuracy_level 4 (f32 A only)
// the GEMM's A is A' = rint(a * inverse) * scale per block of K, the value the own kernels use in
// place of a (the CPU EP's int8 codes times their scale): the block parameters come from
// hipep_mnb_a_int8_* (matmul_nbits.hip), A' is written here.
#include "matmul_nbits.h"

// A thread per 32-bit word of B (8 values at 4 bits, 4 at 8): its block's scale and zero point
// read once, its values written as consecutive elements of W's row (past K_pad nothing exists;
// values in [K, K_pad) are the quantizer's padding and are not written).
template <typename T, int BITS>
HIPEP_DEVICE void hipep_mnb_dequant(const unsigned char* HIPEP_RESTRICT B, const T* HIPEP_RESTRICT scales,
                                    const void* HIPEP_RESTRICT zp, T* HIPEP_RESTRICT W, const hipep_mnb_args a) {
  constexpr int VPW = 32 / BITS;
  const hipep_i64 words_per_row = a.row_bytes / 4;
  const hipep_i64 g = (hipep_i64)blockIdx.x * blockDim.x + threadIdx.x;
  if (g >= a.n * words_per_row) return;
  const hipep_i64 n = g / words_per_row, k0 = (g - n * words_per_row) * VPW;
  if (k0 >= a.k) return;
  const hipep_i64 blk = k0 >> a.log2_bs;
  const unsigned int word = *reinterpret_cast<const unsigned int*>(B + n * a.row_bytes + k0 * BITS / 8);
  const float s = hipep_to_float(scales[n * a.nb + blk]);
  const float z = hipep_mnb_zero_point<T, BITS>(zp, n, blk, a);
  float v[VPW];
  if (a.zp_mode == 2) {
    hipep_mnb_word<BITS>(word, 8388608.0f, v);
#pragma unroll
    for (int j = 0; j < VPW; ++j) v[j] = (v[j] - z) * s;
  } else {
    hipep_mnb_word<BITS>(word, 8388608.0f + z, v);
#pragma unroll
    for (int j = 0; j < VPW; ++j) v[j] *= s;
  }
  T* row = W + n * a.k + k0;
  // The word's values as one run of VPW * sizeof(T) bytes (8 to 32): stored 16 or 8 bytes at a
  // time where the run is whole and aligned (rows of K values start aligned when K * sizeof(T)
  // is a multiple of 16), else value by value.
  constexpr int BYTES = VPW * (int)sizeof(T);
  if (k0 + VPW <= a.k && (a.k * (hipep_i64)sizeof(T)) % 16 == 0 && BYTES % 8 == 0) {
    union {
      T t[VPW];
      uint2 u2[BYTES / 8];
      uint4 u4[BYTES / 16 > 0 ? BYTES / 16 : 1];
    } run;
#pragma unroll
    for (int j = 0; j < VPW; ++j) run.t[j] = hipep_from_float<T>(v[j]);
    if constexpr (BYTES % 16 == 0) {
#pragma unroll
      for (int q = 0; q < BYTES / 16; ++q) reinterpret_cast<uint4*>(row)[q] = run.u4[q];
    } else {
#pragma unroll
      for (int q = 0; q < BYTES / 8; ++q) reinterpret_cast<uint2*>(row)[q] = run.u2[q];
    }
    return;
  }
#pragma unroll
  for (int j = 0; j < VPW; ++j)
    if (k0 + j < a.k) row[j] = hipep_from_float<T>(v[j]);
}

// A'[m, k] = the int8 code of A[m, k] times its block's scale (qp: each block's (scale, inverse)).
template <typename T>
HIPEP_DEVICE void hipep_mnb_a_int8_dequant(const T* HIPEP_RESTRICT A, const float2* HIPEP_RESTRICT qp,
                                           T* HIPEP_RESTRICT A8, const hipep_mnb_args a) {
  const hipep_i64 i = (hipep_i64)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= a.m * a.k) return;
  const hipep_i64 m = i / a.k, k = i - m * a.k;
  A8[i] = hipep_from_float<T>(hipep_mnb_int8_value(hipep_to_float(A[i]), qp[m * a.nb + (k >> a.log2_bs)]));
}

#define HIPEP_MNB_DEQUANT(NAME, T, BITS)                                                               \
  HIPEP_KERNEL void hipep_mnb_dequant_##NAME##_b##BITS(const unsigned char* HIPEP_RESTRICT B,          \
                                                      const T* HIPEP_RESTRICT scales,                 \
                                                      const void* HIPEP_RESTRICT zp, T* HIPEP_RESTRICT W, \
                                                      const hipep_mnb_args a) {                       \
    hipep_mnb_dequant<T, BITS>(B, scales, zp, W, a);                                                   \
  }

HIPEP_MNB_DEQUANT(f32, float, 4)
HIPEP_MNB_DEQUANT(f32, float, 8)
HIPEP_MNB_DEQUANT(f16, hipep_half, 4)
HIPEP_MNB_DEQUANT(f16, hipep_half, 8)
HIPEP_MNB_DEQUANT(bf16, hipep_bf16, 4)
HIPEP_MNB_DEQUANT(bf16, hipep_bf16, 8)

HIPEP_KERNEL void hipep_mnb_a_int8_dequant_f32(const float* HIPEP_RESTRICT A, const float2* HIPEP_RESTRICT qp,
                                               float* HIPEP_RESTRICT A8, const hipep_mnb_args a) {
  hipep_mnb_a_int8_dequant<float>(A, qp, A8, a);
}
