// GroupQueryAttention's split-KV decode for a few query tokens, and its one-token form with the
// rotary and cache append fused in: the device code both decode modules share (kernels/attention.h
// has the whole picture). Entry points: attention_decode.hip (the split-KV kernel) and
// attention_decode_fused.hip (the fused one), two modules so that they compile in parallel.
#ifndef HIPEP_ATTENTION_DECODE_H
#define HIPEP_ATTENTION_DECODE_H
#include "attention.h"

// ---- decode: a few query tokens, the KV range split over blocks ---------------------------------------
// grid (splits, kv_heads * row_groups, batch), hipep_dec_threads<G> threads. The query rows of a KV head are
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
// Blocks of one or two query rows (a small batch's decode: a block per query head) take twice the
// threads, so a pass covers twice the keys: a decode step of up to 256 fp16 keys is one round trip
// of K and V instead of two (blocks of 4 or 8 rows keep 128: their warps' partials fill shared memory).
#define HIPEP_DEC_THREADS_WIDE 256
template <int G> struct hipep_dec_threads {
  static constexpr int value = G <= 2 ? HIPEP_DEC_THREADS_WIDE : HIPEP_DEC_THREADS;
};
#define HIPEP_GQA_MAX_HEAD 256
#define HIPEP_GQA_MAX_SPLITS 64
// Keys up to this many passes of a block (a.key_tile each) take one block, which writes the output
// itself: merging splits costs the partials' write, a fence, the arrival count and the last block's
// reads of them, some three memory round trips against one a pass (a decode step's short contexts,
// say 150 keys in a cache of thousands, then skip the merge). Longer spans are split.
#define HIPEP_DEC_DIRECT_PASSES 4

// Keys per lane per pass: K and V of these are in flight together (registers: 2 * KPL * 8 elements).
template <typename T, int G> struct hipep_dec_keys { static constexpr int value = (sizeof(T) == 2 && G <= 4) ? 8 : 4; };

// Eight elements of a row as loaded (16-byte words), converted to f32 when used: one word of a
// 16-bit type (f16, bf16; the templates), two of f32 (the overloads).
template <typename T> struct hipep_raw8 { uint4 w; };
template <> struct hipep_raw8<float> { float4 x, y; };

template <typename T> HIPEP_DEVICE void hipep_raw_load(hipep_raw8<T>& r, const T* p) {
  r.w = *reinterpret_cast<const uint4*>(p);
}
HIPEP_DEVICE void hipep_raw_load(hipep_raw8<float>& r, const float* p) {
  r.x = reinterpret_cast<const float4*>(p)[0];
  r.y = reinterpret_cast<const float4*>(p)[1];
}
// The same through ld.global.cs (hipep_ld_stream): a load that stays ahead of hipep_grid_wait where the
// code puts it (the fused kernel's first pass of past keys, requested while the kernel ahead finishes).
template <typename T> HIPEP_DEVICE void hipep_raw_load_early(hipep_raw8<T>& r, const T* p) {
  r.w = hipep_ld_stream(reinterpret_cast<const uint4*>(p));
}
HIPEP_DEVICE void hipep_raw_load_early(hipep_raw8<float>& r, const float* p) {
  r.x = hipep_ld_stream(reinterpret_cast<const float4*>(p));
  r.y = hipep_ld_stream(reinterpret_cast<const float4*>(p) + 1);
}
template <typename T> HIPEP_DEVICE void hipep_raw_zero(hipep_raw8<T>& r) { r.w = make_uint4(0u, 0u, 0u, 0u); }
HIPEP_DEVICE void hipep_raw_zero(hipep_raw8<float>& r) { r.x = r.y = make_float4(0.0f, 0.0f, 0.0f, 0.0f); }
template <typename T> HIPEP_DEVICE void hipep_raw_float(const hipep_raw8<T>& r, float* f) {
  const T* h = reinterpret_cast<const T*>(&r.w);
#pragma unroll
  for (int e = 0; e < 8; ++e) f[e] = hipep_to_float(h[e]);
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

// The block's query rows into shared memory as f32 (zeros past H: the idle lanes' dims, and for
// rows past gn): the query the split-KV kernel reads (the input, or the prepare kernel's rotated
// copy in workspace).
template <typename T, int G> struct hipep_dec_stage_q {
  const T* q;
  HIPEP_DEVICE void operator()(float (*q_s)[HIPEP_GQA_MAX_HEAD], const hipep_gqa_args& a, int b, int gn,
                               const int* row_s, const int* row_head) const {
    const int H = a.head_size, P = hipep_dec_lanes(H);
    for (int i = threadIdx.x; i < G * 8 * P; i += blockDim.x) {
      const int h = i / (8 * P), d = i % (8 * P);
      q_s[h][d] = h < gn && d < H ? hipep_to_float(q[b * a.q_sb + (hipep_i64)row_s[h] * a.q_ss +
                                                     (hipep_i64)row_head[h] * a.q_sh + d]) : 0.0f;
    }
  }
};

// One split's keys [k0, k1) against the block's rows: per-warp online softmax, then the warps merged
// in order into the output (`direct`: the block has all the rows' keys) or the split's partials.
// `stage` writes the queries into q_s once the first pass's keys are requested. Key row `new_row`
// (>= 0 in the fused kernel: the step's own token) is read from new_k_s / new_v_s, the block's copy
// in shared memory that `stage` writes, not from the cache, whose row is being written meanwhile.
template <typename T, int G, typename Stage>
HIPEP_DEVICE void hipep_gqa_decode_split(const Stage& stage, const T* HIPEP_RESTRICT cache_k,
                                         const T* HIPEP_RESTRICT cache_v, const T* HIPEP_RESTRICT bias,
                                         const T* HIPEP_RESTRICT sink, T* HIPEP_RESTRICT out,
                                         float* part_acc, float* part_ml, const hipep_gqa_args& a, int k0, int k1,
                                         int gn, const int* row_s, const int* row_head, const int* row_lo,
                                         const int* row_hi,
                                         float (*o_s)[G][HIPEP_GQA_MAX_HEAD], float4 (*q_s4)[HIPEP_GQA_MAX_HEAD / 4],
                                         bool direct, int new_row, const T* new_k_s, const T* new_v_s,
                                         hipep_raw8<T> (&kr)[hipep_dec_keys<T, G>::value],
                                         hipep_raw8<T> (&vr)[hipep_dec_keys<T, G>::value], bool requested) {
  constexpr int W = HIPEP_WARP_SIZE, NW = hipep_dec_threads<G>::value / W, KPL = hipep_dec_keys<T, G>::value;
  __shared__ float m_w[NW][G], l_w[NW][G];
  float (*q_s)[HIPEP_GQA_MAX_HEAD] = reinterpret_cast<float (*)[HIPEP_GQA_MAX_HEAD]>(q_s4);
  const int H = a.head_size, t = threadIdx.x, lane = t % W, warp = t / W;
  const int split = blockIdx.x, b = blockIdx.z, kvh = blockIdx.y / a.row_groups;
  const int P = hipep_dec_lanes(H), KW = W / P;  // lanes per key, keys per load instruction
  const int slice = lane % P, kl = lane / P;       // this lane's 8 dims and key within an instruction
  const bool lane_on = slice * 8 < H;
  const int WT = KPL * KW;  // keys per warp per pass; a pass of the block is a.key_tile = NW * WT keys
  const hipep_i64 kv_base = ((hipep_i64)b * a.kv_heads + kvh) * a.cache_rows;
  int j0 = k0 + warp * WT;  // this warp's first key of the pass
  // The first pass's K and V are requested before the queries are staged (the new row's after);
  // `requested`: already, from the first key on (hipep_gqa_request_first_pass), so only the rows
  // outside [k0, k1) and the token's own are zeroed, as if never loaded.
#pragma unroll
  for (int i = 0; i < KPL; ++i) {
    const int j = j0 + i * KW + kl;
    if (lane_on && j < k1 && j != new_row) {
      if (!requested) {
        hipep_raw_load(kr[i], cache_k + (kv_base + j) * H + slice * 8);
        hipep_raw_load(vr[i], cache_v + (kv_base + j) * H + slice * 8);
      }
    } else {
      hipep_raw_zero(kr[i]);
      hipep_raw_zero(vr[i]);
    }
  }
  stage(q_s, a, b, gn, row_s, row_head);
  __syncthreads();
  if (new_row >= 0) {
#pragma unroll
    for (int i = 0; i < KPL; ++i) {
      if (lane_on && j0 + i * KW + kl == new_row && new_row < k1) {
        hipep_raw_load(kr[i], new_k_s + slice * 8);
        hipep_raw_load(vr[i], new_v_s + slice * 8);
      }
    }
  }

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
        const bool own = j == new_row;
        hipep_raw_load(kr[i], (own ? new_k_s : cache_k + (kv_base + j) * H) + slice * 8);
        hipep_raw_load(vr[i], (own ? new_v_s : cache_v + (kv_base + j) * H) + slice * 8);
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
    if (direct) {
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
  constexpr int W = HIPEP_WARP_SIZE, NW = hipep_dec_threads<G>::value / W;
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

// The split-KV kernel's body: `stage` puts the queries into shared memory (see
// hipep_gqa_decode_split); `fused`: the step's new key and value are the block's own (new_kv_s,
// written by `stage`) at cache row seed (one token, hipep_gqa_decode_fused). The arrival counters
// are zero when the kernel starts and left zero when it ends: the last split block to arrive resets
// its counter after merging.
template <typename T, int G, typename Stage>
HIPEP_DEVICE void hipep_gqa_decode_body(const Stage& stage, const T* HIPEP_RESTRICT cache_k,
                                        const T* HIPEP_RESTRICT cache_v, const int* seqlens, const int* total,
                                        const T* HIPEP_RESTRICT bias, const T* HIPEP_RESTRICT sink,
                                        T* HIPEP_RESTRICT out, float* part_acc, float* part_ml,
                                        unsigned int* counters, const hipep_gqa_args& a, bool fused,
                                        hipep_gqa_row* g_s, const T* new_k_s, const T* new_v_s,
                                        hipep_raw8<T> (&kr)[hipep_dec_keys<T, G>::value],
                                        hipep_raw8<T> (&vr)[hipep_dec_keys<T, G>::value], bool requested) {
  // part_acc / part_ml are written and, by the last block, read: no __restrict__ (no read-only loads)
  __shared__ float4 q_s4[G][HIPEP_GQA_MAX_HEAD / 4];  // the block's queries, 4 dims a word
  // warps' P @ V; then the merge's parts
  __shared__ float4 o_s4[hipep_dec_threads<G>::value / HIPEP_WARP_SIZE * G * HIPEP_GQA_MAX_HEAD / 4];
  float (*o_s)[G][HIPEP_GQA_MAX_HEAD] = reinterpret_cast<float (*)[G][HIPEP_GQA_MAX_HEAD]>(o_s4);
  __shared__ int row_s[G], row_head[G], row_lo[G], row_hi[G];
  const int t = threadIdx.x, split = blockIdx.x, b = blockIdx.z;
  const int kvh = blockIdx.y / a.row_groups, rg = blockIdx.y % a.row_groups;
  const int first_row = rg * a.rows_per_block;
  const int gn = min(a.rows_per_block, a.group * a.seq - first_row);  // the block's rows (<= G)
  if (t < G) {
    const hipep_gqa_row g = hipep_gqa_geometry(a, seqlens, total, b);
    if (t == 0) *g_s = g;
    const int r = first_row + min(t, gn - 1);
    row_s[t] = r / a.group;
    row_head[t] = kvh * a.group + r % a.group;
    hipep_gqa_bounds(a, g, row_s[t], row_lo[t], row_hi[t]);
    if (t >= gn) row_hi[t] = row_lo[t];  // a padding row sees no key
  }
  __syncthreads();
  // The step's own key row (the fused kernel's one token); -1: every key comes from the cache.
  const int new_row = fused && g_s->seed >= 0 && g_s->seed < a.cache_rows ? g_s->seed : -1;
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
  // Uniform over the grid: every block of a (batch, KV head, row group) takes the same branch.
  if (a.splits == 1 || (span + a.key_tile - 1) / a.key_tile <= HIPEP_DEC_DIRECT_PASSES) {
    if (split == 0)  // (which stages, and in the fused kernel writes the cache row: split 0 always runs)
      hipep_gqa_decode_split<T, G>(stage, cache_k, cache_v, bias, sink, out, part_acc, part_ml, a, lo, hi, gn, row_s,
                                   row_head, row_lo, row_hi, o_s, q_s4, true, new_row, new_k_s, new_v_s, kr, vr,
                                   requested && lo == 0);
    return;  // the other split blocks have nothing to do, and nothing is merged
  }
  int chunk = (span + a.splits - 1) / a.splits;
  chunk = (chunk + a.key_tile - 1) / a.key_tile * a.key_tile;
  const int k0 = lo + split * chunk, k1 = min(hi, k0 + chunk);
  if (k0 >= k1) {  // a split past the rows' keys (the grid is sized by the capacity; never split 0)
    if (t < gn) {
      const hipep_i64 p = (((hipep_i64)b * a.seq + row_s[t]) * a.heads + row_head[t]) * a.splits + split;
      part_ml[2 * p] = -HIPEP_INF_F;
      part_ml[2 * p + 1] = 0.0f;
    }
  } else {
    hipep_gqa_decode_split<T, G>(stage, cache_k, cache_v, bias, sink, out, part_acc, part_ml, a, k0, k1, gn, row_s,
                                 row_head, row_lo, row_hi, o_s, q_s4, false, new_row, new_k_s, new_v_s, kr, vr,
                                 requested && k0 == 0);
  }
  // Count this block's split in; the last of the (batch, KV head, row group) to arrive merges them all.
  __shared__ unsigned int last_s;
  unsigned int* counter = &counters[blockIdx.z * gridDim.y + blockIdx.y];
  __threadfence();  // the partials written above, visible device-wide before they are counted
  __syncthreads();
  if (t == 0) {
    const unsigned int before = atomicAdd(counter, 1u);
    last_s = before == (unsigned int)a.splits - 1u;
  }
  __syncthreads();
  if (!last_s) return;
  __threadfence();  // every other split's partials seen
  if (t == 0) *counter = 0u;  // every split has arrived: zero again for the next launch
  hipep_gqa_merge_splits<T, G>(part_acc, part_ml, sink, out, a, gn, row_s, row_head, o_s4);
}

template <typename T, int G>
HIPEP_DEVICE void hipep_gqa_decode(const T* HIPEP_RESTRICT q, const T* HIPEP_RESTRICT cache_k,
                                   const T* HIPEP_RESTRICT cache_v, const int* seqlens, const int* total,
                                   const T* HIPEP_RESTRICT bias, const T* HIPEP_RESTRICT sink, T* HIPEP_RESTRICT out,
                                   float* part_acc, float* part_ml, unsigned int* counters, const hipep_gqa_args a) {
  __shared__ hipep_gqa_row g_s;
  hipep_raw8<T> kr[hipep_dec_keys<T, G>::value], vr[hipep_dec_keys<T, G>::value];
  hipep_gqa_decode_body<T, G>(hipep_dec_stage_q<T, G>{q}, cache_k, cache_v, seqlens, total, bias, sink, out, part_acc,
                              part_ml, counters, a, false, &g_s, (const T*)nullptr, (const T*)nullptr, kr, vr, false);
}

// ---- one token, its rotary and cache append fused in ----------------------------------------------------
// hipep_gqa_decode_fused: what hipep_gqa_prepare and hipep_gqa_decode do for one new token (S == 1)
// on a cache attention reads in place (no past rows to copy, no sliding window), in one launch: each
// block rotates its own query rows and the token's key (the prepare kernel's arithmetic, rounded to
// the element type as it stores them) into shared memory, reads that key and value there instead of
// from the cache row, and the first block of each KV head (split 0, row group 0) also writes them
// into the cache. Other blocks read only older rows of the cache, so nothing waits for that write.
// Faults are reported as the prepare kernel reports them, by the first KV head's writing block.

// The first pass of a split that starts at key 0 (hipep_gqa_decode_split's first loads, the same
// lanes and rows), requested through ld.global.cs: rows past the cache's are zeros.
template <typename T, int G>
HIPEP_DEVICE void hipep_gqa_request_first_pass(const T* cache_k, const T* cache_v, const hipep_gqa_args& a,
                                               hipep_raw8<T> (&kr)[hipep_dec_keys<T, G>::value],
                                               hipep_raw8<T> (&vr)[hipep_dec_keys<T, G>::value]) {
  constexpr int W = HIPEP_WARP_SIZE, KPL = hipep_dec_keys<T, G>::value;
  const int H = a.head_size, lane = threadIdx.x % W, warp = threadIdx.x / W;
  const int P = hipep_dec_lanes(H), KW = W / P, slice = lane % P, kl = lane / P;
  const int kvh = blockIdx.y / a.row_groups;
  const hipep_i64 kv_base = ((hipep_i64)blockIdx.z * a.kv_heads + kvh) * a.cache_rows;
  const int j0 = warp * KPL * KW;
#pragma unroll
  for (int i = 0; i < KPL; ++i) {
    const int j = j0 + i * KW + kl;
    if (slice * 8 < H && j < a.cache_rows) {
      hipep_raw_load_early(kr[i], cache_k + (kv_base + j) * H + slice * 8);
      hipep_raw_load_early(vr[i], cache_v + (kv_base + j) * H + slice * 8);
    } else {
      hipep_raw_zero(kr[i]);
      hipep_raw_zero(vr[i]);
    }
  }
}

template <typename T, int G> struct hipep_dec_stage_fused {
  const T *q, *k, *v;
  const hipep_i64* pos_ids;
  const T *cos_cache, *sin_cache;
  T *cache_k, *cache_v;
  hipep_fault_site length_fault, position_fault;
  const hipep_gqa_row* g_s;
  T *new_k_s, *new_v_s;

  HIPEP_DEVICE void operator()(float (*q_s)[HIPEP_GQA_MAX_HEAD], const hipep_gqa_args& a, int b, int gn,
                               const int* row_s, const int* row_head) const {
    const int H = a.head_size, pairs = H / 2, P = hipep_dec_lanes(H), t = threadIdx.x;
    const int kvh = blockIdx.y / a.row_groups;
    const bool writer = blockIdx.x == 0 && blockIdx.y % a.row_groups == 0;
    const hipep_gqa_row g = *g_s;
    const int half = a.do_rotary ? a.rotary_half : 0;
    const bool reporter = writer && kvh == 0 && t == 0;  // one per batch row
    if (reporter) hipep_gqa_report_length(a, g, length_fault);
    const hipep_i64 pos = a.do_rotary ? hipep_gqa_position(a, g, pos_ids, b, 0, reporter, position_fault) : 0;
    const int row = g.seed;  // the token's cache row
    const bool store = writer && row >= 0 && row < a.cache_rows;
    const hipep_i64 cache_off = (((hipep_i64)b * a.kv_heads + kvh) * a.cache_rows + row) * H;
    // Items: G query rows' pairs, then the key's, then the value's.
    for (int i = t; i < (G + 2) * pairs; i += blockDim.x) {
      const int r = i / pairs, j = i % pairs;
      int e1, e2;
      hipep_gqa_pair(a, half, j, e1, e2);
      if (r < G) {
        if (r >= gn) {
          q_s[r][e1] = q_s[r][e2] = 0.0f;
          continue;
        }
        const T* src = q + b * a.qin_sb + (hipep_i64)row_head[r] * H;
        float y1 = hipep_to_float(src[e1]), y2 = hipep_to_float(src[e2]);
        if (j < half) {
          hipep_gqa_rotate<T>(a, cos_cache, sin_cache, pos, j, y1, y2);
          y1 = hipep_to_float(hipep_from_float<T>(y1));  // as the prepare kernel stores it
          y2 = hipep_to_float(hipep_from_float<T>(y2));
        }
        q_s[r][e1] = y1;
        q_s[r][e2] = y2;
        continue;
      }
      const bool is_k = r == G;
      const T* src = (is_k ? k : v) + b * a.kin_sb + (hipep_i64)kvh * H;
      T o1 = src[e1], o2 = src[e2];
      if (is_k && j < half) {
        float y1 = hipep_to_float(o1), y2 = hipep_to_float(o2);
        hipep_gqa_rotate<T>(a, cos_cache, sin_cache, pos, j, y1, y2);
        o1 = hipep_from_float<T>(y1);
        o2 = hipep_from_float<T>(y2);
      }
      T* dst_s = is_k ? new_k_s : new_v_s;
      dst_s[e1] = o1;
      dst_s[e2] = o2;
      if (store) {
        T* dst = (is_k ? cache_k : cache_v) + cache_off;
        dst[e1] = o1;
        dst[e2] = o2;
      }
    }
    for (int i = t; i < G * (8 * P - H); i += blockDim.x)  // zeros past H: the idle lanes' dims
      q_s[i / (8 * P - H)][H + i % (8 * P - H)] = 0.0f;
  }
};

template <typename T, int G>
HIPEP_DEVICE void hipep_gqa_decode_fused(const T* q, const T* k, const T* v, const int* seqlens, const int* total,
                                         const hipep_i64* pos_ids, const T* cos_cache, const T* sin_cache, T* cache_k,
                                         T* cache_v, const T* bias, const T* sink, T* HIPEP_RESTRICT out,
                                         float* part_acc, float* part_ml, unsigned int* counters,
                                         const hipep_gqa_args a, const hipep_fault_site length_fault,
                                         const hipep_fault_site position_fault) {
  // The cache is written by one block and read by the others (older rows only); the inputs may be
  // the kernel ahead's outputs, read after hipep_grid_wait: no __restrict__, so that no load takes
  // the read-only path, which ptxas may move ahead of the wait (hipep_device.h).
  __shared__ hipep_gqa_row g_s;
  __shared__ uint4 new_kv_s[2][HIPEP_GQA_MAX_HEAD * sizeof(T) / 16];  // the token's key and value
  T* new_k_s = reinterpret_cast<T*>(new_kv_s[0]);
  T* new_v_s = reinterpret_cast<T*>(new_kv_s[1]);
  const hipep_dec_stage_fused<T, G> stage{q, k, v, pos_ids, cos_cache, sin_cache, cache_k, cache_v,
                                          length_fault, position_fault, &g_s, new_k_s, new_v_s};
  // Launched to overlap the kernel ahead (KernelOp.overlaps_previous), the first split's blocks ask
  // for their first pass of cache rows, from row 0 on, before waiting for it: rows older than the
  // token's are written by earlier runs only (this launch writes the token's row, which it reads
  // from shared memory instead). Everything else comes after the wait.
  hipep_raw8<T> kr[hipep_dec_keys<T, G>::value], vr[hipep_dec_keys<T, G>::value];
  const bool requested = blockIdx.x == 0;
  if (requested) hipep_gqa_request_first_pass<T, G>(cache_k, cache_v, a, kr, vr);
  hipep_grid_wait();
  hipep_gqa_decode_body<T, G>(stage, cache_k, cache_v, seqlens, total, bias, sink, out, part_acc, part_ml, counters, a,
                              true, &g_s, new_k_s, new_v_s, kr, vr, requested);
}

#endif  // HIPEP_ATTENTION_DECODE_H
