// com.microsoft::MultiHeadAttention and ai.onnx Attention-23/24/25 on the GPU (bindings in
// hipep/runtime/gpu_attention_ops.py; the semantics are hipep/ops/attention.py's references).
//
// GroupQueryAttention's kernels (attention.h) are not reused: their geometry comes from seqlens_k and
// total_sequence_length in device memory, their cache is BNSH with one head size, their output is
// [B, S, N * H] and a key outside the causal frontier is excluded outright. These two ops instead
// take Q/K/V in either layout (3-D [B, S, N * H] or 4-D [B, N, S, H]) with a V head size of its own,
// keys from past_key/past_value and the new key/value without a concatenated copy, and masks whose
// keys stay in the softmax (MultiHeadAttention's key_padding_mask adds a finite mask_filter_value, so
// a row padded everywhere averages V). So the tiled kernel here is GroupQueryAttention's prefill
// kernel (attention_prefill.hip) generalised to strided operands, loaded element by element (any head
// size up to the variant's bound, no alignment needed).
//
// Kernels:
//   hipep_mha_<dt>_h<HB>     one block per (row tile, KV head, batch), its rows the (token, query head)
//                            pairs of the KV head's group, token-major, so each key tile is read once
//                            for the group (and a decode step of grouped heads fills more rows): a
//                            loop over key tiles with an online softmax in f32, causal tiles skipped;
//                            output rounded once;
//   hipep_mha_present_<dt>   present_key / present_value ([B, kv_heads, past + new, H]): past's rows,
//                            then the new rows (with MultiHeadAttention's bias added in f32).
//
// Query token s sits at position past + s; over an external cache (Attention-24's nonpad_kv_seqlen,
// `kv_len`: batch entry b's first kv_len[b] keys are valid) at kv_len[b] - S + s, with the keys from
// kv_len[b] on excluded. A key j takes part unless the causal frontier (j > position), Attention-25's
// window (j < position - left_window or j > position + right_window, for each bound >= 0), a false
// entry of a bool mask, a key past a shorter mask's end or past the valid keys excludes it;
// all stand for the references' sentinel, which adds exactly nothing to a row that has any other key
// (exp(sentinel - max) is 0 in f32). A row with no key above the sentinel comes out as zeros for
// ai.onnx Attention (`dead_zero`), as ORT's CPU kernel. The keys a row may attend are a contiguous
// range, so a tile of rows visits only the key tiles between its first row's start and its last
// row's end: a window keeps long sequences' work proportional to the window.
#include "hipep_device.h"

#define HIPEP_MHA_MAX_HEAD 256  // hipep/runtime/gpu_attention_ops.py MAX_HEAD

struct hipep_mha_args {
  int batch, seq, heads, kv_heads, group, head_size, v_head_size;
  int past, total;  // keys [0, past) from past_key/past_value ([B, kv_heads, past, H]), [past, total) new
  int causal;       // key j > past + s is not attended
  int mask_kind;    // 0: no attn_mask, 1: additive (the element type), 2: bool (false: not attended)
  int dead_zero;    // a row whose best score is at most `lowest` is zeros (ai.onnx Attention)
  int left_window;  // key j < past + s - left_window is not attended (-1: unbounded)
  int right_window; // key j > past + s + right_window is not attended (-1: unbounded)
  int mask_keys;    // keys the mask holds per row: keys from there on are not attended
  hipep_i64 q_sb, q_sh, q_ss;  // element strides: batch, head, sequence (a head's dims contiguous)
  hipep_i64 k_sb, k_sh, k_ss;  // the new keys
  hipep_i64 v_sb, v_sh, v_ss;  // the new values
  hipep_i64 o_sb, o_sh, o_ss;  // the output
  hipep_i64 m_sb, m_sh, m_ss;  // attn_mask / attention_bias (0: broadcast); keys contiguous
  float scale, softcap, pad_value, lowest;
};

HIPEP_DEVICE int hipep_mha_min(int x, int y) { return x < y ? x : y; }

// The keys [begin, end) a query at position `pos` may attend before the mask: the causal frontier
// and the window's bounds, below `limit` (the batch entry's valid keys).
HIPEP_DEVICE int hipep_mha_key_end(const hipep_mha_args& a, int pos, int limit) {
  int end = limit;
  if (a.causal) end = hipep_mha_min(end, pos + 1);
  if (a.right_window >= 0) end = hipep_mha_min(end, pos + a.right_window + 1);
  return end;
}

HIPEP_DEVICE int hipep_mha_key_begin(const hipep_mha_args& a, int pos) {
  return a.left_window >= 0 && pos > a.left_window ? pos - a.left_window : 0;
}

// Element d of key (or value, `dims` its head size) row j of KV head kvh, batch b: from past below
// `past`, else the new rows (plus the bias, in f32).
template <typename T>
HIPEP_DEVICE float hipep_mha_kv(const T* HIPEP_RESTRICT past, const T* HIPEP_RESTRICT cur, const T* HIPEP_RESTRICT bias,
                                hipep_i64 sb, hipep_i64 sh, hipep_i64 ss, int dims, const hipep_mha_args& a, int b,
                                int kvh, int j, int d) {
  if (j < a.past) return hipep_to_float(past[(((hipep_i64)b * a.kv_heads + kvh) * a.past + j) * dims + d]);
  float x = hipep_to_float(cur[b * sb + kvh * sh + (hipep_i64)(j - a.past) * ss + d]);
  if (bias != 0) x += hipep_to_float(bias[(hipep_i64)kvh * dims + d]);
  return x;
}

// Key (or value) rows [j0, j0 + BN) of one KV head into shared memory as f32, zeros past `end` and in
// the dims from `dims` up to `width` (a multiple of 4: the float4 reads of the dot products).
template <int BN, int LD, typename T>
HIPEP_DEVICE void hipep_mha_load_tile(const T* HIPEP_RESTRICT past, const T* HIPEP_RESTRICT cur,
                                      const T* HIPEP_RESTRICT bias, hipep_i64 sb, hipep_i64 sh, hipep_i64 ss, int dims,
                                      int width, const hipep_mha_args& a, int b, int kvh, int j0, int end, float* tile,
                                      int t, int threads) {
  for (int i = t; i < BN * width; i += threads) {
    const int c = i / width, d = i % width, j = j0 + c;
    tile[c * LD + d] = (j < end && d < dims) ? hipep_mha_kv(past, cur, bias, sb, sh, ss, dims, a, b, kvh, j, d) : 0.0f;
  }
}

template <typename T, int THREADS, int CPT, int HB>
HIPEP_DEVICE void hipep_mha(const T* HIPEP_RESTRICT q, const T* HIPEP_RESTRICT k, const T* HIPEP_RESTRICT v,
                            const T* HIPEP_RESTRICT past_k, const T* HIPEP_RESTRICT past_v,
                            const T* HIPEP_RESTRICT bias, const T* HIPEP_RESTRICT mask_add,
                            const unsigned char* HIPEP_RESTRICT mask_bool, const int* HIPEP_RESTRICT key_pad,
                            const hipep_i64* HIPEP_RESTRICT kv_len, T* HIPEP_RESTRICT out, const hipep_mha_args a,
                            const hipep_fault_site fault) {
  // Thread t owns query rows 2 * (t / 8) and the next, score columns t % 8 + 8 * c and the output
  // dims 4 * (t % 8) + 32 * k + [0, 4), as attention_prefill.hip.
  constexpr int BM = THREADS / 4, BN = 8 * CPT, DK = HB / 32, LD = HB + 4;
  __shared__ float4 q_s4[BM * LD / 4];
  __shared__ float4 kv_s4[BN * LD / 4];
  __shared__ float p_s[BM][BN + 1];
  float* q_s = reinterpret_cast<float*>(q_s4);
  float* kv_s = reinterpret_cast<float*>(kv_s4);
  const int H = a.head_size, HV = a.v_head_size, S = a.seq, T_ = a.total, t = threadIdx.x;
  const int H4 = (H + 3) & ~3, HV4 = (HV + 3) & ~3;
  const int G = a.group, rows = S * G;  // row r: token r / G, query head kvh * G + r % G
  const int q0 = blockIdx.x * BM, kvh = blockIdx.y, b = blockIdx.z;
  const int r0 = 2 * (t / 8), cl = t % 8;
  const T* k_bias = bias != 0 ? bias + (hipep_i64)a.heads * H : bias;
  const T* v_bias = bias != 0 ? bias + (hipep_i64)(a.heads + a.kv_heads) * H : bias;

  for (int i = t; i < BM * H4; i += THREADS) {
    const int r = i / H4, d = i % H4, s = (q0 + r) / G, head = kvh * G + (q0 + r) % G;
    float x = 0.0f;
    if (q0 + r < rows && d < H) {
      x = hipep_to_float(q[b * a.q_sb + head * a.q_sh + (hipep_i64)s * a.q_ss + d]);
      if (bias != 0) x += hipep_to_float(bias[(hipep_i64)head * H + d]);
    }
    q_s[r * LD + d] = x;
  }
  // The batch entry's valid keys and its first query's position. A count outside [0, total] is
  // reported (one block per batch entry does) and clamped, so nothing past K and V is read.
  int limit = T_, offset = a.past;
  if (kv_len != 0) {
    const hipep_i64 n = kv_len[b];
    const bool bad = n < 0 || n > T_;
    if (bad && blockIdx.x == 0 && kvh == 0 && t == 0) hipep_report_fault(fault, HIPEP_FAULT_KV_LENGTH, n, T_);
    limit = bad ? (n < 0 ? 0 : T_) : (int)n;
    offset = limit - S;
  }
  // Keys row s sees: [lo, hi); both bounds grow with s, so the tile's range starts at its first
  // row's and ends at its last row's.
  int lo[2], hi[2], row_s[2], row_head[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int r = q0 + r0 + i;
    row_s[i] = r / G;
    row_head[i] = kvh * G + r % G;
    lo[i] = hipep_mha_key_begin(a, offset + row_s[i]);
    hi[i] = r >= rows ? 0 : hipep_mha_key_end(a, offset + row_s[i], limit);
  }
  const int tile_lo = hipep_mha_key_begin(a, offset + q0 / G);
  const int tile_hi = hipep_mha_key_end(a, offset + (hipep_mha_min(q0 + BM, rows) - 1) / G, limit);

  float m[2] = {-HIPEP_INF_F, -HIPEP_INF_F}, l[2] = {0.0f, 0.0f};
  float4 acc[2][DK];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int kk = 0; kk < DK; ++kk) acc[i][kk] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);

  for (int j0 = tile_lo - tile_lo % BN; j0 < tile_hi; j0 += BN) {
    __syncthreads();  // the previous tile's V is no longer read
    hipep_mha_load_tile<BN, LD>(past_k, k, k_bias, a.k_sb, a.k_sh, a.k_ss, H, H4, a, b, kvh, j0, tile_hi, kv_s, t,
                                THREADS);
    __syncthreads();
    float sc[2][CPT];
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int c = 0; c < CPT; ++c) sc[i][c] = 0.0f;
    for (int d4 = 0; d4 < H4 / 4; ++d4) {
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
      const hipep_i64 mrow = b * a.m_sb + row_head[i] * a.m_sh + (hipep_i64)row_s[i] * a.m_ss;
      float mt = -HIPEP_INF_F;
#pragma unroll
      for (int c = 0; c < CPT; ++c) {
        const int j = j0 + cl + 8 * c;
        bool on = j >= lo[i] && j < hi[i] && (a.mask_kind == 0 || j < a.mask_keys);
        if (on && a.mask_kind == 2) on = mask_bool[mrow + j] != 0;
        float x = -HIPEP_INF_F;
        if (on) {  // the references' order: scale, softcap, key padding, then the mask or bias
          x = sc[i][c] * a.scale;
          if (a.softcap > 0.0f) x = a.softcap * tanhf(x / a.softcap);
          if (key_pad != 0 && key_pad[(hipep_i64)b * T_ + j] <= 0) x += a.pad_value;
          if (a.mask_kind == 1) x += hipep_to_float(mask_add[mrow + j]);
        }
        sc[i][c] = x;
        mt = fmaxf(mt, x);
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
      for (int kk = 0; kk < DK; ++kk) {
        acc[i][kk].x *= alpha;
        acc[i][kk].y *= alpha;
        acc[i][kk].z *= alpha;
        acc[i][kk].w *= alpha;
      }
    }
    __syncthreads();  // scores done with K; P written
    hipep_mha_load_tile<BN, LD>(past_v, v, v_bias, a.v_sb, a.v_sh, a.v_ss, HV, HV4, a, b, kvh, j0, tile_hi, kv_s, t,
                                THREADS);
    __syncthreads();
    const int n_keys = hipep_mha_min(BN, tile_hi - j0);
    for (int c = 0; c < n_keys; ++c) {
      const float pa = p_s[r0][c], pb = p_s[r0 + 1][c];
#pragma unroll
      for (int kk = 0; kk < DK; ++kk) {
        if (4 * cl + 32 * kk < HV4) {
          const float4 vv = kv_s4[c * (LD / 4) + cl + 8 * kk];
          acc[0][kk].x = fmaf(pa, vv.x, acc[0][kk].x);
          acc[0][kk].y = fmaf(pa, vv.y, acc[0][kk].y);
          acc[0][kk].z = fmaf(pa, vv.z, acc[0][kk].z);
          acc[0][kk].w = fmaf(pa, vv.w, acc[0][kk].w);
          acc[1][kk].x = fmaf(pb, vv.x, acc[1][kk].x);
          acc[1][kk].y = fmaf(pb, vv.y, acc[1][kk].y);
          acc[1][kk].z = fmaf(pb, vv.z, acc[1][kk].z);
          acc[1][kk].w = fmaf(pb, vv.w, acc[1][kk].w);
        }
      }
    }
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    if (q0 + r0 + i >= rows) continue;
    const bool zero = l[i] <= 0.0f || (a.dead_zero && m[i] <= a.lowest);
    T* o = out + b * a.o_sb + row_head[i] * a.o_sh + (hipep_i64)row_s[i] * a.o_ss;
#pragma unroll
    for (int kk = 0; kk < DK; ++kk) {
      const int d = 4 * cl + 32 * kk;
      const float r[4] = {acc[i][kk].x, acc[i][kk].y, acc[i][kk].z, acc[i][kk].w};
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (d + e < HV) o[d + e] = hipep_from_float<T>(zero ? 0.0f : r[e] / l[i]);
    }
  }
}

// present [B, kv_heads, total, dims] (grid.y = 0: keys, 1: values; a null present is not written).
template <typename T>
HIPEP_DEVICE void hipep_mha_present(const T* HIPEP_RESTRICT past_k, const T* HIPEP_RESTRICT past_v,
                                    const T* HIPEP_RESTRICT k, const T* HIPEP_RESTRICT v, const T* HIPEP_RESTRICT bias,
                                    T* HIPEP_RESTRICT present_k, T* HIPEP_RESTRICT present_v, const hipep_mha_args a) {
  const bool keys = blockIdx.y == 0;
  T* dst = keys ? present_k : present_v;
  if (dst == 0) return;
  const int dims = keys ? a.head_size : a.v_head_size;
  const T* b_ = bias == 0 ? bias : bias + (hipep_i64)(keys ? a.heads : a.heads + a.kv_heads) * a.head_size;
  const hipep_i64 n = (hipep_i64)a.batch * a.kv_heads * a.total * dims;
  for (hipep_i64 i = (hipep_i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (hipep_i64)gridDim.x * blockDim.x) {
    const int d = (int)(i % dims);
    const hipep_i64 row = i / dims;
    const int j = (int)(row % a.total);
    const hipep_i64 bh = row / a.total;
    const int kvh = (int)(bh % a.kv_heads), b = (int)(bh / a.kv_heads);
    const float x = keys ? hipep_mha_kv(past_k, k, b_, a.k_sb, a.k_sh, a.k_ss, dims, a, b, kvh, j, d)
                         : hipep_mha_kv(past_v, v, b_, a.v_sb, a.v_sh, a.v_ss, dims, a, b, kvh, j, d);
    dst[i] = hipep_from_float<T>(x);
  }
}

// ai.onnx Attention's qk_matmul_output, [B, heads, S, total], one block per (query token, head,
// batch): mode 0 the scaled products Q.K, 1 after the softcap, 2 after the mask, the exclusions and
// the external cache's padding, 3 the softmax. Each stage is rounded to T as the reference's (ORT's
// f16 kernel stores them as f16), and modes 2 and 3 without a softcap add the mask to the unrounded
// product (ORT folds it into the scores GEMM). hipep_mha computes the attention output itself, with
// its scores kept in f32; this kernel recomputes them only for this output. A count of valid keys
// outside [0, total] is clamped here and reported by hipep_mha.
template <typename T> HIPEP_DEVICE float hipep_mha_round(float x) { return hipep_to_float(hipep_from_float<T>(x)); }

template <typename T>
HIPEP_DEVICE void hipep_attention_scores(const T* HIPEP_RESTRICT q, const T* HIPEP_RESTRICT k,
                                         const T* HIPEP_RESTRICT past_k, const T* HIPEP_RESTRICT mask_add,
                                         const unsigned char* HIPEP_RESTRICT mask_bool,
                                         const hipep_i64* HIPEP_RESTRICT kv_len, T* HIPEP_RESTRICT scores,
                                         const hipep_mha_args a, const int mode) {
  __shared__ float q_s[HIPEP_MHA_MAX_HEAD];
  __shared__ float scratch[HIPEP_MAX_WARPS];
  const int s = blockIdx.x, head = blockIdx.y, b = blockIdx.z, t = threadIdx.x;
  const int H = a.head_size, T_ = a.total, kvh = head / a.group;
  for (int d = t; d < H; d += blockDim.x) q_s[d] = hipep_to_float(q[b * a.q_sb + head * a.q_sh + (hipep_i64)s * a.q_ss + d]);
  __syncthreads();
  int limit = T_, offset = a.past;
  if (kv_len != 0) {
    const hipep_i64 n = kv_len[b];
    limit = n < 0 ? 0 : (n > T_ ? T_ : (int)n);
    offset = limit - a.seq;
  }
  const int pos = offset + s, lo = hipep_mha_key_begin(a, pos), hi = hipep_mha_key_end(a, pos, T_);
  const hipep_i64 mrow = b * a.m_sb + head * a.m_sh + (hipep_i64)s * a.m_ss;
  T* row = scores + (((hipep_i64)b * a.heads + head) * a.seq + s) * T_;
  const bool fold = a.softcap <= 0.0f && mode >= 2;
  float best = -HIPEP_INF_F;
  for (int j = t; j < T_; j += blockDim.x) {
    float dot = 0.0f;
    for (int d = 0; d < H; ++d) dot = fmaf(q_s[d], hipep_mha_kv(past_k, k, (const T*)0, a.k_sb, a.k_sh, a.k_ss, H, a, b, kvh, j, d), dot);
    const float qk = dot * a.scale;
    float bias = 0.0f;  // the key's: the exclusions' sentinel, else the mask's
    if (j < lo || j >= hi || (a.mask_kind != 0 && j >= a.mask_keys)) bias = a.lowest;
    else if (a.mask_kind == 2) bias = mask_bool[mrow + j] != 0 ? 0.0f : a.lowest;
    else if (a.mask_kind == 1) bias = hipep_to_float(mask_add[mrow + j]);
    float x;
    if (fold) {
      x = hipep_mha_round<T>(qk + bias);
    } else {
      x = hipep_mha_round<T>(qk);
      if (mode >= 1 && a.softcap > 0.0f) x = hipep_mha_round<T>(a.softcap * tanhf(x / a.softcap));
      if (mode >= 2) x = hipep_mha_round<T>(x + bias);
    }
    if (mode >= 2 && j >= limit) x = a.lowest;
    row[j] = hipep_from_float<T>(x);  // exact: x is already a value of T
    best = hipep_fmax_nan(best, x);
  }
  if (mode < 3) return;
  // The softmax of the row as the reference's: exp(x - max) over the sum; a row with no key above
  // the sentinel is zeros. Each thread reads back only the entries it wrote.
  best = hipep_block_max(best, scratch);
  const float m = fabsf(best) < HIPEP_INF_F ? best : 0.0f;  // a finite max, else 0 (a dead row)
  float sum = 0.0f;
  for (int j = t; j < T_; j += blockDim.x) sum += expf(hipep_to_float(row[j]) - m);
  sum = hipep_block_sum(sum, scratch);
  if (sum == 0.0f) sum = 1.0f;
  const bool dead = best <= a.lowest;
  for (int j = t; j < T_; j += blockDim.x)
    row[j] = hipep_from_float<T>(dead ? 0.0f : expf(hipep_to_float(row[j]) - m) / sum);
}

// ---- entry points ----------------------------------------------------------------------------------------

#define HIPEP_MHA_VARIANT(NAME, T, HB, THREADS, CPT)                                                             \
  HIPEP_KERNEL void __launch_bounds__(THREADS) hipep_mha_##NAME##_h##HB(                                        \
      const T* q, const T* k, const T* v, const T* past_k, const T* past_v, const T* bias, const T* mask_add,    \
      const unsigned char* mask_bool, const int* key_pad, const hipep_i64* kv_len, T* out,                       \
      const hipep_mha_args a, const hipep_fault_site fault) {                                                    \
    hipep_mha<T, THREADS, CPT, HB>(q, k, v, past_k, past_v, bias, mask_add, mask_bool, key_pad, kv_len, out, a,  \
                                   fault);                                                                       \
  }

#define HIPEP_MHA(NAME, T)                                                                                       \
  HIPEP_MHA_VARIANT(NAME, T, 64, 128, 4)                                                                         \
  HIPEP_MHA_VARIANT(NAME, T, 128, 128, 4)                                                                        \
  HIPEP_MHA_VARIANT(NAME, T, 256, 64, 2)                                                                         \
  HIPEP_KERNEL void hipep_mha_present_##NAME(const T* past_k, const T* past_v, const T* k, const T* v,           \
                                             const T* bias, T* present_k, T* present_v, const hipep_mha_args a) { \
    hipep_mha_present<T>(past_k, past_v, k, v, bias, present_k, present_v, a);                                   \
  }                                                                                                              \
  HIPEP_KERNEL void hipep_attention_scores_##NAME(const T* q, const T* k, const T* past_k, const T* mask_add,     \
                                                  const unsigned char* mask_bool, const hipep_i64* kv_len,       \
                                                  T* scores, const hipep_mha_args a, const int mode) {           \
    hipep_attention_scores<T>(q, k, past_k, mask_add, mask_bool, kv_len, scores, a, mode);                      \
  }

HIPEP_MHA(f32, float)
HIPEP_MHA(f16, hipep_half)
