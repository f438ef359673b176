// The block-level runtime of the host stand-in (cuda_fp16.h here): block and warp barriers and the
// thread and block indices. The test's launcher calls hipep_host_begin_block once per block, then
// runs the block's threads, each calling hipep_host_set_thread before the kernel entry point.
#include "cuda_fp16.h"

thread_local hipep_host_dim3 threadIdx, blockIdx;
hipep_host_dim3 blockDim, gridDim;
uint64_t hipep_host_exchange[1024];

static pthread_barrier_t block_barrier;
static pthread_barrier_t warp_barriers[1024 / HIPEP_WARP_SIZE];
static bool barriers_made = false;

extern "C" __attribute__((visibility("default"))) void hipep_host_begin_block(unsigned bx, unsigned by, unsigned bz,
                                                                              unsigned gx, unsigned gy, unsigned gz) {
  if (barriers_made) {
    pthread_barrier_destroy(&block_barrier);
    for (auto& b : warp_barriers) pthread_barrier_destroy(&b);
  }
  barriers_made = true;
  blockDim = {bx, by, bz};
  gridDim = {gx, gy, gz};
  const unsigned n = bx * by * bz;
  pthread_barrier_init(&block_barrier, nullptr, n);
  const unsigned warp = HIPEP_WARP_SIZE;
  for (unsigned w = 0; w < 1024 / warp; ++w)
    pthread_barrier_init(&warp_barriers[w], nullptr, n > w * warp ? std::min(warp, n - w * warp) : 1u);
}

extern "C" __attribute__((visibility("default"))) void hipep_host_set_thread(unsigned tx, unsigned ty, unsigned tz,
                                                                             unsigned bx, unsigned by, unsigned bz) {
  threadIdx = {tx, ty, tz};
  blockIdx = {bx, by, bz};
}

void hipep_host_syncthreads() { pthread_barrier_wait(&block_barrier); }
void hipep_host_warp_barrier() { pthread_barrier_wait(&warp_barriers[hipep_host_tid() / HIPEP_WARP_SIZE]); }

alignas(64) static unsigned char dynamic_smem[64 * 1024];
unsigned char* hipep_host_dynamic_smem() { return dynamic_smem; }
