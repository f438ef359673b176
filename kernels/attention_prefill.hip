// GroupQueryAttention's tiled kernel for several query tokens (kernels/attention.h has the whole picture).
#include "attention.h"

// ---- prefill: query tiles against KV tiles -------------------------------------------------------------
// grid (ceil(S / BM), heads, batch), THREADS threads; BM = THREADS / 4 query rows, BN = 8 * CPT keys
// per tile, head size at most HB. Thread t owns query rows 2 * (t / 8) and the next, score columns
// t % 8 + 8 * i and the head dims 4 * (t % 8) + 32 * k + [0, 4): a row's scores live in 8
// neighbouring lanes, reduced by shuffles. Q and each K (then V) tile are staged in shared memory as
// f32, rows padded by four words so that the 16-byte reads of 8 different rows (scores) or of 8
// neighbouring slices of one row (P @ V) hit distinct banks.

// Eight elements of a row (16 or 32 bytes) as f32.
HIPEP_DEVICE void hipep_load8(const float* p, float* f) {
  const float4 x = reinterpret_cast<const float4*>(p)[0], y = reinterpret_cast<const float4*>(p)[1];
  f[0] = x.x; f[1] = x.y; f[2] = x.z; f[3] = x.w; f[4] = y.x; f[5] = y.y; f[6] = y.z; f[7] = y.w;
}

// f16 and bf16: one 16-byte word.
template <typename T> HIPEP_DEVICE void hipep_load8(const T* p, float* f) {
  const uint4 u = *reinterpret_cast<const uint4*>(p);
  const T* h = reinterpret_cast<const T*>(&u);
#pragma unroll
  for (int e = 0; e < 8; ++e) f[e] = hipep_to_float(h[e]);
}

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

#define HIPEP_GQA_PREFILL(NAME, T)                                                                               \
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

HIPEP_GQA_PREFILL(f32, float)
HIPEP_GQA_PREFILL(f16, hipep_half)
HIPEP_GQA_PREFILL(bf16, hipep_bf16)
