// Einsum of two f64 operands: y[o] = sum over the summed subscripts s of A[o, s] * B[o, s], in
// double. There is no f64 GEMM (and the f32 product path would round), so every two-operand f64
// equation runs here, whatever its subscripts: the runtime hands each operand's element stride per
// output axis and per summed axis (0 where the operand lacks the subscript or broadcasts it; the
// sum of the strides of its axes where a subscript repeats within the operand, a diagonal), after
// merging axes that every operand steps through as one.
//
// One output per row of threads, as kernels/reduce.hip's rows: blockDim.x threads (one warp and
// blockDim.y outputs per block, or a whole block for long sums) split the summed index space in
// strided passes, each decoding its index into the operands' offsets, and combine their partial
// sums with warp shuffles. y is contiguous in the output's subscript order.
#include "hipep_device.h"

#define HIPEP_EINSUM_MAX_RANK 8  // output axes, and summed axes, each (after merging)

struct hipep_einsum_args {
  hipep_i64 outputs;  // elements of y
  hipep_i64 summed;   // terms per output: the product of the summed extents (1 where none is summed)
  hipep_i64 out_dims[HIPEP_EINSUM_MAX_RANK];
  hipep_i64 a_out[HIPEP_EINSUM_MAX_RANK];  // A's and B's element strides per output axis
  hipep_i64 b_out[HIPEP_EINSUM_MAX_RANK];
  hipep_i64 sum_dims[HIPEP_EINSUM_MAX_RANK];
  hipep_i64 a_sum[HIPEP_EINSUM_MAX_RANK];  // and per summed axis
  hipep_i64 b_sum[HIPEP_EINSUM_MAX_RANK];
  int out_rank;
  int sum_rank;
};

// Adds to oa, ob the offsets of row-major index i over dims (the last axis fastest).
HIPEP_DEVICE void hipep_einsum_offsets(hipep_i64 i, const hipep_i64* dims, const hipep_i64* sa, const hipep_i64* sb,
                                       int rank, hipep_i64& oa, hipep_i64& ob) {
  for (int d = rank - 1; d >= 0; --d) {
    const hipep_i64 q = i / dims[d], c = i - q * dims[d];
    oa += c * sa[d];
    ob += c * sb[d];
    i = q;
  }
}

HIPEP_KERNEL void hipep_einsum_f64(const double* HIPEP_RESTRICT A, const double* HIPEP_RESTRICT B,
                                   double* HIPEP_RESTRICT Y, const hipep_einsum_args a) {
  __shared__ double scratch[HIPEP_MAX_WARPS];
  const hipep_i64 row = (hipep_i64)blockIdx.x * blockDim.y + threadIdx.y;
  if (row >= a.outputs) return;  // only when blockDim.x is one warp: no block barrier below
  hipep_i64 a0 = 0, b0 = 0;
  hipep_einsum_offsets(row, a.out_dims, a.a_out, a.b_out, a.out_rank, a0, b0);
  double acc = 0.0;
  for (hipep_i64 i = threadIdx.x; i < a.summed; i += blockDim.x) {
    hipep_i64 oa = a0, ob = b0;
    hipep_einsum_offsets(i, a.sum_dims, a.a_sum, a.b_sum, a.sum_rank, oa, ob);
    acc += A[oa] * B[ob];
  }
  acc = hipep_block_sum(acc, scratch);
  if (threadIdx.x == 0) Y[row] = acc;
}
