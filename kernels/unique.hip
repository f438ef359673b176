// Unique: the distinct items of a tensor (its elements, or its slices along an axis), as numpy's
// np.unique gives them and hipep's CPU device returns them: Y (the items, ascending or in order of
// first occurrence), each one's first index, every item's index into Y (inverse) and each one's
// count.
//
// An item is slice i of the input seen as [outer, items, inner] (the axis in the middle; without an
// axis outer = inner = 1 and the items are the elements): its outer * inner elements in row-major
// order, as numpy compares slices after moving the axis to the front. Items are ordered
// lexicographically by `<` on their elements, -0 equal to 0 and NaN after every number (NaNs
// alike), as numpy's sort orders them. Two items are the same where they order alike, except that
// a slice holding a NaN is the same as no other one (`nan_distinct`: numpy compares slices with
// `==`; a 1-D input, with or without an axis, has its NaNs collapsed into one value).
//
// Where hipep claims this op its input is small and known to the host (the host sizes the outputs
// from the same values: `groups` is Y's extent along the axis), so one block does it, comparing
// items pairwise in three passes over the items (barriers between):
//   1. rep[i]: the first item that is the same as item i (i itself for a first occurrence);
//   2. for each first occurrence i, its position in Y (sorted: the first occurrences ordered before
//      it, ties by index; unsorted: the first occurrences before i), written to pos[i], with its
//      slice of Y, its first index and its count (the items whose rep is i);
//   3. inverse[k] = pos[rep[k]].
// rep and pos live in the stream's workspace (2 * items entries). An output nobody reads is a null
// pointer, never written; a position past `groups` is never written.
#include "hipep_device.h"

struct hipep_unique_args {
  hipep_i64 items;   // the items: elements (no axis) or slices along the axis
  hipep_i64 outer;   // the input's extent before the axis (1 without one)
  hipep_i64 inner;   // the input's extent after the axis (1 without one)
  hipep_i64 groups;  // the distinct items: Y's extent along the axis, indices' and counts' length
  int sorted;        // 1: Y ascending; 0: in order of first occurrence
  int nan_distinct;  // 1: an item holding a NaN is the same as no other item
};

// -1, 0 or 1 as a orders before, with or after b: `<` on numbers (-0 == 0), NaN after them all.
template <typename T> HIPEP_DEVICE int hipep_unique_order(const T a, const T b) {
  if (a < b) return -1;
  if (b < a) return 1;
  if (a == b) return 0;
  const bool a_nan = a != a, b_nan = b != b;  // only a floating type gets here
  return a_nan == b_nan ? 0 : (a_nan ? 1 : -1);
}

template <typename T>
HIPEP_DEVICE int hipep_unique_compare(const T* HIPEP_RESTRICT x, const hipep_i64 i, const hipep_i64 j,
                                      const hipep_unique_args& a) {
  for (hipep_i64 o = 0; o < a.outer; ++o) {
    const T* xi = x + (o * a.items + i) * a.inner;
    const T* xj = x + (o * a.items + j) * a.inner;
    for (hipep_i64 e = 0; e < a.inner; ++e) {
      const int c = hipep_unique_order<T>(xi[e], xj[e]);
      if (c != 0) return c;
    }
  }
  return 0;
}

template <typename T>
HIPEP_DEVICE bool hipep_unique_has_nan(const T* HIPEP_RESTRICT x, const hipep_i64 i, const hipep_unique_args& a) {
  for (hipep_i64 o = 0; o < a.outer; ++o) {
    const T* xi = x + (o * a.items + i) * a.inner;
    for (hipep_i64 e = 0; e < a.inner; ++e)
      if (xi[e] != xi[e]) return true;
  }
  return false;
}

template <typename T>
HIPEP_DEVICE void hipep_unique(const T* HIPEP_RESTRICT x, T* HIPEP_RESTRICT y, hipep_i64* HIPEP_RESTRICT first,
                               hipep_i64* HIPEP_RESTRICT inverse, hipep_i64* HIPEP_RESTRICT counts,
                               hipep_i64* HIPEP_RESTRICT work, const hipep_unique_args a) {
  hipep_i64* rep = work;
  hipep_i64* pos = work + a.items;
  const hipep_i64 step = blockDim.x;
  for (hipep_i64 i = threadIdx.x; i < a.items; i += step) {
    hipep_i64 r = i;
    if (!(a.nan_distinct && hipep_unique_has_nan<T>(x, i, a))) {
      for (hipep_i64 j = 0; j < i; ++j) {
        if (hipep_unique_compare<T>(x, j, i, a) == 0) {  // where NaNs are distinct i holds none, nor then j
          r = j;
          break;
        }
      }
    }
    rep[i] = r;
  }
  __syncthreads();
  for (hipep_i64 i = threadIdx.x; i < a.items; i += step) {
    if (rep[i] != i) continue;
    hipep_i64 p = 0, count = 0;
    for (hipep_i64 k = 0; k < a.items; ++k) {
      const hipep_i64 rk = rep[k];
      count += rk == i;
      if (rk != k || k == i) continue;  // the other first occurrences
      if (a.sorted) {
        const int c = hipep_unique_compare<T>(x, k, i, a);
        p += c < 0 || (c == 0 && k < i);  // alike in order only where both hold a NaN: by index
      } else {
        p += k < i;
      }
    }
    pos[i] = p;
    if (p >= a.groups) continue;
    if (first) first[p] = i;
    if (counts) counts[p] = count;
    if (y) {
      for (hipep_i64 o = 0; o < a.outer; ++o) {
        const T* src = x + (o * a.items + i) * a.inner;
        T* dst = y + (o * a.groups + p) * a.inner;
        for (hipep_i64 e = 0; e < a.inner; ++e) dst[e] = src[e];
      }
    }
  }
  __syncthreads();
  if (inverse) {
    for (hipep_i64 k = threadIdx.x; k < a.items; k += step) inverse[k] = pos[rep[k]];
  }
}

#define HIPEP_UNIQUE(NAME, T)                                                                            \
  HIPEP_KERNEL void hipep_unique_##NAME(const T* HIPEP_RESTRICT x, T* HIPEP_RESTRICT y,                  \
                                        hipep_i64* HIPEP_RESTRICT first, hipep_i64* HIPEP_RESTRICT inverse, \
                                        hipep_i64* HIPEP_RESTRICT counts, hipep_i64* HIPEP_RESTRICT work,  \
                                        const hipep_unique_args a) {                                     \
    hipep_unique<T>(x, y, first, inverse, counts, work, a);                                             \
  }

HIPEP_UNIQUE(f32, float)
HIPEP_UNIQUE(f64, double)
HIPEP_UNIQUE(i64, hipep_i64)
HIPEP_UNIQUE(i8, signed char)
