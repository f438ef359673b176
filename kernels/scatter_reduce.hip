// The reductions of ScatterElements and ScatterND (add, mul, max, min; opsets 16 and 18): the
// runtime copies data into the output, then each update combines into its target (addressed as
// kernels/indexing.h says) with an atomic read-modify-write: a hardware atomic add where one
// exists for the type (f32, 32- and 64-bit integers), else a compare-and-swap loop on the
// element's word, or for 1- and 2-byte types on the aligned 32-bit word holding it (its
// neighbours are written back unchanged).
//
// Integer results are exact in any order (add and mul wrap as numpy's do, and are the same bits
// for signed and unsigned types, so those share the signed type's entry point); float add and mul
// depend on the order updates arrive in, within rounding; f16 rounds after every update (hipep's
// reference rounds once, after all). max and min propagate NaN as numpy's maximum and minimum.
// bool: add is logical or, mul logical and (hipep's reference); max and min are not claimed.
// An update whose index is out of range is dropped and reported.
#include "indexing.h"

#define HIPEP_RED_ADD 0
#define HIPEP_RED_MUL 1
#define HIPEP_RED_MAX 2
#define HIPEP_RED_MIN 3

HIPEP_DEVICE float hipep_fmin_nan(float a, float b) { return (a != a || a < b) ? a : b; }
HIPEP_DEVICE double hipep_dmin_nan(double a, double b) { return (a != a || a < b) ? a : b; }

// The type's bits as an unsigned integer of its size, and back (a byte copy: no union, since
// __half has constructors).
template <int SIZE> struct hipep_uint_of;
template <> struct hipep_uint_of<1> { typedef unsigned char type; };
template <> struct hipep_uint_of<2> { typedef unsigned short type; };
template <> struct hipep_uint_of<4> { typedef unsigned int type; };
template <> struct hipep_uint_of<8> { typedef hipep_u64 type; };

template <typename To, typename From> HIPEP_DEVICE To hipep_bits_as(const From f) {
  static_assert(sizeof(To) == sizeof(From), "a bit copy keeps the size");
  To t;
  const unsigned char* s = reinterpret_cast<const unsigned char*>(&f);
  unsigned char* d = reinterpret_cast<unsigned char*>(&t);
#pragma unroll
  for (int k = 0; k < (int)sizeof(To); ++k) d[k] = s[k];
  return t;
}

// combine(a, b) of reduction R on values of type T; integers in unsigned arithmetic of at least
// 32 bits, so add and mul wrap as numpy's do (no signed overflow, no promotion to int).
template <int R, typename T> struct hipep_reduce_op {
  static HIPEP_DEVICE T combine(T a, T b) {
    typedef typename hipep_uint_of<(sizeof(T) < 4 ? 4 : sizeof(T))>::type U;
    if (R == HIPEP_RED_ADD) return (T)((U)a + (U)b);
    if (R == HIPEP_RED_MUL) return (T)((U)a * (U)b);
    if (R == HIPEP_RED_MAX) return a < b ? b : a;
    return b < a ? b : a;
  }
};
template <int R> struct hipep_reduce_op<R, bool> {
  static HIPEP_DEVICE bool combine(bool a, bool b) {
    return (R == HIPEP_RED_ADD || R == HIPEP_RED_MAX) ? (a || b) : (a && b);
  }
};
template <int R> struct hipep_reduce_op<R, float> {
  static HIPEP_DEVICE float combine(float a, float b) {
    if (R == HIPEP_RED_ADD) return a + b;
    if (R == HIPEP_RED_MUL) return a * b;
    return R == HIPEP_RED_MAX ? hipep_fmax_nan(a, b) : hipep_fmin_nan(a, b);
  }
};
template <int R> struct hipep_reduce_op<R, double> {
  static HIPEP_DEVICE double combine(double a, double b) {
    if (R == HIPEP_RED_ADD) return a + b;
    if (R == HIPEP_RED_MUL) return a * b;
    return R == HIPEP_RED_MAX ? hipep_dmax_nan(a, b) : hipep_dmin_nan(a, b);
  }
};
template <int R> struct hipep_reduce_op<R, hipep_half> {
  static HIPEP_DEVICE hipep_half combine(hipep_half a, hipep_half b) {
    return hipep_from_float<hipep_half>(hipep_reduce_op<R, float>::combine(hipep_to_float(a), hipep_to_float(b)));
  }
};

// Which hardware atomic add a type has: none (a compare-and-swap loop), the float one, or the
// 32- or 64-bit integer one (two's complement: the unsigned add is the signed one).
template <typename T> struct hipep_add_atomic { static constexpr int kind = 0; };
template <> struct hipep_add_atomic<float> { static constexpr int kind = 1; };
template <> struct hipep_add_atomic<int> { static constexpr int kind = 2; };
template <> struct hipep_add_atomic<hipep_i64> { static constexpr int kind = 3; };

// *p = combine(*p, v), atomically.
template <int R, typename T> HIPEP_DEVICE void hipep_atomic_reduce(T* p, const T v) {
  typedef typename hipep_uint_of<sizeof(T)>::type B;
  constexpr int add = R == HIPEP_RED_ADD ? hipep_add_atomic<T>::kind : 0;
  if constexpr (add == 1) {
    hipep_atomic_add(reinterpret_cast<float*>(p), hipep_bits_as<float>(v));
  } else if constexpr (add == 2) {
    atomicAdd(reinterpret_cast<unsigned int*>(p), hipep_bits_as<unsigned int>(v));
  } else if constexpr (add == 3) {
    atomicAdd(reinterpret_cast<hipep_u64*>(p), hipep_bits_as<hipep_u64>(v));
  } else if constexpr (sizeof(T) == 4 || sizeof(T) == 8) {
    B* word = reinterpret_cast<B*>(p);
    B old = *(volatile B*)word;
    for (;;) {
      const B want = hipep_bits_as<B>(hipep_reduce_op<R, T>::combine(hipep_bits_as<T>(old), v));
      if (want == old) break;  // nothing changes (a max already reached, a product by one)
      const B seen = atomicCAS(word, old, want);
      if (seen == old) break;
      old = seen;
    }
  } else {  // 1 or 2 bytes: the aligned 32-bit word holding the element
    const hipep_u64 addr = (hipep_u64)p;
    unsigned int* word = reinterpret_cast<unsigned int*>(addr & ~(hipep_u64)3);
    const unsigned int shift = (unsigned int)(addr & 3) * 8u;
    const unsigned int mask = (unsigned int)(B)~(B)0 << shift;
    unsigned int old = *(volatile unsigned int*)word;
    for (;;) {
      const T cur = hipep_bits_as<T>((B)((old & mask) >> shift));
      const unsigned int bits = (unsigned int)hipep_bits_as<B>(hipep_reduce_op<R, T>::combine(cur, v)) << shift;
      const unsigned int want = (old & ~mask) | bits;
      if (want == old) break;
      const unsigned int seen = atomicCAS(word, old, want);
      if (seen == old) break;
      old = seen;
    }
  }
}

template <int R, typename T, typename I>
HIPEP_DEVICE void hipep_scatter_elements_reduce(const I* HIPEP_RESTRICT indices, const T* HIPEP_RESTRICT updates,
                                                T* HIPEP_RESTRICT out, const hipep_elements_args a,
                                                const hipep_fault_site fault) {
  const hipep_i64 step = (hipep_i64)gridDim.x * blockDim.x;
  for (hipep_i64 i = (hipep_i64)blockIdx.x * blockDim.x + threadIdx.x; i < a.n; i += step) {
    const hipep_i64 at = hipep_elements_target(indices, i, a, fault);
    if (at >= 0) hipep_atomic_reduce<R, T>(out + at, updates[i]);
  }
}

// Element units: `inner` and the strides count elements of T.
template <int R, typename T, typename I>
HIPEP_DEVICE void hipep_scatter_nd_reduce(const I* HIPEP_RESTRICT indices, const T* HIPEP_RESTRICT updates,
                                          T* HIPEP_RESTRICT out, const hipep_nd_args a, const hipep_fault_site fault) {
  const hipep_i64 row_step = (hipep_i64)gridDim.y * blockDim.y;
  const hipep_i64 col_step = (hipep_i64)gridDim.x * blockDim.x;
  for (hipep_i64 r = (hipep_i64)blockIdx.y * blockDim.y + threadIdx.y; r < a.rows; r += row_step) {
    const bool reports = blockIdx.x == 0 && threadIdx.x == 0;
    const hipep_i64 at = hipep_nd_target(indices, r, a, reports ? fault : hipep_fault_site{nullptr, 0});
    if (at < 0) continue;
    const T* src = updates + r * a.inner;
    for (hipep_i64 t = (hipep_i64)blockIdx.x * blockDim.x + threadIdx.x; t < a.inner; t += col_step)
      hipep_atomic_reduce<R, T>(out + at + t, src[t]);
  }
}

// ---- entry points (by element type) ---------------------------------------------------------------

#define HIPEP_ELEMENTS_REDUCE(RNAME, R, TNAME, T, INAME, I)                                                        \
  HIPEP_KERNEL void hipep_scatter_elements_##RNAME##_##TNAME##_##INAME(                                            \
      const I* HIPEP_RESTRICT idx, const T* HIPEP_RESTRICT upd, T* HIPEP_RESTRICT out, const hipep_elements_args a, \
      const hipep_fault_site f) {                                                                                  \
    hipep_scatter_elements_reduce<R, T, I>(idx, upd, out, a, f);                                                   \
  }

#define HIPEP_ND_REDUCE(RNAME, R, TNAME, T, INAME, I)                                                              \
  HIPEP_KERNEL void hipep_scatter_nd_##RNAME##_##TNAME##_##INAME(const I* HIPEP_RESTRICT idx,                      \
                                                                 const T* HIPEP_RESTRICT upd, T* HIPEP_RESTRICT out, \
                                                                 const hipep_nd_args a, const hipep_fault_site f) { \
    hipep_scatter_nd_reduce<R, T, I>(idx, upd, out, a, f);                                                         \
  }

#define HIPEP_REDUCTIONS(FAMILY, TNAME, T, INAME, I) \
  FAMILY(add, HIPEP_RED_ADD, TNAME, T, INAME, I)     \
  FAMILY(mul, HIPEP_RED_MUL, TNAME, T, INAME, I)     \
  FAMILY(max, HIPEP_RED_MAX, TNAME, T, INAME, I)     \
  FAMILY(min, HIPEP_RED_MIN, TNAME, T, INAME, I)

// Two's complement: add and mul of unsigned types are their signed twins' (the runtime names those).
#define HIPEP_ORDERED(FAMILY, TNAME, T, INAME, I) \
  FAMILY(max, HIPEP_RED_MAX, TNAME, T, INAME, I)  \
  FAMILY(min, HIPEP_RED_MIN, TNAME, T, INAME, I)

#define HIPEP_REDUCTION_FAMILY(FAMILY, INAME, I)        \
  HIPEP_REDUCTIONS(FAMILY, f16, hipep_half, INAME, I)   \
  HIPEP_REDUCTIONS(FAMILY, f32, float, INAME, I)        \
  HIPEP_REDUCTIONS(FAMILY, f64, double, INAME, I)       \
  HIPEP_REDUCTIONS(FAMILY, i8, signed char, INAME, I)   \
  HIPEP_REDUCTIONS(FAMILY, i16, short, INAME, I)        \
  HIPEP_REDUCTIONS(FAMILY, i32, int, INAME, I)          \
  HIPEP_REDUCTIONS(FAMILY, i64, hipep_i64, INAME, I)    \
  HIPEP_ORDERED(FAMILY, u8, unsigned char, INAME, I)    \
  HIPEP_ORDERED(FAMILY, u16, unsigned short, INAME, I)  \
  HIPEP_ORDERED(FAMILY, u32, unsigned int, INAME, I)    \
  HIPEP_ORDERED(FAMILY, u64, hipep_u64, INAME, I)       \
  FAMILY(add, HIPEP_RED_ADD, b8, bool, INAME, I)        \
  FAMILY(mul, HIPEP_RED_MUL, b8, bool, INAME, I)

// ScatterElements takes int32 or int64 indices; ScatterND int64.
HIPEP_REDUCTION_FAMILY(HIPEP_ELEMENTS_REDUCE, i32, int)
HIPEP_REDUCTION_FAMILY(HIPEP_ELEMENTS_REDUCE, i64, hipep_i64)
HIPEP_REDUCTION_FAMILY(HIPEP_ND_REDUCE, i64, hipep_i64)
