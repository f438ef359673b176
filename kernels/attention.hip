// com.microsoft::GroupQueryAttention on the GPU (the semantics are hipep/ops/contrib_attention.py's
// _gqa: BNSH KV cache, causal, left/right padding through seqlens_k, local window, softcap,
// attention_bias, head_sink / smooth_softmax, and the sliding-window cache of gemma2's layers).
//
// Every kernel reads seqlens_k and total_sequence_length from device memory, never the host (for a
// prompt the binding first copies total into workspace; one token's kernels never read it): a
// launch's grid is sized by the buffer capacities and head counts, and blocks past a row's valid
// length exit early, so a decode step's launches are identical from step to step and replay as
// one CUDA graph. `hipep_gqa_geometry` is the one place that turns those values into cache rows
// (hipep/runtime/gpu_attention.py emulates it in numpy for the tests).
//
// Kernels, in launch order:
//   hipep_gqa_copy_past      present (or the window cache) rows taken from past: copied, and in a
//                            fresh present the rows past the new tokens zeroed (as the reference);
//                            not launched when present is past's buffer (the shared KV cache);
//   hipep_gqa_prepare_*      rotary on Q (into workspace) and on the new K, K/V written into the
//                            cache at each row's position; the decode kernel's arrival counters zeroed;
//   hipep_gqa_decode_*       one query token (or a few): flash-decoding, the KV range split over
//                            blocks (grid.x), the query rows sharing a KV head -- its query heads,
//                            times the tokens -- in one block so K/V are read once per KV head;
//                            partial max/sum/acc per split to workspace, and the last split block
//                            of a KV head to finish merges them (and the head sink) into the output;
//   hipep_gqa_prefill_*      several query tokens: one block per (query tile, head, batch), a loop
//                            over KV tiles with an online softmax, causal tiles skipped;
//   hipep_gqa_window_store   sliding-window cache: the window cache's kept rows back into present.
// Scores, softmax and the weighted sum of V run in f32; the output is rounded once. Rotated Q/K are
// rounded to the element type first (as ORT's kernels store them); in f32 the rotation is MLAS's
// fused form, fma(x1, cos, -(x2 * sin)) and fma(x1, sin, x2 * cos), so present_key is exact.
// Seqlens or positions out of range (the reference raises) give unspecified values but never an
// access outside the buffers: rows are clamped to the cache and positions to the cos/sin caches.
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

// Keys query row s (of batch row g) attends: [lo, hi).
HIPEP_DEVICE void hipep_gqa_bounds(const hipep_gqa_args& a, const hipep_gqa_row& g, int s, int& lo, int& hi) {
  const int raw = g.past + s + 1;
  const int f = min(raw, g.len);
  hi = min(f, a.cache_rows);
  lo = a.window >= 0 ? max((a.window_from_raw ? raw : f) - a.window, 0) : 0;
}

// ---- element access ---------------------------------------------------------------------------------

HIPEP_DEVICE void hipep_load8(const float* p, float* f) {
  const float4 x = reinterpret_cast<const float4*>(p)[0], y = reinterpret_cast<const float4*>(p)[1];
  f[0] = x.x; f[1] = x.y; f[2] = x.z; f[3] = x.w; f[4] = y.x; f[5] = y.y; f[6] = y.z; f[7] = y.w;
}

HIPEP_DEVICE void hipep_load8(const hipep_half* p, float* f) {
  const uint4 u = *reinterpret_cast<const uint4*>(p);
  const hipep_half* h = reinterpret_cast<const hipep_half*>(&u);
#pragma unroll
  for (int e = 0; e < 8; ++e) f[e] = __half2float(h[e]);
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
// and 2j + 1 interleaved); the others are the head's tail, copied in pairs.

template <typename T>
HIPEP_DEVICE void hipep_rope(float x1, float x2, float c, float s, float& y1, float& y2);

template <> HIPEP_DEVICE void hipep_rope<float>(float x1, float x2, float c, float s, float& y1, float& y2) {
  y1 = fmaf(x1, c, -__fmul_rn(x2, s));
  y2 = fmaf(x1, s, __fmul_rn(x2, c));
}

template <> HIPEP_DEVICE void hipep_rope<hipep_half>(float x1, float x2, float c, float s, float& y1, float& y2) {
  y1 = __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s));
  y2 = __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s));
}

template <typename T>
HIPEP_DEVICE void hipep_gqa_prepare(const T* HIPEP_RESTRICT q, const T* HIPEP_RESTRICT k, const T* HIPEP_RESTRICT v,
                                    const int* seqlens, const int* total, const hipep_i64* pos_ids,
                                    const T* HIPEP_RESTRICT cos_cache, const T* HIPEP_RESTRICT sin_cache,
                                    T* HIPEP_RESTRICT q_out, T* HIPEP_RESTRICT cache_k, T* HIPEP_RESTRICT cache_v,
                                    unsigned int* HIPEP_RESTRICT counters, const hipep_gqa_args a) {
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
    if (j < half) {
      e1 = a.interleaved ? 2 * j : j;
      e2 = a.interleaved ? 2 * j + 1 : j + half;
    } else {
      e1 = 2 * half + 2 * (j - half);
      e2 = e1 + 1;
    }
    const hipep_gqa_row g = hipep_gqa_geometry(a, seqlens, total, b);
    float y1 = hipep_to_float(src[e1]), y2 = hipep_to_float(src[e2]);
    if (rotate) {
      hipep_i64 pos = a.has_pos_ids ? (g.first ? pos_ids[0] + s : pos_ids[(hipep_i64)b * S + s])
                                    : (hipep_i64)(g.first ? s : g.t - S + s);
      pos = pos < 0 ? 0 : (pos >= a.max_pos ? a.max_pos - 1 : pos);
      const float c = hipep_to_float(cos_cache[pos * a.rotary_half + j]);
      const float sn = hipep_to_float(sin_cache[pos * a.rotary_half + j]);
      hipep_rope<T>(y1, y2, c, sn, y1, y2);
    }
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

// ---- decode: a few query tokens, the KV range split over blocks ---------------------------------------
// grid (splits, kv_heads * row_groups, batch), DEC_THREADS threads. The query rows of a KV head are
// its group's (token, head) pairs, row r = token * group + head in group; a block takes up to G of
// them (the entry's variant: 1, 2, 4 or 8) and the keys any of them sees, [lo of its first row, hi of
// its last), split into `splits` chunks of whole key tiles (a.key_tile keys: every warp's share of
// one pass). Flash-decoding: a key is read by P = pow2 >= H / 8 neighbouring lanes, 8 elements (16 or
// 32 bytes) each, so one load instruction of a warp reads W / P consecutive keys; every lane keeps
// KPL keys' K and V in flight at once (loaded together, before they are needed). Dot products are
// summed over the P lanes by shuffles; each warp keeps its own running max, sum and P @ V for every
// row (no barrier per key tile), and at the end the warps' partials are merged in warp order, so
// results do not depend on scheduling. Partials and outputs are indexed by the flat
// (batch * S + token) * heads + head.

#define HIPEP_DEC_THREADS 128
#define HIPEP_DEC_WARPS (HIPEP_DEC_THREADS / HIPEP_WARP_SIZE)
#define HIPEP_GQA_MAX_HEAD 256
#define HIPEP_GQA_MAX_SPLITS 64

// Keys per lane per pass: K and V of these are in flight together (registers: 2 * KPL * 8 elements).
template <typename T, int G> struct hipep_dec_keys { static constexpr int value = (sizeof(T) == 2 && G <= 4) ? 8 : 4; };

// Eight elements of a row as loaded (16-byte words), converted to f32 when used.
template <typename T> struct hipep_raw8;
template <> struct hipep_raw8<hipep_half> { uint4 w; };
template <> struct hipep_raw8<float> { float4 x, y; };

HIPEP_DEVICE void hipep_raw_load(hipep_raw8<hipep_half>& r, const hipep_half* p) {
  r.w = *reinterpret_cast<const uint4*>(p);
}
HIPEP_DEVICE void hipep_raw_load(hipep_raw8<float>& r, const float* p) {
  r.x = reinterpret_cast<const float4*>(p)[0];
  r.y = reinterpret_cast<const float4*>(p)[1];
}
HIPEP_DEVICE void hipep_raw_zero(hipep_raw8<hipep_half>& r) { r.w = make_uint4(0u, 0u, 0u, 0u); }
HIPEP_DEVICE void hipep_raw_zero(hipep_raw8<float>& r) { r.x = r.y = make_float4(0.0f, 0.0f, 0.0f, 0.0f); }
HIPEP_DEVICE void hipep_raw_float(const hipep_raw8<hipep_half>& r, float* f) {
  const hipep_half* h = reinterpret_cast<const hipep_half*>(&r.w);
#pragma unroll
  for (int e = 0; e < 8; ++e) f[e] = __half2float(h[e]);
}
HIPEP_DEVICE void hipep_raw_float(const hipep_raw8<float>& r, float* f) {
  f[0] = r.x.x; f[1] = r.x.y; f[2] = r.x.z; f[3] = r.x.w; f[4] = r.y.x; f[5] = r.y.y; f[6] = r.y.z; f[7] = r.y.w;
}

// Lanes that read one key: the power of two covering H / 8 (lanes past H / 8 idle).
HIPEP_DEVICE int hipep_dec_lanes(int H) {
  int p = 1;
  while (8 * p < H) p <<= 1;
  return p;
}

// One split's keys [k0, k1) against the block's rows: per-warp online softmax, then the warps merged
// in order into the output (one split) or the split's partials.
template <typename T, int G>
HIPEP_DEVICE void hipep_gqa_decode_split(const T* HIPEP_RESTRICT q, const T* HIPEP_RESTRICT cache_k,
                                         const T* HIPEP_RESTRICT cache_v, const T* HIPEP_RESTRICT bias,
                                         const T* HIPEP_RESTRICT sink, T* HIPEP_RESTRICT out,
                                         float* part_acc, float* part_ml, const hipep_gqa_args& a, int k0, int k1,
                                         int gn, const int* row_s, const int* row_head, const int* row_lo,
                                         const int* row_hi,
                                         float (*o_s)[G][HIPEP_GQA_MAX_HEAD], float4 (*q_s4)[HIPEP_GQA_MAX_HEAD / 4]) {
  constexpr int W = HIPEP_WARP_SIZE, NW = HIPEP_DEC_WARPS, KPL = hipep_dec_keys<T, G>::value;
  __shared__ float m_w[NW][G], l_w[NW][G];
  float (*q_s)[HIPEP_GQA_MAX_HEAD] = reinterpret_cast<float (*)[HIPEP_GQA_MAX_HEAD]>(q_s4);
  const int H = a.head_size, t = threadIdx.x, lane = t % W, warp = t / W;
  const int split = blockIdx.x, b = blockIdx.z, kvh = blockIdx.y / a.row_groups;
  const int P = hipep_dec_lanes(H), KW = W / P;  // lanes per key, keys per load instruction
  const int slice = lane % P, kl = lane / P;       // this lane's 8 dims and key within an instruction
  const bool lane_on = slice * 8 < H;
  const int WT = KPL * KW;  // keys per warp per pass; a pass of the block is a.key_tile = NW * WT keys
  const hipep_i64 kv_base = ((hipep_i64)b * a.kv_heads + kvh) * a.cache_rows;
  hipep_raw8<T> kr[KPL], vr[KPL];
  int j0 = k0 + warp * WT;  // this warp's first key of the pass
  // The first pass's K and V are requested before the queries are staged.
#pragma unroll
  for (int i = 0; i < KPL; ++i) {
    const int j = j0 + i * KW + kl;
    if (lane_on && j < k1) {
      hipep_raw_load(kr[i], cache_k + (kv_base + j) * H + slice * 8);
      hipep_raw_load(vr[i], cache_v + (kv_base + j) * H + slice * 8);
    } else {
      hipep_raw_zero(kr[i]);
      hipep_raw_zero(vr[i]);
    }
  }
  for (int i = t; i < G * 8 * P; i += blockDim.x) {  // zeros past H: the idle lanes' dims
    const int h = i / (8 * P), d = i % (8 * P);
    q_s[h][d] = h < gn && d < H ? hipep_to_float(q[b * a.q_sb + (hipep_i64)row_s[h] * a.q_ss +
                                                   (hipep_i64)row_head[h] * a.q_sh + d]) : 0.0f;
  }
  __syncthreads();

  float m_run[G], l_run[G], acc[G][8];
#pragma unroll
  for (int h = 0; h < G; ++h) {
    m_run[h] = -HIPEP_INF_F;
    l_run[h] = 0.0f;
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[h][e] = 0.0f;
  }
  for (; j0 < k1; j0 += NW * WT) {  // uniform over the warp: the shuffles below see every lane
    float s[KPL][G];
#pragma unroll
    for (int i = 0; i < KPL; ++i) {
      float kf[8];
      hipep_raw_float(kr[i], kf);
#pragma unroll
      for (int h = 0; h < G; ++h) {
        const float4 x = q_s4[h][2 * slice], y = q_s4[h][2 * slice + 1];
        float d = x.x * kf[0];
        d = fmaf(x.y, kf[1], d);
        d = fmaf(x.z, kf[2], d);
        d = fmaf(x.w, kf[3], d);
        d = fmaf(y.x, kf[4], d);
        d = fmaf(y.y, kf[5], d);
        d = fmaf(y.z, kf[6], d);
        s[i][h] = fmaf(y.w, kf[7], d);
      }
    }
    for (int m = 1; m < P; m <<= 1) {  // the key's P lanes: every one ends with the whole dot product
#pragma unroll
      for (int i = 0; i < KPL; ++i)
#pragma unroll
        for (int h = 0; h < G; ++h) s[i][h] += HIPEP_SHFL_XOR(s[i][h], m);
    }
#pragma unroll
    for (int h = 0; h < G; ++h) {
      const int rlo = row_lo[h], rhi = row_hi[h];
      float mt = -HIPEP_INF_F;
#pragma unroll
      for (int i = 0; i < KPL; ++i) {
        const int j = j0 + i * KW + kl;
        s[i][h] = (j < k1 && j >= rlo && j < rhi) ? hipep_gqa_score<T>(a, s[i][h], bias, b, row_head[h], row_s[h], j)
                                                  : -HIPEP_INF_F;
        mt = fmaxf(mt, s[i][h]);
      }
      for (int m = P; m < W; m <<= 1) mt = fmaxf(mt, HIPEP_SHFL_XOR(mt, m));  // over the warp's keys
      const float m_new = fmaxf(m_run[h], mt);
      const bool dead = m_new == -HIPEP_INF_F;
      float sum = 0.0f;
#pragma unroll
      for (int i = 0; i < KPL; ++i) {
        s[i][h] = dead ? 0.0f : expf(s[i][h] - m_new);
        sum += s[i][h];
      }
      for (int m = P; m < W; m <<= 1) sum += HIPEP_SHFL_XOR(sum, m);
      const float alpha = dead ? 1.0f : expf(m_run[h] - m_new);
      l_run[h] = l_run[h] * alpha + sum;
      m_run[h] = m_new;
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[h][e] *= alpha;
    }
#pragma unroll
    for (int i = 0; i < KPL; ++i) {
      float vf[8];
      hipep_raw_float(vr[i], vf);
#pragma unroll
      for (int h = 0; h < G; ++h)
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[h][e] = fmaf(s[i][h], vf[e], acc[h][e]);
    }
    const int jn = j0 + NW * WT;  // the next pass's K and V
#pragma unroll
    for (int i = 0; i < KPL; ++i) {
      const int j = jn + i * KW + kl;
      if (lane_on && j < k1) {
        hipep_raw_load(kr[i], cache_k + (kv_base + j) * H + slice * 8);
        hipep_raw_load(vr[i], cache_v + (kv_base + j) * H + slice * 8);
      }
    }
  }
  // The warp's keys: each lane summed its own; the KW keys of an instruction are added by shuffles.
#pragma unroll
  for (int h = 0; h < G; ++h)
#pragma unroll
    for (int e = 0; e < 8; ++e)
      for (int m = P; m < W; m <<= 1) acc[h][e] += HIPEP_SHFL_XOR(acc[h][e], m);
  if (kl == 0 && lane_on) {
#pragma unroll
    for (int h = 0; h < G; ++h)
#pragma unroll
      for (int e = 0; e < 8; ++e) o_s[warp][h][slice * 8 + e] = acc[h][e];
  }
  if (lane == 0) {
#pragma unroll
    for (int h = 0; h < G; ++h) {
      m_w[warp][h] = m_run[h];
      l_w[warp][h] = l_run[h];
    }
  }
  __syncthreads();
  // The warps' partials merged in warp order.
  for (int i = t; i < gn * H; i += blockDim.x) {
    const int h = i / H, d = i % H;
    float m = -HIPEP_INF_F;
#pragma unroll
    for (int w = 0; w < NW; ++w) m = fmaxf(m, m_w[w][h]);
    float o = 0.0f, l = 0.0f;
#pragma unroll
    for (int w = 0; w < NW; ++w) {
      if (m_w[w][h] != -HIPEP_INF_F) {
        const float f = expf(m_w[w][h] - m);
        o = fmaf(o_s[w][h][d], f, o);
        l = fmaf(l_w[w][h], f, l);
      }
    }
    const hipep_i64 row = ((hipep_i64)b * a.seq + row_s[h]) * a.heads + row_head[h];  // output row
    if (a.splits == 1) {
      const float sk = a.has_sink ? (sink != 0 ? hipep_to_float(sink[row_head[h]]) : 0.0f) : 0.0f;
      out[row * H + d] = hipep_from_float<T>(hipep_gqa_finish(o, m, l, a.has_sink, sk));
    } else {
      const hipep_i64 p = row * a.splits + split;
      part_acc[p * H + d] = o;
      if (d == 0) {
        part_ml[2 * p] = m;
        part_ml[2 * p + 1] = l;
      }
    }
  }
}

// The last split block of a (batch, KV head, row group): its rows' partials of every split merged
// (and the head sink) into the output. One warp per row weighs the splits (exp(m_i - m), zero for a
// split that saw no key); the threads then split the weighted sum into 16-byte columns of the rows
// and, where there are few columns, the splits into parts, added in order.
template <typename T, int G>
HIPEP_DEVICE void hipep_gqa_merge_splits(const float* part_acc, const float* part_ml, const T* HIPEP_RESTRICT sink,
                                         T* HIPEP_RESTRICT out, const hipep_gqa_args& a, int gn, const int* row_s,
                                         const int* row_head, float4* sum_s4) {
  constexpr int W = HIPEP_WARP_SIZE, NW = HIPEP_DEC_WARPS;
  __shared__ float w_s[G][HIPEP_GQA_MAX_SPLITS], mr_s[G], lr_s[G];
  const int H = a.head_size, n = a.splits, t = threadIdx.x, lane = t % W, warp = t / W, b = blockIdx.z;
  for (int h = warp; h < gn; h += NW) {
    const hipep_i64 p0 = (((hipep_i64)b * a.seq + row_s[h]) * a.heads + row_head[h]) * n;
    float m = -HIPEP_INF_F;
    for (int i = lane; i < n; i += W) m = fmaxf(m, part_ml[2 * (p0 + i)]);
#pragma unroll
    for (int k = W / 2; k > 0; k >>= 1) m = fmaxf(m, HIPEP_SHFL_XOR(m, k));
    float l = 0.0f;
    for (int i = lane; i < n; i += W) {
      const float mi = part_ml[2 * (p0 + i)];
      const float w = mi == -HIPEP_INF_F ? 0.0f : expf(mi - m);
      l = fmaf(part_ml[2 * (p0 + i) + 1], w, l);
      w_s[h][i] = w;
    }
    l = hipep_warp_sum(l);
    if (lane == 0) {
      mr_s[h] = m;
      lr_s[h] = l;
    }
  }
  __syncthreads();
  const int H4 = H / 4, cols = gn * H4;  // 4 head dims a column
  const int parts = (int)blockDim.x >= 2 * cols ? (int)blockDim.x / cols : 1;
  for (int c0 = 0; c0 < cols; c0 += blockDim.x) {  // one pass unless the rows are wide (parts == 1)
    const int part = parts > 1 ? t / cols : 0, c = parts > 1 ? t % cols : c0 + t;
    float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    const int h = c / H4, d = (c % H4) * 4;
    const bool on = part < parts && c < cols;
    if (on) {
      const hipep_i64 p0 = (((hipep_i64)b * a.seq + row_s[h]) * a.heads + row_head[h]) * n;
#pragma unroll 8
      for (int i = part; i < n; i += parts) {
        const float w = w_s[h][i];
        if (w != 0.0f) {  // a split that saw no key left its partial output unwritten
          const float4 x = *reinterpret_cast<const float4*>(part_acc + (p0 + i) * H + d);
          o.x = fmaf(x.x, w, o.x);
          o.y = fmaf(x.y, w, o.y);
          o.z = fmaf(x.z, w, o.z);
          o.w = fmaf(x.w, w, o.w);
        }
      }
    }
    if (parts > 1) {
      if (on) sum_s4[t] = o;
      __syncthreads();
      if (t >= cols) return;
      o = sum_s4[t];
      for (int k = 1; k < parts; ++k) {
        const float4 x = sum_s4[k * cols + t];
        o.x += x.x;
        o.y += x.y;
        o.z += x.z;
        o.w += x.w;
      }
    } else if (!on) {
      break;
    }
    const float m = mr_s[h], l = lr_s[h];
    const float sk = a.has_sink ? (sink != 0 ? hipep_to_float(sink[row_head[h]]) : 0.0f) : 0.0f;
    T* o_row = out + (((hipep_i64)b * a.seq + row_s[h]) * a.heads + row_head[h]) * H + d;
    o_row[0] = hipep_from_float<T>(hipep_gqa_finish(o.x, m, l, a.has_sink, sk));
    o_row[1] = hipep_from_float<T>(hipep_gqa_finish(o.y, m, l, a.has_sink, sk));
    o_row[2] = hipep_from_float<T>(hipep_gqa_finish(o.z, m, l, a.has_sink, sk));
    o_row[3] = hipep_from_float<T>(hipep_gqa_finish(o.w, m, l, a.has_sink, sk));
    if (parts > 1) return;
  }
}

template <typename T, int G>
HIPEP_DEVICE void hipep_gqa_decode(const T* HIPEP_RESTRICT q, const T* HIPEP_RESTRICT cache_k,
                                   const T* HIPEP_RESTRICT cache_v, const int* seqlens, const int* total,
                                   const T* HIPEP_RESTRICT bias, const T* HIPEP_RESTRICT sink, T* HIPEP_RESTRICT out,
                                   float* part_acc, float* part_ml, unsigned int* counters, const hipep_gqa_args a) {
  // part_acc / part_ml are written and, by the last block, read: no __restrict__ (no read-only loads)
  __shared__ float4 q_s4[G][HIPEP_GQA_MAX_HEAD / 4];  // the block's queries, 4 dims a word
  __shared__ float4 o_s4[HIPEP_DEC_WARPS * G * HIPEP_GQA_MAX_HEAD / 4];  // warps' P @ V; then the merge's parts
  float (*o_s)[G][HIPEP_GQA_MAX_HEAD] = reinterpret_cast<float (*)[G][HIPEP_GQA_MAX_HEAD]>(o_s4);
  __shared__ int row_s[G], row_head[G], row_lo[G], row_hi[G];
  const int t = threadIdx.x, split = blockIdx.x, b = blockIdx.z;
  const int kvh = blockIdx.y / a.row_groups, rg = blockIdx.y % a.row_groups;
  const int first_row = rg * a.rows_per_block;
  const int gn = min(a.rows_per_block, a.group * a.seq - first_row);  // the block's rows (<= G)
  if (t < G) {
    const hipep_gqa_row g = hipep_gqa_geometry(a, seqlens, total, b);
    const int r = first_row + min(t, gn - 1);
    row_s[t] = r / a.group;
    row_head[t] = kvh * a.group + r % a.group;
    hipep_gqa_bounds(a, g, row_s[t], row_lo[t], row_hi[t]);
    if (t >= gn) row_hi[t] = row_lo[t];  // a padding row sees no key
  }
  __syncthreads();
  int lo = 0x7fffffff, hi = 0;
#pragma unroll
  for (int h = 0; h < G; ++h) {
    if (row_hi[h] > row_lo[h]) {
      lo = min(lo, row_lo[h]);
      hi = max(hi, row_hi[h]);
    }
  }
  if (hi == 0) lo = 0;
  const int span = max(hi - lo, 0);
  int chunk = (span + a.splits - 1) / a.splits;
  chunk = (chunk + a.key_tile - 1) / a.key_tile * a.key_tile;
  const int k0 = lo + split * chunk, k1 = min(hi, k0 + chunk);
  if (k0 >= k1 && a.splits > 1) {  // a split past the rows' keys (the grid is sized by the capacity)
    if (t < gn) {
      const hipep_i64 p = (((hipep_i64)b * a.seq + row_s[t]) * a.heads + row_head[t]) * a.splits + split;
      part_ml[2 * p] = -HIPEP_INF_F;
      part_ml[2 * p + 1] = 0.0f;
    }
  } else {
    hipep_gqa_decode_split<T, G>(q, cache_k, cache_v, bias, sink, out, part_acc, part_ml, a, k0, k1, gn, row_s,
                                 row_head, row_lo, row_hi, o_s, q_s4);
  }
  if (a.splits == 1) return;
  // Count this block's split in; the last of the (batch, KV head, row group) to arrive merges them all.
  __shared__ unsigned int last_s;
  __threadfence();  // the partials written above, visible device-wide before they are counted
  __syncthreads();
  if (t == 0) {
    const unsigned int before = atomicAdd(&counters[blockIdx.z * gridDim.y + blockIdx.y], 1u);
    last_s = before == (unsigned int)a.splits - 1u;
  }
  __syncthreads();
  if (!last_s) return;
  __threadfence();  // every other split's partials seen
  hipep_gqa_merge_splits<T, G>(part_acc, part_ml, sink, out, a, gn, row_s, row_head, o_s4);
}

// ---- prefill: query tiles against KV tiles -------------------------------------------------------------
// grid (ceil(S / BM), heads, batch), THREADS threads; BM = THREADS / 4 query rows, BN = 8 * CPT keys
// per tile, head size at most HB. Thread t owns query rows 2 * (t / 8) and the next, score columns
// t % 8 + 8 * i and the head dims 4 * (t % 8) + 32 * k + [0, 4): a row's scores live in 8
// neighbouring lanes, reduced by shuffles. Q and each K (then V) tile are staged in shared memory as
// f32, rows padded by four words so that the 16-byte reads of 8 different rows (scores) or of 8
// neighbouring slices of one row (P @ V) hit distinct banks.

// Cache rows [j0, j0 + BN) (zeros from `end` on) into shared memory as f32, 16 bytes a load.
template <int BN, int LD, typename T>
HIPEP_DEVICE void hipep_gqa_load_tile(const T* HIPEP_RESTRICT cache, hipep_i64 base, int j0, int end, int H,
                                      float* tile, int t, int threads) {
  const int H8 = H / 8;
  for (int i = t; i < BN * H8; i += threads) {
    const int c = i / H8, d = (i % H8) * 8;
    float f[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    if (j0 + c < end) hipep_load8(cache + (base + j0 + c) * H + d, f);
#pragma unroll
    for (int e = 0; e < 8; ++e) tile[c * LD + d + e] = f[e];
  }
}

template <typename T, int THREADS, int CPT, int HB>
HIPEP_DEVICE void hipep_gqa_prefill(const T* HIPEP_RESTRICT q, const T* HIPEP_RESTRICT cache_k,
                                    const T* HIPEP_RESTRICT cache_v, const int* seqlens, const int* total,
                                    const T* HIPEP_RESTRICT bias, const T* HIPEP_RESTRICT sink, T* HIPEP_RESTRICT out,
                                    const hipep_gqa_args a) {
  constexpr int BM = THREADS / 4, BN = 8 * CPT, DK = HB / 32, LD = HB + 4;
  __shared__ float4 q_s4[BM * LD / 4];
  __shared__ float4 kv_s4[BN * LD / 4];
  __shared__ float p_s[BM][BN + 1];
  float* q_s = reinterpret_cast<float*>(q_s4);
  float* kv_s = reinterpret_cast<float*>(kv_s4);
  const int H = a.head_size, S = a.seq, t = threadIdx.x;
  const int q0 = blockIdx.x * BM, head = blockIdx.y, b = blockIdx.z, kvh = head / a.group;
  const hipep_gqa_row g = hipep_gqa_geometry(a, seqlens, total, b);
  const int r0 = 2 * (t / 8), cl = t % 8;

  const int H8 = H / 8;
  for (int i = t; i < BM * H8; i += THREADS) {
    const int r = i / H8, d = (i % H8) * 8, s = q0 + r;
    float f[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    if (s < S) hipep_load8(q + b * a.q_sb + s * a.q_ss + (hipep_i64)head * a.q_sh + d, f);
#pragma unroll
    for (int e = 0; e < 8; ++e) q_s[r * LD + d + e] = f[e];
  }
  int lo[2], hi[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    hipep_gqa_bounds(a, g, q0 + r0 + i, lo[i], hi[i]);
    if (q0 + r0 + i >= S) hi[i] = lo[i] = 0;
  }
  // Bounds grow with the row, so the tile's key range runs from its first row's lo to its last row's hi.
  int tile_lo, tile_hi, unused;
  hipep_gqa_bounds(a, g, q0, tile_lo, unused);
  hipep_gqa_bounds(a, g, min(q0 + BM, S) - 1, unused, tile_hi);

  float m[2] = {-HIPEP_INF_F, -HIPEP_INF_F}, l[2] = {0.0f, 0.0f};
  float4 acc[2][DK];  // dims 4 * cl + 32 * k + [0, 4)
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int k = 0; k < DK; ++k) acc[i][k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  const hipep_i64 kv_base = ((hipep_i64)b * a.kv_heads + kvh) * a.cache_rows;

  for (int j0 = tile_lo; j0 < tile_hi; j0 += BN) {
    __syncthreads();  // the previous tile's V is no longer read
    hipep_gqa_load_tile<BN, LD>(cache_k, kv_base, j0, tile_hi, H, kv_s, t, THREADS);
    __syncthreads();
    float sc[2][CPT];
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int c = 0; c < CPT; ++c) sc[i][c] = 0.0f;
    for (int d4 = 0; d4 < H / 4; ++d4) {
      const float4 qa = q_s4[r0 * (LD / 4) + d4], qb = q_s4[(r0 + 1) * (LD / 4) + d4];
#pragma unroll
      for (int c = 0; c < CPT; ++c) {
        const float4 kv = kv_s4[(cl + 8 * c) * (LD / 4) + d4];
        sc[0][c] = fmaf(qa.w, kv.w, fmaf(qa.z, kv.z, fmaf(qa.y, kv.y, fmaf(qa.x, kv.x, sc[0][c]))));
        sc[1][c] = fmaf(qb.w, kv.w, fmaf(qb.z, kv.z, fmaf(qb.y, kv.y, fmaf(qb.x, kv.x, sc[1][c]))));
      }
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int s = q0 + r0 + i;
      float mt = -HIPEP_INF_F;
#pragma unroll
      for (int c = 0; c < CPT; ++c) {
        const int j = j0 + cl + 8 * c;
        sc[i][c] = (j >= lo[i] && j < hi[i]) ? hipep_gqa_score<T>(a, sc[i][c], bias, b, head, s, j) : -HIPEP_INF_F;
        mt = fmaxf(mt, sc[i][c]);
      }
      mt = fmaxf(mt, HIPEP_SHFL_XOR(mt, 1));
      mt = fmaxf(mt, HIPEP_SHFL_XOR(mt, 2));
      mt = fmaxf(mt, HIPEP_SHFL_XOR(mt, 4));
      const float m_new = fmaxf(m[i], mt);
      const bool dead = m_new == -HIPEP_INF_F;
      float sum = 0.0f;
#pragma unroll
      for (int c = 0; c < CPT; ++c) {
        const float p = dead ? 0.0f : expf(sc[i][c] - m_new);
        p_s[r0 + i][cl + 8 * c] = p;
        sum += p;
      }
      sum += HIPEP_SHFL_XOR(sum, 1);
      sum += HIPEP_SHFL_XOR(sum, 2);
      sum += HIPEP_SHFL_XOR(sum, 4);
      const float alpha = dead ? 1.0f : expf(m[i] - m_new);
      l[i] = l[i] * alpha + sum;
      m[i] = m_new;
#pragma unroll
      for (int k = 0; k < DK; ++k) {
        acc[i][k].x *= alpha;
        acc[i][k].y *= alpha;
        acc[i][k].z *= alpha;
        acc[i][k].w *= alpha;
      }
    }
    __syncthreads();  // scores done with K; P written
    hipep_gqa_load_tile<BN, LD>(cache_v, kv_base, j0, tile_hi, H, kv_s, t, THREADS);
    __syncthreads();
    const int n_keys = min(BN, tile_hi - j0);
    for (int c = 0; c < n_keys; ++c) {
      const float pa = p_s[r0][c], pb = p_s[r0 + 1][c];
#pragma unroll
      for (int k = 0; k < DK; ++k) {
        if (4 * cl + 32 * k < H) {
          const float4 vv = kv_s4[c * (LD / 4) + cl + 8 * k];
          acc[0][k].x = fmaf(pa, vv.x, acc[0][k].x);
          acc[0][k].y = fmaf(pa, vv.y, acc[0][k].y);
          acc[0][k].z = fmaf(pa, vv.z, acc[0][k].z);
          acc[0][k].w = fmaf(pa, vv.w, acc[0][k].w);
          acc[1][k].x = fmaf(pb, vv.x, acc[1][k].x);
          acc[1][k].y = fmaf(pb, vv.y, acc[1][k].y);
          acc[1][k].z = fmaf(pb, vv.z, acc[1][k].z);
          acc[1][k].w = fmaf(pb, vv.w, acc[1][k].w);
        }
      }
    }
  }
  const float sk = a.has_sink ? (sink != 0 ? hipep_to_float(sink[head]) : 0.0f) : 0.0f;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int s = q0 + r0 + i;
    if (s >= S) continue;
    T* o = out + (((hipep_i64)b * S + s) * a.heads + head) * H;
#pragma unroll
    for (int k = 0; k < DK; ++k) {
      const int d = 4 * cl + 32 * k;
      if (d < H) {  // H is a multiple of 8, so a slice is all in or all out
        o[d] = hipep_from_float<T>(hipep_gqa_finish(acc[i][k].x, m[i], l[i], a.has_sink, sk));
        o[d + 1] = hipep_from_float<T>(hipep_gqa_finish(acc[i][k].y, m[i], l[i], a.has_sink, sk));
        o[d + 2] = hipep_from_float<T>(hipep_gqa_finish(acc[i][k].z, m[i], l[i], a.has_sink, sk));
        o[d + 3] = hipep_from_float<T>(hipep_gqa_finish(acc[i][k].w, m[i], l[i], a.has_sink, sk));
      }
    }
  }
}

// ---- entry points ----------------------------------------------------------------------------------------

// The split-KV kernel for blocks of up to G query rows.
#define HIPEP_GQA_DECODE(NAME, T, G)                                                                             \
  HIPEP_KERNEL void __launch_bounds__(HIPEP_DEC_THREADS) hipep_gqa_decode_##NAME##_g##G(                         \
      const T* q, const T* cache_k, const T* cache_v, const int* seqlens, const int* total, const T* bias,       \
      const T* sink, T* out, float* part_acc, float* part_ml, unsigned int* counters, const hipep_gqa_args a) {   \
    hipep_grid_release();                                                                                        \
    hipep_gqa_decode<T, G>(q, cache_k, cache_v, seqlens, total, bias, sink, out, part_acc, part_ml, counters, a); \
  }

#define HIPEP_GQA(NAME, T)                                                                                       \
  HIPEP_KERNEL void hipep_gqa_prepare_##NAME(const T* q, const T* k, const T* v, const int* seqlens,             \
                                             const int* total, const hipep_i64* pos_ids, const T* cos_cache,    \
                                             const T* sin_cache, T* q_out, T* cache_k, T* cache_v,               \
                                             unsigned int* counters, const hipep_gqa_args a) {                  \
    hipep_gqa_prepare<T>(q, k, v, seqlens, total, pos_ids, cos_cache, sin_cache, q_out, cache_k, cache_v,       \
                         counters, a);                                                                           \
  }                                                                                                              \
  HIPEP_GQA_DECODE(NAME, T, 1)                                                                                   \
  HIPEP_GQA_DECODE(NAME, T, 2)                                                                                   \
  HIPEP_GQA_DECODE(NAME, T, 4)                                                                                   \
  HIPEP_GQA_DECODE(NAME, T, 8)                                                                                   \
  HIPEP_KERNEL void __launch_bounds__(128) hipep_gqa_prefill_##NAME##_h64(                                      \
      const T* q, const T* cache_k, const T* cache_v, const int* seqlens, const int* total, const T* bias,       \
      const T* sink, T* out, const hipep_gqa_args a) {                                                           \
    hipep_gqa_prefill<T, 128, 4, 64>(q, cache_k, cache_v, seqlens, total, bias, sink, out, a);                   \
  }                                                                                                              \
  HIPEP_KERNEL void __launch_bounds__(128) hipep_gqa_prefill_##NAME##_h128(                                     \
      const T* q, const T* cache_k, const T* cache_v, const int* seqlens, const int* total, const T* bias,       \
      const T* sink, T* out, const hipep_gqa_args a) {                                                           \
    hipep_gqa_prefill<T, 128, 4, 128>(q, cache_k, cache_v, seqlens, total, bias, sink, out, a);                  \
  }                                                                                                              \
  HIPEP_KERNEL void __launch_bounds__(64) hipep_gqa_prefill_##NAME##_h256(                                      \
      const T* q, const T* cache_k, const T* cache_v, const int* seqlens, const int* total, const T* bias,       \
      const T* sink, T* out, const hipep_gqa_args a) {                                                           \
    hipep_gqa_prefill<T, 64, 2, 256>(q, cache_k, cache_v, seqlens, total, bias, sink, out, a);                   \
  }

HIPEP_GQA(f32, float)
HIPEP_GQA(f16, hipep_half)
