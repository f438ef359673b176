// com.microsoft::MatMulNBits, one row of fp16 or bf16 A (decode), on tensor cores: the entry points of the
// kernel whose template and design are in matmul_nbits_tc.h.

#include "matmul_nbits_tc.h"

// Instances: U rounds of loads in flight a lane, SPLIT warps a column group of 16, zero points or
// not, block 32 (`_b32`: scales read in pairs) or 64 and more (`_bw`); two blocks per SM (128
// registers a thread at most). fp16: slower than the h2 forms on the H100 and H200, selected only
// with HIPEP_MNB_GEMV_TC=1; bf16, which has no packed form of its own, by default
// (hipep/runtime/gpu_quant.py row_tc_form).
#define HIPEP_MNB_TC_ONE(NAME, T, U, SPLIT, ZP, ZSUFFIX, PAIRED, BSUFFIX)                              \
  HIPEP_KERNEL void __launch_bounds__(MNB_WARPS * HIPEP_WARP_SIZE, 2)                                \
      hipep_mnb_gemv_tc_##NAME##_##BSUFFIX##_u##U##_s##SPLIT##ZSUFFIX(HIPEP_MNB_PARAMS(T)) {           \
    hipep_mnb_gemv_tc<U, SPLIT, ZP, PAIRED>(hipep_mnb_a_loaded<T>{A},                                   \
                                            hipep_mnb_tc_plain<T>{B, scales, zp, bias, Y}, a);         \
  }
#define HIPEP_MNB_TC(NAME, T, U, SPLIT)                                                               \
  HIPEP_MNB_TC_ONE(NAME, T, U, SPLIT, false, , true, b32)                                             \
  HIPEP_MNB_TC_ONE(NAME, T, U, SPLIT, true, _zp, true, b32)                                           \
  HIPEP_MNB_TC_ONE(NAME, T, U, SPLIT, false, , false, bw)                                             \
  HIPEP_MNB_TC_ONE(NAME, T, U, SPLIT, true, _zp, false, bw)
#if HIPEP_WARP_SIZE == 32  // the mma's fragments are a 32-lane warp's
HIPEP_MNB_TC(f16, hipep_half, 4, 4) HIPEP_MNB_TC(f16, hipep_half, 4, 8)
HIPEP_MNB_TC(bf16, hipep_bf16, 4, 4) HIPEP_MNB_TC(bf16, hipep_bf16, 4, 8)
#endif
