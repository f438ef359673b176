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
//                            cache at each row's position;
//   hipep_gqa_decode_*       one query token (or a few): flash-decoding, the KV range split over
//                            blocks (grid.x), the query rows sharing a KV head -- its query heads,
//                            times the tokens -- in one block so K/V are read once per KV head;
//                            partial max/sum/acc per split to workspace, or the output directly
//                            when there is one split;
//   hipep_gqa_combine_*      merges the splits' partials (and the head sink) into the output;
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
                                    const hipep_gqa_args a) {
  const int S = a.seq, H = a.head_size, pairs = H / 2, slots = a.heads + 2 * a.kv_heads;
  const int half = a.do_rotary ? a.rotary_half : 0;
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
// its group's (token, head) pairs, row r = token * group + head in group; a block takes up to
// HIPEP_DEC_HEADS of them and the keys any of them sees, [lo of its first row, hi of its last),
// split into `splits` chunks. Per KV tile of DEC_TILE keys: each thread scores one key against the
// block's rows (K row read once, Q from shared memory; keys outside a row's bounds masked), one warp
// per row updates the running max/sum, then threads own 8-wide slices of the head (and every KL-th
// key of the tile) to accumulate P @ V. The slices' partial sums are added in a fixed order at the
// end, so results do not depend on scheduling. Partials and outputs are indexed by the flat
// (batch * S + token) * heads + head.

#define HIPEP_DEC_THREADS 128
#define HIPEP_DEC_TILE 128
#define HIPEP_DEC_HEADS 8
#define HIPEP_GQA_MAX_HEAD 256

template <typename T>
HIPEP_DEVICE void hipep_gqa_decode(const T* HIPEP_RESTRICT q, const T* HIPEP_RESTRICT cache_k,
                                   const T* HIPEP_RESTRICT cache_v, const int* seqlens, const int* total,
                                   const T* HIPEP_RESTRICT bias, const T* HIPEP_RESTRICT sink, T* HIPEP_RESTRICT out,
                                   float* HIPEP_RESTRICT part_acc, float* HIPEP_RESTRICT part_ml,
                                   const hipep_gqa_args a) {
  __shared__ float4 q_s4[HIPEP_DEC_HEADS][HIPEP_GQA_MAX_HEAD / 4];  // the block's queries, 4 dims a word
  float (*q_s)[HIPEP_GQA_MAX_HEAD] = reinterpret_cast<float (*)[HIPEP_GQA_MAX_HEAD]>(q_s4);
  __shared__ float sc[HIPEP_DEC_HEADS][HIPEP_DEC_TILE];
  __shared__ float o_s[HIPEP_DEC_HEADS][HIPEP_GQA_MAX_HEAD];
  __shared__ float m_s[HIPEP_DEC_HEADS], l_s[HIPEP_DEC_HEADS], al_s[HIPEP_DEC_HEADS];
  const int H = a.head_size, t = threadIdx.x;
  const int split = blockIdx.x, b = blockIdx.z;
  const int kvh = blockIdx.y / a.row_groups, rg = blockIdx.y % a.row_groups;
  const int first_row = rg * a.rows_per_block;
  const int gn = min(a.rows_per_block, a.group * a.seq - first_row);  // the block's rows
  // The block's rows: token, head, keys [lo, hi) (shared memory keeps registers for the tiles).
  __shared__ int row_s[HIPEP_DEC_HEADS], row_head[HIPEP_DEC_HEADS], row_lo[HIPEP_DEC_HEADS], row_hi[HIPEP_DEC_HEADS];
  if (t < HIPEP_DEC_HEADS) {
    const hipep_gqa_row g = hipep_gqa_geometry(a, seqlens, total, b);
    const int r = first_row + min(t, gn - 1);
    row_s[t] = r / a.group;
    row_head[t] = kvh * a.group + r % a.group;
    hipep_gqa_bounds(a, g, row_s[t], row_lo[t], row_hi[t]);
  }
  __syncthreads();
  int lo = 0x7fffffff, hi = 0;
  for (int h = 0; h < gn; ++h) {
    if (row_hi[h] > row_lo[h]) {
      lo = min(lo, row_lo[h]);
      hi = max(hi, row_hi[h]);
    }
  }
  if (hi == 0) lo = 0;
  const int span = max(hi - lo, 0);
  int chunk = (span + a.splits - 1) / a.splits;
  chunk = (chunk + HIPEP_DEC_TILE - 1) / HIPEP_DEC_TILE * HIPEP_DEC_TILE;
  const int k0 = lo + split * chunk, k1 = min(hi, k0 + chunk);
  if (k0 >= k1 && a.splits > 1) {  // a split past the row's keys (the grid is sized by the capacity)
    if (t < gn) {
      const hipep_i64 p = (((hipep_i64)b * a.seq + row_s[t]) * a.heads + row_head[t]) * a.splits + split;
      part_ml[2 * p] = -HIPEP_INF_F;
      part_ml[2 * p + 1] = 0.0f;
    }
    return;
  }

  for (int i = t; i < HIPEP_DEC_HEADS * H; i += blockDim.x) {
    const int h = i / H, d = i % H;
    q_s[h][d] = h < gn ? hipep_to_float(q[b * a.q_sb + (hipep_i64)row_s[h] * a.q_ss +
                                         (hipep_i64)row_head[h] * a.q_sh + d]) : 0.0f;
  }
  if (t < HIPEP_DEC_HEADS) {
    m_s[t] = -HIPEP_INF_F;
    l_s[t] = 0.0f;
    al_s[t] = 1.0f;
  }
  __syncthreads();

  const hipep_i64 kv_base = ((hipep_i64)b * a.kv_heads + kvh) * a.cache_rows;
  const int slices = H / 8, key_lanes = blockDim.x / slices;
  const int slice = t % slices, key_lane = t / slices;
  const bool pv_active = key_lane < key_lanes;
  float acc[HIPEP_DEC_HEADS][8];
#pragma unroll
  for (int h = 0; h < HIPEP_DEC_HEADS; ++h)
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[h][e] = 0.0f;
  const int lane = t % HIPEP_WARP_SIZE, warp = t / HIPEP_WARP_SIZE, warps = blockDim.x / HIPEP_WARP_SIZE;

  for (int j0 = k0; j0 < k1; j0 += HIPEP_DEC_TILE) {
    const int j = j0 + t;
    float dot[HIPEP_DEC_HEADS];
#pragma unroll
    for (int h = 0; h < HIPEP_DEC_HEADS; ++h) dot[h] = 0.0f;
    if (j < k1) {
      const T* kr = cache_k + (kv_base + j) * H;
      for (int d = 0; d < H; d += 8) {
        float kf[8];
        hipep_load8(kr + d, kf);
#pragma unroll
        for (int h = 0; h < HIPEP_DEC_HEADS; ++h) {
          if (h < gn) {
            const float4 x = q_s4[h][d / 4], y = q_s4[h][d / 4 + 1];
            dot[h] = fmaf(x.x, kf[0], fmaf(x.y, kf[1], fmaf(x.z, kf[2], fmaf(x.w, kf[3], dot[h]))));
            dot[h] = fmaf(y.x, kf[4], fmaf(y.y, kf[5], fmaf(y.z, kf[6], fmaf(y.w, kf[7], dot[h]))));
          }
        }
      }
    }
#pragma unroll
    for (int h = 0; h < HIPEP_DEC_HEADS; ++h)
      if (h < gn)
        sc[h][t] = (j < k1 && j >= row_lo[h] && j < row_hi[h])
                       ? hipep_gqa_score<T>(a, dot[h], bias, b, row_head[h], row_s[h], j) : -HIPEP_INF_F;
    __syncthreads();
    for (int h = warp; h < gn; h += warps) {
      float mt = -HIPEP_INF_F;
      for (int c = lane; c < HIPEP_DEC_TILE; c += HIPEP_WARP_SIZE) mt = fmaxf(mt, sc[h][c]);
      mt = hipep_warp_max(mt);
      const float m_old = m_s[h], m_new = fmaxf(m_old, mt);
      const bool dead = m_new == -HIPEP_INF_F;
      float sum = 0.0f;
      for (int c = lane; c < HIPEP_DEC_TILE; c += HIPEP_WARP_SIZE) {
        const float p = dead ? 0.0f : expf(sc[h][c] - m_new);
        sc[h][c] = p;
        sum += p;
      }
      sum = hipep_warp_sum(sum);
      if (lane == 0) {
        const float alpha = dead ? 1.0f : expf(m_old - m_new);
        al_s[h] = alpha;
        l_s[h] = l_s[h] * alpha + sum;
        m_s[h] = m_new;
      }
    }
    __syncthreads();
    if (pv_active) {
      const int n_keys = min(HIPEP_DEC_TILE, k1 - j0);
#pragma unroll
      for (int h = 0; h < HIPEP_DEC_HEADS; ++h)
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[h][e] *= al_s[h];
      for (int c = key_lane; c < n_keys; c += key_lanes) {
        float vf[8];
        hipep_load8(cache_v + (kv_base + j0 + c) * H + slice * 8, vf);
#pragma unroll
        for (int h = 0; h < HIPEP_DEC_HEADS; ++h) {
          if (h < gn) {
            const float p = sc[h][c];
#pragma unroll
            for (int e = 0; e < 8; ++e) acc[h][e] = fmaf(p, vf[e], acc[h][e]);
          }
        }
      }
    }
    __syncthreads();
  }

  // The key lanes' partial sums, added in key-lane order.
  for (int i = t; i < HIPEP_DEC_HEADS * H; i += blockDim.x) o_s[i / H][i % H] = 0.0f;
  __syncthreads();
  for (int r = 0; r < key_lanes; ++r) {
    if (key_lane == r) {
#pragma unroll
      for (int h = 0; h < HIPEP_DEC_HEADS; ++h)
        if (h < gn)
#pragma unroll
          for (int e = 0; e < 8; ++e) o_s[h][slice * 8 + e] += acc[h][e];
    }
    __syncthreads();
  }
  for (int i = t; i < gn * H; i += blockDim.x) {
    const int h = i / H, d = i % H;
    const hipep_i64 row = ((hipep_i64)b * a.seq + row_s[h]) * a.heads + row_head[h];  // output row
    if (a.splits == 1) {
      const float sk = a.has_sink ? (sink != 0 ? hipep_to_float(sink[row_head[h]]) : 0.0f) : 0.0f;
      out[row * H + d] = hipep_from_float<T>(hipep_gqa_finish(o_s[h][d], m_s[h], l_s[h], a.has_sink, sk));
    } else {
      const hipep_i64 p = row * a.splits + split;
      part_acc[p * H + d] = o_s[h][d];
      if (d == 0) {
        part_ml[2 * p] = m_s[h];
        part_ml[2 * p + 1] = l_s[h];
      }
    }
  }
}

// grid (heads, batch * S): the splits of one (batch, token, head) merged.
template <typename T>
HIPEP_DEVICE void hipep_gqa_combine(const float* HIPEP_RESTRICT part_acc, const float* HIPEP_RESTRICT part_ml,
                                    const T* HIPEP_RESTRICT sink, T* HIPEP_RESTRICT out, const hipep_gqa_args a) {
  const int head = blockIdx.x, b = blockIdx.y, H = a.head_size;  // b: batch * S + token
  const hipep_i64 p0 = ((hipep_i64)b * a.heads + head) * a.splits;
  float m = -HIPEP_INF_F;
  for (int i = 0; i < a.splits; ++i) m = fmaxf(m, part_ml[2 * (p0 + i)]);
  float l = 0.0f;
  for (int i = 0; i < a.splits; ++i) {
    const float mi = part_ml[2 * (p0 + i)];
    if (mi != -HIPEP_INF_F) l += part_ml[2 * (p0 + i) + 1] * expf(mi - m);
  }
  const float sk = a.has_sink ? (sink != 0 ? hipep_to_float(sink[head]) : 0.0f) : 0.0f;
  for (int d = threadIdx.x; d < H; d += blockDim.x) {
    float o = 0.0f;
    for (int i = 0; i < a.splits; ++i) {
      const float mi = part_ml[2 * (p0 + i)];
      if (mi != -HIPEP_INF_F) o += part_acc[(p0 + i) * H + d] * expf(mi - m);
    }
    out[((hipep_i64)b * a.heads + head) * H + d] = hipep_from_float<T>(hipep_gqa_finish(o, m, l, a.has_sink, sk));
  }
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

#define HIPEP_GQA(NAME, T)                                                                                       \
  HIPEP_KERNEL void hipep_gqa_prepare_##NAME(const T* q, const T* k, const T* v, const int* seqlens,             \
                                             const int* total, const hipep_i64* pos_ids, const T* cos_cache,    \
                                             const T* sin_cache, T* q_out, T* cache_k, T* cache_v,               \
                                             const hipep_gqa_args a) {                                          \
    hipep_gqa_prepare<T>(q, k, v, seqlens, total, pos_ids, cos_cache, sin_cache, q_out, cache_k, cache_v, a);   \
  }                                                                                                              \
  HIPEP_KERNEL void __launch_bounds__(HIPEP_DEC_THREADS) hipep_gqa_decode_##NAME(                               \
      const T* q, const T* cache_k, const T* cache_v, const int* seqlens, const int* total, const T* bias,       \
      const T* sink, T* out, float* part_acc, float* part_ml, const hipep_gqa_args a) {                          \
    hipep_gqa_decode<T>(q, cache_k, cache_v, seqlens, total, bias, sink, out, part_acc, part_ml, a);            \
  }                                                                                                              \
  HIPEP_KERNEL void hipep_gqa_combine_##NAME(const float* part_acc, const float* part_ml, const T* sink, T* out, \
                                             const hipep_gqa_args a) {                                          \
    hipep_gqa_combine<T>(part_acc, part_ml, sink, out, a);                                                       \
  }                                                                                                              \
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
