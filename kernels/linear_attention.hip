// Gated DeltaNet linear attention (Qwen3.5's linear-attention layers; the semantics are
// hipep/ops/linear_attention.py's): CausalConvWithState, LinearAttentionGate, LinearAttention and
// GatedRMSNorm. f32 arithmetic throughout, f16 widened on load and rounded once on store.
//
// hipep_causal_conv: one thread per output element (b, c, t) -- bias + the k taps over
// x' = past_state ++ input, then SiLU -- and, past the outputs, one per present_state element
// (x''s last (k - 1) * dilation columns), read from past_state or input, never from an output.
//
// hipep_la_gate: elementwise, decay = decay_scale[h] * softplus(a + dt_bias[h]), beta = sigmoid(b).
//
// hipep_linear_attention: one block per (batch, KV head), one thread per value column j: the
// thread keeps column j of the head's state S [d_k, d_v] in registers (d_k <= HIPEP_LA_MAX_DK) and
// runs the tokens in order -- S *= exp(g) (gated), u = beta * (v_j - S^T k) (delta) or v_j,
// S += k u, then for each query head reading this KV head o = scale * q^T S -- so no thread waits
// for another. Query and key vectors are read by every thread of the block (the same addresses).
//
// hipep_gated_rms_norm: rows of C = len(scale) elements (a warp, or a block, per row as the row
// kernels' launch shapes give): sum of squares, inv = 1 / sqrt(mean + eps), y = x * inv * scale
// times silu(gate) or sigmoid(gate).
#include "hipep_device.h"

#define HIPEP_LA_MAX_DK 256

struct hipep_conv_args {
  hipep_i64 batch, channels, length;
  int k, dilation, silu;
};

template <typename T>
HIPEP_DEVICE float hipep_conv_tap(const T* x, const T* past, const hipep_conv_args& a, hipep_i64 bc, hipep_i64 i) {
  // element i of x' = past_state ++ input for row bc (past_state zeros when absent)
  const hipep_i64 keep = (hipep_i64)(a.k - 1) * a.dilation;
  if (i < keep) return past == nullptr ? 0.0f : hipep_to_float(past[bc * keep + i]);
  return hipep_to_float(x[bc * a.length + (i - keep)]);
}

template <typename T>
HIPEP_DEVICE void hipep_causal_conv(const T* HIPEP_RESTRICT x, const T* HIPEP_RESTRICT w, const T* HIPEP_RESTRICT bias,
                                    const T* HIPEP_RESTRICT past, T* HIPEP_RESTRICT y, T* HIPEP_RESTRICT present,
                                    const hipep_conv_args a) {
  const hipep_i64 keep = (hipep_i64)(a.k - 1) * a.dilation;
  const hipep_i64 rows = a.batch * a.channels, outputs = rows * a.length;
  const hipep_i64 n = outputs + (present == nullptr ? 0 : rows * keep);
  for (hipep_i64 e = (hipep_i64)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (hipep_i64)gridDim.x * blockDim.x) {
    if (e < outputs) {
      const hipep_i64 bc = e / a.length, t = e % a.length, c = bc % a.channels;
      float acc = 0.0f;
      for (int j = 0; j < a.k; ++j)
        acc = fmaf(hipep_to_float(w[c * a.k + j]), hipep_conv_tap(x, past, a, bc, t + (hipep_i64)j * a.dilation), acc);
      if (bias != nullptr) acc = __fadd_rn(acc, hipep_to_float(bias[c]));
      if (a.silu) acc = acc / (1.0f + expf(-acc));
      y[e] = hipep_from_float<T>(acc);
    } else {
      const hipep_i64 s = e - outputs, bc = s / keep, i = s % keep;
      present[s] = hipep_from_float<T>(hipep_conv_tap(x, past, a, bc, a.length + i));
    }
  }
}

struct hipep_la_gate_args {
  hipep_i64 n;  // elements of a (and b)
  int heads;
};

template <typename T>
HIPEP_DEVICE void hipep_la_gate(const T* HIPEP_RESTRICT a_in, const float* HIPEP_RESTRICT dt_bias,
                                const float* HIPEP_RESTRICT decay_scale, const T* HIPEP_RESTRICT b_in,
                                T* HIPEP_RESTRICT decay, T* HIPEP_RESTRICT beta, const hipep_la_gate_args a) {
  for (hipep_i64 e = (hipep_i64)blockIdx.x * blockDim.x + threadIdx.x; e < a.n; e += (hipep_i64)gridDim.x * blockDim.x) {
    const int h = (int)(e % a.heads);
    const float x = __fadd_rn(hipep_to_float(a_in[e]), dt_bias[h]);
    // softplus without overflow: max(x, 0) + log1p(exp(-|x|))
    const float sp = __fadd_rn(fmaxf(x, 0.0f), log1pf(expf(-fabsf(x))));
    decay[e] = hipep_from_float<T>(__fmul_rn(decay_scale[h], sp));
    if (beta != nullptr) beta[e] = hipep_from_float<T>(1.0f / (1.0f + expf(-hipep_to_float(b_in[e]))));
  }
}

struct hipep_la_args {
  int batch, tokens, q_heads, kv_heads, key_heads, dk, dv;
  int gated, delta, decay_per_key, beta_shared;  // decay [B, T, H_kv] or [B, T, H_kv * d_k]; beta [.., H_kv] or [.., 1]
  int has_past;
  float scale;
};

template <typename T, typename S>
HIPEP_DEVICE void hipep_linear_attention(const T* HIPEP_RESTRICT q, const T* HIPEP_RESTRICT k, const T* HIPEP_RESTRICT v,
                                         const S* HIPEP_RESTRICT past, const T* HIPEP_RESTRICT decay,
                                         const T* HIPEP_RESTRICT beta, T* HIPEP_RESTRICT out,
                                         S* HIPEP_RESTRICT present, const hipep_la_args a) {
  const int h = blockIdx.x, b = blockIdx.y, j = threadIdx.x;
  if (j >= a.dv) return;  // no block barrier below
  const int dk = a.dk, heads_out = a.q_heads > a.kv_heads ? a.q_heads : a.kv_heads;
  const hipep_i64 state_off = (((hipep_i64)b * a.kv_heads + h) * dk) * a.dv + j;
  float s[HIPEP_LA_MAX_DK];
  for (int i = 0; i < dk; ++i) s[i] = a.has_past ? hipep_to_float(past[state_off + (hipep_i64)i * a.dv]) : 0.0f;
  const int key_head = h / (a.kv_heads / a.key_heads);
  // the query heads reading this KV head, and the output head of each
  const int first_q = a.q_heads >= a.kv_heads ? h * (a.q_heads / a.kv_heads) : h / (a.kv_heads / a.q_heads);
  const int n_q = a.q_heads >= a.kv_heads ? a.q_heads / a.kv_heads : 1;
  for (int t = 0; t < a.tokens; ++t) {
    const hipep_i64 bt = (hipep_i64)b * a.tokens + t;
    const T* kt = k + (bt * a.key_heads + key_head) * dk;
    if (a.gated) {
      if (a.decay_per_key) {
        const T* g = decay + (bt * a.kv_heads + h) * dk;
        for (int i = 0; i < dk; ++i) s[i] = __fmul_rn(s[i], expf(hipep_to_float(g[i])));
      } else {
        const float e = expf(hipep_to_float(decay[bt * a.kv_heads + h]));
        for (int i = 0; i < dk; ++i) s[i] = __fmul_rn(s[i], e);
      }
    }
    float u = hipep_to_float(v[(bt * a.kv_heads + h) * a.dv + j]);
    if (a.delta) {
      float recall = 0.0f;
      for (int i = 0; i < dk; ++i) recall = fmaf(s[i], hipep_to_float(kt[i]), recall);
      const float bb = hipep_to_float(beta[a.beta_shared ? bt : bt * a.kv_heads + h]);
      u = __fmul_rn(bb, __fsub_rn(u, recall));
    }
    for (int i = 0; i < dk; ++i) s[i] = fmaf(hipep_to_float(kt[i]), u, s[i]);
    for (int r = 0; r < n_q; ++r) {
      const int qh = first_q + r;
      const T* qt = q + (bt * a.q_heads + qh) * dk;
      float o = 0.0f;
      for (int i = 0; i < dk; ++i) o = fmaf(hipep_to_float(qt[i]), s[i], o);
      const int oh = a.q_heads >= a.kv_heads ? qh : h;
      out[(bt * heads_out + oh) * a.dv + j] = hipep_from_float<T>(__fmul_rn(a.scale, o));
    }
  }
  for (int i = 0; i < dk; ++i) present[state_off + (hipep_i64)i * a.dv] = hipep_from_float<S>(s[i]);
}

struct hipep_grn_args {
  hipep_i64 rows;
  int c, sigmoid;
  float eps;
};

template <typename T>
HIPEP_DEVICE void hipep_gated_rms_norm(const T* HIPEP_RESTRICT x, const T* HIPEP_RESTRICT scale,
                                       const T* HIPEP_RESTRICT gate, T* HIPEP_RESTRICT y, const hipep_grn_args a) {
  __shared__ float scratch[HIPEP_MAX_WARPS];
  const hipep_i64 r = (hipep_i64)blockIdx.x * blockDim.y + threadIdx.y;
  if (r >= a.rows) return;  // only when blockDim.x is one warp: no block barrier below
  const T* px = x + r * a.c;
  float sq = 0.0f;
  for (int i = threadIdx.x; i < a.c; i += blockDim.x) {
    const float v = hipep_to_float(px[i]);
    sq = fmaf(v, v, sq);
  }
  const float inv = 1.0f / sqrtf(__fadd_rn(hipep_block_sum(sq, scratch) / (float)a.c, a.eps));
  for (int i = threadIdx.x; i < a.c; i += blockDim.x) {
    const float z = hipep_to_float(gate[r * a.c + i]);
    const float sg = 1.0f / (1.0f + expf(-z));
    const float act = a.sigmoid ? sg : __fmul_rn(z, sg);
    const float n = __fmul_rn(__fmul_rn(hipep_to_float(px[i]), inv), hipep_to_float(scale[i]));
    y[r * a.c + i] = hipep_from_float<T>(__fmul_rn(n, act));
  }
}

#define HIPEP_LINEAR_ATTENTION(NAME, T)                                                                       \
  HIPEP_KERNEL void hipep_causal_conv_##NAME(const T* x, const T* w, const T* bias, const T* past, T* y,      \
                                             T* present, const hipep_conv_args a) {                           \
    hipep_causal_conv<T>(x, w, bias, past, y, present, a);                                                    \
  }                                                                                                           \
  HIPEP_KERNEL void hipep_la_gate_##NAME(const T* a_in, const float* dt_bias, const float* decay_scale,       \
                                         const T* b_in, T* decay, T* beta, const hipep_la_gate_args a) {      \
    hipep_la_gate<T>(a_in, dt_bias, decay_scale, b_in, decay, beta, a);                                       \
  }                                                                                                           \
  HIPEP_KERNEL void hipep_linear_attention_##NAME(const T* q, const T* k, const T* v, const T* past,          \
                                                  const T* decay, const T* beta, T* out, T* present,          \
                                                  const hipep_la_args a) {                                    \
    hipep_linear_attention<T, T>(q, k, v, past, decay, beta, out, present, a);                                \
  }                                                                                                           \
  HIPEP_KERNEL void hipep_gated_rms_norm_##NAME(const T* x, const T* scale, const T* gate, T* y,              \
                                                const hipep_grn_args a) {                                     \
    hipep_gated_rms_norm<T>(x, scale, gate, y, a);                                                            \
  }

HIPEP_LINEAR_ATTENTION(f32, float)
HIPEP_LINEAR_ATTENTION(f16, hipep_half)
