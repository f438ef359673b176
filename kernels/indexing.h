// Shared by kernels/indexing.hip (GatherElements, GatherND, the scatters' data moves) and
// kernels/scatter_reduce.hip (the scatters' reductions): their parameter structs and how an
// element or a row of indices finds its target in data.
//
//   * elements (GatherElements, ScatterElements): element i of `indices` (row-major over its
//     shape, which the runtime gives merged as `dims`) addresses data element
//         base(i) + j * axis_stride,   base(i) = sum_d coord_d(i) * strides[d],
//     where j is the index value and the indexed axis's own stride in `strides` is 0. The output
//     of GatherElements and the updates of ScatterElements have the shape of indices (contiguous).
//   * nd (GatherND, ScatterND): row r of indices viewed as [rows, k] is a tuple of k indices
//     into data's axes b .. b + k - 1 (b: GatherND's batch_dims, 0 for ScatterND); it selects the
//     slice of `inner` words at
//         (r / per_batch) * batch_stride + sum_j idx[r, j] * strides[j].
//
// Negative indices count from the end of their axis. An index still out of range (ONNX Runtime
// rejects it) is reported in the stream's fault record (hipep_device.h), which the host turns
// into an error naming the node, and the caller touches nothing for it.
#ifndef HIPEP_INDEXING_H
#define HIPEP_INDEXING_H
#include "hipep_device.h"

#define HIPEP_INDEX_MAX_RANK 16

struct hipep_elements_args {
  hipep_i64 n;            // elements of indices
  hipep_i64 axis_extent;  // data's extent along the indexed axis (indices lie in [-extent, extent - 1])
  hipep_i64 axis_stride;  // data elements per step along the indexed axis
  hipep_i64 dims[HIPEP_INDEX_MAX_RANK];     // indices' shape (axes merged where data allows)
  hipep_i64 strides[HIPEP_INDEX_MAX_RANK];  // data elements per step along those axes; 0 for the indexed one
  int rank;
};

struct hipep_nd_args {
  hipep_i64 rows;          // index tuples (every leading dimension of indices)
  hipep_i64 per_batch;     // tuples per batch (GatherND's batch_dims; all of them otherwise)
  hipep_i64 batch_stride;  // data words per batch
  hipep_i64 inner;         // words per slice
  hipep_i64 extents[HIPEP_INDEX_MAX_RANK];  // data's extent along each indexed axis
  hipep_i64 strides[HIPEP_INDEX_MAX_RANK];  // data words per step along each indexed axis
  int k;                   // indices per tuple
};

// ---- shared pieces --------------------------------------------------------------------------------

// j = raw counted from the end where negative; whether it lies in [0, extent).
template <typename I> HIPEP_DEVICE bool hipep_wrap_index(I raw, hipep_i64 extent, hipep_i64& j) {
  j = (hipep_i64)raw;
  if (j < 0) j += extent;
  return j >= 0 && j < extent;
}

HIPEP_DEVICE hipep_i64 hipep_elements_base(hipep_i64 i, const hipep_elements_args& a) {
  hipep_i64 off = 0;
  for (int d = a.rank - 1; d > 0; --d) {
    const hipep_i64 q = i / a.dims[d];
    off += (i - q * a.dims[d]) * a.strides[d];
    i = q;
  }
  return a.rank > 0 ? off + i * a.strides[0] : off;
}

// Element i's data offset, or -1 for an index out of range (reported).
template <typename I>
HIPEP_DEVICE hipep_i64 hipep_elements_target(const I* HIPEP_RESTRICT indices, hipep_i64 i, const hipep_elements_args& a,
                                             const hipep_fault_site fault) {
  hipep_i64 j;
  if (!hipep_wrap_index(indices[i], a.axis_extent, j)) {
    hipep_report_bad_index(fault, (hipep_i64)indices[i], a.axis_extent);
    return -1;
  }
  return hipep_elements_base(i, a) + j * a.axis_stride;
}

// Row r's slice offset in words, or -1 where one of its indices is out of range (reported).
template <typename I>
HIPEP_DEVICE hipep_i64 hipep_nd_target(const I* HIPEP_RESTRICT indices, hipep_i64 r, const hipep_nd_args& a,
                                       const hipep_fault_site fault) {
  hipep_i64 off = (r / a.per_batch) * a.batch_stride;
  const I* tuple = indices + r * a.k;
  for (int q = 0; q < a.k; ++q) {
    hipep_i64 j;
    if (!hipep_wrap_index(tuple[q], a.extents[q], j)) {
      hipep_report_bad_index(fault, (hipep_i64)tuple[q], a.extents[q]);
      return -1;
    }
    off += j * a.strides[q];
  }
  return off;
}

#endif  // HIPEP_INDEXING_H
