// TopK along one axis: the runtime views X as [outer, n, inner] (the lines run along the axis, stride
// `inner`) and writes Values and Indices (int64) as [outer, k, inner]. The order is ONNX Runtime's CPU
// EP's (sorted=1): by value, largest (or smallest) first, equal values by the smaller index first, NaN
// above every number (first for largest=1, last for largest=0; NaNs among themselves by index),
// -0.0 equal to +0.0.
//
// Each element becomes an item whose plain unsigned order is that order, so a block sorts items
// without looking at the element type:
//   key   an unsigned image of the value, monotone in it: floats (f16 widened to f32, exactly) by
//         their sign-flipped bits with NaN made one value above +inf and -0.0 made +0.0; signed
//         integers with the sign bit flipped; for largest=0 the key's complement;
//   item  (key, ~index): the larger item comes first; for keys of up to 32 bits one u64
//         (key << 32 | 0xffffffff - index), for int64 a (key, ~index) pair.
// The zero item sorts after every real one (a real item's ~index is never 0: indices < 2^31), so a
// block pads its items with zeros to a power of two and never outputs them. Values are read back
// from X at the chosen index, so they keep their exact bits (NaN payloads, the sign of zero).
//
// * select: a block per (line, chunk of at most `chunk` elements of it) loads its chunk as items into
//   shared memory, sorts them with a bitonic network (descending) and keeps the first k: straight to
//   Values/Indices where the line is one chunk, else into the candidate buffer (k items per chunk).
// * merge: the same over the candidate buffer's lines (`count` items each, chunked the same way), so
//   long lines (vocabularies of 32000-256000 with a small k) are selected in a few passes: each one
//   keeps k of every chunk, until a line's candidates fit one block, which writes the outputs.
#include "hipep_device.h"

struct hipep_topk_args {
  hipep_i64 lines;   // outer * inner
  hipep_i64 n;       // X's extent along the axis
  hipep_i64 inner;   // X's elements after the axis (the stride of a line)
  hipep_i64 k;
  hipep_i64 count;   // items per line of this pass's input: n for select, candidates for merge
  hipep_i64 chunk;   // items per block (<= sort)
  hipep_i64 chunks;  // blocks per line: 1 writes Values/Indices, more write k candidates per chunk
  int sort;          // the block's shared-memory sort size: a power of two >= chunk
  int largest;
};

// ---- keys -----------------------------------------------------------------------------------------

HIPEP_DEVICE unsigned hipep_topk_float_key(float v) {
  union {
    float f;
    unsigned u;
  } bits;
  bits.f = v;
  unsigned b = bits.u;
  if (v != v) b = 0x7fc00000u;        // every NaN one value, above +inf
  else if (b == 0x80000000u) b = 0u;  // -0.0 == +0.0
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

HIPEP_DEVICE unsigned hipep_topk_key(float v) { return hipep_topk_float_key(v); }
HIPEP_DEVICE unsigned hipep_topk_key(hipep_half v) { return hipep_topk_float_key(__half2float(v)); }
HIPEP_DEVICE unsigned hipep_topk_key(signed char v) { return (unsigned)(int)v ^ 0x80000000u; }
HIPEP_DEVICE unsigned hipep_topk_key(unsigned char v) { return (unsigned)v; }
HIPEP_DEVICE unsigned hipep_topk_key(short v) { return (unsigned)(int)v ^ 0x80000000u; }
HIPEP_DEVICE unsigned hipep_topk_key(int v) { return (unsigned)v ^ 0x80000000u; }
HIPEP_DEVICE hipep_u64 hipep_topk_key(hipep_i64 v) { return (hipep_u64)v ^ 0x8000000000000000ull; }

// ---- items ----------------------------------------------------------------------------------------

// Keys of up to 32 bits: one word.
struct hipep_topk_item32 {
  hipep_u64 w;
  HIPEP_DEVICE static hipep_topk_item32 make(unsigned key, hipep_i64 index) {
    hipep_topk_item32 r;
    r.w = ((hipep_u64)key << 32) | (hipep_u64)(0xffffffffu - (unsigned)index);
    return r;
  }
  HIPEP_DEVICE static hipep_topk_item32 none() {
    hipep_topk_item32 r;
    r.w = 0;
    return r;
  }
  HIPEP_DEVICE bool before(const hipep_topk_item32& o) const { return w > o.w; }
  HIPEP_DEVICE hipep_i64 index() const { return (hipep_i64)(0xffffffffu - (unsigned)(w & 0xffffffffu)); }
};

// int64 keys: the key and the complemented index side by side.
struct hipep_topk_item64 {
  hipep_u64 key;
  unsigned rank;  // 0xffffffff - index
  HIPEP_DEVICE static hipep_topk_item64 make(hipep_u64 key, hipep_i64 index) {
    hipep_topk_item64 r;
    r.key = key;
    r.rank = 0xffffffffu - (unsigned)index;
    return r;
  }
  HIPEP_DEVICE static hipep_topk_item64 none() {
    hipep_topk_item64 r;
    r.key = 0;
    r.rank = 0;
    return r;
  }
  HIPEP_DEVICE bool before(const hipep_topk_item64& o) const { return key > o.key || (key == o.key && rank > o.rank); }
  HIPEP_DEVICE hipep_i64 index() const { return (hipep_i64)(0xffffffffu - rank); }
};

template <typename T> struct hipep_topk_item_of { typedef hipep_topk_item32 type; };
template <> struct hipep_topk_item_of<hipep_i64> { typedef hipep_topk_item64 type; };

template <typename Item, typename T> HIPEP_DEVICE Item hipep_topk_item(T v, hipep_i64 index, int largest) {
  const auto key = hipep_topk_key(v);
  return Item::make(largest ? key : ~key, index);
}

// ---- the block's sort -----------------------------------------------------------------------------

// Sorts s[0, size) (size a power of two) so that every item comes before() the ones after it: a
// bitonic network, each thread taking compare-exchange pairs in a block-stride loop.
template <typename Item> HIPEP_DEVICE void hipep_topk_sort(Item* s, int size) {
  const int pairs = size / 2;
  for (int run = 2; run <= size; run <<= 1) {
    for (int stride = run / 2; stride > 0; stride >>= 1) {
      for (int t = threadIdx.x; t < pairs; t += blockDim.x) {
        const int i = 2 * t - (t & (stride - 1));  // the pair (i, i + stride)
        const int j = i + stride;
        const bool first_half = (i & run) == 0;  // runs alternate direction until the last one
        const Item a = s[i], b = s[j];
        if (first_half ? b.before(a) : a.before(b)) {
          s[i] = b;
          s[j] = a;
        }
      }
      __syncthreads();
    }
  }
}

// The block's k best items of s[0, k) written out: where this is the line's only chunk, as Values
// (read back from X) and Indices; else as the chunk's k candidates.
template <typename T, typename Item>
HIPEP_DEVICE void hipep_topk_emit(const Item* s, const T* HIPEP_RESTRICT x, T* HIPEP_RESTRICT values,
                                  hipep_i64* HIPEP_RESTRICT indices, Item* HIPEP_RESTRICT cand_out,
                                  const hipep_topk_args& a, hipep_i64 line, hipep_i64 chunk) {
  if (a.chunks == 1) {
    const hipep_i64 outer = line / a.inner, in = line - outer * a.inner;
    const T* px = x + outer * a.n * a.inner + in;
    const hipep_i64 base = outer * a.k * a.inner + in;
    for (hipep_i64 j = threadIdx.x; j < a.k; j += blockDim.x) {
      const hipep_i64 index = s[j].index();
      if (values != 0) values[base + j * a.inner] = px[index * a.inner];
      if (indices != 0) indices[base + j * a.inner] = index;
    }
  } else {
    Item* out = cand_out + (line * a.chunks + chunk) * a.k;
    for (hipep_i64 j = threadIdx.x; j < a.k; j += blockDim.x) out[j] = s[j];
  }
}

template <typename T> HIPEP_DEVICE void hipep_topk_select(const T* HIPEP_RESTRICT x, T* HIPEP_RESTRICT values,
                                                          hipep_i64* HIPEP_RESTRICT indices,
                                                          void* HIPEP_RESTRICT cand_out, const hipep_topk_args a) {
  typedef typename hipep_topk_item_of<T>::type Item;
  HIPEP_DYNAMIC_SHARED(hipep_u64, hipep_topk_smem);
  Item* s = reinterpret_cast<Item*>(hipep_topk_smem);
  const hipep_i64 work = a.lines * a.chunks;
  for (hipep_i64 w = blockIdx.x; w < work; w += gridDim.x) {
    const hipep_i64 line = w / a.chunks, chunk = w - line * a.chunks;
    const hipep_i64 outer = line / a.inner, in = line - outer * a.inner;
    const T* px = x + outer * a.n * a.inner + in;
    const hipep_i64 first = chunk * a.chunk;
    const hipep_i64 len = a.n - first < a.chunk ? a.n - first : a.chunk;
    for (int e = threadIdx.x; e < a.sort; e += blockDim.x) {
      s[e] = e < len ? hipep_topk_item<Item>(px[(first + e) * a.inner], first + e, a.largest) : Item::none();
    }
    __syncthreads();
    hipep_topk_sort(s, a.sort);
    hipep_topk_emit(s, x, values, indices, reinterpret_cast<Item*>(cand_out), a, line, chunk);
    __syncthreads();  // the shared items are rewritten for the block's next chunk
  }
}

template <typename T>
HIPEP_DEVICE void hipep_topk_merge(const T* HIPEP_RESTRICT x, const void* HIPEP_RESTRICT cand_in, T* HIPEP_RESTRICT values,
                                   hipep_i64* HIPEP_RESTRICT indices, void* HIPEP_RESTRICT cand_out,
                                   const hipep_topk_args a) {
  typedef typename hipep_topk_item_of<T>::type Item;
  HIPEP_DYNAMIC_SHARED(hipep_u64, hipep_topk_smem);
  Item* s = reinterpret_cast<Item*>(hipep_topk_smem);
  const Item* in = reinterpret_cast<const Item*>(cand_in);
  const hipep_i64 work = a.lines * a.chunks;
  for (hipep_i64 w = blockIdx.x; w < work; w += gridDim.x) {
    const hipep_i64 line = w / a.chunks, chunk = w - line * a.chunks;
    const Item* p = in + line * a.count + chunk * a.chunk;
    const hipep_i64 len = a.count - chunk * a.chunk < a.chunk ? a.count - chunk * a.chunk : a.chunk;
    for (int e = threadIdx.x; e < a.sort; e += blockDim.x) s[e] = e < len ? p[e] : Item::none();
    __syncthreads();
    hipep_topk_sort(s, a.sort);
    hipep_topk_emit(s, x, values, indices, reinterpret_cast<Item*>(cand_out), a, line, chunk);
    __syncthreads();
  }
}

#define HIPEP_TOPK(NAME, T)                                                                                  \
  HIPEP_KERNEL void hipep_topk_##NAME##_select(const T* HIPEP_RESTRICT x, T* HIPEP_RESTRICT values,          \
                                               hipep_i64* HIPEP_RESTRICT indices, void* HIPEP_RESTRICT cand_out, \
                                               const hipep_topk_args a) {                                     \
    hipep_topk_select<T>(x, values, indices, cand_out, a);                                                   \
  }                                                                                                          \
  HIPEP_KERNEL void hipep_topk_##NAME##_merge(const T* HIPEP_RESTRICT x, const void* HIPEP_RESTRICT cand_in,  \
                                              T* HIPEP_RESTRICT values, hipep_i64* HIPEP_RESTRICT indices,    \
                                              void* HIPEP_RESTRICT cand_out, const hipep_topk_args a) {        \
    hipep_topk_merge<T>(x, cand_in, values, indices, cand_out, a);                                           \
  }

HIPEP_TOPK(f32, float)
HIPEP_TOPK(f16, hipep_half)
HIPEP_TOPK(i8, signed char)
HIPEP_TOPK(u8, unsigned char)
HIPEP_TOPK(i16, short)
HIPEP_TOPK(i32, int)
HIPEP_TOPK(i64, hipep_i64)
