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
