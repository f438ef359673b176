// GroupQueryAttention's prefill on tensor cores: fp16 and bf16, head sizes that are a multiple of 16 up
// to 128 (kernels/attention.h has the whole picture; attention_prefill.hip is the form for every other
// case, in f32 arithmetic on the CUDA cores).
//
// Flash attention with mma.sync m16n8k16 (hipep_device.h; NVIDIA compute capability 8.0 and newer: the
// binding selects it only where Target.tensor_cores). grid (ceil(S / BM), heads, batch), 4 warps: warp w
// takes query rows q0 + 16 w .. + 15, the A operand of every product. Per KV tile of BN keys:
//   * K staged as it lies ([key][dim], rows padded by 8 elements so that the quads' 4-byte reads of 8
//     keys hit distinct banks) and V transposed ([dim][key], padded alike): an mma's B operand is two
//     consecutive elements of one staged row, for both products;
//   * S = Q K^T: the warp's Q fragments stay in registers for the whole kernel (loaded once);
//   * the scores (scale, softcap, attention_bias: hipep_gqa_score, the reference's order) are masked
//     to each row's [lo, hi) (hipep_gqa_bounds: causal, padding, local window), and an online softmax
//     runs per row: a row's values are spread over the 4 lanes of a quad, reduced by two shuffles;
//   * P, rounded to the element type, is the A operand of O += P V as the accumulators of S lie (the
//     D fragments of key blocks 2j and 2j + 1 are the A fragment of step j), and the row sums add the
//     rounded values, so the weights O is normalized by are those it summed.
// Products are summed in f32 by the tensor cores and the softmax runs in f32 (attention_prefill.hip
// keeps P in f32: the two differ by P's rounding, within the element type's precision). KV tiles
// past the block's last row's keys are skipped (causal), as in attention_prefill.hip.
#include "attention.h"

#define HIPEP_PTC_WARPS 4
#define HIPEP_PTC_THREADS (32 * HIPEP_PTC_WARPS)
#define HIPEP_PTC_BM (16 * HIPEP_PTC_WARPS)  // query rows a block (hipep/runtime/gpu_attention.py PREFILL_TC_ROWS)
#define HIPEP_PTC_BN 64                      // keys a tile
#define HIPEP_PTC_PAD 8                      // elements of padding a staged row

// Two floats rounded to T as one register (the lower k first), and the rounded values as floats.
template <typename T> HIPEP_DEVICE unsigned int hipep_ptc_pack(float lo, float hi, float& lo_r, float& hi_r) {
  alignas(4) const T h[2] = {hipep_from_float<T>(lo), hipep_from_float<T>(hi)};
  lo_r = hipep_to_float(h[0]);
  hi_r = hipep_to_float(h[1]);
  return *reinterpret_cast<const unsigned int*>(h);
}

// Two consecutive elements (4-byte aligned) as one register.
template <typename T> HIPEP_DEVICE unsigned int hipep_ptc_word(const T* p) {
  return *reinterpret_cast<const unsigned int*>(p);
}

template <typename T, int HB>
HIPEP_DEVICE void hipep_gqa_prefill_tc(const T* HIPEP_RESTRICT q, const T* HIPEP_RESTRICT cache_k,
                                       const T* HIPEP_RESTRICT cache_v, const int* seqlens, const int* total,
                                       const T* HIPEP_RESTRICT bias, const T* HIPEP_RESTRICT sink,
                                       T* HIPEP_RESTRICT out, const hipep_gqa_args a) {
  constexpr int BM = HIPEP_PTC_BM, BN = HIPEP_PTC_BN, NT = HIPEP_PTC_THREADS;
  constexpr int LDK = HB + HIPEP_PTC_PAD, LDV = BN + HIPEP_PTC_PAD;
  constexpr int KS = HB / 16, DB = HB / 8, NB = BN / 8;  // k-steps of Q K^T, output dim blocks, key blocks
  constexpr int WPT = BN * (HB / 8) / NT;                  // 16-byte words of K (and of V) a thread stages a tile
  __shared__ uint4 k_s4[BN * LDK * sizeof(T) / 16];
  __shared__ uint4 vt_s4[HB * LDV * sizeof(T) / 16];
  T* k_s = reinterpret_cast<T*>(k_s4);
  T* vt_s = reinterpret_cast<T*>(vt_s4);
  const int H = a.head_size, S = a.seq, t = threadIdx.x, lane = t % 32, warp = t / 32;
  const int g = lane / 4, tq = lane % 4;  // the quad (a row pair g, g + 8) and the thread in it
  const int q0 = blockIdx.x * BM, head = blockIdx.y, b = blockIdx.z, kvh = head / a.group;
  const int ks_n = H / 16, db_n = H / 8;
  const hipep_gqa_row geo = hipep_gqa_geometry(a, seqlens, total, b);

  int rows[2] = {q0 + 16 * warp + g, q0 + 16 * warp + g + 8};
  int lo[2], hi[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    hipep_gqa_bounds(a, geo, rows[i], lo[i], hi[i]);
    if (rows[i] >= S) lo[i] = hi[i] = 0;
  }
  // The warp's Q as mma A fragments: a0 row g, dims 16 kk + 2 tq (+1); a1 row g + 8; a2, a3 the same 8 dims on.
  unsigned int qa[KS][4];
  const T* q_row[2];
#pragma unroll
  for (int i = 0; i < 2; ++i)
    q_row[i] = q + b * a.q_sb + (hipep_i64)min(rows[i], S - 1) * a.q_ss + (hipep_i64)head * a.q_sh;
#pragma unroll
  for (int kk = 0; kk < KS; ++kk) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int i = r % 2, d = 16 * kk + 8 * (r / 2) + 2 * tq;
      qa[kk][r] = (kk < ks_n && rows[i] < S) ? hipep_ptc_word(q_row[i] + d) : 0u;
    }
  }
  // Bounds grow with the row, so the block's keys run from its first row's lo to its last row's hi.
  int tile_lo, tile_hi, unused;
  hipep_gqa_bounds(a, geo, q0, tile_lo, unused);
  hipep_gqa_bounds(a, geo, min(q0 + BM, S) - 1, unused, tile_hi);

  float m[2] = {-HIPEP_INF_F, -HIPEP_INF_F}, l[2] = {0.0f, 0.0f};
  float o[DB][4];
#pragma unroll
  for (int db = 0; db < DB; ++db)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[db][e] = 0.0f;
  const hipep_i64 kv_base = ((hipep_i64)b * a.kv_heads + kvh) * a.cache_rows;

  for (int j0 = tile_lo; j0 < tile_hi; j0 += BN) {
    // K as it lies, V transposed (neighbouring threads take neighbouring keys of one 8-dim slice, so that
    // their 2-byte stores fall into distinct banks), 16-byte words, zeros past the block's keys: every
    // word of the tile is requested before the first is stored (one memory round trip a tile, not one a
    // word), and stored once the previous tile is no longer read.
    uint4 kw[WPT], vw[WPT];
#pragma unroll
    for (int r = 0; r < WPT; ++r) {
      const int i = t + r * NT;
      const int kc = i / (HB / 8), kd = (i % (HB / 8)) * 8, vc = i % BN, vd = (i / BN) * 8;
      kw[r] = vw[r] = make_uint4(0u, 0u, 0u, 0u);
      if (kd < H && j0 + kc < tile_hi)
        kw[r] = *reinterpret_cast<const uint4*>(cache_k + (kv_base + j0 + kc) * H + kd);
      if (vd < H && j0 + vc < tile_hi)
        vw[r] = *reinterpret_cast<const uint4*>(cache_v + (kv_base + j0 + vc) * H + vd);
    }
    __syncthreads();  // the previous tile is no longer read
#pragma unroll
    for (int r = 0; r < WPT; ++r) {
      const int i = t + r * NT;
      const int kc = i / (HB / 8), kd = (i % (HB / 8)) * 8, vc = i % BN, vd = (i / BN) * 8;
      *reinterpret_cast<uint4*>(k_s + kc * LDK + kd) = kw[r];
      const T* h = reinterpret_cast<const T*>(&vw[r]);
#pragma unroll
      for (int e = 0; e < 8; ++e) vt_s[(vd + e) * LDV + vc] = h[e];
    }
    __syncthreads();

    // S = Q K^T: s[nb] holds rows g (0, 1) and g + 8 (2, 3) at keys j0 + 8 nb + 2 tq (+1).
    float s[NB][4];
#pragma unroll
    for (int nb = 0; nb < NB; ++nb) {
#pragma unroll
      for (int e = 0; e < 4; ++e) s[nb][e] = 0.0f;
      const T* kr = k_s + (8 * nb + g) * LDK + 2 * tq;
#pragma unroll
      for (int kk = 0; kk < KS; ++kk)
        if (kk < ks_n)
          hipep_mma_of<T>::m16n8k16(s[nb], qa[kk], hipep_ptc_word(kr + 16 * kk), hipep_ptc_word(kr + 16 * kk + 8));
    }
    float mt[2] = {-HIPEP_INF_F, -HIPEP_INF_F};
#pragma unroll
    for (int nb = 0; nb < NB; ++nb)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = e / 2, j = j0 + 8 * nb + 2 * tq + (e % 2);
        const float x = (j >= lo[i] && j < hi[i]) ? hipep_gqa_score<T>(a, s[nb][e], bias, b, head, rows[i], j)
                                                  : -HIPEP_INF_F;
        s[nb][e] = x;
        mt[i] = fmaxf(mt[i], x);
      }
    float alpha[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      mt[i] = fmaxf(mt[i], HIPEP_SHFL_XOR(mt[i], 1));
      mt[i] = fmaxf(mt[i], HIPEP_SHFL_XOR(mt[i], 2));
      const float m_new = fmaxf(m[i], mt[i]);
      alpha[i] = m_new == -HIPEP_INF_F ? 1.0f : expf(m[i] - m_new);
      m[i] = m_new;
    }
    // P rounded to T as the A fragments of O += P V (key step kj: key blocks 2 kj and 2 kj + 1).
    unsigned int pa[BN / 16][4];
    float rs[2] = {0.0f, 0.0f};
#pragma unroll
    for (int nb = 0; nb < NB; ++nb) {
      float p[4], r[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) p[e] = m[e / 2] == -HIPEP_INF_F ? 0.0f : expf(s[nb][e] - m[e / 2]);
      pa[nb / 2][2 * (nb % 2)] = hipep_ptc_pack<T>(p[0], p[1], r[0], r[1]);
      pa[nb / 2][2 * (nb % 2) + 1] = hipep_ptc_pack<T>(p[2], p[3], r[2], r[3]);
      rs[0] += r[0] + r[1];
      rs[1] += r[2] + r[3];
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      rs[i] += HIPEP_SHFL_XOR(rs[i], 1);
      rs[i] += HIPEP_SHFL_XOR(rs[i], 2);
      l[i] = l[i] * alpha[i] + rs[i];
    }
#pragma unroll
    for (int db = 0; db < DB; ++db)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[db][e] *= alpha[e / 2];
#pragma unroll
    for (int db = 0; db < DB; ++db) {
      if (db >= db_n) continue;
      const T* vr = vt_s + (8 * db + g) * LDV + 2 * tq;
#pragma unroll
      for (int kj = 0; kj < BN / 16; ++kj)
        hipep_mma_of<T>::m16n8k16(o[db], pa[kj], hipep_ptc_word(vr + 16 * kj), hipep_ptc_word(vr + 16 * kj + 8));
    }
  }
  const float sk = a.has_sink ? (sink != 0 ? hipep_to_float(sink[head]) : 0.0f) : 0.0f;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    if (rows[i] >= S) continue;
    T* orow = out + (((hipep_i64)b * S + rows[i]) * a.heads + head) * H;
#pragma unroll
    for (int db = 0; db < DB; ++db) {
      if (db >= db_n) continue;
      const int d = 8 * db + 2 * tq;
      orow[d] = hipep_from_float<T>(hipep_gqa_finish(o[db][2 * i], m[i], l[i], a.has_sink, sk));
      orow[d + 1] = hipep_from_float<T>(hipep_gqa_finish(o[db][2 * i + 1], m[i], l[i], a.has_sink, sk));
    }
  }
}

// ---- entry points ----------------------------------------------------------------------------------------

#define HIPEP_GQA_PREFILL_TC(NAME, T, HB)                                                                     \
  HIPEP_KERNEL void __launch_bounds__(HIPEP_PTC_THREADS) hipep_gqa_prefill_tc_##NAME##_h##HB(                 \
      const T* q, const T* cache_k, const T* cache_v, const int* seqlens, const int* total, const T* bias,     \
      const T* sink, T* out, const hipep_gqa_args a) {                                                         \
    hipep_gqa_prefill_tc<T, HB>(q, cache_k, cache_v, seqlens, total, bias, sink, out, a);                      \
  }

HIPEP_GQA_PREFILL_TC(f16, hipep_half, 64)
HIPEP_GQA_PREFILL_TC(f16, hipep_half, 128)
HIPEP_GQA_PREFILL_TC(bf16, hipep_bf16, 64)
HIPEP_GQA_PREFILL_TC(bf16, hipep_bf16, 128)
