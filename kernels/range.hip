// Range: out[i] for i < n, n = max(ceil((limit - start) / delta), 0), computed by the host from
// the shape program (start, limit and delta are host-known where Range is claimed).
//
// ONNX Runtime's CPU kernel accumulates: y[0] = start, y[i] = y[i-1] + delta, in the operands'
// type. For integers that running sum equals start + i * delta in wrap-around arithmetic, so every
// thread computes its elements directly (unsigned arithmetic: wrap-around without signed
// overflow). For f32 every step rounds, and start + i * delta would round differently: one thread
// adds delta n times, as the CPU kernel does (Range outputs are index vectors: n is small). f16
// (opset 27) accumulates the same way in f32 (ONNX Runtime takes f32 whatever stash_type says)
// and rounds each output once to f16.
// start and delta are one-element tensors read from memory the device addresses.
#include "hipep_device.h"

#define HIPEP_RANGE_INT(NAME, T, U)                                                                   \
  HIPEP_KERNEL void hipep_range_##NAME(const T* HIPEP_RESTRICT start, const T* HIPEP_RESTRICT delta,   \
                                       T* HIPEP_RESTRICT out, hipep_i64 n) {                          \
    const U s = (U)start[0], d = (U)delta[0];                                                         \
    const hipep_i64 step = (hipep_i64)gridDim.x * blockDim.x;                                         \
    for (hipep_i64 i = (hipep_i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step)           \
      out[i] = (T)(U)(s + (U)i * d);                                                                  \
  }

HIPEP_RANGE_INT(i16, short, unsigned int)
HIPEP_RANGE_INT(i32, int, unsigned int)
HIPEP_RANGE_INT(i64, hipep_i64, hipep_u64)

HIPEP_KERNEL void hipep_range_f32(const float* HIPEP_RESTRICT start, const float* HIPEP_RESTRICT delta,
                                  float* HIPEP_RESTRICT out, hipep_i64 n) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  const float d = delta[0];
  float v = start[0];
  for (hipep_i64 i = 0; i < n; ++i) {
    out[i] = v;
    v = __fadd_rn(v, d);
  }
}

HIPEP_KERNEL void hipep_range_f16(const hipep_half* HIPEP_RESTRICT start, const hipep_half* HIPEP_RESTRICT delta,
                                  hipep_half* HIPEP_RESTRICT out, hipep_i64 n) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  const float d = __half2float(delta[0]);
  float v = __half2float(start[0]);
  for (hipep_i64 i = 0; i < n; ++i) {
    out[i] = __float2half_rn(v);
    v = __fadd_rn(v, d);
  }
}
