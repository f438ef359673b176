// com.microsoft::MatMulNBits, one row of fp16 A (decode), on tensor cores: the entry points of the
// kernel whose template and design are in matmul_nbits_tc.h.

#include "matmul_nbits_tc.h"

// Instances: U rounds of loads in flight a lane, SPLIT warps a column group of 16, zero points or
// not, block 32 (`_b32`: scales read in pairs) or 64 and more (`_bw`); two blocks per SM (128
// registers a thread at most). Not yet timed against the h2 forms on a GPU: selected only with
// HIPEP_MNB_GEMV_TC=1 (hipep/runtime/gpu_quant.py row_tc_form).
#define HIPEP_MNB_TC_ONE(U, SPLIT, ZP, ZSUFFIX, PAIRED, BSUFFIX)                                       \
  HIPEP_KERNEL void __launch_bounds__(MNB_WARPS * HIPEP_WARP_SIZE, 2)                                \
      hipep_mnb_gemv_tc_f16_##BSUFFIX##_u##U##_s##SPLIT##ZSUFFIX(HIPEP_MNB_PARAMS(hipep_half)) {     \
    hipep_mnb_gemv_tc<U, SPLIT, ZP, PAIRED>(hipep_mnb_a_loaded<hipep_half>{A},                          \
                                            hipep_mnb_tc_plain{B, scales, zp, bias, Y}, a);            \
  }
#define HIPEP_MNB_TC(U, SPLIT)                                                                        \
  HIPEP_MNB_TC_ONE(U, SPLIT, false, , true, b32) HIPEP_MNB_TC_ONE(U, SPLIT, true, _zp, true, b32)     \
  HIPEP_MNB_TC_ONE(U, SPLIT, false, , false, bw) HIPEP_MNB_TC_ONE(U, SPLIT, true, _zp, false, bw)
#if HIPEP_WARP_SIZE == 32  // the mma's fragments are a 32-lane warp's
HIPEP_MNB_TC(4, 4) HIPEP_MNB_TC(4, 8)
#endif
