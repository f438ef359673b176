// MaxUnpool: Y[I[i]] = X[i] over the flattened tensors, Y zero elsewhere (the runtime fills Y and
// the winners with zeros first). Where an index repeats, the last X element stays, as ONNX
// Runtime's CPU kernel writes them in order: the mark pass takes the largest i + 1 per output
// element (atomicMax into `winner`, a 32-bit word per element of Y: the scatters' scheme,
// kernels/indexing.hip), and the write pass stores only the element that won. An index outside
// [0, size) writes nothing and is reported in the stream's fault record (hipep_device.h), which
// the host turns into an error naming the node.
// Elements move as words W of their own size (2, 4 or 8 bytes).
#include "hipep_device.h"

struct hipep_max_unpool_args {
  hipep_i64 n;     // X's (and I's) elements
  hipep_i64 size;  // Y's elements
};

HIPEP_KERNEL void hipep_max_unpool_mark(const hipep_i64* HIPEP_RESTRICT idx, unsigned int* HIPEP_RESTRICT winner,
                                        const hipep_max_unpool_args a, const hipep_fault_site fault) {
  const hipep_i64 step = (hipep_i64)gridDim.x * blockDim.x;
  for (hipep_i64 i = (hipep_i64)blockIdx.x * blockDim.x + threadIdx.x; i < a.n; i += step) {
    const hipep_i64 j = idx[i];
    if (j < 0 || j >= a.size) {
      hipep_report_fault(fault, HIPEP_FAULT_FLAT_INDEX, j, a.size);
      continue;
    }
    hipep_atomic_max_u32(winner + j, (unsigned int)(i + 1));
  }
}

template <typename W>
HIPEP_DEVICE void hipep_max_unpool_write(const W* HIPEP_RESTRICT x, const hipep_i64* HIPEP_RESTRICT idx,
                                         const unsigned int* HIPEP_RESTRICT winner, W* HIPEP_RESTRICT y,
                                         const hipep_max_unpool_args a) {
  const hipep_i64 step = (hipep_i64)gridDim.x * blockDim.x;
  for (hipep_i64 i = (hipep_i64)blockIdx.x * blockDim.x + threadIdx.x; i < a.n; i += step) {
    const hipep_i64 j = idx[i];
    if (j >= 0 && j < a.size && winner[j] == (unsigned int)(i + 1)) y[j] = x[i];
  }
}

#define HIPEP_MAX_UNPOOL_WRITE(WNAME, W)                                                                    \
  HIPEP_KERNEL void hipep_max_unpool_write_##WNAME(const W* x, const hipep_i64* idx,                        \
                                                   const unsigned int* winner, W* y,                       \
                                                   const hipep_max_unpool_args a) {                        \
    hipep_max_unpool_write<W>(x, idx, winner, y, a);                                                        \
  }

HIPEP_MAX_UNPOOL_WRITE(w2, unsigned short)
HIPEP_MAX_UNPOOL_WRITE(w4, unsigned int)
HIPEP_MAX_UNPOOL_WRITE(w8, unsigned long long)
