// GroupQueryAttention's KV cache kernels (kernels/attention.h has the whole picture): past's rows
// into present or the window cache, rotary and the new tokens' rows (and the checks of seqlens_k and
// the rotary positions), the window cache back into present.
#include "attention.h"

// ---- cache rows from past ------------------------------------------------------------------------
// dst [B, kv_heads, dst_rows, H] from past [B, kv_heads, past_rows, H], in 16-byte words;
// grid.y = 0: keys, 1: values. Fresh present: rows below `past` copied, rows past the new tokens
// zeroed. Window cache: rows below `seed` copied from past rows src_off + r.

HIPEP_DEVICE void hipep_gqa_copy_rows(const uint4* HIPEP_RESTRICT src, uint4* HIPEP_RESTRICT dst, const int* seqlens,
                                      const int* total, int dst_rows, int words, const hipep_gqa_args& a) {
  const hipep_i64 n = (hipep_i64)a.batch * a.kv_heads * dst_rows * words;
  for (hipep_i64 i = (hipep_i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (hipep_i64)gridDim.x * blockDim.x) {
    const int w = (int)(i % words);
    const hipep_i64 row = i / words;
    const int r = (int)(row % dst_rows);
    const hipep_i64 bh = row / dst_rows;
    const int b = (int)(bh / a.kv_heads);
    const hipep_gqa_row g = hipep_gqa_geometry(a, seqlens, total, b);
    if (r < g.seed) {
      const int sr = g.src_off + r;
      if (a.has_past && sr < a.past_rows) dst[i] = src[(bh * a.past_rows + sr) * words + w];
    } else if (!a.windowed && r >= g.seed + a.seq) {
      dst[i] = make_uint4(0u, 0u, 0u, 0u);
    }
  }
}

HIPEP_KERNEL void hipep_gqa_copy_past(const uint4* HIPEP_RESTRICT past_k, const uint4* HIPEP_RESTRICT past_v,
                                      const int* seqlens, const int* total, uint4* HIPEP_RESTRICT dst_k,
                                      uint4* HIPEP_RESTRICT dst_v, int dst_rows, int words, const hipep_gqa_args a) {
  if (blockIdx.y == 0)
    hipep_gqa_copy_rows(past_k, dst_k, seqlens, total, dst_rows, words, a);
  else
    hipep_gqa_copy_rows(past_v, dst_v, seqlens, total, dst_rows, words, a);
}

// present [B, kv_heads, past_rows, H] = the window cache's rows [first, first + count), zeros after.
HIPEP_KERNEL void hipep_gqa_window_store(const uint4* HIPEP_RESTRICT cache_k, const uint4* HIPEP_RESTRICT cache_v,
                                         const int* seqlens, const int* total, uint4* HIPEP_RESTRICT present_k,
                                         uint4* HIPEP_RESTRICT present_v, int words, const hipep_gqa_args a) {
  const uint4* src = blockIdx.y == 0 ? cache_k : cache_v;
  uint4* dst = blockIdx.y == 0 ? present_k : present_v;
  const int rows = a.past_rows;
  const hipep_i64 n = (hipep_i64)a.batch * a.kv_heads * rows * words;
  for (hipep_i64 i = (hipep_i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (hipep_i64)gridDim.x * blockDim.x) {
    const int w = (int)(i % words);
    const hipep_i64 row = i / words;
    const int r = (int)(row % rows);
    const hipep_i64 bh = row / rows;
    const hipep_gqa_row g = hipep_gqa_geometry(a, seqlens, total, (int)(bh / a.kv_heads));
    const int sr = g.store_first + r;
    dst[i] = (r < g.store_count && sr < a.cache_rows) ? src[(bh * a.cache_rows + sr) * words + w]
                                                       : make_uint4(0u, 0u, 0u, 0u);
  }
}

// ---- rotary and cache append -------------------------------------------------------------------------
// One thread per (batch, token, head slot, element pair); slots are the query heads, then the KV
// heads' keys, then their values. Pair j < rotary_half is rotated (elements j and j + half, or 2j
// and 2j + 1 interleaved); the others are the head's tail, copied in pairs. A batch row's seqlens_k
// that does not fit the step is reported through `length_fault`, a rotary position outside the
// cos/sin caches through `position_fault`, each by the thread of the row's (or token's) first key
// pair, so a bad row costs one report and a good one none.

template <typename T>
HIPEP_DEVICE void hipep_gqa_prepare(const T* HIPEP_RESTRICT q, const T* HIPEP_RESTRICT k, const T* HIPEP_RESTRICT v,
                                    const int* seqlens, const int* total, const hipep_i64* pos_ids,
                                    const T* HIPEP_RESTRICT cos_cache, const T* HIPEP_RESTRICT sin_cache,
                                    T* HIPEP_RESTRICT q_out, T* HIPEP_RESTRICT cache_k, T* HIPEP_RESTRICT cache_v,
                                    unsigned int* HIPEP_RESTRICT counters, const hipep_gqa_args a,
                                    const hipep_fault_site length_fault, const hipep_fault_site position_fault) {
  const int S = a.seq, H = a.head_size, pairs = H / 2, slots = a.heads + 2 * a.kv_heads;
  const int half = a.do_rotary ? a.rotary_half : 0;
  if (counters != 0) {  // the split-KV kernel's, one per (batch, KV head, row group): zero every run
    const int nc = a.batch * a.kv_heads * a.row_groups;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < nc; i += gridDim.x * blockDim.x) counters[i] = 0u;
  }
  const hipep_i64 n = (hipep_i64)a.batch * S * slots * pairs;
  for (hipep_i64 i = (hipep_i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (hipep_i64)gridDim.x * blockDim.x) {
    const int j = (int)(i % pairs);
    hipep_i64 rest = i / pairs;
    const int slot = (int)(rest % slots);
    rest /= slots;
    const int s = (int)(rest % S);
    const int b = (int)(rest / S);
    const bool is_q = slot < a.heads, is_k = !is_q && slot < a.heads + a.kv_heads;
    if (is_q && !a.do_rotary) continue;  // attention reads the query input itself
    const T* src;
    if (is_q)
      src = q + b * a.qin_sb + s * a.qin_ss + (hipep_i64)slot * H;
    else if (is_k)
      src = k + b * a.kin_sb + s * a.kin_ss + (hipep_i64)(slot - a.heads) * H;
    else
      src = v + b * a.kin_sb + s * a.kin_ss + (hipep_i64)(slot - a.heads - a.kv_heads) * H;
    const bool rotate = !(slot >= a.heads + a.kv_heads) && j < half;
    int e1, e2;
    hipep_gqa_pair(a, half, j, e1, e2);
    const hipep_gqa_row g = hipep_gqa_geometry(a, seqlens, total, b);
    const bool reporter = slot == a.heads && j == 0;  // the first key pair of its (batch, token)
    if (reporter && s == 0) hipep_gqa_report_length(a, g, length_fault);
    float y1 = hipep_to_float(src[e1]), y2 = hipep_to_float(src[e2]);
    if (rotate)
      hipep_gqa_rotate<T>(a, cos_cache, sin_cache, hipep_gqa_position(a, g, pos_ids, b, s, reporter, position_fault),
                          j, y1, y2);
    T* dst;
    if (is_q) {
      dst = q_out + (((hipep_i64)b * a.heads + slot) * S + s) * H;
    } else {
      const int row = g.seed + s;
      if (row < 0 || row >= a.cache_rows) continue;
      const int kvh = is_k ? slot - a.heads : slot - a.heads - a.kv_heads;
      dst = (is_k ? cache_k : cache_v) + (((hipep_i64)b * a.kv_heads + kvh) * a.cache_rows + row) * H;
    }
    dst[e1] = hipep_from_float<T>(y1);
    dst[e2] = hipep_from_float<T>(y2);
  }
}

// ---- entry points ----------------------------------------------------------------------------------------

#define HIPEP_GQA_PREPARE(NAME, T)                                                                               \
  HIPEP_KERNEL void hipep_gqa_prepare_##NAME(const T* q, const T* k, const T* v, const int* seqlens,             \
                                             const int* total, const hipep_i64* pos_ids, const T* cos_cache,    \
                                             const T* sin_cache, T* q_out, T* cache_k, T* cache_v,               \
                                             unsigned int* counters, const hipep_gqa_args a,                    \
                                             const hipep_fault_site length_fault,                               \
                                             const hipep_fault_site position_fault) {                           \
    hipep_gqa_prepare<T>(q, k, v, seqlens, total, pos_ids, cos_cache, sin_cache, q_out, cache_k, cache_v,       \
                         counters, a, length_fault, position_fault);                                             \
  }

HIPEP_GQA_PREPARE(f32, float)
HIPEP_GQA_PREPARE(f16, hipep_half)
HIPEP_GQA_PREPARE(bf16, hipep_bf16)
