// Indexing by a tensor of indices, the data moves: GatherElements, GatherND, ScatterElements
// (Scatter) and ScatterND with reduction 'none', TensorScatter's rows, and ReverseSequence. The addressing is
// kernels/indexing.h's; the scatters' reductions are kernels/scatter_reduce.hip (a module of their
// own, so a model without them does not compile their ~100 entry points).
//
// Gathers move elements as words W of 1 to 16 bytes (GatherND widens the word where a slice's
// bytes and the pointers allow); nd kernels have threads along x walk a slice's words, blockDim.y
// rows per block (one tuple read per row). An index out of range yields zeros (gathers) or drops
// its update (scatters), never an access outside the buffers, and is reported.
//
// Scatters: the runtime first copies data into the output, then applies the updates. ONNX leaves
// the result of repeated indices undefined; ONNX Runtime's CPU kernel applies updates in order,
// so the last one wins. To give that answer on every run, a first pass ("mark") has every update
// atomicMax its id + 1 into a per-target "winner" word (stream workspace the runtime zeroes
// first: one word per data element for elements, per data slice for nd), and the second pass
// writes only the updates whose id won: O(updates) work, where ordering the updates otherwise
// would take a sort or a serial loop. Where the runtime knows no two updates share a target
// (constant indices without repeats) it passes no winner array and the write pass alone runs.
#include "indexing.h"

// ---- GatherElements -------------------------------------------------------------------------------

template <typename W, typename I>
HIPEP_DEVICE void hipep_gather_elements(const W* HIPEP_RESTRICT data, const I* HIPEP_RESTRICT indices,
                                        W* HIPEP_RESTRICT out, const hipep_elements_args a,
                                        const hipep_fault_site fault) {
  const hipep_i64 step = (hipep_i64)gridDim.x * blockDim.x;
  for (hipep_i64 i = (hipep_i64)blockIdx.x * blockDim.x + threadIdx.x; i < a.n; i += step) {
    const hipep_i64 at = hipep_elements_target(indices, i, a, fault);
    out[i] = at >= 0 ? data[at] : W();
  }
}

// ---- ScatterElements ------------------------------------------------------------------------------

template <typename I>
HIPEP_DEVICE void hipep_scatter_elements_mark(const I* HIPEP_RESTRICT indices, unsigned int* HIPEP_RESTRICT winner,
                                              const hipep_elements_args a, const hipep_fault_site fault) {
  const hipep_i64 step = (hipep_i64)gridDim.x * blockDim.x;
  for (hipep_i64 i = (hipep_i64)blockIdx.x * blockDim.x + threadIdx.x; i < a.n; i += step) {
    const hipep_i64 at = hipep_elements_target(indices, i, a, fault);
    if (at >= 0) hipep_atomic_max_u32(winner + at, (unsigned int)(i + 1));
  }
}

// `winner` null: no two updates share a target, each one writes.
template <typename W, typename I>
HIPEP_DEVICE void hipep_scatter_elements(const I* HIPEP_RESTRICT indices, const W* HIPEP_RESTRICT updates,
                                         W* HIPEP_RESTRICT out, const unsigned int* HIPEP_RESTRICT winner,
                                         const hipep_elements_args a, const hipep_fault_site fault) {
  const hipep_i64 step = (hipep_i64)gridDim.x * blockDim.x;
  for (hipep_i64 i = (hipep_i64)blockIdx.x * blockDim.x + threadIdx.x; i < a.n; i += step) {
    const hipep_i64 at = hipep_elements_target(indices, i, a, fault);
    if (at >= 0 && (winner == nullptr || winner[at] == (unsigned int)(i + 1))) out[at] = updates[i];
  }
}

// ---- GatherND -------------------------------------------------------------------------------------

template <typename W, typename I>
HIPEP_DEVICE void hipep_gather_nd(const W* HIPEP_RESTRICT data, const I* HIPEP_RESTRICT indices, W* HIPEP_RESTRICT out,
                                  const hipep_nd_args a, const hipep_fault_site fault) {
  const hipep_i64 row_step = (hipep_i64)gridDim.y * blockDim.y;
  const hipep_i64 col_step = (hipep_i64)gridDim.x * blockDim.x;
  for (hipep_i64 r = (hipep_i64)blockIdx.y * blockDim.y + threadIdx.y; r < a.rows; r += row_step) {
    // Every thread of the row reads the tuple; one of them reports it.
    const bool reports = blockIdx.x == 0 && threadIdx.x == 0;
    const hipep_i64 at = hipep_nd_target(indices, r, a, reports ? fault : hipep_fault_site{nullptr, 0});
    W* dst = out + r * a.inner;
    for (hipep_i64 t = (hipep_i64)blockIdx.x * blockDim.x + threadIdx.x; t < a.inner; t += col_step)
      dst[t] = at >= 0 ? data[at + t] : W();
  }
}

// ---- ScatterND ------------------------------------------------------------------------------------
// The winner of a slice is indexed by its offset / inner (data's slices in order).

template <typename I>
HIPEP_DEVICE void hipep_scatter_nd_mark(const I* HIPEP_RESTRICT indices, unsigned int* HIPEP_RESTRICT winner,
                                        const hipep_nd_args a, const hipep_fault_site fault) {
  const hipep_i64 step = (hipep_i64)gridDim.x * blockDim.x;
  for (hipep_i64 r = (hipep_i64)blockIdx.x * blockDim.x + threadIdx.x; r < a.rows; r += step) {
    const hipep_i64 at = hipep_nd_target(indices, r, a, fault);
    if (at >= 0) hipep_atomic_max_u32(winner + at / a.inner, (unsigned int)(r + 1));
  }
}

template <typename W, typename I>
HIPEP_DEVICE void hipep_scatter_nd(const I* HIPEP_RESTRICT indices, const W* HIPEP_RESTRICT updates,
                                   W* HIPEP_RESTRICT out, const unsigned int* HIPEP_RESTRICT winner,
                                   const hipep_nd_args a, const hipep_fault_site fault) {
  const hipep_i64 row_step = (hipep_i64)gridDim.y * blockDim.y;
  const hipep_i64 col_step = (hipep_i64)gridDim.x * blockDim.x;
  for (hipep_i64 r = (hipep_i64)blockIdx.y * blockDim.y + threadIdx.y; r < a.rows; r += row_step) {
    // With winners the mark pass has reported the row's bad indices already.
    const bool reports = winner == nullptr && blockIdx.x == 0 && threadIdx.x == 0;
    const hipep_i64 at = hipep_nd_target(indices, r, a, reports ? fault : hipep_fault_site{nullptr, 0});
    if (at < 0 || (winner != nullptr && winner[at / a.inner] != (unsigned int)(r + 1))) continue;
    const W* src = updates + r * a.inner;
    for (hipep_i64 t = (hipep_i64)blockIdx.x * blockDim.x + threadIdx.x; t < a.inner; t += col_step)
      out[at + t] = src[t];
  }
}

// ---- TensorScatter --------------------------------------------------------------------------------
// The cache [outer, max_seq, inner] (outer: batch and the axes before the sequence axis, inner: the
// axes after it, in words) takes update [outer, seq, inner]: update row (o, i) lands on cache row
// (o, write_indices[o / per_batch] + i), modulo max_seq in circular mode. The runtime has copied
// past_cache into the cache first, unless the two share memory (a decode step updating the cache
// in place): each thread reads update and writes the cache only, so that is the same. A write
// index out of range (negative; linear mode: past max_seq - seq) writes nothing of its batch entry
// and is reported.

struct hipep_tensor_scatter_args {
  hipep_i64 rows;       // update rows: outer * seq
  hipep_i64 seq;        // update's extent along the sequence axis
  hipep_i64 max_seq;    // the cache's extent along it
  hipep_i64 per_batch;  // outer rows per batch entry (the axes between batch and the sequence axis)
  hipep_i64 inner;      // words per row
  int circular;
};

template <typename W>
HIPEP_DEVICE void hipep_tensor_scatter(const W* HIPEP_RESTRICT update, const hipep_i64* HIPEP_RESTRICT write_indices,
                                       W* HIPEP_RESTRICT cache, const hipep_tensor_scatter_args a,
                                       const hipep_fault_site fault) {
  const hipep_i64 row_step = (hipep_i64)gridDim.y * blockDim.y;
  const hipep_i64 col_step = (hipep_i64)gridDim.x * blockDim.x;
  for (hipep_i64 r = (hipep_i64)blockIdx.y * blockDim.y + threadIdx.y; r < a.rows; r += row_step) {
    const hipep_i64 o = r / a.seq, i = r - o * a.seq;
    hipep_i64 at = write_indices == nullptr ? 0 : write_indices[o / a.per_batch];
    if (at < 0 || (!a.circular && at > a.max_seq - a.seq)) {
      // One thread of the batch entry's first row reports it.
      if (i == 0 && o % a.per_batch == 0 && blockIdx.x == 0 && threadIdx.x == 0)
        hipep_report_fault(fault, HIPEP_FAULT_WRITE_INDEX, at, a.circular ? -1 : a.max_seq - a.seq);
      continue;
    }
    // (circular: reduced first, so a write index near the int64 limit does not overflow)
    at = a.circular ? (at % a.max_seq + i) % a.max_seq : at + i;
    W* dst = cache + (o * a.max_seq + at) * a.inner;
    const W* src = update + r * a.inner;
    for (hipep_i64 t = (hipep_i64)blockIdx.x * blockDim.x + threadIdx.x; t < a.inner; t += col_step) dst[t] = src[t];
  }
}

// ---- entry points (by element or word size) -------------------------------------------------------

#define HIPEP_ELEMENTS_MOVE(WNAME, W, INAME, I)                                                                     \
  HIPEP_KERNEL void hipep_gather_elements_##WNAME##_##INAME(const W* HIPEP_RESTRICT data,                         \
                                                            const I* HIPEP_RESTRICT idx, W* HIPEP_RESTRICT out,   \
                                                            const hipep_elements_args a, const hipep_fault_site f) { \
    hipep_gather_elements<W, I>(data, idx, out, a, f);                                                             \
  }                                                                                                                \
  HIPEP_KERNEL void hipep_scatter_elements_##WNAME##_##INAME(                                                      \
      const I* HIPEP_RESTRICT idx, const W* HIPEP_RESTRICT upd, W* HIPEP_RESTRICT out,                             \
      const unsigned int* HIPEP_RESTRICT winner, const hipep_elements_args a, const hipep_fault_site f) {          \
    hipep_scatter_elements<W, I>(idx, upd, out, winner, a, f);                                                     \
  }

#define HIPEP_ND_MOVE(WNAME, W, INAME, I)                                                                          \
  HIPEP_KERNEL void hipep_gather_nd_##WNAME##_##INAME(const W* HIPEP_RESTRICT data, const I* HIPEP_RESTRICT idx,  \
                                                      W* HIPEP_RESTRICT out, const hipep_nd_args a,               \
                                                      const hipep_fault_site f) {                                  \
    hipep_gather_nd<W, I>(data, idx, out, a, f);                                                                   \
  }                                                                                                                \
  HIPEP_KERNEL void hipep_scatter_nd_##WNAME##_##INAME(const I* HIPEP_RESTRICT idx, const W* HIPEP_RESTRICT upd,  \
                                                       W* HIPEP_RESTRICT out,                                      \
                                                       const unsigned int* HIPEP_RESTRICT winner,                  \
                                                       const hipep_nd_args a, const hipep_fault_site f) {          \
    hipep_scatter_nd<W, I>(idx, upd, out, winner, a, f);                                                           \
  }

#define HIPEP_ELEMENTS_MARK(INAME, I)                                                                              \
  HIPEP_KERNEL void hipep_scatter_elements_mark_##INAME(const I* HIPEP_RESTRICT idx,                              \
                                                        unsigned int* HIPEP_RESTRICT winner,                       \
                                                        const hipep_elements_args a, const hipep_fault_site f) {   \
    hipep_scatter_elements_mark<I>(idx, winner, a, f);                                                             \
  }

#define HIPEP_ND_MARK(INAME, I)                                                                                    \
  HIPEP_KERNEL void hipep_scatter_nd_mark_##INAME(const I* HIPEP_RESTRICT idx, unsigned int* HIPEP_RESTRICT winner, \
                                                  const hipep_nd_args a, const hipep_fault_site f) {               \
    hipep_scatter_nd_mark<I>(idx, winner, a, f);                                                                   \
  }

// GatherElements and ScatterElements take int32 or int64 indices; GatherND and ScatterND int64.
#define HIPEP_ELEMENTS_FAMILY(INAME, I)             \
  HIPEP_ELEMENTS_MOVE(w1, unsigned char, INAME, I)  \
  HIPEP_ELEMENTS_MOVE(w2, unsigned short, INAME, I) \
  HIPEP_ELEMENTS_MOVE(w4, unsigned int, INAME, I)   \
  HIPEP_ELEMENTS_MOVE(w8, hipep_u64, INAME, I)      \
  HIPEP_ELEMENTS_MARK(INAME, I)

#define HIPEP_ND_FAMILY(INAME, I)             \
  HIPEP_ND_MOVE(w1, unsigned char, INAME, I)  \
  HIPEP_ND_MOVE(w2, unsigned short, INAME, I) \
  HIPEP_ND_MOVE(w4, unsigned int, INAME, I)   \
  HIPEP_ND_MOVE(w8, hipep_u64, INAME, I)      \
  HIPEP_ND_MOVE(w16, uint4, INAME, I)         \
  HIPEP_ND_MARK(INAME, I)

HIPEP_ELEMENTS_FAMILY(i32, int)
HIPEP_ELEMENTS_FAMILY(i64, hipep_i64)
HIPEP_ND_FAMILY(i64, hipep_i64)

// ---- ReverseSequence -------------------------------------------------------------------------------
// The input as [d0, d1, inner] (batch and time are axes 0 and 1, in either order). Each output
// element reads its batch entry's length from sequence_lens (device memory) and takes the element
// mirrored within that length, or its own past it. A length outside [0, steps] (ONNX Runtime
// rejects it) is reported and its entry copied as it is.

struct hipep_reverse_sequence_args {
  hipep_i64 n;      // elements
  hipep_i64 d1;     // axis 1's extent
  hipep_i64 inner;  // elements a (axis 0, axis 1) position holds
  hipep_i64 steps;  // the time axis' extent
  int batch_first;  // batch_axis 0, time_axis 1 (else the other way round)
};

template <typename W>
HIPEP_DEVICE void hipep_reverse_sequence(const W* HIPEP_RESTRICT x, const hipep_i64* HIPEP_RESTRICT lens,
                                         W* HIPEP_RESTRICT y, const hipep_reverse_sequence_args a,
                                         const hipep_fault_site fault) {
  const hipep_i64 step = (hipep_i64)gridDim.x * blockDim.x;
  for (hipep_i64 i = (hipep_i64)blockIdx.x * blockDim.x + threadIdx.x; i < a.n; i += step) {
    const hipep_i64 r = i % a.inner, j = i / a.inner, a1 = j % a.d1, a0 = j / a.d1;
    const hipep_i64 b = a.batch_first ? a0 : a1, t = a.batch_first ? a1 : a0;
    hipep_i64 len = lens[b];
    if (len < 0 || len > a.steps) {
      hipep_report_fault(fault, HIPEP_FAULT_SEQUENCE_LENGTH, len, a.steps);
      len = 0;
    }
    const hipep_i64 s = t < len ? len - 1 - t : t;
    y[i] = x[(a.batch_first ? b * a.d1 + s : s * a.d1 + b) * a.inner + r];
  }
}

#define HIPEP_REVERSE_SEQUENCE(WNAME, W)                                                                         \
  HIPEP_KERNEL void hipep_reverse_sequence_##WNAME(const W* HIPEP_RESTRICT x, const hipep_i64* HIPEP_RESTRICT lens, \
                                                   W* HIPEP_RESTRICT y, const hipep_reverse_sequence_args a,      \
                                                   const hipep_fault_site f) {                                    \
    hipep_reverse_sequence<W>(x, lens, y, a, f);                                                                 \
  }

HIPEP_REVERSE_SEQUENCE(w1, unsigned char)
HIPEP_REVERSE_SEQUENCE(w2, unsigned short)
HIPEP_REVERSE_SEQUENCE(w4, unsigned int)
HIPEP_REVERSE_SEQUENCE(w8, hipep_u64)

// TensorScatter moves rows as words of 1 to 16 bytes (the runtime widens them where it can).
#define HIPEP_TENSOR_SCATTER(WNAME, W)                                                                             \
  HIPEP_KERNEL void hipep_tensor_scatter_##WNAME(const W* HIPEP_RESTRICT upd, const hipep_i64* HIPEP_RESTRICT idx, \
                                                 W* HIPEP_RESTRICT cache, const hipep_tensor_scatter_args a,       \
                                                 const hipep_fault_site f) {                                       \
    hipep_tensor_scatter<W>(upd, idx, cache, a, f);                                                                \
  }

HIPEP_TENSOR_SCATTER(w1, unsigned char)
HIPEP_TENSOR_SCATTER(w2, unsigned short)
HIPEP_TENSOR_SCATTER(w4, unsigned int)
HIPEP_TENSOR_SCATTER(w8, hipep_u64)
HIPEP_TENSOR_SCATTER(w16, uint4)
