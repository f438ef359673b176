// Candidate designs for the one-row int4 GEMV (4 bits, block 32, no zero points, fp16 A and
// scales), timed by benchmarks/gemv_study.py against hipep's own kernels and a read-only floor.
// Not product kernels: they take only the study's shapes (K a multiple of 1024, 16-byte rows).
//   read_only      the weights' loads alone (the floor for any kernel with this access pattern)
//   read_with_a    the same plus A's 32 halves per chunk from global memory (L1)
//   f32_a_l1       a full GEMV: nibbles to f32, FMA in f32, A from L1
//   h2_a_l1        nibbles to halves (one AND/OR), HFMA2, A from L1
//   h2_a_staged    h2_a_l1 with A staged once per block in shared memory as half2 pairs; a warp per
//                  output column
// C: output columns per warp; U: chunks (16 bytes) per column in flight per lane.
#include "hipep_device.h"
typedef long long i64;

// read_only: the same access pattern as a warp-per-COLS-rows GEMV, only loads and an XOR.
template <int COLS, int U>
__device__ void read_only(const unsigned char* __restrict__ B, unsigned int* __restrict__ out, i64 n, i64 row_bytes) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const i64 col0 = ((i64)blockIdx.x * warps + warp) * COLS;
  const int chunks = (int)(row_bytes / 16);
  unsigned int x = 0;
  for (int c0 = lane; c0 < chunks; c0 += 32 * U) {
    uint4 q[U][COLS];
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int c = 0; c < COLS; ++c) {
        q[u][c] = make_uint4(0, 0, 0, 0);
        if (c0 + 32 * u < chunks && col0 + c < n)
          q[u][c] = __ldg(reinterpret_cast<const uint4*>(B + (col0 + c) * row_bytes) + c0 + 32 * u);
      }
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int c = 0; c < COLS; ++c) x ^= q[u][c].x ^ q[u][c].y ^ q[u][c].z ^ q[u][c].w;
  }
  for (int o = 16; o; o >>= 1) x ^= __shfl_xor_sync(0xffffffffu, x, o);
  if (lane == 0) out[blockIdx.x * warps + warp] = x;
}

// f32_a_l1: one row of A, 4-bit weights without zero points (8): warp per COLS columns, no shared
// memory; A read from global (L1) per chunk; U chunks per column in flight per lane.
__device__ __forceinline__ void dq8(unsigned int w, float* out) {
  // 8 nibbles → floats q - 8 via the 2^23 trick
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const unsigned int b = (w >> (8 * j)) & 0xFFu;
    out[2 * j] = __int_as_float(0x4B000000u | (b & 0xFu)) - 8388616.0f;
    out[2 * j + 1] = __int_as_float(0x4B000000u | (b >> 4)) - 8388616.0f;
  }
}

template <int COLS, int U>
__device__ void f32_a_l1(const __half* __restrict__ A, const unsigned char* __restrict__ B, const __half* __restrict__ S,
                        __half* __restrict__ Y, i64 n, i64 row_bytes, i64 nb, int log2_bs) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const i64 col0 = ((i64)blockIdx.x * warps + warp) * COLS;
  const int chunks = (int)(row_bytes / 16);
  float acc[COLS];
#pragma unroll
  for (int c = 0; c < COLS; ++c) acc[c] = 0.f;
  for (int c0 = lane; c0 < chunks; c0 += 32 * U) {
    uint4 q[U][COLS];
    float s[U][COLS];
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int c = 0; c < COLS; ++c) {
        q[u][c] = make_uint4(0, 0, 0, 0);
        s[u][c] = 0.f;
        const int ch = c0 + 32 * u;
        if (ch < chunks && col0 + c < n) {
          q[u][c] = __ldg(reinterpret_cast<const uint4*>(B + (col0 + c) * row_bytes) + ch);
          s[u][c] = __half2float(S[(col0 + c) * nb + (((i64)ch * 32) >> log2_bs)]);
        }
      }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int ch = c0 + 32 * u;
      if (ch >= chunks) break;
      float a[32];
      const uint4* ap = reinterpret_cast<const uint4*>(A + (i64)ch * 32);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const uint4 v = __ldg(ap + i);
        const __half2* h = reinterpret_cast<const __half2*>(&v);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float2 f = __half22float2(h[j]);
          a[8 * i + 2 * j] = f.x;
          a[8 * i + 2 * j + 1] = f.y;
        }
      }
#pragma unroll
      for (int c = 0; c < COLS; ++c) {
        const unsigned int w[4] = {q[u][c].x, q[u][c].y, q[u][c].z, q[u][c].w};
        float p = 0.f;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          float d[8];
          dq8(w[i], d);
#pragma unroll
          for (int j = 0; j < 8; ++j) p = fmaf(a[8 * i + j], d[j], p);
        }
        acc[c] = fmaf(s[u][c], p, acc[c]);
      }
    }
  }
#pragma unroll
  for (int c = 0; c < COLS; ++c)
    for (int o = 16; o; o >>= 1) acc[c] += __shfl_xor_sync(0xffffffffu, acc[c], o);
  if (lane == 0)
#pragma unroll
    for (int c = 0; c < COLS; ++c)
      if (col0 + c < n) Y[col0 + c] = __float2half(acc[c]);
}

#define FLOOR(C, U) \
  extern "C" __global__ void __launch_bounds__(128) read_only_c##C##_u##U(const unsigned char* B, unsigned int* out, i64 n, i64 rb) { read_only<C, U>(B, out, n, rb); }
#define V2(C, U) \
  extern "C" __global__ void __launch_bounds__(128) f32_a_l1_c##C##_u##U(const __half* A, const unsigned char* B, const __half* S, __half* Y, i64 n, i64 rb, i64 nb, int l) { f32_a_l1<C, U>(A, B, S, Y, n, rb, nb, l); }
FLOOR(1, 4) FLOOR(2, 4)
V2(2, 4)

// ---- packed arithmetic -------------------------------------------------------------------------------
__device__ __forceinline__ __half2 u2h(unsigned int v) { return *reinterpret_cast<__half2*>(&v); }
__device__ __forceinline__ __half2 word_h2(unsigned int x, __half2 p0, __half2 p1, __half2 p2, __half2 p3, __half2 c_lo, __half2 c_hi) {
  const __half2 sixteenth = __float2half2_rn(0.0625f);
  const unsigned int x8 = x >> 8;
  const __half2 d0 = __hsub2(u2h((x & 0x000F000Fu) | 0x64006400u), c_lo);
  const __half2 d1 = __hfma2(u2h((x & 0x00F000F0u) | 0x64006400u), sixteenth, c_hi);
  const __half2 d2 = __hsub2(u2h((x8 & 0x000F000Fu) | 0x64006400u), c_lo);
  const __half2 d3 = __hfma2(u2h((x8 & 0x00F000F0u) | 0x64006400u), sixteenth, c_hi);
  __half2 p = __hmul2(d0, p0);
  p = __hfma2(d1, p1, p);
  p = __hfma2(d2, p2, p);
  return __hfma2(d3, p3, p);
}

// h2_a_l1: no shared memory; A's 32 halves of a chunk from global (L1), pairs built in registers.
template <int COLS, int U>
__device__ void h2_a_l1(const __half* __restrict__ A, const unsigned char* __restrict__ B, const __half* __restrict__ S,
                        __half* __restrict__ Y, i64 n, i64 row_bytes, i64 nb, int log2_bs) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const i64 col0 = ((i64)blockIdx.x * warps + warp) * COLS;
  const int chunks = (int)(row_bytes / 16);
  float acc[COLS];
#pragma unroll
  for (int c = 0; c < COLS; ++c) acc[c] = 0.f;
  const __half2 c_lo = __float2half2_rn(1032.0f), c_hi = __float2half2_rn(-72.0f);
  for (int c0 = lane; c0 < chunks; c0 += 32 * U) {
    uint4 q[U][COLS];
    float s[U][COLS];
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int c = 0; c < COLS; ++c) {
        q[u][c] = make_uint4(0, 0, 0, 0);
        s[u][c] = 0.f;
        const int ch = c0 + 32 * u;
        if (ch < chunks && col0 + c < n) {
          q[u][c] = __ldg(reinterpret_cast<const uint4*>(B + (col0 + c) * row_bytes) + ch);
          s[u][c] = __half2float(S[(col0 + c) * nb + (((i64)ch * 32) >> log2_bs)]);
        }
      }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int ch = c0 + 32 * u;
      if (ch >= chunks) break;
      const uint4* ap = reinterpret_cast<const uint4*>(A + (i64)ch * 32);
      uint4 av[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) av[i] = __ldg(ap + i);
#pragma unroll
      for (int c = 0; c < COLS; ++c) {
        const unsigned int w[4] = {q[u][c].x, q[u][c].y, q[u][c].z, q[u][c].w};
        float part = 0.f;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const __half2* h = reinterpret_cast<const __half2*>(&av[i]);  // (a0,a1) (a2,a3) (a4,a5) (a6,a7)
          const __half2 p0 = __lows2half2(h[0], h[2]), p1 = __highs2half2(h[0], h[2]);
          const __half2 p2 = __lows2half2(h[1], h[3]), p3 = __highs2half2(h[1], h[3]);
          const float2 f = __half22float2(word_h2(w[i], p0, p1, p2, p3, c_lo, c_hi));
          part += f.x + f.y;
        }
        acc[c] = fmaf(s[u][c], part, acc[c]);
      }
    }
  }
#pragma unroll
  for (int c = 0; c < COLS; ++c)
    for (int o = 16; o; o >>= 1) acc[c] += __shfl_xor_sync(0xffffffffu, acc[c], o);
  if (lane == 0)
#pragma unroll
    for (int c = 0; c < COLS; ++c)
      if (col0 + c < n) Y[col0 + c] = __float2half(acc[c]);
}

// read_with_a: the read floor plus A's 4 uint4 per chunk from global.
template <int COLS, int U>
__device__ void read_with_a(const __half* __restrict__ A, const unsigned char* __restrict__ B, unsigned int* out, i64 n, i64 row_bytes) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const i64 col0 = ((i64)blockIdx.x * warps + warp) * COLS;
  const int chunks = (int)(row_bytes / 16);
  unsigned int x = 0;
  for (int c0 = lane; c0 < chunks; c0 += 32 * U) {
    uint4 q[U][COLS];
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int c = 0; c < COLS; ++c) {
        q[u][c] = make_uint4(0, 0, 0, 0);
        if (c0 + 32 * u < chunks && col0 + c < n)
          q[u][c] = __ldg(reinterpret_cast<const uint4*>(B + (col0 + c) * row_bytes) + c0 + 32 * u);
      }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (c0 + 32 * u >= chunks) break;
      const uint4* ap = reinterpret_cast<const uint4*>(A + (i64)(c0 + 32 * u) * 32);
#pragma unroll
      for (int i = 0; i < 4; ++i) { const uint4 a = __ldg(ap + i); x ^= a.x ^ a.w; }
#pragma unroll
      for (int c = 0; c < COLS; ++c) x ^= q[u][c].x ^ q[u][c].y ^ q[u][c].z ^ q[u][c].w;
    }
  }
  for (int o = 16; o; o >>= 1) x ^= __shfl_xor_sync(0xffffffffu, x, o);
  if (lane == 0) out[blockIdx.x * warps + warp] = x;
}

#define V3(C, U) \
  extern "C" __global__ void __launch_bounds__(128) h2_a_l1_c##C##_u##U(const __half* A, const unsigned char* B, const __half* S, __half* Y, i64 n, i64 rb, i64 nb, int l) { h2_a_l1<C, U>(A, B, S, Y, n, rb, nb, l); }
#define FA(C, U) \
  extern "C" __global__ void __launch_bounds__(128) read_with_a_c##C##_u##U(const __half* A, const unsigned char* B, unsigned int* out, i64 n, i64 rb) { read_with_a<C, U>(A, B, out, n, rb); }
V3(1, 4) V3(2, 4) V3(2, 2)
FA(1, 4) FA(2, 4)

// ---- A staged once per block as half2 pairs, a warp per column ----------------------------------------
template <bool A_FIRST, int U, int AW>
__device__ void h2_a_staged(const __half* __restrict__ A, const unsigned char* __restrict__ B, const __half* __restrict__ S,
                       __half* __restrict__ Y, int n, int row_bytes, int nb, int log2_bs, int k) {
  extern __shared__ uint4 planes[];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, W = blockDim.x / 32;
  const int col = blockIdx.x * W + warp;
  const int chunks = row_bytes / 16;
  const int words = k / 8;
  uint4 av[AW];
  uint4 q[U];
  float s[U];
  const unsigned char* brow = B + (i64)(col < n ? col : 0) * row_bytes;
  const __half* srow = S + (i64)(col < n ? col : 0) * nb;
  auto load_b = [&](int c0) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int ch = c0 + 32 * u;
      q[u] = make_uint4(0, 0, 0, 0);
      s[u] = 0.f;
      if (ch < chunks && col < n) {
        q[u] = __ldg(reinterpret_cast<const uint4*>(brow) + ch);
        s[u] = __half2float(srow[(ch * 32) >> log2_bs]);
      }
    }
  };
  auto load_a = [&]() {
#pragma unroll
    for (int i = 0; i < AW; ++i) {
      const int w = threadIdx.x + i * blockDim.x;
      if (w < words) av[i] = __ldg(reinterpret_cast<const uint4*>(A) + w);
    }
  };
  if (A_FIRST) { load_a(); load_b(lane); } else { load_b(lane); load_a(); }
#pragma unroll
  for (int i = 0; i < AW; ++i) {
    const int w = threadIdx.x + i * blockDim.x;
    if (w < words) {
      const __half2* h = reinterpret_cast<const __half2*>(&av[i]);
      const __half2 p0 = __lows2half2(h[0], h[2]), p1 = __highs2half2(h[0], h[2]);
      const __half2 p2 = __lows2half2(h[1], h[3]), p3 = __highs2half2(h[1], h[3]);
      uint4 o;
      o.x = *reinterpret_cast<const unsigned int*>(&p0);
      o.y = *reinterpret_cast<const unsigned int*>(&p1);
      o.z = *reinterpret_cast<const unsigned int*>(&p2);
      o.w = *reinterpret_cast<const unsigned int*>(&p3);
      planes[(w & 3) * (words / 4) + (w >> 2)] = o;
    }
  }
  __syncthreads();
  const int pc = words / 4;
  const __half2 c_lo = __float2half2_rn(1032.0f), c_hi = __float2half2_rn(-72.0f);
  float acc = 0.f;
  for (int c0 = lane; c0 < chunks; c0 += 32 * U) {
    if (c0 != lane) load_b(c0);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int ch = c0 + 32 * u;
      if (ch >= chunks) break;
      const uint4 a0 = planes[ch], a1 = planes[pc + ch], a2 = planes[2 * pc + ch], a3 = planes[3 * pc + ch];
      float part;
      float2 f = __half22float2(word_h2(q[u].x, u2h(a0.x), u2h(a0.y), u2h(a0.z), u2h(a0.w), c_lo, c_hi));
      part = f.x + f.y;
      f = __half22float2(word_h2(q[u].y, u2h(a1.x), u2h(a1.y), u2h(a1.z), u2h(a1.w), c_lo, c_hi));
      part += f.x + f.y;
      f = __half22float2(word_h2(q[u].z, u2h(a2.x), u2h(a2.y), u2h(a2.z), u2h(a2.w), c_lo, c_hi));
      part += f.x + f.y;
      f = __half22float2(word_h2(q[u].w, u2h(a3.x), u2h(a3.y), u2h(a3.z), u2h(a3.w), c_lo, c_hi));
      part += f.x + f.y;
      acc = fmaf(s[u], part, acc);
    }
  }
  for (int o = 16; o; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (lane == 0 && col < n) Y[col] = __float2half(acc);
}
#define PK(AF, U, AW) \
  extern "C" __global__ void __launch_bounds__(512) h2_a_staged_a##AF##_u##U##_w##AW(const __half* A, const unsigned char* B, const __half* S, __half* Y, int n, int rb, int nb, int l, int k) { h2_a_staged<AF, U, AW>(A, B, S, Y, n, rb, nb, l, k); }
PK(1, 4, 1) PK(1, 4, 2) PK(1, 4, 4) PK(1, 2, 1) PK(1, 2, 2) PK(1, 2, 4)

// ---- persistent warps: one wave of blocks, each warp over columns col, col + stride, ... -----------------
//   h2_persist     A staged once per block; every lane holds its whole share of a column's row (U chunks,
//                  U * 32 >= the row's chunks) and issues the next column's loads before it computes the
//                  current one, so the weights stream while the SM computes (a launch of several waves
//                  otherwise pays a load round trip and A's staging per wave)
//   HACC           a chunk's four words summed in half2 (one conversion to f32 per chunk, not per word)
template <int U, bool HACC>
__device__ __forceinline__ float h2_chunk(uint4 q, const uint4* planes, int pc, int ch, __half2 c_lo, __half2 c_hi) {
  const uint4 a0 = planes[ch], a1 = planes[pc + ch], a2 = planes[2 * pc + ch], a3 = planes[3 * pc + ch];
  const __half2 w0 = word_h2(q.x, u2h(a0.x), u2h(a0.y), u2h(a0.z), u2h(a0.w), c_lo, c_hi);
  const __half2 w1 = word_h2(q.y, u2h(a1.x), u2h(a1.y), u2h(a1.z), u2h(a1.w), c_lo, c_hi);
  const __half2 w2 = word_h2(q.z, u2h(a2.x), u2h(a2.y), u2h(a2.z), u2h(a2.w), c_lo, c_hi);
  const __half2 w3 = word_h2(q.w, u2h(a3.x), u2h(a3.y), u2h(a3.z), u2h(a3.w), c_lo, c_hi);
  if (HACC) {
    const float2 f = __half22float2(__hadd2(__hadd2(w0, w1), __hadd2(w2, w3)));
    return f.x + f.y;
  }
  float2 f = __half22float2(w0);
  float part = f.x + f.y;
  f = __half22float2(w1); part += f.x + f.y;
  f = __half22float2(w2); part += f.x + f.y;
  f = __half22float2(w3); part += f.x + f.y;
  return part;
}

template <int U, int AW, bool HACC>
__device__ void h2_persist(const __half* __restrict__ A, const unsigned char* __restrict__ B, const __half* __restrict__ S,
                           __half* __restrict__ Y, int n, int row_bytes, int nb, int log2_bs, int k) {
  extern __shared__ uint4 planes[];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, W = blockDim.x / 32;
  const int stride = gridDim.x * W;
  const int chunks = row_bytes / 16, words = k / 8, pc = words / 4;
  int col = blockIdx.x * W + warp;
  uint4 q[U], qn[U];
  float s[U], sn[U];
  auto load = [&](int c, uint4 (&qq)[U], float (&ss)[U]) {
    const uint4* brow = reinterpret_cast<const uint4*>(B + (i64)(c < n ? c : 0) * row_bytes);
    const __half* srow = S + (i64)(c < n ? c : 0) * nb;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int ch = lane + 32 * u;
      qq[u] = make_uint4(0, 0, 0, 0);
      ss[u] = 0.f;
      if (ch < chunks && c < n) {
        qq[u] = __ldg(brow + ch);
        ss[u] = __half2float(srow[(ch * 32) >> log2_bs]);
      }
    }
  };
  load(col, q, s);
  uint4 av[AW];
#pragma unroll
  for (int i = 0; i < AW; ++i) {
    const int w = threadIdx.x + i * blockDim.x;
    if (w < words) av[i] = __ldg(reinterpret_cast<const uint4*>(A) + w);
  }
#pragma unroll
  for (int i = 0; i < AW; ++i) {
    const int w = threadIdx.x + i * blockDim.x;
    if (w < words) {
      const __half2* h = reinterpret_cast<const __half2*>(&av[i]);
      const __half2 p0 = __lows2half2(h[0], h[2]), p1 = __highs2half2(h[0], h[2]);
      const __half2 p2 = __lows2half2(h[1], h[3]), p3 = __highs2half2(h[1], h[3]);
      uint4 o;
      o.x = *reinterpret_cast<const unsigned int*>(&p0);
      o.y = *reinterpret_cast<const unsigned int*>(&p1);
      o.z = *reinterpret_cast<const unsigned int*>(&p2);
      o.w = *reinterpret_cast<const unsigned int*>(&p3);
      planes[(w & 3) * pc + (w >> 2)] = o;
    }
  }
  __syncthreads();
  const __half2 c_lo = __float2half2_rn(1032.0f), c_hi = __float2half2_rn(-72.0f);
  while (col < n) {
    const int next = col + stride;
    load(next, qn, sn);  // in flight while this column is computed
    float acc = 0.f;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int ch = lane + 32 * u;
      if (ch < chunks) acc = fmaf(s[u], h2_chunk<U, HACC>(q[u], planes, pc, ch, c_lo, c_hi), acc);
    }
    for (int o = 16; o; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) Y[col] = __float2half(acc);
#pragma unroll
    for (int u = 0; u < U; ++u) { q[u] = qn[u]; s[u] = sn[u]; }
    col = next;
  }
}
#define PP(U, AW, HACC) \
  extern "C" __global__ void __launch_bounds__(256) h2_persist_u##U##_w##AW##_h##HACC(const __half* A, const unsigned char* B, const __half* S, __half* Y, int n, int rb, int nb, int l, int k) { h2_persist<U, AW, HACC>(A, B, S, Y, n, rb, nb, l, k); }
PP(2, 1, 0) PP(4, 2, 0) PP(8, 4, 0) PP(2, 1, 1) PP(4, 2, 1) PP(8, 4, 1)

// h2_a_staged with a chunk's words summed in half2 (HACC), one wave or more of plain blocks
template <int U, int AW>
__device__ void h2_staged_hacc(const __half* __restrict__ A, const unsigned char* __restrict__ B, const __half* __restrict__ S,
                               __half* __restrict__ Y, int n, int row_bytes, int nb, int log2_bs, int k) {
  extern __shared__ uint4 planes[];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, W = blockDim.x / 32;
  const int col = blockIdx.x * W + warp;
  const int chunks = row_bytes / 16, words = k / 8, pc = words / 4;
  const unsigned char* brow = B + (i64)(col < n ? col : 0) * row_bytes;
  const __half* srow = S + (i64)(col < n ? col : 0) * nb;
  uint4 q[U];
  float s[U];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int ch = lane + 32 * u;
    q[u] = make_uint4(0, 0, 0, 0);
    s[u] = 0.f;
    if (ch < chunks && col < n) {
      q[u] = __ldg(reinterpret_cast<const uint4*>(brow) + ch);
      s[u] = __half2float(srow[(ch * 32) >> log2_bs]);
    }
  }
  uint4 av[AW];
#pragma unroll
  for (int i = 0; i < AW; ++i) {
    const int w = threadIdx.x + i * blockDim.x;
    if (w < words) av[i] = __ldg(reinterpret_cast<const uint4*>(A) + w);
  }
#pragma unroll
  for (int i = 0; i < AW; ++i) {
    const int w = threadIdx.x + i * blockDim.x;
    if (w < words) {
      const __half2* h = reinterpret_cast<const __half2*>(&av[i]);
      const __half2 p0 = __lows2half2(h[0], h[2]), p1 = __highs2half2(h[0], h[2]);
      const __half2 p2 = __lows2half2(h[1], h[3]), p3 = __highs2half2(h[1], h[3]);
      uint4 o;
      o.x = *reinterpret_cast<const unsigned int*>(&p0);
      o.y = *reinterpret_cast<const unsigned int*>(&p1);
      o.z = *reinterpret_cast<const unsigned int*>(&p2);
      o.w = *reinterpret_cast<const unsigned int*>(&p3);
      planes[(w & 3) * pc + (w >> 2)] = o;
    }
  }
  __syncthreads();
  const __half2 c_lo = __float2half2_rn(1032.0f), c_hi = __float2half2_rn(-72.0f);
  float acc = 0.f;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int ch = lane + 32 * u;
    if (ch < chunks) acc = fmaf(s[u], h2_chunk<U, true>(q[u], planes, pc, ch, c_lo, c_hi), acc);
  }
  for (int o = 16; o; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (lane == 0 && col < n) Y[col] = __float2half(acc);
}
#define PH(U, AW) \
  extern "C" __global__ void __launch_bounds__(256) h2_staged_hacc_u##U##_w##AW(const __half* A, const unsigned char* B, const __half* S, __half* Y, int n, int rb, int nb, int l, int k) { h2_staged_hacc<U, AW>(A, B, S, Y, n, rb, nb, l, k); }
PH(2, 1) PH(4, 2) PH(8, 4)

// ---- one round per lane, load order and overlap with the previous launch --------------------------------
//   h2_row1   a warp a column, each lane's whole share of the row (U chunks) in one round of loads.
//   ORDER 0: A's loads, then B's; 1: B's, then A's; 2: programmatic dependent launch as hipep's kernels do
//   it (release the next grid at once, B's loads, wait for the previous grid, then A's)
template <int U, int AW, int ORDER, bool HACC>
__device__ void h2_row1(const __half* __restrict__ A, const unsigned char* __restrict__ B, const __half* __restrict__ S,
                        __half* __restrict__ Y, int n, int row_bytes, int nb, int log2_bs, int k) {
  extern __shared__ uint4 planes[];
  if (ORDER == 2) hipep_grid_release();
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, W = blockDim.x / 32;
  const int col = blockIdx.x * W + warp;
  const int chunks = row_bytes / 16, words = k / 8, pc = words / 4;
  const unsigned char* brow = B + (i64)(col < n ? col : 0) * row_bytes;
  const __half* srow = S + (i64)(col < n ? col : 0) * nb;
  uint4 q[U], av[AW];
  float s[U];
  auto load_b = [&]() {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int ch = lane + 32 * u;
      q[u] = make_uint4(0, 0, 0, 0);
      s[u] = 0.f;
      if (ch < chunks && col < n) {
        // overlapped (ORDER 2): ld.global.cs, which ptxas leaves ahead of the wait (it hoists the
        // wait above every ld.global.nc); otherwise the read-only path
        q[u] = ORDER == 2 ? hipep_ld_stream(reinterpret_cast<const uint4*>(brow) + ch)
                          : __ldg(reinterpret_cast<const uint4*>(brow) + ch);
        s[u] = __half2float(ORDER == 2 ? hipep_ld_stream(srow + ((ch * 32) >> log2_bs)) : srow[(ch * 32) >> log2_bs]);
      }
    }
  };
  auto load_a = [&]() {
#pragma unroll
    for (int i = 0; i < AW; ++i) {
      const int w = threadIdx.x + i * blockDim.x;
      // overlapped: coherent loads after the wait (hipep_ld_produced), as hipep's kernels
      if (w < words) av[i] = ORDER == 2 ? hipep_ld_produced(reinterpret_cast<const uint4*>(A) + w)
                                        : __ldg(reinterpret_cast<const uint4*>(A) + w);
    }
  };
  if (ORDER == 0) { load_a(); load_b(); }
  else if (ORDER == 1) { load_b(); load_a(); }
  else { load_b(); hipep_grid_wait(); load_a(); }
#pragma unroll
  for (int i = 0; i < AW; ++i) {
    const int w = threadIdx.x + i * blockDim.x;
    if (w < words) {
      const __half2* h = reinterpret_cast<const __half2*>(&av[i]);
      const __half2 p0 = __lows2half2(h[0], h[2]), p1 = __highs2half2(h[0], h[2]);
      const __half2 p2 = __lows2half2(h[1], h[3]), p3 = __highs2half2(h[1], h[3]);
      uint4 o;
      o.x = *reinterpret_cast<const unsigned int*>(&p0);
      o.y = *reinterpret_cast<const unsigned int*>(&p1);
      o.z = *reinterpret_cast<const unsigned int*>(&p2);
      o.w = *reinterpret_cast<const unsigned int*>(&p3);
      planes[(w & 3) * pc + (w >> 2)] = o;
    }
  }
  __syncthreads();
  const __half2 c_lo = __float2half2_rn(1032.0f), c_hi = __float2half2_rn(-72.0f);
  float acc = 0.f;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int ch = lane + 32 * u;
    if (ch < chunks) acc = fmaf(s[u], h2_chunk<U, HACC>(q[u], planes, pc, ch, c_lo, c_hi), acc);
  }
  for (int o = 16; o; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (lane == 0 && col < n) Y[col] = __float2half(acc);
}
#define PR(U, AW, ORDER, HACC) \
  extern "C" __global__ void __launch_bounds__(256) h2_row1_u##U##_w##AW##_o##ORDER##_h##HACC(const __half* A, const unsigned char* B, const __half* S, __half* Y, int n, int rb, int nb, int l, int k) { h2_row1<U, AW, ORDER, HACC>(A, B, S, Y, n, rb, nb, l, k); }
#define PR_ALL(U, AW) PR(U, AW, 0, 0) PR(U, AW, 1, 0) PR(U, AW, 2, 0) PR(U, AW, 0, 1) PR(U, AW, 2, 1)
PR_ALL(2, 1) PR_ALL(4, 2) PR_ALL(8, 4)

// ---- K split among the warps of a column (grids short of a wave: the down and o projections) ----------------
//   h2_splitk   S warps per output column, each on every S-th run of 32 * U chunks of the row, one round of
//               loads a lane; the S partial sums meet in shared memory. 8 / S columns a block, so N * S / 8
//               blocks: the down projection (N 2048, K 8192) fills 512 or 1024 blocks instead of 256.
//   ORDER as h2_row1 (0: A then B, plain launches; 2: B, wait, A, overlapped launches)
template <int U, int AW, int S, int ORDER>
__device__ void h2_splitk(const __half* __restrict__ A, const unsigned char* __restrict__ B, const __half* __restrict__ S_,
                          __half* __restrict__ Y, int n, int row_bytes, int nb, int log2_bs, int k) {
  extern __shared__ uint4 planes[];
  __shared__ float partial[8];
  if (ORDER == 2) hipep_grid_release();
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, W = blockDim.x / 32;
  const int col = blockIdx.x * (W / S) + warp / S, part = warp % S;
  const int chunks = row_bytes / 16, words = k / 8, pc = words / 4;
  const unsigned char* brow = B + (i64)(col < n ? col : 0) * row_bytes;
  const __half* srow = S_ + (i64)(col < n ? col : 0) * nb;
  uint4 q[U], av[AW];
  float s[U];
  auto load_b = [&]() {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int ch = (part * U + u) * 32 + lane;
      q[u] = make_uint4(0, 0, 0, 0);
      s[u] = 0.f;
      if (ch < chunks && col < n) {
        // overlapped (ORDER 2): ld.global.cs, which ptxas leaves ahead of the wait (it hoists the
        // wait above every ld.global.nc); otherwise the read-only path
        q[u] = ORDER == 2 ? hipep_ld_stream(reinterpret_cast<const uint4*>(brow) + ch)
                          : __ldg(reinterpret_cast<const uint4*>(brow) + ch);
        s[u] = __half2float(ORDER == 2 ? hipep_ld_stream(srow + ((ch * 32) >> log2_bs)) : srow[(ch * 32) >> log2_bs]);
      }
    }
  };
  auto load_a = [&]() {
#pragma unroll
    for (int i = 0; i < AW; ++i) {
      const int w = threadIdx.x + i * blockDim.x;
      // overlapped: coherent loads after the wait (hipep_ld_produced), as hipep's kernels
      if (w < words) av[i] = ORDER == 2 ? hipep_ld_produced(reinterpret_cast<const uint4*>(A) + w)
                                        : __ldg(reinterpret_cast<const uint4*>(A) + w);
    }
  };
  if (ORDER == 0) { load_a(); load_b(); }
  else { load_b(); hipep_grid_wait(); load_a(); }
#pragma unroll
  for (int i = 0; i < AW; ++i) {
    const int w = threadIdx.x + i * blockDim.x;
    if (w < words) {
      const __half2* h = reinterpret_cast<const __half2*>(&av[i]);
      const __half2 p0 = __lows2half2(h[0], h[2]), p1 = __highs2half2(h[0], h[2]);
      const __half2 p2 = __lows2half2(h[1], h[3]), p3 = __highs2half2(h[1], h[3]);
      uint4 o;
      o.x = *reinterpret_cast<const unsigned int*>(&p0);
      o.y = *reinterpret_cast<const unsigned int*>(&p1);
      o.z = *reinterpret_cast<const unsigned int*>(&p2);
      o.w = *reinterpret_cast<const unsigned int*>(&p3);
      planes[(w & 3) * pc + (w >> 2)] = o;
    }
  }
  __syncthreads();
  const __half2 c_lo = __float2half2_rn(1032.0f), c_hi = __float2half2_rn(-72.0f);
  float acc = 0.f;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int ch = (part * U + u) * 32 + lane;
    if (ch < chunks) acc = fmaf(s[u], h2_chunk<U, false>(q[u], planes, pc, ch, c_lo, c_hi), acc);
  }
  for (int o = 16; o; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (lane == 0) partial[warp] = acc;
  __syncthreads();
  if (lane == 0 && part == 0 && col < n) {
    float sum = 0.f;
#pragma unroll
    for (int p = 0; p < S; ++p) sum += partial[warp + p];
    Y[col] = __float2half(sum);
  }
}
#define PS(U, AW, SPLIT, ORDER) \
  extern "C" __global__ void __launch_bounds__(256) h2_splitk_u##U##_w##AW##_s##SPLIT##_o##ORDER(const __half* A, const unsigned char* B, const __half* S, __half* Y, int n, int rb, int nb, int l, int k) { h2_splitk<U, AW, SPLIT, ORDER>(A, B, S, Y, n, rb, nb, l, k); }
// K 8192 (256 chunks): S 2 with U 4, S 4 with U 2; K 2048 (64 chunks): S 2 with U 1; K 4096 (128): S 2 with U 2, S 4 with U 1
PS(4, 4, 2, 0) PS(4, 4, 2, 2) PS(2, 4, 4, 0) PS(2, 4, 4, 2)
PS(1, 1, 2, 0) PS(1, 1, 2, 2)
PS(2, 2, 2, 0) PS(2, 2, 2, 2) PS(1, 2, 4, 0) PS(1, 2, 4, 2)

// ---- bulk copies (TMA, NVIDIA sm_90+): a block's columns requested whole at its start ------------------
// h2_bulk: thread 0 issues one cp.async.bulk per stage (C / STAGES consecutive columns of B, contiguous
// in memory) into shared memory, each completing its own mbarrier, as soon as the block starts: all of
// the block's weights are in flight at once, without registers holding them. Meanwhile the block stages
// A as h2_a_staged does; warp w then waits for the stage holding its columns and computes from shared
// memory (scales from global). C columns a block, C / 8 a warp. Launched overlapping the kernel ahead,
// the bulk copies go out before the block waits for that kernel (only A is produced by it).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
__device__ __forceinline__ unsigned int smem_addr(const void* p) { return (unsigned int)__cvta_generic_to_shared(p); }
#endif

template <int C, int STAGES>
__device__ void h2_bulk(const __half* __restrict__ A, const unsigned char* __restrict__ B, const __half* __restrict__ S,
                        __half* __restrict__ Y, int n, int row_bytes, int nb, int log2_bs, int k) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(128) unsigned char smem[];
  unsigned long long* bars = reinterpret_cast<unsigned long long*>(smem);
  unsigned char* wsm = smem + 128;
  uint4* planes = reinterpret_cast<uint4*>(wsm + C * row_bytes);
  const int col0 = blockIdx.x * C;
  const int cols = min(C, n - col0);
  constexpr int PER = C / STAGES;
  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < STAGES; ++s)
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(bars + s)) : "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#pragma unroll
    for (int s = 0; s < STAGES; ++s) {
      const int c = min(PER, cols - s * PER);
      const unsigned int bytes = c > 0 ? (unsigned int)(c * row_bytes) : 0u;
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bars + s)), "r"(bytes)
                   : "memory");
      if (bytes)
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                     ::"r"(smem_addr(wsm + s * PER * row_bytes)), "l"(B + (i64)(col0 + s * PER) * row_bytes),
                       "r"(bytes), "r"(smem_addr(bars + s))
                     : "memory");
    }
  }
  // the weights are the session's: requested before the wait for the kernel ahead, which may write A
  hipep_grid_release();
  hipep_grid_wait();
  const int words = k / 8;
  for (int w = threadIdx.x; w < words; w += blockDim.x) {
    const uint4 v = hipep_ld_produced(reinterpret_cast<const uint4*>(A) + w);
    const __half2* h = reinterpret_cast<const __half2*>(&v);
    const __half2 p0 = __lows2half2(h[0], h[2]), p1 = __highs2half2(h[0], h[2]);
    const __half2 p2 = __lows2half2(h[1], h[3]), p3 = __highs2half2(h[1], h[3]);
    uint4 o;
    o.x = *reinterpret_cast<const unsigned int*>(&p0);
    o.y = *reinterpret_cast<const unsigned int*>(&p1);
    o.z = *reinterpret_cast<const unsigned int*>(&p2);
    o.w = *reinterpret_cast<const unsigned int*>(&p3);
    planes[(w & 3) * (words / 4) + (w >> 2)] = o;
  }
  __syncthreads();  // A staged; the barriers initialized
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  constexpr int CW = C / 8;  // columns a warp (8 warps)
  const int chunks = row_bytes / 16, pc = words / 4;
  const __half2 c_lo = __float2half2_rn(1032.0f), c_hi = __float2half2_rn(-72.0f);
  const int stage = (warp * CW) / PER;
  {
    unsigned int done = 0;
    while (!done)
      asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0; selp.u32 %0, 1, 0, p; }"
                   : "=r"(done) : "r"(smem_addr(bars + stage)) : "memory");
  }
#pragma unroll
  for (int j = 0; j < CW; ++j) {
    const int c = warp * CW + j;
    if (c >= cols) break;
    const uint4* brow = reinterpret_cast<const uint4*>(wsm + c * row_bytes);
    const __half* srow = S + (i64)(col0 + c) * nb;
    float acc = 0.f;
    for (int ch = lane; ch < chunks; ch += 32) {
      const uint4 q = brow[ch];
      const float s = __half2float(__ldg(srow + ((ch * 32) >> log2_bs)));
      const uint4 a0 = planes[ch], a1 = planes[pc + ch], a2 = planes[2 * pc + ch], a3 = planes[3 * pc + ch];
      __half2 p = word_h2(q.x, u2h(a0.x), u2h(a0.y), u2h(a0.z), u2h(a0.w), c_lo, c_hi);
      p = __hadd2(p, word_h2(q.y, u2h(a1.x), u2h(a1.y), u2h(a1.z), u2h(a1.w), c_lo, c_hi));
      float2 f = __half22float2(p);
      float part = f.x + f.y;
      p = word_h2(q.z, u2h(a2.x), u2h(a2.y), u2h(a2.z), u2h(a2.w), c_lo, c_hi);
      p = __hadd2(p, word_h2(q.w, u2h(a3.x), u2h(a3.y), u2h(a3.z), u2h(a3.w), c_lo, c_hi));
      f = __half22float2(p);
      part += f.x + f.y;
      acc = fmaf(s, part, acc);
    }
    for (int o = 16; o; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) Y[col0 + c] = __float2half(acc);
  }
#endif
}
#define PB(C, STAGES) \
  extern "C" __global__ void __launch_bounds__(256) h2_bulk_c##C##_s##STAGES(const __half* A, const unsigned char* B, const __half* S, __half* Y, int n, int rb, int nb, int l, int k) { h2_bulk<C, STAGES>(A, B, S, Y, n, rb, nb, l, k); }
PB(8, 1) PB(8, 2) PB(16, 2) PB(16, 4) PB(32, 4)

// ---- hipep's row1 template with COLS output columns a warp ---------------------------------------
// A warp's lanes load one round of every column's chunks, and each of A's staged pairs read from
// shared memory serves all COLS columns. With two columns a warp a 4096-wide grid takes half the
// warps (and, at <= 64 registers, half the register file) of an SM: the next kernel's blocks, launched
// early (overlapped launches), find room beside it and issue their weight loads while it computes.
#include "matmul_nbits_row.h"
#define PC(U, C, S, LB)                                                                             \
  HIPEP_KERNEL void __launch_bounds__(MNB_WARPS * HIPEP_WARP_SIZE, LB)                               \
      row1_cols_u##U##_c##C##_s##S##_lb##LB(HIPEP_MNB_PARAMS(hipep_half)) {                          \
    hipep_mnb_gemv_row1<hipep_half, false, U, false, S, hipep_mnb_a_loaded<hipep_half>, C>(          \
        hipep_mnb_a_loaded<hipep_half>{A}, B, scales, zp, bias, Y, a);                               \
  }
// K = 2048 (64 chunks): U 2, or U 1 with two warps a column
PC(2, 2, 1, 4) PC(2, 4, 1, 3) PC(2, 8, 1, 2) PC(1, 4, 2, 4) PC(1, 8, 2, 3) PC(2, 4, 1, 4) PC(2, 2, 1, 5)
// K = 4096 (128 chunks): U 4, or U 2 with two warps a column, or U 1 with four
PC(4, 2, 1, 3) PC(4, 4, 1, 2) PC(2, 2, 2, 4) PC(2, 4, 2, 3) PC(1, 4, 4, 4) PC(1, 8, 4, 3) PC(2, 8, 2, 2)
// K = 8192 (256 chunks): U 4 with two warps a column, U 2 with four
PC(4, 1, 2, 5) PC(4, 2, 2, 3) PC(2, 2, 4, 4) PC(2, 4, 4, 3) PC(4, 4, 2, 2)
