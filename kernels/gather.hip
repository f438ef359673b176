// Gather: out[o, i, k] = data[o, indices[i], k], the runtime viewing data as [outer, n_axis,
// inner] and the output as [outer, n_idx, inner] (n_idx: every index, flattened). An embedding
// lookup is outer = 1, a row of `inner` elements per index.
//
// Elements are moved as words W of 1 to 16 bytes: the runtime picks the widest word that divides
// a row's bytes and the pointers' alignment, so an f16 row of 4096 moves as 512 16-byte words.
// Threads along x walk a row's words, blockDim.y rows per block (one division per row, none per
// word). Negative indices count from the end. An index still out of range (ONNX Runtime rejects
// it) yields a row of zeros, never a read outside the table, and is reported in the stream's fault
// record (hipep_device.h), which the host turns into an error naming the node at its next sync.
#include "hipep_device.h"

struct hipep_gather_args {
  hipep_i64 rows;    // outer * n_idx
  hipep_i64 inner;   // words per row
  hipep_i64 n_idx;
  hipep_i64 n_axis;
};

template <typename W, typename I>
HIPEP_DEVICE void hipep_gather(const W* HIPEP_RESTRICT data, const I* HIPEP_RESTRICT indices, W* HIPEP_RESTRICT out,
                               const hipep_gather_args a, const hipep_fault_site fault) {
  const hipep_i64 row_step = (hipep_i64)gridDim.y * blockDim.y;
  const hipep_i64 col_step = (hipep_i64)gridDim.x * blockDim.x;
  for (hipep_i64 row = (hipep_i64)blockIdx.y * blockDim.y + threadIdx.y; row < a.rows; row += row_step) {
    const hipep_i64 o = row / a.n_idx, i = row - o * a.n_idx;
    hipep_i64 j = (hipep_i64)indices[i];
    if (j < 0) j += a.n_axis;
    const bool ok = j >= 0 && j < a.n_axis;
    // One report per bad row (its first thread), and only where the row is bad: no cost otherwise.
    if (!ok && blockIdx.x == 0 && threadIdx.x == 0) hipep_report_bad_index(fault, (hipep_i64)indices[i], a.n_axis);
    const W* src = data + (o * a.n_axis + j) * a.inner;
    W* dst = out + row * a.inner;
    for (hipep_i64 k = (hipep_i64)blockIdx.x * blockDim.x + threadIdx.x; k < a.inner; k += col_step)
      dst[k] = ok ? src[k] : W();
  }
}

#define HIPEP_GATHER(WNAME, W)                                                                        \
  HIPEP_KERNEL void hipep_gather_##WNAME##_i32(const W* HIPEP_RESTRICT data, const int* HIPEP_RESTRICT idx, \
                                               W* HIPEP_RESTRICT out, const hipep_gather_args a,     \
                                               const hipep_fault_site fault) {                        \
    hipep_gather<W, int>(data, idx, out, a, fault);                                                   \
  }                                                                                                   \
  HIPEP_KERNEL void hipep_gather_##WNAME##_i64(const W* HIPEP_RESTRICT data,                         \
                                               const hipep_i64* HIPEP_RESTRICT idx,                   \
                                               W* HIPEP_RESTRICT out, const hipep_gather_args a,     \
                                               const hipep_fault_site fault) {                        \
    hipep_gather<W, hipep_i64>(data, idx, out, a, fault);                                             \
  }

HIPEP_GATHER(w1, unsigned char)
HIPEP_GATHER(w2, unsigned short)
HIPEP_GATHER(w4, unsigned int)
HIPEP_GATHER(w8, hipep_u64)
HIPEP_GATHER(w16, uint4)
