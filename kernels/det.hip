// Det: the determinant of each n x n matrix of a batch, by LU decomposition with partial pivoting in
// f64 (the CPU device's LAPACK does the same; ONNX Runtime's CPU EP runs Eigen's in the element type).
// One block per matrix at a time: the matrix is copied into the block's f64 region of the workspace,
// thread 0 picks each column's pivot (the first row of largest magnitude below the diagonal), the block
// swaps the rows and eliminates the trailing submatrix, and thread 0 multiplies the pivots into the
// determinant in column order, negated per row swap. A zero pivot leaves the column (its determinant
// is 0); NaN propagates. The result is rounded to f32, then to the element type (f16 through f32, as
// ONNX Runtime). A 0 x 0 matrix's determinant is 1.
#include "hipep_device.h"

struct hipep_det_args {
  hipep_i64 batch;  // matrices
  hipep_i64 n;      // their order
};

template <typename T>
HIPEP_DEVICE void hipep_det(const T* HIPEP_RESTRICT x, T* HIPEP_RESTRICT y, double* HIPEP_RESTRICT work,
                            const hipep_det_args a) {
  __shared__ hipep_i64 pivot_row;
  const hipep_i64 n = a.n, nn = n * n;
  double* m = work + (hipep_i64)blockIdx.x * nn;
  for (hipep_i64 b = blockIdx.x; b < a.batch; b += gridDim.x) {
    const T* src = x + b * nn;
    for (hipep_i64 i = threadIdx.x; i < nn; i += blockDim.x) m[i] = (double)hipep_to_float(src[i]);
    __syncthreads();
    double det = 1.0;  // thread 0's
    for (hipep_i64 k = 0; k < n; ++k) {
      if (threadIdx.x == 0) {
        hipep_i64 p = k;
        double best = fabs(m[k * n + k]);
        for (hipep_i64 i = k + 1; i < n; ++i) {
          const double v = fabs(m[i * n + k]);
          if (v > best) {
            best = v;
            p = i;
          }
        }
        pivot_row = p;
      }
      __syncthreads();
      const hipep_i64 p = pivot_row;
      if (p != k) {
        for (hipep_i64 j = k + threadIdx.x; j < n; j += blockDim.x) {
          const double t = m[k * n + j];
          m[k * n + j] = m[p * n + j];
          m[p * n + j] = t;
        }
      }
      __syncthreads();
      const double pivot = m[k * n + k];
      if (threadIdx.x == 0) det *= p != k ? -pivot : pivot;
      if (pivot != 0.0) {  // rows below: row -= (its column-k value / pivot) * pivot row, right of column k
        const hipep_i64 width = n - k - 1;
        for (hipep_i64 t = threadIdx.x; t < width * width; t += blockDim.x) {
          const hipep_i64 i = k + 1 + t / width, j = k + 1 + t % width;
          m[i * n + j] -= m[i * n + k] / pivot * m[k * n + j];
        }
      }
      __syncthreads();  // (column k is not written: every thread read its factors unchanged)
    }
    if (threadIdx.x == 0) y[b] = hipep_from_float<T>((float)det);
    __syncthreads();  // the next matrix overwrites the region
  }
}

#define HIPEP_DET(NAME, T)                                                                                \
  HIPEP_KERNEL void hipep_det_##NAME(const T* x, T* y, double* work, const hipep_det_args a) {            \
    hipep_det<T>(x, y, work, a);                                                                          \
  }

HIPEP_DET(f32, float)
HIPEP_DET(f16, hipep_half)
