// ONNX MatMulInteger (and the product of ConvInteger and QLinearConv: W times X's windows, per
// image and group): int8/uint8 A and B, optional zero points, int32 output, numpy matmul
// broadcasting of the batch axes:
//     Y[z, m, n] = sum_k (A[z](m, k) - a_zp(z, m)) * (B[z](k, n) - b_zp(z, n))
// Every product fits in an int (|x - zp| <= 255), and the sum wraps modulo 2^32 as ONNX Runtime's
// int32 accumulation does; it is kept in unsigned ints so the wraparound is defined, and the bits
// are the same as int32 adds give.
//
// A and B are C-contiguous matrices (A(m, k) = A[a_off(z) + m * a_sm + k],
// B(k, n) = B[b_off(z) + k * b_sk + n]); Y is contiguous [batch, m, n]. a_off/b_off come from the
// output matrix index z through up to HIPEP_MMI_MAX_BATCH_RANK batch axes (merged first by the
// runtime; 0 stride where an operand broadcasts), as in kernels/gemm.hip. Where B is one matrix the
// runtime folds A's batch into rows, so a per-row zero point of A is indexed modulo a_zp_rows.
//
// Zero points: a_zp null (0), per tensor (a_zp_rows 0) or per row (a_zp_rows = rows of one A
// matrix), and, with a_zp_batched, M of them per matrix of A (a grouped convolution's per-channel
// zero points of W [G, M/G, K]): their offset is a_off / k; b_zp null, per tensor
// (b_zp_cols 0) or per column (b_zp_cols 1), and, with b_zp_batched, one row of N per matrix of B
// ([..., 1, N] shaped like B's batch): its offset is b_off / k.
// They are subtracted as the tiles are loaded, so the inner loop is a plain integer product and
// the padding of partial tiles (0, not the zero point) adds nothing.
//
// One kernel: 64 x 64 output tiles, K in slices of 32 through shared memory, 256 threads each
// accumulating a 4 x 4 block. A thread's rows (columns) are 16 apart so that a warp's shared-memory
// reads of one k hit distinct banks or broadcast, and its output stores are contiguous along n.
// grid.x covers column tiles, grid.y row tiles and grid.z matrices, the last two looping past
// the grid so any M and batch run.
#include "hipep_device.h"

#define HIPEP_MMI_MAX_BATCH_RANK 4
#define HIPEP_MMI_THREADS 256
#define HIPEP_MMI_BM 64
#define HIPEP_MMI_BN 64
#define HIPEP_MMI_BK 32

struct hipep_matmul_integer_args {
  hipep_i64 m, n, k;
  hipep_i64 a_sm;  // A's element stride along m (k is contiguous)
  hipep_i64 b_sk;  // B's along k (n is contiguous)
  hipep_i64 batch;
  hipep_i64 batch_dims[HIPEP_MMI_MAX_BATCH_RANK];
  hipep_i64 a_batch[HIPEP_MMI_MAX_BATCH_RANK];
  hipep_i64 b_batch[HIPEP_MMI_MAX_BATCH_RANK];
  hipep_i64 a_zp_rows;  // 0: one zero point for A; else one per row, rows counted modulo this
  hipep_i64 b_zp_cols;  // 0: one zero point for B; 1: one per column
  int a_zp_batched;     // per-row zero points that differ per matrix of A
  int b_zp_batched;     // per-column zero points that differ per matrix of B
  int batch_rank;
};

template <typename TA, typename TB>
HIPEP_DEVICE void hipep_matmul_integer(const TA* HIPEP_RESTRICT A, const TB* HIPEP_RESTRICT B,
                                       const TA* HIPEP_RESTRICT a_zp, const TB* HIPEP_RESTRICT b_zp,
                                       int* HIPEP_RESTRICT Y, const hipep_matmul_integer_args a) {
  constexpr int BM = HIPEP_MMI_BM, BN = HIPEP_MMI_BN, BK = HIPEP_MMI_BK;
  constexpr int TX = 16, TY = HIPEP_MMI_THREADS / TX;  // 16 x 16 threads, 4 x 4 outputs each
  constexpr int TM = BM / TY, TN = BN / TX;
  constexpr int A_PER = BM * BK / HIPEP_MMI_THREADS, B_PER = BK * BN / HIPEP_MMI_THREADS;
  static_assert(TM == 4 && TN == 4, "4 x 4 register blocks");
  // +1: A is stored transposed (k-major) by threads that step along k; the odd row length puts
  // those stores on distinct banks.
  __shared__ int As[BK][BM + 1];
  __shared__ int Bs[BK][BN];
  const int tid = threadIdx.x;
  const int tx = tid % TX, ty = tid / TX;
  const hipep_i64 n0 = (hipep_i64)blockIdx.x * BN;
  const hipep_i64 m_tiles = (a.m + BM - 1) / BM;
  const int a_scalar_zp = (a_zp != nullptr && a.a_zp_rows == 0) ? (int)a_zp[0] : 0;
  for (hipep_i64 z = blockIdx.z; z < a.batch; z += gridDim.z) {
    hipep_i64 ao = 0, bo = 0, zz = z;
    for (int d = a.batch_rank - 1; d >= 0; --d) {
      const hipep_i64 c = zz % a.batch_dims[d];
      zz /= a.batch_dims[d];
      ao += c * a.a_batch[d];
      bo += c * a.b_batch[d];
    }
    const TA* pa = A + ao;
    const TB* pb = B + bo;
    const TA* pza = a_zp == nullptr ? nullptr : a_zp + (a.a_zp_batched && a.k > 0 ? ao / a.k : 0);
    // B's zero points for the columns this thread loads: they do not change along k.
    const TB* pz = b_zp == nullptr ? nullptr : b_zp + (a.b_zp_batched && a.k > 0 ? bo / a.k : 0);
    int bz[B_PER];
#pragma unroll
    for (int i = 0; i < B_PER; ++i) {
      const hipep_i64 gn = n0 + (tid + i * HIPEP_MMI_THREADS) % BN;
      bz[i] = (pz == nullptr || gn >= a.n) ? 0 : (int)pz[gn * a.b_zp_cols];
    }
    for (hipep_i64 mt = blockIdx.y; mt < m_tiles; mt += gridDim.y) {
      const hipep_i64 m0 = mt * BM;
      int az[A_PER];
#pragma unroll
      for (int i = 0; i < A_PER; ++i) {
        const hipep_i64 gm = m0 + (tid + i * HIPEP_MMI_THREADS) / BK;
        az[i] = (pza != nullptr && a.a_zp_rows != 0 && gm < a.m) ? (int)pza[gm % a.a_zp_rows] : a_scalar_zp;
      }
      unsigned acc[TM][TN];
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0u;

      for (hipep_i64 k0 = 0; k0 < a.k; k0 += BK) {
        // Consecutive threads load consecutive bytes: A along k, B along n.
#pragma unroll
        for (int i = 0; i < A_PER; ++i) {
          const int idx = tid + i * HIPEP_MMI_THREADS;
          const int mm = idx / BK, kk = idx % BK;
          const hipep_i64 gm = m0 + mm, gk = k0 + kk;
          As[kk][mm] = (gm < a.m && gk < a.k) ? (int)pa[gm * a.a_sm + gk] - az[i] : 0;
        }
#pragma unroll
        for (int i = 0; i < B_PER; ++i) {
          const int idx = tid + i * HIPEP_MMI_THREADS;
          const int kk = idx / BN, nn = idx % BN;
          const hipep_i64 gk = k0 + kk, gn = n0 + nn;
          Bs[kk][nn] = (gk < a.k && gn < a.n) ? (int)pb[gk * a.b_sk + gn] - bz[i] : 0;
        }
        __syncthreads();
#pragma unroll 8
        for (int kk = 0; kk < BK; ++kk) {
          int af[TM], bf[TN];
#pragma unroll
          for (int i = 0; i < TM; ++i) af[i] = As[kk][ty + i * TY];
#pragma unroll
          for (int j = 0; j < TN; ++j) bf[j] = Bs[kk][tx + j * TX];
#pragma unroll
          for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j) acc[i][j] += (unsigned)(af[i] * bf[j]);
        }
        // The next slice overwrites the tiles every thread is still reading.
        __syncthreads();
      }

      int* py = Y + z * a.m * a.n;
#pragma unroll
      for (int i = 0; i < TM; ++i) {
        const hipep_i64 gm = m0 + ty + i * TY;
        if (gm >= a.m) continue;
#pragma unroll
        for (int j = 0; j < TN; ++j) {
          const hipep_i64 gn = n0 + tx + j * TX;
          if (gn < a.n) py[gm * a.n + gn] = (int)acc[i][j];
        }
      }
    }
  }
}

#define HIPEP_MMI_ENTRY(NAME, TA, TB)                                                                    \
  HIPEP_KERNEL void __launch_bounds__(HIPEP_MMI_THREADS) hipep_matmul_integer_##NAME(                    \
      const TA* HIPEP_RESTRICT A, const TB* HIPEP_RESTRICT B, const TA* HIPEP_RESTRICT a_zp,             \
      const TB* HIPEP_RESTRICT b_zp, int* HIPEP_RESTRICT Y, const hipep_matmul_integer_args a) {        \
    hipep_matmul_integer<TA, TB>(A, B, a_zp, b_zp, Y, a);                                                \
  }

HIPEP_MMI_ENTRY(u8_u8, unsigned char, unsigned char)
HIPEP_MMI_ENTRY(u8_i8, unsigned char, signed char)
HIPEP_MMI_ENTRY(i8_u8, signed char, unsigned char)
HIPEP_MMI_ENTRY(i8_i8, signed char, signed char)
