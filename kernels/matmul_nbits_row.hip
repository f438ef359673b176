// com.microsoft::MatMulNBits, one row of A (decode): the entry points of the GEMV in packed
// arithmetic, whose templates are in matmul_nbits_row.h.

#include "matmul_nbits_row.h"

// Blocks resident per SM asked of the compiler (MIN_BLOCKS: registers 65536 / (256 * MIN_BLOCKS)):
// as many as hold each variant's loads and sums without spilling.
#define HIPEP_MNB_ROW1_ONE(VARIANT, NAME, T, Q8, U, ZP, SUFFIX, MIN_BLOCKS)                           \
  HIPEP_KERNEL void __launch_bounds__(MNB_WARPS * HIPEP_WARP_SIZE, MIN_BLOCKS)                        \
      hipep_mnb_gemv_row1_##VARIANT##_##NAME##_b4_u##U##SUFFIX(HIPEP_MNB_PARAMS(T)) {                 \
    hipep_mnb_gemv_row1<T, Q8, U, ZP>(hipep_mnb_a_loaded<T>{A}, B, scales, zp, bias, Y, a);                                  \
  }
#define HIPEP_MNB_ROW1(VARIANT, NAME, T, Q8, B1, B2, B4)      \
  HIPEP_MNB_ROW1_ONE(VARIANT, NAME, T, Q8, 1, false, , B1)    \
  HIPEP_MNB_ROW1_ONE(VARIANT, NAME, T, Q8, 2, false, , B2)    \
  HIPEP_MNB_ROW1_ONE(VARIANT, NAME, T, Q8, 4, false, , B4)    \
  HIPEP_MNB_ROW1_ONE(VARIANT, NAME, T, Q8, 1, true, _zp, B1)  \
  HIPEP_MNB_ROW1_ONE(VARIANT, NAME, T, Q8, 2, true, _zp, B2)  \
  HIPEP_MNB_ROW1_ONE(VARIANT, NAME, T, Q8, 4, true, _zp, B4)
HIPEP_MNB_ROW1(h2, f16, hipep_half, false, 8, 8, 5)
// K split between two warps of a column (h2 only: what was measured)
#define HIPEP_MNB_ROW1_SPLIT(U, ZP, SUFFIX, MIN_BLOCKS)                                              \
  HIPEP_KERNEL void __launch_bounds__(MNB_WARPS * HIPEP_WARP_SIZE, MIN_BLOCKS)                        \
      hipep_mnb_gemv_row1_h2_f16_b4_u##U##_s2##SUFFIX(HIPEP_MNB_PARAMS(hipep_half)) {                 \
    hipep_mnb_gemv_row1<hipep_half, false, U, ZP, 2>(hipep_mnb_a_loaded<hipep_half>{A}, B, scales, zp, bias, Y, a);                   \
  }
HIPEP_MNB_ROW1_SPLIT(1, false, , 8) HIPEP_MNB_ROW1_SPLIT(2, false, , 8) HIPEP_MNB_ROW1_SPLIT(4, false, , 5)
HIPEP_MNB_ROW1_SPLIT(1, true, _zp, 8) HIPEP_MNB_ROW1_SPLIT(2, true, _zp, 8) HIPEP_MNB_ROW1_SPLIT(4, true, _zp, 5)
// Several columns a warp (h2): each of A's pairs read from shared memory serves COLS columns, and a
// grid of COLS times fewer warps leaves room on the SMs for the next kernel's blocks, which load their
// weights while this one computes. One round of U chunks a lane over the row, SPLIT warps a column.
// Measured on the H200 against the forms above, as hipep launches them (overlapped; one-wave grids
// here): 4096 x 4096 4.95 -> 4.71 us (U 4, 2 columns), o 2048 -> 2048 2.61 -> 2.01 and qkv 2048 ->
// 3072 2.83 -> 2.67 (U 2, 4 columns), the LM head 2048 -> 32000 16.4 -> 14.4 (U 2, 2 columns, 5 per
// SM), down 8192 -> 2048 6.07 -> 5.40 (U 2, 2 columns, 4 warps a column;
// benchmarks/results/2026-12-04-gemv-study-cols-h200.md). Launch bounds: the most blocks per SM
// without a spill, with or without zero points (ptxas, sm_90).
#define HIPEP_MNB_ROW1_COLS(U, C, S, LB)                                                              \
  HIPEP_KERNEL void __launch_bounds__(MNB_WARPS * HIPEP_WARP_SIZE, LB)                               \
      hipep_mnb_gemv_row1_h2_f16_b4_u##U##_c##C##_s##S(HIPEP_MNB_PARAMS(hipep_half)) {                \
    hipep_mnb_gemv_row1<hipep_half, false, U, false, S, hipep_mnb_a_loaded<hipep_half>, C>(          \
        hipep_mnb_a_loaded<hipep_half>{A}, B, scales, zp, bias, Y, a);                               \
  }                                                                                                   \
  HIPEP_KERNEL void __launch_bounds__(MNB_WARPS * HIPEP_WARP_SIZE, LB)                               \
      hipep_mnb_gemv_row1_h2_f16_b4_u##U##_c##C##_s##S##_zp(HIPEP_MNB_PARAMS(hipep_half)) {           \
    hipep_mnb_gemv_row1<hipep_half, false, U, true, S, hipep_mnb_a_loaded<hipep_half>, C>(           \
        hipep_mnb_a_loaded<hipep_half>{A}, B, scales, zp, bias, Y, a);                               \
  }
HIPEP_MNB_ROW1_COLS(2, 4, 1, 3) HIPEP_MNB_ROW1_COLS(2, 2, 1, 5) HIPEP_MNB_ROW1_COLS(4, 2, 1, 3)
HIPEP_MNB_ROW1_COLS(2, 2, 4, 4)
HIPEP_MNB_ROW1(q8, f32, float, true, 8, 6, 4)
HIPEP_MNB_ROW1(q8, f16, hipep_half, true, 8, 6, 4)
HIPEP_MNB_ROW1(q8, bf16, hipep_bf16, true, 8, 6, 4)

// The one-row GEMV in packed arithmetic (see above): q8 for accuracy_level 4, h2 for fp16 A. Two
// register shares: 4 blocks per SM (64 registers; the q8 variants spill 16 bytes there) for grids
// past 3 blocks per SM, and 3 per SM (no spill) as `_w3` for grids one wave of those covers (measured
// on the H200 at 3 per SM: qkv 2048 -> 3072 3.20 -> 2.85 us fp16, 4.37 -> 3.98 f32 level 4; down
// f32 level 4 8.71 -> 7.82; 4096 x 4096, 512 blocks, 5.70 -> 7.14 us: two waves).
#define HIPEP_MNB_ROW(VARIANT, NAME, T, Q8)                                                          \
  HIPEP_KERNEL void __launch_bounds__(MNB_WARPS * HIPEP_WARP_SIZE, 4)                                 \
      hipep_mnb_gemv_row_##VARIANT##_##NAME##_b4(HIPEP_MNB_PARAMS(T)) {                               \
    hipep_mnb_gemv_row<T, Q8>(hipep_mnb_a_loaded<T>{A}, B, scales, zp, bias, Y, a);                                          \
  }                                                                                                   \
  HIPEP_KERNEL void __launch_bounds__(MNB_WARPS * HIPEP_WARP_SIZE, 3)                                 \
      hipep_mnb_gemv_row_##VARIANT##_##NAME##_b4_w3(HIPEP_MNB_PARAMS(T)) {                            \
    hipep_mnb_gemv_row<T, Q8>(hipep_mnb_a_loaded<T>{A}, B, scales, zp, bias, Y, a);                                          \
  }
HIPEP_MNB_ROW(q8, f32, float, true)
HIPEP_MNB_ROW(q8, f16, hipep_half, true)
HIPEP_MNB_ROW(q8, bf16, hipep_bf16, true)
HIPEP_MNB_ROW(h2, f16, hipep_half, false)

// The gated kernel (hipep::GatedMatMulNBits) is rendered at run time with each program's epilogue
// (hipep/runtime/gpu_gated_matmul.py); this instance, with the product as its program, lets the
// compile checks (tools/check_kernels.sh: nvcc, and hipcc for AMD) build the template.
struct hipep_gated_product {
  HIPEP_DEVICE hipep_half operator()(hipep_half g, hipep_half u) const {
    return __float2half_rn(__half2float(g) * __half2float(u));
  }
};
HIPEP_KERNEL void __launch_bounds__(MNB_WARPS * HIPEP_WARP_SIZE, 5)
    hipep_mnb_gemv_row1_gated_product_f16_u2(HIPEP_MNB_GATED_PARAMS(hipep_half, hipep_half)) {
  hipep_mnb_gemv_row1_gated<hipep_half, hipep_half, false, 2, false, hipep_gated_product>(
      hipep_mnb_a_loaded<hipep_half>{A}, B0, scales0, zp0, B1, scales1, zp1, Y, a);
}

// hipep::SkipNormMatMulNBits is rendered at run time too (hipep/runtime/gpu_norm_matmul.py), its
// GEMV and the norm as A's source; this instance lets the compile checks build the source.
HIPEP_KERNEL void __launch_bounds__(MNB_WARPS * HIPEP_WARP_SIZE, 8)
    hipep_mnb_gemv_row1_skip_norm_f16_u2(const hipep_mnb_skip_norm_src<1> src, HIPEP_MNB_WEIGHTS(hipep_half)) {
  hipep_grid_release();
  hipep_mnb_gemv_row1<hipep_half, false, 2, false, 1, hipep_mnb_skip_norm_src<1>>(src, B, scales, zp, bias, Y, a);
}
