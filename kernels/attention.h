// com.microsoft::GroupQueryAttention on the GPU: what its kernels share (the semantics are
// hipep/ops/contrib_attention.py's _gqa: BNSH KV cache, causal, left/right padding through seqlens_k,
// local window, softcap, attention_bias, head_sink / smooth_softmax, and the sliding-window cache of
// gemma2's layers).
//
// Every kernel reads seqlens_k and total_sequence_length from device memory, never the host (for a
// prompt the binding first copies total into workspace; one token's kernels never read it): a
// launch's grid is sized by the buffer capacities and head counts, and blocks past a row's valid
// length exit early, so a decode step's launches are identical from step to step and replay as
// one CUDA graph. `hipep_gqa_geometry` is the one place that turns those values into cache rows
// (hipep/runtime/gpu_attention.py emulates it in numpy for the tests).
//
// Kernels, in launch order, one module each for the cache, decode and prefill:
//   attention_cache.hip    hipep_gqa_copy_past: present (or the window cache) rows taken from past:
//                          copied, and in a fresh present the rows past the new tokens zeroed (as the
//                          reference); not launched when present is past's buffer (the shared KV
//                          cache); hipep_gqa_prepare_*: rotary on Q (into workspace) and on the new K,
//                          K/V written into the cache at each row's position; the decode kernel's
//                          arrival counters zeroed;
//   attention_decode.hip   hipep_gqa_decode_* (device code in attention_decode.h, shared with
//                          attention_decode_fused.hip): one query token (or a few): flash-decoding, the KV range
//                          split over blocks (grid.x), the query rows sharing a KV head -- its query
//                          heads, times the tokens -- in one block so K/V are read once per KV head;
//                          partial max/sum/acc per split to workspace, and the last split block of a
//                          KV head to finish merges them (and the head sink) into the output; keys
//                          of a few passes (short contexts) take the first split block alone, which
//                          writes the output (no merge); hipep_gqa_decode_fused_*: one token on a
//                          cache attended in place, the prepare kernel's work done in its own blocks
//                          (so a decode step is this one launch), its first pass of past rows
//                          requested before it waits for the kernel ahead (launched to overlap it);
//   attention_prefill.hip  hipep_gqa_prefill_*: several query tokens: one block per (query tile, head,
//                          batch), a loop over KV tiles with an online softmax, causal tiles skipped;
//   attention_prefill_tc.hip  hipep_gqa_prefill_tc_*: the same on tensor cores (mma.sync) for fp16 and
//                          bf16 with head sizes a multiple of 16 up to 128, where the device has them;
//   attention_cache.hip    hipep_gqa_window_store: sliding-window cache: the window cache's kept rows
//                          back into present.
// Scores, softmax and the weighted sum of V run in f32; the output is rounded once. Rotated Q/K are
// rounded to the element type first (as ORT's kernels store them); in f32 the rotation is MLAS's
// fused form, fma(x1, cos, -(x2 * sin)) and fma(x1, sin, x2 * cos), so present_key is exact.
// Seqlens or positions out of range (the reference raises) never lead to an access outside the
// buffers -- rows are clamped to the cache and positions to the cos/sin caches -- and the prepare
// kernel reports them in the stream's fault record (hipep_device.h; HIPEP_FAULT_SEQLEN,
// HIPEP_FAULT_SEQLEN_SHORT, HIPEP_FAULT_POSITION), so the run raises an error naming the node
// instead of returning the clamped values.
#ifndef HIPEP_ATTENTION_H
#define HIPEP_ATTENTION_H
#include "hipep_device.h"

struct hipep_gqa_args {
  int batch, seq, heads, kv_heads, head_size, group;
  int rotary_half, do_rotary, interleaved, has_pos_ids, max_pos;
  int has_past, past_rows;  // past_key's sequence extent (the capacity)
  int cache_rows;           // rows per (batch, kv head) of the cache attention reads
  int present_rows;         // rows per (batch, kv head) of present
  int windowed, window, window_from_raw;
  int splits, row_groups, rows_per_block;  // split-KV kernel: query rows (token, head) per block
  int key_tile;  // split-KV kernel: a split's keys are a multiple of this (one pass of the block's warps)
  int bias_len, has_sink;
  hipep_i64 bias_sb, bias_sh, bias_ss;
  hipep_i64 qin_sb, qin_ss;  // query input: batch and sequence strides (elements)
  hipep_i64 kin_sb, kin_ss;  // key / value inputs
  hipep_i64 q_sb, q_ss, q_sh;  // the query attention reads (input or rotated workspace copy)
  float scale, softcap;
};

// ---- per batch row: where things are in the cache ------------------------------------------------

struct hipep_gqa_row {
  int t;       // seqlens_k + 1
  int first;   // a first prompt (sequence_length == total_sequence_length)
  int past;    // causal offset: query row s sees cache rows below min(past + s + 1, len)
  int len;     // valid cache rows
  int seed;    // cache rows taken from past
  int src_off; // past row of cache row 0 (sliding-window cache)
  int store_first, store_count;  // sliding-window cache: present rows = cache[first, first + count)
};

HIPEP_DEVICE int hipep_window_end(int p, int cap, int gap) {
  return p <= cap ? p : p - gap * ((p - cap + gap - 1) / gap);
}

HIPEP_DEVICE hipep_gqa_row hipep_gqa_geometry(const hipep_gqa_args& a, const int* seqlens, const int* total, int b) {
  hipep_gqa_row g;
  const int S = a.seq;
  g.t = seqlens[b] + 1;
  if (S > 1) {
    g.first = total[0] == S;  // the binding staged total into device memory for prompts
  } else {
    // One token: a first prompt means total == 1, so every row is one token long; only the
    // rotary position_ids rule still tells the two apart (rows and positions coincide).
    g.first = a.has_pos_ids;
    for (int i = 0; i < a.batch && g.first; ++i) g.first = seqlens[i] == 0;
  }
  g.store_first = 0;
  g.src_off = 0;
  if (!a.windowed) {
    const int p = (g.first || !a.has_past) ? 0 : max(g.t - S, 0);
    g.past = g.seed = p;
    g.len = g.t;
    g.store_count = 0;
    return g;
  }
  // ORT's windowed cache (contrib_attention._windowed_cache): appending past the capacity C
  // reclaims gap = C - w + 1 of the oldest rows at once; a step that would drop rows its first
  // query still sees stages every resident row (for the whole batch) and writes back the tail.
  const int cap = a.past_rows, w = a.window, gap = cap - w + 1;
  bool staging = false;
  for (int i = 0; i < a.batch; ++i) {
    const int pi = max(seqlens[i] + 1 - S, 0);
    if (hipep_window_end(pi + S, cap, gap) - S < min(pi, w - 1)) staging = true;
  }
  const int p = max(g.t - S, 0);
  const int before = hipep_window_end(p, cap, gap), kept = hipep_window_end(p + S, cap, gap) - S;
  g.seed = staging ? before : kept;
  g.src_off = staging ? 0 : before - kept;
  g.past = g.seed;
  g.len = g.seed + S;
  g.store_first = staging ? before - kept : 0;
  g.store_count = staging ? kept + S : g.seed + S;
  return g;
}

// Whether a batch row's seqlens_k (g.t - 1) fits this step, as the reference checks it: 0 where it
// does, else the fault code, with `bound` the limit it broke (hipep_device.h). Without the
// sliding-window cache the row's keys (seqlens_k + 1) must fit the cache, and in a step after the
// first prompt also cover the new tokens and need no more past rows than past_key holds; the window
// cache keeps absolute lengths, which need only cover the new tokens.
HIPEP_DEVICE unsigned int hipep_gqa_length_fault(const hipep_gqa_args& a, const hipep_gqa_row& g, hipep_i64& bound) {
  const int S = a.seq;
  if (!a.windowed) {
    int limit = a.cache_rows;
    if (!g.first && a.has_past) limit = min(limit, a.past_rows + S);
    if (g.t < 1 || g.t > limit) {
      bound = limit;
      return HIPEP_FAULT_SEQLEN;
    }
    if (g.first || g.t >= S) return 0u;
  } else if (g.t >= S) {
    return 0u;
  }
  bound = S;
  return HIPEP_FAULT_SEQLEN_SHORT;
}

// Reports a batch row's seqlens_k that does not fit the step through `length_fault`.
HIPEP_DEVICE void hipep_gqa_report_length(const hipep_gqa_args& a, const hipep_gqa_row& g,
                                          const hipep_fault_site length_fault) {
  hipep_i64 bound;
  const unsigned int code = hipep_gqa_length_fault(a, g, bound);
  if (code != 0u) hipep_report_fault(length_fault, code, (hipep_i64)g.t - 1, bound);
}

// Keys query row s (of batch row g) attends: [lo, hi).
HIPEP_DEVICE void hipep_gqa_bounds(const hipep_gqa_args& a, const hipep_gqa_row& g, int s, int& lo, int& hi) {
  const int raw = g.past + s + 1;
  const int f = min(raw, g.len);
  hi = min(f, a.cache_rows);
  lo = a.window >= 0 ? max((a.window_from_raw ? raw : f) - a.window, 0) : 0;
}

// The score of one key after scale, softcap and attention_bias (the reference's order).
template <typename T>
HIPEP_DEVICE float hipep_gqa_score(const hipep_gqa_args& a, float dot, const T* bias, int b, int head, int s, int j) {
  float x = dot * a.scale;
  if (a.softcap > 0.0f) x = a.softcap * tanhf(x / a.softcap);
  if (bias != 0 && j < a.bias_len) x += hipep_to_float(bias[b * a.bias_sb + head * a.bias_sh + s * a.bias_ss + j]);
  return x;
}

// out = acc / l, with the head sink (or smooth softmax's zero sink) in the denominator.
HIPEP_DEVICE float hipep_gqa_finish(float acc, float m, float l, bool has_sink, float sink) {
  if (has_sink) {
    const float m2 = m > sink ? m : sink;
    const float f = m == -HIPEP_INF_F ? 0.0f : expf(m - m2);
    l = l * f + expf(sink - m2);
    acc *= f;
  }
  return l > 0.0f ? acc / l : 0.0f;
}

// ---- rotary ----------------------------------------------------------------------------------------

// The rotation of one element pair (x1, x2) by (cos, sin): unfused for the 16-bit types (f16, bf16:
// hipep/ops/contrib_attention.py rotates both alike), f32 in MLAS's fused form (see above).
template <typename T>
HIPEP_DEVICE void hipep_rope(float x1, float x2, float c, float s, float& y1, float& y2) {
  y1 = __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s));
  y2 = __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s));
}

template <> HIPEP_DEVICE void hipep_rope<float>(float x1, float x2, float c, float s, float& y1, float& y2) {
  y1 = fmaf(x1, c, -__fmul_rn(x2, s));
  y2 = fmaf(x1, s, __fmul_rn(x2, c));
}

// The elements of pair j of a head: j < half rotated (j and j + half, or 2j and 2j + 1
// interleaved), the head's tail past the rotated part in consecutive pairs.
HIPEP_DEVICE void hipep_gqa_pair(const hipep_gqa_args& a, int half, int j, int& e1, int& e2) {
  if (j < half) {
    e1 = a.interleaved ? 2 * j : j;
    e2 = a.interleaved ? 2 * j + 1 : j + half;
  } else {
    e1 = 2 * half + 2 * (j - half);
    e2 = e1 + 1;
  }
}

// The rotary position of token s of batch row b, clamped to the cos/sin caches. One outside them is
// reported through `position_fault` by the `reporter` thread, unless the row's length is bad: its
// positions follow from it, and it is reported instead (hipep_gqa_length_fault).
HIPEP_DEVICE hipep_i64 hipep_gqa_position(const hipep_gqa_args& a, const hipep_gqa_row& g, const hipep_i64* pos_ids,
                                          int b, int s, bool reporter, const hipep_fault_site position_fault) {
  const hipep_i64 pos = a.has_pos_ids ? (g.first ? pos_ids[0] + s : pos_ids[(hipep_i64)b * a.seq + s])
                                      : (hipep_i64)(g.first ? s : g.t - a.seq + s);
  if (pos >= 0 && pos < a.max_pos) return pos;
  hipep_i64 unused;
  if (reporter && hipep_gqa_length_fault(a, g, unused) == 0u)
    hipep_report_fault(position_fault, HIPEP_FAULT_POSITION, pos, a.max_pos);
  return pos < 0 ? 0 : a.max_pos - 1;
}

// Element pair j of a head rotated by the cos/sin caches' row `pos`.
template <typename T>
HIPEP_DEVICE void hipep_gqa_rotate(const hipep_gqa_args& a, const T* cos_cache, const T* sin_cache, hipep_i64 pos,
                                   int j, float& y1, float& y2) {
  hipep_rope<T>(y1, y2, hipep_to_float(cos_cache[pos * a.rotary_half + j]),
                hipep_to_float(sin_cache[pos * a.rotary_half + j]), y1, y2);
}

#endif  // HIPEP_ATTENTION_H
