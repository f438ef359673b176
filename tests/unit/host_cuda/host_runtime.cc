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

static unsigned mma_fragments[1024][6];  // a0..a3, b0, b1 of every thread of the block

// One of a register's two 16-bit values (`which`: 0 the low one), fp16 or bf16, exactly as a double.
static double mma_value(unsigned reg, int which, bool bf16) {
  uint16_t bits = (uint16_t)(reg >> (16 * which));
  if (bf16) {
    const uint32_t u = (uint32_t)bits << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return (double)f;
  }
  __half h;
  std::memcpy(&h, &bits, 2);
  return (double)h;
}

// D += A B over the warp's fragments; the products and their sum exact (in double), rounded once.
static void host_mma(float (&d)[4], const unsigned (&mine)[6], bool bf16) {
  const int tid = hipep_host_tid(), lane = tid % HIPEP_WARP_SIZE, base = tid - lane;
  std::memcpy(mma_fragments[tid], mine, sizeof(mine));
  hipep_host_warp_barrier();
  // A[row][k]: lane 4 (row % 8) + (k % 8) / 2, register (row >= 8) + 2 (k >= 8), half k % 2
  auto a_at = [&](int row, int k) {
    return mma_value(mma_fragments[base + 4 * (row % 8) + (k % 8) / 2][(row >= 8) + 2 * (k >= 8)], k % 2, bf16);
  };
  // B[k][col]: lane 4 col + (k % 8) / 2, register 4 + (k >= 8), half k % 2
  auto b_at = [&](int k, int col) {
    return mma_value(mma_fragments[base + 4 * col + (k % 8) / 2][4 + (k >= 8)], k % 2, bf16);
  };
  const int g = lane / 4, t = lane % 4;
  float out[4];
  for (int i = 0; i < 4; ++i) {
    const int row = g + 8 * (i / 2), col = 2 * t + i % 2;
    double sum = 0.0;
    for (int k = 0; k < 16; ++k) sum += a_at(row, k) * b_at(k, col);
    out[i] = (float)((double)d[i] + sum);
  }
  hipep_host_warp_barrier();
  for (int i = 0; i < 4; ++i) d[i] = out[i];
}

void hipep_host_mma_m16n8k16(float (&d)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0,
                             unsigned b1) {
  host_mma(d, {a0, a1, a2, a3, b0, b1}, false);
}

void hipep_host_mma_m16n8k16_bf16(float (&d)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0,
                                  unsigned b1) {
  host_mma(d, {a0, a1, a2, a3, b0, b1}, true);
}
