// Fetching the session's weights into the L2 cache ahead of the launches that read them.
//
// A decode step alternates kernels that stream weights at memory bandwidth (the GEMVs) with
// kernels bound by latency (attention over a few hundred cache rows, the norms of one row), during
// which memory sits idle. A replayed CUDA graph runs hipep_l2_prefetch on a branch of its own,
// beside those latency-bound kernels, over the weights of the GEMVs that follow them
// (hipep/runtime/cuda_prefetch.py plans where and what), so those GEMVs read from L2.
//
// The kernel only requests: cp.async.bulk.prefetch.L2 (NVIDIA sm_90+) hands each chunk to the
// SM's copy engine and the thread goes on, so the branch ends at once and nothing waits for it.
// A prefetch is a hint: it writes nothing and changes no result. Elsewhere (AMD, older NVIDIA, the
// host stand-in) it does nothing; the runtime plans prefetches only where it is real.
#include "hipep_device.h"

#define HIPEP_PREFETCH_MAX 16  // ranges one launch takes (hipep/runtime/cuda_prefetch.py: MAX_RANGES)

// Ranges of device memory, each 16-byte aligned and a multiple of 16 bytes long (the bulk
// prefetch's rule), requested `chunk` bytes at a time (a multiple of 16).
struct hipep_prefetch_ranges {
  unsigned long long ptr[HIPEP_PREFETCH_MAX];
  unsigned long long bytes[HIPEP_PREFETCH_MAX];
  unsigned int count;
  unsigned int chunk;
};

HIPEP_KERNEL void hipep_l2_prefetch(const hipep_prefetch_ranges r) {
#if defined(HIPEP_NVIDIA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const unsigned long long t = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
  const unsigned long long threads = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned int k = 0; k < r.count && k < HIPEP_PREFETCH_MAX; ++k) {
    const unsigned long long bytes = r.bytes[k];
    for (unsigned long long at = t * r.chunk; at < bytes; at += threads * r.chunk) {
      const unsigned int n = (unsigned int)(bytes - at < r.chunk ? bytes - at : r.chunk);
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(r.ptr[k] + at), "r"(n) : "memory");
    }
  }
#endif
}
