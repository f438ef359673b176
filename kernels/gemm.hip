// Matrix products: ONNX MatMul (batched, with numpy broadcasting of the batch axes) and Gemm
// (transA/transB, alpha, beta and a broadcast C), for f32, f16 and bf16 storage; every product
// accumulates in f32 and each output is rounded once:
//     Y[z, m, n] = alpha * sum_k A[z](m, k) * B[z](k, n)  (+ beta * C(m, n))
// The runtime describes each operand by element strides, so transposes cost nothing:
//   A(m, k) = A[a_off(z) + m * a_sm + k * a_sk],  B(k, n) = B[b_off(z) + k * b_sk + n * b_sn],
//   C(m, n) = C[m * c_sm + n * c_sn] (0 on broadcast axes; C null: no term),
// and Y is contiguous [batch, m, n]. a_off/b_off come from the output matrix index z through up
// to HIPEP_GEMM_MAX_BATCH_RANK batch axes (the runtime merges axes first; a broadcast axis has
// stride 0). grid.z walks the batch (looping past 65535).
//
// Three kernels:
//   * gemv_n (few rows, B contiguous along n, the decode case of `x @ W`): a block covers
//     blockDim.x * VEC columns with blockDim.y groups splitting K; each thread reads VEC columns
//     of B per 16-byte load, several loads in flight. The k groups are combined by warp shuffles,
//     then warp by warp in shared memory, in a fixed order (results do not depend on timing).
//     Where those blocks would leave multiprocessors idle (narrow B), K is split among grid.y
//     blocks ("_split" entries): each writes its f32 partial sums to a workspace
//     [k_splits, batch, m, n], and gemm_split_reduce adds them in split order and applies the
//     epilogue.
//   * gemv_t (few rows, B contiguous along k: Gemm's transB, or a 1-column B): one warp per
//     output column reads that column of B along k, 16 bytes per lane, and reduces by shuffles.
//   * gemm (everything else): BM x BN output tiles, BK-deep slices of A and B staged through
//     shared memory (double-buffered, the next slice's global loads in registers while the
//     current one is used), each thread accumulating a TM x TN register block.
// MT is the most rows a gemv instance handles (the runtime picks the smallest MT >= m).
// f64 (gemm_f64): 16 x 16 output tiles, 16-deep slices of A and B through shared memory, a thread
// an output accumulating in double: the conformance suite's and scientific models' double
// products, where exactness matters more than speed.
#include "hipep_device.h"

#define HIPEP_GEMM_MAX_BATCH_RANK 4
#define HIPEP_GEMV_THREADS 256
#define HIPEP_GEMV_MAX_COLS 256  // blockDim.x * VEC of gemv_n never exceeds this
#define HIPEP_GEMV_LOADS 8
#define HIPEP_GEMM_THREADS 256

struct hipep_gemm_args {
  hipep_i64 m, n, k;
  hipep_i64 a_sm, a_sk;  // A's element strides along m and k
  hipep_i64 b_sk, b_sn;  // B's along k and n
  hipep_i64 c_sm, c_sn;  // C's along m and n (0: broadcast)
  hipep_i64 batch;       // output matrices
  hipep_i64 batch_dims[HIPEP_GEMM_MAX_BATCH_RANK];
  hipep_i64 a_batch[HIPEP_GEMM_MAX_BATCH_RANK];  // A's element stride per batch axis
  hipep_i64 b_batch[HIPEP_GEMM_MAX_BATCH_RANK];
  hipep_i64 k_chunk;   // split gemv_n: the k extent of one split (grid.y splits)
  hipep_i64 k_splits;  // split gemv_n and its reduction: how many
  int batch_rank;
  float alpha, beta;
};

template <typename T, int VEC> struct alignas(sizeof(T) * VEC) hipep_gemm_vec { T v[VEC]; };

HIPEP_DEVICE void hipep_gemm_offsets(const hipep_gemm_args& a, hipep_i64 z, hipep_i64& ao, hipep_i64& bo) {
  ao = 0;
  bo = 0;
  for (int d = a.batch_rank - 1; d >= 0; --d) {
    const hipep_i64 c = z % a.batch_dims[d];
    z /= a.batch_dims[d];
    ao += c * a.a_batch[d];
    bo += c * a.b_batch[d];
  }
}

// alpha * acc + beta * C(m, n), rounded once to T.
template <typename T>
HIPEP_DEVICE T hipep_gemm_epilogue(const hipep_gemm_args& a, const T* HIPEP_RESTRICT c, float acc, hipep_i64 m,
                                   hipep_i64 n) {
  float v = a.alpha * acc;
  if (c != 0) v += a.beta * hipep_to_float(c[m * a.c_sm + n * a.c_sn]);
  return hipep_from_float<T>(v);
}

// ---- gemv_n: B contiguous along n ---------------------------------------------------------------

template <typename T, int MT, int VEC, bool SPLIT>
HIPEP_DEVICE void hipep_gemv_n(const T* HIPEP_RESTRICT A, const T* HIPEP_RESTRICT B, const T* HIPEP_RESTRICT C,
                               T* HIPEP_RESTRICT Y, float* HIPEP_RESTRICT partial, const hipep_gemm_args a) {
  __shared__ float red[MT * HIPEP_GEMV_MAX_COLS];
  typedef hipep_gemm_vec<T, VEC> V;
  const int cl = blockDim.x, kg = blockDim.y;
  const int tid = threadIdx.y * cl + threadIdx.x;
  const int lane = tid % HIPEP_WARP_SIZE, warp = tid / HIPEP_WARP_SIZE;
  const int warps = (cl * kg + HIPEP_WARP_SIZE - 1) / HIPEP_WARP_SIZE;
  const hipep_i64 n0 = ((hipep_i64)blockIdx.x * cl + threadIdx.x) * VEC;
  const bool cols = n0 < a.n;  // VEC > 1: n is a multiple of VEC, so all VEC columns exist
  for (hipep_i64 z = blockIdx.z; z < a.batch; z += gridDim.z) {
    hipep_i64 ao, bo;
    hipep_gemm_offsets(a, z, ao, bo);
    const T* pa = A + ao;
    const T* pb = B + bo + n0;
    float acc[MT][VEC];
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
      for (int v = 0; v < VEC; ++v) acc[m][v] = 0.0f;
    const hipep_i64 split_end = ((hipep_i64)blockIdx.y + 1) * a.k_chunk;
    const hipep_i64 k_end = SPLIT && split_end < a.k ? split_end : a.k;
    if (cols) {
      hipep_i64 k = (SPLIT ? (hipep_i64)blockIdx.y * a.k_chunk : 0) + threadIdx.y;
      // HIPEP_GEMV_LOADS loads of B in flight per thread: the loop is bound by memory latency,
      // and one block per multiprocessor must keep enough bytes in flight.
      for (; k + (HIPEP_GEMV_LOADS - 1) * kg < k_end; k += HIPEP_GEMV_LOADS * kg) {
        V b[HIPEP_GEMV_LOADS];
#pragma unroll
        for (int u = 0; u < HIPEP_GEMV_LOADS; ++u) b[u] = *reinterpret_cast<const V*>(pb + (k + u * kg) * a.b_sk);
#pragma unroll
        for (int u = 0; u < HIPEP_GEMV_LOADS; ++u) {
#pragma unroll
          for (int m = 0; m < MT; ++m) {
            if (m < a.m) {
              const float x = hipep_to_float(pa[m * a.a_sm + (k + u * kg) * a.a_sk]);
#pragma unroll
              for (int v = 0; v < VEC; ++v) acc[m][v] = fmaf(x, hipep_to_float(b[u].v[v]), acc[m][v]);
            }
          }
        }
      }
      for (; k < k_end; k += kg) {
        const V b = *reinterpret_cast<const V*>(pb + k * a.b_sk);
#pragma unroll
        for (int m = 0; m < MT; ++m) {
          if (m < a.m) {
            const float x = hipep_to_float(pa[m * a.a_sm + k * a.a_sk]);
#pragma unroll
            for (int v = 0; v < VEC; ++v) acc[m][v] = fmaf(x, hipep_to_float(b.v[v]), acc[m][v]);
          }
        }
      }
    }
    // The k groups of one warp: lanes cl, 2 cl, ... apart hold the same columns.
    for (int mask = cl; mask < HIPEP_WARP_SIZE; mask <<= 1) {
#pragma unroll
      for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int v = 0; v < VEC; ++v) acc[m][v] += HIPEP_SHFL_XOR(acc[m][v], mask);
    }
    // Then warp after warp, in order: lanes 0 .. cl-1 of each warp hold its sums.
    for (int w = 0; w < warps; ++w) {
      if (warp == w && lane < cl) {
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
          for (int v = 0; v < VEC; ++v) {
            float* r = &red[m * HIPEP_GEMV_MAX_COLS + lane * VEC + v];
            *r = (w == 0 ? 0.0f : *r) + acc[m][v];
          }
      }
      __syncthreads();
    }
    if (tid < cl) {
      const hipep_i64 col = ((hipep_i64)blockIdx.x * cl + tid) * VEC;
      T* py = Y + z * a.m * a.n;
      float* pp = partial + ((hipep_i64)blockIdx.y * a.batch + z) * a.m * a.n;
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        if (m < a.m) {
#pragma unroll
          for (int v = 0; v < VEC; ++v) {
            const float sum = red[m * HIPEP_GEMV_MAX_COLS + tid * VEC + v];
            if (col + v >= a.n) continue;
            if (SPLIT)
              pp[m * a.n + col + v] = sum;
            else
              py[m * a.n + col + v] = hipep_gemm_epilogue<T>(a, C, sum, m, col + v);
          }
        }
      }
    }
    __syncthreads();  // red is reused by the next matrix of the batch
  }
}

// ---- gemv_t: B contiguous along k ---------------------------------------------------------------

template <typename T, int MT, int VEC>
HIPEP_DEVICE void hipep_gemv_t(const T* HIPEP_RESTRICT A, const T* HIPEP_RESTRICT B, const T* HIPEP_RESTRICT C,
                               T* HIPEP_RESTRICT Y, const hipep_gemm_args a) {
  typedef hipep_gemm_vec<T, VEC> V;
  const int lane = threadIdx.x;  // blockDim.x is one warp
  const hipep_i64 col = (hipep_i64)blockIdx.x * blockDim.y + threadIdx.y;
  if (col >= a.n) return;  // the whole warp: no shuffle is left half-done
  for (hipep_i64 z = blockIdx.z; z < a.batch; z += gridDim.z) {
    hipep_i64 ao, bo;
    hipep_gemm_offsets(a, z, ao, bo);
    const T* pa = A + ao;
    const T* pb = B + bo + col * a.b_sn;
    float acc[MT];
#pragma unroll
    for (int m = 0; m < MT; ++m) acc[m] = 0.0f;
    const hipep_i64 step = (hipep_i64)HIPEP_WARP_SIZE * VEC;
    hipep_i64 k = (hipep_i64)lane * VEC;
    for (; k + step < a.k; k += 2 * step) {  // two loads in flight
      const V b0 = *reinterpret_cast<const V*>(pb + k);
      const V b1 = *reinterpret_cast<const V*>(pb + k + step);
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        if (m < a.m) {
          // VEC > 1: A is contiguous along k (a_sk == 1) and aligned, the runtime checks.
          const V x0 = *reinterpret_cast<const V*>(pa + m * a.a_sm + k * a.a_sk);
          const V x1 = *reinterpret_cast<const V*>(pa + m * a.a_sm + (k + step) * a.a_sk);
#pragma unroll
          for (int v = 0; v < VEC; ++v) {
            acc[m] = fmaf(hipep_to_float(x0.v[v]), hipep_to_float(b0.v[v]), acc[m]);
            acc[m] = fmaf(hipep_to_float(x1.v[v]), hipep_to_float(b1.v[v]), acc[m]);
          }
        }
      }
    }
    for (; k < a.k; k += step) {
      const V b0 = *reinterpret_cast<const V*>(pb + k);
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        if (m < a.m) {
          const V x0 = *reinterpret_cast<const V*>(pa + m * a.a_sm + k * a.a_sk);
#pragma unroll
          for (int v = 0; v < VEC; ++v) acc[m] = fmaf(hipep_to_float(x0.v[v]), hipep_to_float(b0.v[v]), acc[m]);
        }
      }
    }
#pragma unroll
    for (int m = 0; m < MT; ++m) acc[m] = hipep_warp_sum(acc[m]);
    if (lane == 0) {
      T* py = Y + z * a.m * a.n;
#pragma unroll
      for (int m = 0; m < MT; ++m)
        if (m < a.m) py[m * a.n + col] = hipep_gemm_epilogue<T>(a, C, acc[m], m, col);
    }
  }
}

// ---- gemm: shared-memory tiles, register blocks ---------------------------------------------------

// A thread's TM rows (and TN columns) come in runs of 4, the runs BM / (TM / 4) apart, so a warp's
// shared-memory reads of one k are 16-byte words side by side.
template <int EXTENT, int PER_THREAD> HIPEP_DEVICE int hipep_gemm_slot(int t, int i) {
  return (i / 4) * (EXTENT / (PER_THREAD / 4)) + t * 4 + (i % 4);
}

template <typename T, int BM, int BN, int BK, int TM, int TN>
HIPEP_DEVICE void hipep_gemm_tiled(const T* HIPEP_RESTRICT A, const T* HIPEP_RESTRICT B, const T* HIPEP_RESTRICT C,
                                   T* HIPEP_RESTRICT Y, const hipep_gemm_args a) {
  static_assert((BM / TM) * (BN / TN) == HIPEP_GEMM_THREADS, "one thread per TM x TN block");
  static_assert(TM % 4 == 0 && TN % 4 == 0, "register blocks in runs of 4");
  constexpr int A_PER = BM * BK / HIPEP_GEMM_THREADS;
  constexpr int B_PER = BN * BK / HIPEP_GEMM_THREADS;
  // +4: rows stay 16-byte aligned, and the transposing stores fall on distinct banks.
  __shared__ float As[2][BK][BM + 4];
  __shared__ float Bs[2][BK][BN + 4];
  const int tid = threadIdx.x;
  const int tx = tid % (BN / TN), ty = tid / (BN / TN);
  const hipep_i64 m0 = (hipep_i64)blockIdx.y * BM, n0 = (hipep_i64)blockIdx.x * BN;
  // Consecutive threads load consecutive addresses: along k where A (B) is contiguous along k,
  // else along m (n).
  const bool a_along_k = a.a_sk == 1 && a.a_sm != 1;
  const bool b_along_n = a.b_sn == 1;
  for (hipep_i64 z = blockIdx.z; z < a.batch; z += gridDim.z) {
    hipep_i64 ao, bo;
    hipep_gemm_offsets(a, z, ao, bo);
    const T* pa = A + ao;
    const T* pb = B + bo;
    float ra[A_PER], rb[B_PER];
    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;

    // Global -> registers (the slice at K0), registers -> shared buffer S. Thread tid moves
    // elements tid, tid + THREADS, ... of the slice, numbered along the contiguous axis.
#define HIPEP_GEMM_A_AT(idx, mm, kk)                    \
  const int mm = a_along_k ? (idx) / BK : (idx) % BM; \
  const int kk = a_along_k ? (idx) % BK : (idx) / BM;
#define HIPEP_GEMM_B_AT(idx, kk, nn)                    \
  const int nn = b_along_n ? (idx) % BN : (idx) / BK; \
  const int kk = b_along_n ? (idx) / BN : (idx) % BK;
#define HIPEP_GEMM_LOAD(K0)                                                                       \
  _Pragma("unroll") for (int i = 0; i < A_PER; ++i) {                                              \
    HIPEP_GEMM_A_AT(tid + i * HIPEP_GEMM_THREADS, mm, kk)                                          \
    const hipep_i64 gm = m0 + mm, gk = (K0) + kk;                                                  \
    ra[i] = (gm < a.m && gk < a.k) ? hipep_to_float(pa[gm * a.a_sm + gk * a.a_sk]) : 0.0f;        \
  }                                                                                                \
  _Pragma("unroll") for (int i = 0; i < B_PER; ++i) {                                              \
    HIPEP_GEMM_B_AT(tid + i * HIPEP_GEMM_THREADS, kk, nn)                                          \
    const hipep_i64 gk = (K0) + kk, gn = n0 + nn;                                                  \
    rb[i] = (gk < a.k && gn < a.n) ? hipep_to_float(pb[gk * a.b_sk + gn * a.b_sn]) : 0.0f;        \
  }
#define HIPEP_GEMM_STORE(S)                                                                       \
  _Pragma("unroll") for (int i = 0; i < A_PER; ++i) {                                              \
    HIPEP_GEMM_A_AT(tid + i * HIPEP_GEMM_THREADS, mm, kk)                                          \
    As[S][kk][mm] = ra[i];                                                                         \
  }                                                                                                \
  _Pragma("unroll") for (int i = 0; i < B_PER; ++i) {                                              \
    HIPEP_GEMM_B_AT(tid + i * HIPEP_GEMM_THREADS, kk, nn)                                          \
    Bs[S][kk][nn] = rb[i];                                                                         \
  }

    HIPEP_GEMM_LOAD(0)
    HIPEP_GEMM_STORE(0)
    __syncthreads();
    int s = 0;
    for (hipep_i64 k0 = 0; k0 < a.k; k0 += BK) {
      const bool more = k0 + BK < a.k;
      if (more) {
        HIPEP_GEMM_LOAD(k0 + BK)
      }
#pragma unroll
      for (int kk = 0; kk < BK; ++kk) {
        float af[TM], bf[TN];
#pragma unroll
        for (int i = 0; i < TM; ++i) af[i] = As[s][kk][hipep_gemm_slot<BM, TM>(ty, i)];
#pragma unroll
        for (int j = 0; j < TN; ++j) bf[j] = Bs[s][kk][hipep_gemm_slot<BN, TN>(tx, j)];
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
          for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(af[i], bf[j], acc[i][j]);
      }
      // The other buffer was last read in the previous step, which every thread has finished.
      if (more) {
        HIPEP_GEMM_STORE(s ^ 1)
      }
      __syncthreads();
      s ^= 1;
    }
#undef HIPEP_GEMM_LOAD
#undef HIPEP_GEMM_STORE
#undef HIPEP_GEMM_A_AT
#undef HIPEP_GEMM_B_AT

    T* py = Y + z * a.m * a.n;
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      const hipep_i64 gm = m0 + hipep_gemm_slot<BM, TM>(ty, i);
      if (gm >= a.m) continue;
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        const hipep_i64 gn = n0 + hipep_gemm_slot<BN, TN>(tx, j);
        if (gn < a.n) py[gm * a.n + gn] = hipep_gemm_epilogue<T>(a, C, acc[i][j], gm, gn);
      }
    }
  }
}

// ---- the split gemv's reduction -------------------------------------------------------------------

// Y[i] = epilogue(sum over s of partial[s][i]) for the batch * m * n outputs, splits added in order.
template <typename T>
HIPEP_DEVICE void hipep_gemm_split_reduce(const float* HIPEP_RESTRICT partial, const T* HIPEP_RESTRICT C,
                                          T* HIPEP_RESTRICT Y, const hipep_gemm_args a) {
  const hipep_i64 total = a.batch * a.m * a.n;
  for (hipep_i64 i = (hipep_i64)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (hipep_i64)gridDim.x * blockDim.x) {
    float sum = 0.0f;
    for (hipep_i64 s = 0; s < a.k_splits; ++s) sum += partial[s * total + i];
    const hipep_i64 mn = i % (a.m * a.n);
    Y[i] = hipep_gemm_epilogue<T>(a, C, sum, mn / a.n, mn % a.n);
  }
}

// ---- entry points -------------------------------------------------------------------------------

#define HIPEP_GEMV_ENTRY(KIND, NAME, T, MT, SUFFIX, VEC)                                                  \
  HIPEP_KERNEL void __launch_bounds__(HIPEP_GEMV_THREADS) hipep_gemv_##KIND##_##NAME##_m##MT##SUFFIX(     \
      const T* HIPEP_RESTRICT A, const T* HIPEP_RESTRICT B, const T* HIPEP_RESTRICT C, T* HIPEP_RESTRICT Y, \
      const hipep_gemm_args a) {                                                                           \
    HIPEP_GEMV_CALL_##KIND(T, MT, VEC);                                                                   \
  }
#define HIPEP_GEMV_CALL_n(T, MT, VEC) hipep_gemv_n<T, MT, VEC, false>(A, B, C, Y, 0, a)
#define HIPEP_GEMV_CALL_t(T, MT, VEC) hipep_gemv_t<T, MT, VEC>(A, B, C, Y, a)

// The split gemv_n (vectorized only: the decode case) writes partial sums; the reduction finishes.
#define HIPEP_GEMV_SPLIT_ENTRY(NAME, T, MT, VEC)                                                          \
  HIPEP_KERNEL void __launch_bounds__(HIPEP_GEMV_THREADS) hipep_gemv_n_##NAME##_m##MT##_vec_split(        \
      const T* HIPEP_RESTRICT A, const T* HIPEP_RESTRICT B, float* HIPEP_RESTRICT partial,                \
      const hipep_gemm_args a) {                                                                           \
    hipep_gemv_n<T, MT, VEC, true>(A, B, 0, 0, partial, a);                                               \
  }
#define HIPEP_GEMV_SPLIT_ALL(NAME, T, VEC)                                                                \
  HIPEP_GEMV_SPLIT_ENTRY(NAME, T, 1, VEC)                                                                 \
  HIPEP_GEMV_SPLIT_ENTRY(NAME, T, 2, VEC)                                                                 \
  HIPEP_GEMV_SPLIT_ENTRY(NAME, T, 4, VEC)                                                                 \
  HIPEP_GEMV_SPLIT_ENTRY(NAME, T, 8, VEC)                                                                 \
  HIPEP_KERNEL void hipep_gemm_split_reduce_##NAME(const float* HIPEP_RESTRICT partial, const T* HIPEP_RESTRICT C, \
                                                   T* HIPEP_RESTRICT Y, const hipep_gemm_args a) {         \
    hipep_gemm_split_reduce<T>(partial, C, Y, a);                                                         \
  }

#define HIPEP_GEMV_ALL(NAME, T, VEC)        \
  HIPEP_GEMV_ENTRY(n, NAME, T, 1, , 1)      \
  HIPEP_GEMV_ENTRY(n, NAME, T, 2, , 1)      \
  HIPEP_GEMV_ENTRY(n, NAME, T, 4, , 1)      \
  HIPEP_GEMV_ENTRY(n, NAME, T, 8, , 1)      \
  HIPEP_GEMV_ENTRY(n, NAME, T, 1, _vec, VEC) \
  HIPEP_GEMV_ENTRY(n, NAME, T, 2, _vec, VEC) \
  HIPEP_GEMV_ENTRY(n, NAME, T, 4, _vec, VEC) \
  HIPEP_GEMV_ENTRY(n, NAME, T, 8, _vec, VEC) \
  HIPEP_GEMV_ENTRY(t, NAME, T, 1, , 1)      \
  HIPEP_GEMV_ENTRY(t, NAME, T, 2, , 1)      \
  HIPEP_GEMV_ENTRY(t, NAME, T, 4, , 1)      \
  HIPEP_GEMV_ENTRY(t, NAME, T, 8, , 1)      \
  HIPEP_GEMV_ENTRY(t, NAME, T, 1, _vec, VEC) \
  HIPEP_GEMV_ENTRY(t, NAME, T, 2, _vec, VEC) \
  HIPEP_GEMV_ENTRY(t, NAME, T, 4, _vec, VEC) \
  HIPEP_GEMV_ENTRY(t, NAME, T, 8, _vec, VEC)

// MIN_BLOCKS: the 64-wide tile is for grids too small to fill the GPU with 128-wide ones, so it
// asks for two blocks per multiprocessor (at most 128 registers); the 128-wide one keeps its
// accumulators and the next slice's values in registers without spilling (one block).
#define HIPEP_GEMM_ENTRY(NAME, T, TILE, BK, TMN, MIN_BLOCKS)                                              \
  HIPEP_KERNEL void __launch_bounds__(HIPEP_GEMM_THREADS, MIN_BLOCKS) hipep_gemm_##NAME##_##TILE(                     \
      const T* HIPEP_RESTRICT A, const T* HIPEP_RESTRICT B, const T* HIPEP_RESTRICT C, T* HIPEP_RESTRICT Y, \
      const hipep_gemm_args a) {                                                                           \
    hipep_gemm_tiled<T, TILE, TILE, BK, TMN, TMN>(A, B, C, Y, a);                                         \
  }

HIPEP_GEMV_ALL(f32, float, 4)
HIPEP_GEMV_ALL(f16, hipep_half, 8)
HIPEP_GEMV_ALL(bf16, hipep_bf16, 8)
HIPEP_GEMV_SPLIT_ALL(f32, float, 4)
HIPEP_GEMV_SPLIT_ALL(f16, hipep_half, 8)
HIPEP_GEMV_SPLIT_ALL(bf16, hipep_bf16, 8)

HIPEP_GEMM_ENTRY(f32, float, 128, 8, 8, 1)
HIPEP_GEMM_ENTRY(f32, float, 64, 16, 4, 2)
HIPEP_GEMM_ENTRY(f16, hipep_half, 128, 8, 8, 1)
HIPEP_GEMM_ENTRY(f16, hipep_half, 64, 16, 4, 2)
HIPEP_GEMM_ENTRY(bf16, hipep_bf16, 128, 8, 8, 1)
HIPEP_GEMM_ENTRY(bf16, hipep_bf16, 64, 16, 4, 2)

// ---- gemm_f64: double products ------------------------------------------------------------------

#define HIPEP_GEMM_F64_TILE 16

HIPEP_KERNEL void __launch_bounds__(HIPEP_GEMM_F64_TILE * HIPEP_GEMM_F64_TILE)
    hipep_gemm_f64(const double* HIPEP_RESTRICT A, const double* HIPEP_RESTRICT B, const double* HIPEP_RESTRICT C,
                   double* HIPEP_RESTRICT Y, const hipep_gemm_args a) {
  __shared__ double as[HIPEP_GEMM_F64_TILE][HIPEP_GEMM_F64_TILE];
  __shared__ double bs[HIPEP_GEMM_F64_TILE][HIPEP_GEMM_F64_TILE + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const hipep_i64 col = (hipep_i64)blockIdx.x * HIPEP_GEMM_F64_TILE + tx;
  const hipep_i64 row = (hipep_i64)blockIdx.y * HIPEP_GEMM_F64_TILE + ty;
  for (hipep_i64 z = blockIdx.z; z < a.batch; z += gridDim.z) {
    hipep_i64 ao, bo;
    hipep_gemm_offsets(a, z, ao, bo);
    double acc = 0.0;
    for (hipep_i64 k0 = 0; k0 < a.k; k0 += HIPEP_GEMM_F64_TILE) {
      // Past the edges the tiles hold zeros (their products add nothing).
      as[ty][tx] = row < a.m && k0 + tx < a.k ? A[ao + row * a.a_sm + (k0 + tx) * a.a_sk] : 0.0;
      bs[ty][tx] = k0 + ty < a.k && col < a.n ? B[bo + (k0 + ty) * a.b_sk + col * a.b_sn] : 0.0;
      __syncthreads();
      const int depth = a.k - k0 < HIPEP_GEMM_F64_TILE ? (int)(a.k - k0) : HIPEP_GEMM_F64_TILE;
      for (int l = 0; l < depth; ++l) acc += as[ty][l] * bs[l][tx];
      __syncthreads();
    }
    if (row < a.m && col < a.n) {
      double v = (double)a.alpha * acc;
      if (C != 0) v += (double)a.beta * C[row * a.c_sm + col * a.c_sn];
      Y[(z * a.m + row) * a.n + col] = v;
    }
  }
}
