// Rotary embeddings: com.microsoft::RotaryEmbedding and MRotaryEmbedding, and ai.onnx RotaryEmbedding-23
// (the semantics are hipep/ops/rotary.py's _ms_rope / _mrope / _onnx_rope).
//
// The input is 3-D [B, S, N * H] or 4-D [B, N, S, H]; the runtime passes its element strides per
// batch, token and head, the output has the input's layout. One thread per (batch, token, head,
// element pair): pair j < R / 2 (R the rotary dimension) is rotated -- elements j and j + R / 2, or
// 2j and 2j + 1 interleaved -- by the angle of the token's position; the head's tail past R is
// copied in pairs. Where cos/sin rows come from (`pos_mode`):
//   0: position = position_ids[0] + s (one offset for every token, com.microsoft only);
//   1: position = position_ids[b, s];
//   2: no position_ids: cos/sin are [B, S, R / 2], row b * S + s (ai.onnx only);
//   3: MRotaryEmbedding: position_ids [3, B, S] holds three streams (temporal, height, width) and
//      pair j takes the position of its stream: chunked (mrope_layout 0: j < sec_t T, then sec_h
//      pairs of H, the rest W) or interleaved (1: H at j % 3 == 1 below 3 * sec_h, W at j % 3 == 2
//      below 3 * sec_w, T elsewhere). Its cos and sin are multiplied by `scale` (1 otherwise).
// f32 uses MLAS's fused form (fma(x1, cos, -(x2 * sin)), fma(x1, sin, x2 * cos)) as ORT's CPU kernel
// does, but for the interleaved form's pairs past the first after the last whole vector of
// HIPEP_ROPE_VECTOR_PAIRS, which MLAS computes unfused (hipep/ops/contrib_attention.py's _rope); f16
// computes in f32, unfused, and rounds once. A position outside the caches (the reference raises)
// is clamped, so no access leaves the buffers, and reported in the stream's fault record
// (hipep_device.h's HIPEP_FAULT_POSITION) by its token's first pair (by any pair of the first head
// in mode 3, whose streams differ per pair), so the run raises an error
// naming the node instead of returning the clamped rotation.
#include "hipep_device.h"

struct hipep_rope_args {
  int batch, seq, heads, head_size, rotary_half, interleaved, pos_mode, max_pos;
  int mrope_layout, sec_t, sec_h, sec_w;  // pos_mode 3 only
  float scale;
  hipep_i64 sb, ss, sh;  // element strides of the input (and output) per batch, token and head
};

#define HIPEP_ROPE_VECTOR_PAIRS 8

HIPEP_DEVICE void hipep_rope_unfused(float x1, float x2, float c, float s, float& y1, float& y2) {
  y1 = __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s));
  y2 = __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s));
}

template <typename T>
HIPEP_DEVICE void hipep_rope_pair(float x1, float x2, float c, float s, bool unfused, float& y1, float& y2);

template <>
HIPEP_DEVICE void hipep_rope_pair<float>(float x1, float x2, float c, float s, bool unfused, float& y1, float& y2) {
  if (unfused) {
    hipep_rope_unfused(x1, x2, c, s, y1, y2);
    return;
  }
  y1 = fmaf(x1, c, -__fmul_rn(x2, s));
  y2 = fmaf(x1, s, __fmul_rn(x2, c));
}

template <>
HIPEP_DEVICE void hipep_rope_pair<hipep_half>(float x1, float x2, float c, float s, bool, float& y1, float& y2) {
  hipep_rope_unfused(x1, x2, c, s, y1, y2);
}

template <typename T>
HIPEP_DEVICE void hipep_rotary(const T* HIPEP_RESTRICT x, const hipep_i64* HIPEP_RESTRICT pos_ids,
                               const T* HIPEP_RESTRICT cos_cache, const T* HIPEP_RESTRICT sin_cache,
                               T* HIPEP_RESTRICT y, const hipep_rope_args a, const hipep_fault_site fault) {
  const int pairs = a.head_size / 2, half = a.rotary_half;
  const hipep_i64 n = (hipep_i64)a.batch * a.seq * a.heads * pairs;
  for (hipep_i64 i = (hipep_i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (hipep_i64)gridDim.x * blockDim.x) {
    const int j = (int)(i % pairs);
    hipep_i64 rest = i / pairs;
    const int head = (int)(rest % a.heads);
    rest /= a.heads;
    const int s = (int)(rest % a.seq);
    const int b = (int)(rest / a.seq);
    const hipep_i64 base = b * a.sb + s * a.ss + head * a.sh;
    int e1, e2;
    if (j < half) {
      e1 = a.interleaved ? 2 * j : j;
      e2 = a.interleaved ? 2 * j + 1 : j + half;
    } else {
      e1 = 2 * half + 2 * (j - half);
      e2 = e1 + 1;
    }
    float y1 = hipep_to_float(x[base + e1]), y2 = hipep_to_float(x[base + e2]);
    if (j < half) {
      hipep_i64 row;
      if (a.pos_mode == 2) {
        row = (hipep_i64)b * a.seq + s;
      } else if (a.pos_mode == 3) {
        const int stream = a.mrope_layout == 0 ? (j < a.sec_t ? 0 : (j < a.sec_t + a.sec_h ? 1 : 2))
                           : (j % 3 == 1 && j < 3 * a.sec_h) ? 1 : ((j % 3 == 2 && j < 3 * a.sec_w) ? 2 : 0);
        row = pos_ids[((hipep_i64)stream * a.batch + b) * a.seq + s];
        if (row < 0 || row >= a.max_pos) {
          if (head == 0) hipep_report_fault(fault, HIPEP_FAULT_POSITION, row, a.max_pos);
          row = row < 0 ? 0 : a.max_pos - 1;
        }
      } else {
        row = a.pos_mode == 0 ? pos_ids[0] + s : pos_ids[(hipep_i64)b * a.seq + s];
        if (row < 0 || row >= a.max_pos) {
          if (head == 0 && j == 0) hipep_report_fault(fault, HIPEP_FAULT_POSITION, row, a.max_pos);
          row = row < 0 ? 0 : a.max_pos - 1;
        }
      }
      float c = hipep_to_float(cos_cache[row * half + j]), sn = hipep_to_float(sin_cache[row * half + j]);
      if (a.scale != 1.0f) {  // MRotaryEmbedding's scale: on cos and sin, as ORT's kernel does
        c = __fmul_rn(c, a.scale);
        sn = __fmul_rn(sn, a.scale);
      }
      const bool unfused = a.interleaved && j > half / HIPEP_ROPE_VECTOR_PAIRS * HIPEP_ROPE_VECTOR_PAIRS;
      hipep_rope_pair<T>(y1, y2, c, sn, unfused, y1, y2);
    }
    y[base + e1] = hipep_from_float<T>(y1);
    y[base + e2] = hipep_from_float<T>(y2);
  }
}

#define HIPEP_ROTARY(NAME, T)                                                                                  \
  HIPEP_KERNEL void hipep_rotary_##NAME(const T* x, const hipep_i64* pos_ids, const T* cos_cache,             \
                                        const T* sin_cache, T* y, const hipep_rope_args a,                    \
                                        const hipep_fault_site fault) {                                       \
    hipep_rotary<T>(x, pos_ids, cos_cache, sin_cache, y, a, fault);                                            \
  }

HIPEP_ROTARY(f32, float)
HIPEP_ROTARY(f16, hipep_half)
