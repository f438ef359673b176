// Host stand-in for the CUDA device environment kernels/*.hip use, so g++ compiles a kernel module
// into a shared library whose entry points run on the CPU (tests/unit/test_gpu_linalg_on_host.py):
// every GPU thread of a block is a host thread, __syncthreads is a barrier of the block, and a warp
// shuffle exchanges values through memory between two barriers of the warp. Blocks run one after
// another, so a __shared__ array (a static local here) belongs to the block that runs.
#pragma once
#include <pthread.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

// CUDA's integer min / max overloads
using std::max;
using std::min;

struct hipep_host_dim3 {
  unsigned x = 0, y = 0, z = 0;
};
extern thread_local hipep_host_dim3 threadIdx, blockIdx;
extern hipep_host_dim3 blockDim, gridDim;

#define __global__ __attribute__((visibility("default")))
#define __device__
#define __forceinline__ inline
#define __shared__ static
#define __restrict__ __restrict
#define __launch_bounds__(...)

typedef _Float16 __half;
inline float __half2float(__half v) { return (float)v; }
inline __half __float2half_rn(float v) { return (__half)v; }

#ifndef HIPEP_WARP_SIZE
#define HIPEP_WARP_SIZE 32
#endif

void hipep_host_syncthreads();
void hipep_host_warp_barrier();
extern uint64_t hipep_host_exchange[1024];
#define __syncthreads() hipep_host_syncthreads()

// A load through the read-only data cache: a plain load on the host.
template <class T> T __ldg(const T* p) { return *p; }

inline int hipep_host_tid() { return (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x; }

template <class T> T __shfl_xor_sync(unsigned, T v, int lane_mask) {
  static_assert(sizeof(T) <= sizeof(uint64_t), "one exchange word per thread");
  const int tid = hipep_host_tid(), lane = tid % HIPEP_WARP_SIZE;
  std::memcpy(&hipep_host_exchange[tid], &v, sizeof(T));
  hipep_host_warp_barrier();
  T r;
  std::memcpy(&r, &hipep_host_exchange[tid - lane + (lane ^ lane_mask)], sizeof(T));
  hipep_host_warp_barrier();
  return r;
}

inline float __int_as_float(int i) {
  float f;
  std::memcpy(&f, &i, 4);
  return f;
}
inline double __longlong_as_double(long long i) {
  double f;
  std::memcpy(&f, &i, 8);
  return f;
}
template <class T> T atomicAdd(T* p, T v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
// Blocks run one after another on the host: a fence orders nothing more than the atomics do.
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
template <class T> T atomicCAS(T* p, T compare, T value) {
  __atomic_compare_exchange_n(p, &compare, value, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return compare;  // the old value, as CUDA's atomicCAS returns
}
inline float atomicAdd(float* p, float v) {
  float old = *p, want;
  do {
    want = old + v;
  } while (!__atomic_compare_exchange(p, &old, &want, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
  return old;
}

// ---- what the MatMulNBits kernels use beyond the above ------------------------------------------
// CUDA's vector types, bit casts, byte permute and dp4a, half2 arithmetic (every operation rounded
// once to f16, as on the GPU: products of halves are exact in double, so fma in double then one
// rounding), and the launch's dynamic shared memory (one buffer: blocks run one at a time).
struct float2 { float x, y; };
struct float4 { float x, y, z, w; };
struct uint2 { unsigned x, y; };
struct uint4 { unsigned x, y, z, w; };
struct int4 { int x, y, z, w; };
inline float2 make_float2(float a, float b) { return {a, b}; }
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
inline uint2 make_uint2(unsigned a, unsigned b) { return {a, b}; }
inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return {a, b, c, d}; }
inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
  const uint64_t v = ((uint64_t)y << 32) | x;
  unsigned r = 0;
  for (int i = 0; i < 4; ++i) r |= (unsigned)((v >> (8 * ((s >> (4 * i)) & 7))) & 0xFF) << (8 * i);
  return r;
}
inline int __dp4a(int a, int b, int c) {
  for (int i = 0; i < 4; ++i) c += (int)(signed char)(a >> (8 * i)) * (int)(signed char)(b >> (8 * i));
  return c;
}
inline __half __float2half(float v) { return (__half)v; }
struct __half2 { __half x, y; };
inline __half2 __halves2half2(__half a, __half b) { return {a, b}; }
inline __half2 __lows2half2(__half2 a, __half2 b) { return {a.x, b.x}; }
inline __half2 __highs2half2(__half2 a, __half2 b) { return {a.y, b.y}; }
inline __half2 __float2half2_rn(float v) { return {(__half)v, (__half)v}; }
inline float2 __half22float2(__half2 h) { return {(float)h.x, (float)h.y}; }
inline __half hipep_host_fma16(__half a, __half b, __half c) { return (__half)((double)a * (double)b + (double)c); }
inline __half2 __hfma2(__half2 a, __half2 b, __half2 c) {
  return {hipep_host_fma16(a.x, b.x, c.x), hipep_host_fma16(a.y, b.y, c.y)};
}
inline __half2 __hmul2(__half2 a, __half2 b) { return {(__half)((double)a.x * b.x), (__half)((double)a.y * b.y)}; }
inline __half2 __hsub2(__half2 a, __half2 b) { return {(__half)((double)a.x - b.x), (__half)((double)a.y - b.y)}; }
// mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 for a warp (the study's tensor-core GEMVs,
// benchmarks/gemv_study.hip): every lane leaves its fragments in memory between two barriers of the
// warp and computes its four elements of D from all of them, with PTX's fragment layout (lane 4g + t:
// A rows g and g + 8, k 2t, 2t + 1 and 2t + 8, 2t + 9; B column g, the same k; D rows g and g + 8,
// columns 2t, 2t + 1). The products are exact and summed in double, rounded to f32 once: the tensor
// cores' order of additions is not specified, so results agree with the GPU's to f32 rounding.
#define HIPEP_HOST_MMA 1
void hipep_host_mma_m16n8k16(float (&d)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0,
                             unsigned b1);
void hipep_host_mma_m16n8k16_bf16(float (&d)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0,
                                  unsigned b1);
unsigned char* hipep_host_dynamic_smem();
#define HIPEP_DYNAMIC_SHARED(type, name) type* name = reinterpret_cast<type*>(hipep_host_dynamic_smem())
