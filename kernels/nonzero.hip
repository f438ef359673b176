// NonZero, and the selection of Compress: the coordinates of a tensor's nonzero elements in
// row-major order, as ONNX NonZero writes them ([rank, count] int64: coordinate d of the j-th
// nonzero element at d * count + j).
//
// Where hipep claims these ops their input is small and known to the host (it reads the values
// to size the output: count is the output's extent), so one block does it: the elements in chunks
// of blockDim.x, each chunk's flags turned into positions by a block scan in shared memory, after
// the chunks before. A position past `count` is never written (the host sized the output from
// the same values). A floating value is nonzero where it compares unequal to zero (NaN is, -0 is
// not), as numpy's and ONNX Runtime's.
#include "hipep_device.h"

#define HIPEP_NONZERO_MAX_RANK 8

struct hipep_nonzero_args {
  hipep_i64 n;      // elements of the input
  hipep_i64 count;  // nonzero elements: the output's second extent
  hipep_i64 dims[HIPEP_NONZERO_MAX_RANK];
  int rank;         // at least 1 (a scalar counts as one element of a vector)
};

template <typename T> HIPEP_DEVICE bool hipep_nonzero_at(const T* x, hipep_i64 i) { return x[i] != T(0); }
template <> HIPEP_DEVICE bool hipep_nonzero_at<hipep_half>(const hipep_half* x, hipep_i64 i) {
  return __half2float(x[i]) != 0.0f;
}
template <> HIPEP_DEVICE bool hipep_nonzero_at<bool>(const bool* x, hipep_i64 i) {
  return reinterpret_cast<const unsigned char*>(x)[i] != 0;
}

template <typename T>
HIPEP_DEVICE void hipep_nonzero(const T* HIPEP_RESTRICT x, hipep_i64* HIPEP_RESTRICT y, const hipep_nonzero_args a) {
  __shared__ int scan[1024];  // blockDim.x <= 1024
  __shared__ hipep_i64 base;
  const int t = threadIdx.x;
  if (t == 0) base = 0;
  __syncthreads();
  for (hipep_i64 c0 = 0; c0 < a.n; c0 += blockDim.x) {
    const hipep_i64 i = c0 + t;
    const int flag = (i < a.n && hipep_nonzero_at<T>(x, i)) ? 1 : 0;
    scan[t] = flag;
    __syncthreads();
    for (int off = 1; off < (int)blockDim.x; off <<= 1) {  // inclusive scan (Hillis-Steele)
      const int v = t >= off ? scan[t - off] : 0;
      __syncthreads();
      scan[t] += v;
      __syncthreads();
    }
    if (flag) {
      const hipep_i64 pos = base + scan[t] - 1;
      if (pos < a.count) {
        hipep_i64 rem = i;
        for (int d = a.rank - 1; d >= 0; --d) {
          y[d * a.count + pos] = rem % a.dims[d];
          rem /= a.dims[d];
        }
      }
    }
    __syncthreads();
    if (t == (int)blockDim.x - 1) base += scan[t];
    __syncthreads();
  }
}

#define HIPEP_NONZERO(NAME, T)                                                                       \
  HIPEP_KERNEL void hipep_nonzero_##NAME(const T* HIPEP_RESTRICT x, hipep_i64* HIPEP_RESTRICT y,    \
                                         const hipep_nonzero_args a) {                                \
    hipep_nonzero<T>(x, y, a);                                                                        \
  }

HIPEP_NONZERO(f32, float)
HIPEP_NONZERO(f16, hipep_half)
HIPEP_NONZERO(u8, unsigned char)
HIPEP_NONZERO(i32, int)
HIPEP_NONZERO(i64, hipep_i64)
HIPEP_NONZERO(bool, bool)
