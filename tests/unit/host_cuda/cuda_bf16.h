// Host stand-in for cuda_bf16.h (see cuda_fp16.h here): bf16 as its 16 bits, rounded to nearest even.
#pragma once
#include <cstring>

struct __nv_bfloat16 {
  unsigned short bits;
};
inline float __bfloat162float(__nv_bfloat16 v) {
  const unsigned int u = (unsigned int)v.bits << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline __nv_bfloat16 __float2bfloat16(float f) {
  unsigned int u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return {(unsigned short)((u >> 16) | 0x40)};  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return {(unsigned short)(u >> 16)};
}
