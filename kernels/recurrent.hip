// ONNX RNN, GRU and LSTM: one block per (batch entry, direction), looping over that entry's time
// steps. A recurrence is sequential in time and each step needs the whole previous state, so the
// state lives in the block's shared memory between steps (as f32, as ORT's CPU kernels keep it for
// f16 too) and the block's warps share each step's matrix-vector products: a warp computes one gate
// row at a time, its lanes striding along the row (W's and R's rows are contiguous, so a warp's loads
// are coalesced), the sum in f32 by shuffles. Then each thread updates the hidden units i = tid,
// tid + blockDim.x, ... from the gate values in shared memory.
//
// Shared memory (the launch's dynamic part, f32): h [H] | aux [H] | gates [G H]
//   RNN  gates: x Wi^T + h Ri^T + Wbi + Rbi (aux unused)
//   GRU  gates: z and r rows as RNN's; h rows x Wh^T + Wbh (+ Rbh), then + (r * h) Rh^T in a second
//        pass (aux holds r * h), or, with linear_before_reset, aux holds h Rh^T + Rbh
//   LSTM gates: i, o, f, c rows as RNN's; aux is the cell state C
// The binding refuses a hidden size whose (G + 2) H floats do not fit a launch's shared memory.
//
// Layouts: layout 0 X [S, N, I], Y [S, D, N, H], states [D, N, H]; layout 1 (batch_first) X [N, S, I],
// Y [N, S, D, H], states [N, D, H]. A batch entry of length L runs steps 0 .. L-1 (backwards for the
// reverse direction); Y is zero at its steps L .. S-1, and Y_h (Y_c) is the state after its last
// step, zero for L = 0 (ORT's CPU EP's answer). A length outside [0, S] (ORT rejects it) is reported
// through the fault record and its entry computed as of length 0.
#include "hipep_device.h"

#define HIPEP_RNN 1
#define HIPEP_GRU 3
#define HIPEP_LSTM 4

struct hipep_recurrent_args {
  hipep_i64 steps, batch, input, hidden;  // S, N, I, H
  int directions;                         // D: 1, or 2 (bidirectional)
  int reverse;                            // one direction, run backwards
  int batch_first;                        // layout 1
  int linear_before_reset;                // GRU
  int input_forget;                       // LSTM: f = 1 - i
  int has_clip;
  float clip;                  // gate inputs bounded to [-clip, clip] where has_clip
  int act[2][3];               // per direction: RNN f; GRU f, g; LSTM f, g, h (codes below)
  float alpha[2][3], beta[2][3];
};

// The codes are the positions in hipep.ops.recurrent.ACTIVATIONS; the formulas ORT's CPU kernels use.
HIPEP_DEVICE float hipep_recurrent_act(int code, float x, float alpha, float beta) {
  switch (code) {
    case 0: return x > 0.f ? x : 0.f;                           // Relu
    case 1: return tanhf(x);                                    // Tanh
    case 2: return 1.f / (1.f + expf(-x));                      // Sigmoid
    case 3: return alpha * x + beta;                            // Affine
    case 4: return x >= 0.f ? x : alpha * x;                    // LeakyRelu
    case 5: return x > alpha ? x : 0.f;                         // ThresholdedRelu
    case 6: return alpha * tanhf(beta * x);                     // ScaledTanh
    case 7: return fminf(1.f, fmaxf(0.f, alpha * x + beta));    // HardSigmoid
    case 8: return x >= 0.f ? x : alpha * (expf(x) - 1.f);      // Elu
    case 9: return x / (1.f + fabsf(x));                        // Softsign
    default: return logf(1.f + expf(x));                        // Softplus (inf past expf's range, as ORT)
  }
}

// Activation j of direction d on a gate's input, clipped first where clip is given.
HIPEP_DEVICE float hipep_recurrent_gate(const hipep_recurrent_args& a, int d, int j, float x) {
  if (a.has_clip) x = x > a.clip ? a.clip : (x < -a.clip ? -a.clip : x);
  return hipep_recurrent_act(a.act[d][j], x, a.alpha[d][j], a.beta[d][j]);
}

// sum_k row[k] * v[k] over n elements by the calling warp (every lane gets the sum). v is T (global)
// or float (shared).
template <typename T, typename V>
HIPEP_DEVICE float hipep_recurrent_dot(const T* HIPEP_RESTRICT row, const V* v, hipep_i64 n) {
  const int lane = threadIdx.x % HIPEP_WARP_SIZE;
  float acc = 0.f;
  for (hipep_i64 k = lane; k < n; k += HIPEP_WARP_SIZE) acc += hipep_to_float(row[k]) * hipep_to_float(v[k]);
  return hipep_warp_sum(acc);
}

template <typename T, int OP>
HIPEP_DEVICE void hipep_recurrent(const T* HIPEP_RESTRICT x, const T* HIPEP_RESTRICT w, const T* HIPEP_RESTRICT r,
                                  const T* HIPEP_RESTRICT bias, const int* HIPEP_RESTRICT lens,
                                  const T* HIPEP_RESTRICT h0, const T* HIPEP_RESTRICT c0, const T* HIPEP_RESTRICT peep,
                                  T* HIPEP_RESTRICT y, T* HIPEP_RESTRICT yh, T* HIPEP_RESTRICT yc,
                                  const hipep_recurrent_args a, const hipep_fault_site fault) {
  HIPEP_DYNAMIC_SHARED(float, smem);
  const hipep_i64 S = a.steps, N = a.batch, I = a.input, H = a.hidden, GH = OP * H;
  const hipep_i64 b = blockIdx.x;
  const int d = blockIdx.y, D = a.directions;
  const bool backward = a.reverse || d == 1;
  const int tid = threadIdx.x, warp = tid / HIPEP_WARP_SIZE, lane = tid % HIPEP_WARP_SIZE;
  const int warps = blockDim.x / HIPEP_WARP_SIZE;
  float* h = smem;
  float* aux = h + H;
  float* gates = aux + H;
  const T* wd = w + d * GH * I;
  const T* rd = r + d * GH * H;
  const T* wb = bias != nullptr ? bias + d * 2 * GH : nullptr;
  const T* rb = bias != nullptr ? wb + GH : nullptr;
  const T* pd = peep != nullptr ? peep + d * 3 * H : nullptr;
  const hipep_i64 state_at = (a.batch_first ? b * D + d : d * N + b) * H;

  hipep_i64 len = S;
  if (lens != nullptr) {
    len = lens[b];
    if (len < 0 || len > S) {
      if (tid == 0) hipep_report_fault(fault, HIPEP_FAULT_SEQUENCE_LENGTH, len, S);
      len = 0;
    }
  }
  for (hipep_i64 i = tid; i < H; i += blockDim.x) {
    h[i] = h0 != nullptr ? hipep_to_float(h0[state_at + i]) : 0.f;
    if (OP == HIPEP_LSTM) aux[i] = c0 != nullptr ? hipep_to_float(c0[state_at + i]) : 0.f;
  }
  __syncthreads();

  const bool lbr = OP == HIPEP_GRU && a.linear_before_reset;
  for (hipep_i64 s = 0; s < len; ++s) {
    const hipep_i64 t = backward ? len - 1 - s : s;
    const T* xt = x + (a.batch_first ? b * S + t : t * N + b) * I;
    // Pass 1: every gate row's x W^T, and h R^T where the row's recurrent input is h itself (all but
    // GRU's h rows without linear_before_reset, which wait for r).
    for (hipep_i64 row = warp; row < GH; row += warps) {
      const float xw = hipep_recurrent_dot(wd + row * I, xt, I);
      const bool h_rows = OP == HIPEP_GRU && row >= 2 * H;
      const float hr = (h_rows && !lbr) ? 0.f : hipep_recurrent_dot(rd + row * H, h, H);
      if (lane == 0) {
        const float bw = wb != nullptr ? hipep_to_float(wb[row]) : 0.f;
        const float br = rb != nullptr ? hipep_to_float(rb[row]) : 0.f;
        if (lbr && h_rows) {
          gates[row] = xw + bw;
          aux[row - 2 * H] = hr + br;
        } else {
          gates[row] = xw + hr + bw + br;  // GRU's h rows: x Wh^T + Wbh + Rbh so far
        }
      }
    }
    __syncthreads();
    if (OP == HIPEP_GRU && !lbr) {
      // r * h, then the h rows' (r * h) Rh^T.
      for (hipep_i64 i = tid; i < H; i += blockDim.x) aux[i] = hipep_recurrent_gate(a, d, 0, gates[H + i]) * h[i];
      __syncthreads();
      for (hipep_i64 row = 2 * H + warp; row < GH; row += warps) {
        const float hr = hipep_recurrent_dot(rd + row * H, aux, H);
        if (lane == 0) gates[row] += hr;
      }
      __syncthreads();
    }
    // Each thread its hidden units: every read of h (and aux) for this step is behind the barrier
    // above, so the new state overwrites the old in place.
    for (hipep_i64 i = tid; i < H; i += blockDim.x) {
      float hn;
      if (OP == HIPEP_RNN) {
        hn = hipep_recurrent_gate(a, d, 0, gates[i]);
      } else if (OP == HIPEP_GRU) {
        const float z = hipep_recurrent_gate(a, d, 0, gates[i]);
        float in = gates[2 * H + i];
        if (lbr) in += hipep_recurrent_gate(a, d, 0, gates[H + i]) * aux[i];
        const float cand = hipep_recurrent_gate(a, d, 1, in);
        hn = (1.f - z) * cand + z * h[i];
      } else {
        const float c = aux[i];
        const float pi = pd != nullptr ? hipep_to_float(pd[i]) : 0.f;
        const float po = pd != nullptr ? hipep_to_float(pd[H + i]) : 0.f;
        const float pf = pd != nullptr ? hipep_to_float(pd[2 * H + i]) : 0.f;
        const float ig = hipep_recurrent_gate(a, d, 0, gates[i] + pi * c);
        const float fg = a.input_forget ? 1.f - ig : hipep_recurrent_gate(a, d, 0, gates[2 * H + i] + pf * c);
        const float cn = fg * c + ig * hipep_recurrent_gate(a, d, 1, gates[3 * H + i]);
        const float og = hipep_recurrent_gate(a, d, 0, gates[H + i] + po * cn);
        hn = og * hipep_recurrent_act(a.act[d][2], cn, a.alpha[d][2], a.beta[d][2]);  // h(C): not clipped
        aux[i] = cn;
      }
      h[i] = hn;
      if (y != nullptr) {
        const hipep_i64 at = a.batch_first ? ((b * S + t) * D + d) * H : ((t * D + d) * N + b) * H;
        y[at + i] = hipep_from_float<T>(hn);
      }
    }
    __syncthreads();
  }

  // Y past the entry's length, and the final state (zero for an empty sequence).
  if (y != nullptr) {
    for (hipep_i64 k = tid; k < (S - len) * H; k += blockDim.x) {
      const hipep_i64 t = len + k / H, i = k % H;
      y[(a.batch_first ? ((b * S + t) * D + d) : ((t * D + d) * N + b)) * H + i] = hipep_from_float<T>(0.f);
    }
  }
  for (hipep_i64 i = tid; i < H; i += blockDim.x) {
    if (yh != nullptr) yh[state_at + i] = hipep_from_float<T>(len > 0 ? h[i] : 0.f);
    if (OP == HIPEP_LSTM && yc != nullptr) yc[state_at + i] = hipep_from_float<T>(len > 0 ? aux[i] : 0.f);
  }
}

#define HIPEP_RECURRENT(NAME, OP, TNAME, T)                                                                          \
  HIPEP_KERNEL void hipep_##NAME##_##TNAME(const T* HIPEP_RESTRICT x, const T* HIPEP_RESTRICT w,                    \
                                           const T* HIPEP_RESTRICT r, const T* HIPEP_RESTRICT bias,                 \
                                           const int* HIPEP_RESTRICT lens, const T* HIPEP_RESTRICT h0,              \
                                           const T* HIPEP_RESTRICT c0, const T* HIPEP_RESTRICT peep,                \
                                           T* HIPEP_RESTRICT y, T* HIPEP_RESTRICT yh, T* HIPEP_RESTRICT yc,         \
                                           const hipep_recurrent_args a, const hipep_fault_site f) {                \
    hipep_recurrent<T, OP>(x, w, r, bias, lens, h0, c0, peep, y, yh, yc, a, f);                                   \
  }

HIPEP_RECURRENT(rnn, HIPEP_RNN, f32, float)
HIPEP_RECURRENT(rnn, HIPEP_RNN, f16, hipep_half)
HIPEP_RECURRENT(gru, HIPEP_GRU, f32, float)
HIPEP_RECURRENT(gru, HIPEP_GRU, f16, hipep_half)
HIPEP_RECURRENT(lstm, HIPEP_LSTM, f32, float)
HIPEP_RECURRENT(lstm, HIPEP_LSTM, f16, hipep_half)
