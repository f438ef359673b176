// Shared by kernels/matmul_nbits.hip (the general GEMV and the GEMM) and kernels/matmul_nbits_row.hip
// (the one-row GEMV in packed arithmetic): the launch arguments, the decoding of B's words, zero
// points, the int8 quantization of A as MLAS does it, and the GEMVs' loads of B. The layout of
// MatMulNBits' operands is described at the top of matmul_nbits.hip.
#ifndef HIPEP_MATMUL_NBITS_H
#define HIPEP_MATMUL_NBITS_H

#include "hipep_device.h"


struct hipep_mnb_args {
  hipep_i64 m;          // rows of A (product of A's leading dims)
  hipep_i64 n;          // N
  hipep_i64 k;          // K: A's row length
  hipep_i64 k_pad;      // n_blocks * block_size: B's row length in values
  hipep_i64 row_bytes;  // n_blocks * blob
  hipep_i64 nb;         // n_blocks
  hipep_i64 zp_row;     // bytes per row of packed zero points
  int log2_bs;          // log2(block_size)
  int k_tile;           // GEMV: values of K per shared-memory tile (a multiple of a chunk's values)
  int zp_mode;          // 0: none (2^(BITS-1)), 1: packed uint8, 2: floats of T
  int aligned16;        // GEMV: every row of B starts 16-byte aligned (one 16-byte load per chunk)
  int k_split;          // GEMV: warps sharing a column group, each on every k_split-th run of chunks
  int a_vec;            // GEMV: K % 4 == 0 and A aligned to 4 elements (A staged 4 values at a time)
  int int8_a;           // accuracy_level 4, integer zero points: A quantized to int8 per block (above)
};

#define MNB_WARPS 8
#define MNB_COLS 2       // output columns per warp (MNB_COLS_WIDE: the wide one-row variant)
#define MNB_COLS_WIDE 4
#define MNB_PAD 4

// The float 2^23 + v for the byte `b` (0..3) of w: its bits 0x4B0000vv.
HIPEP_DEVICE float hipep_mnb_byte_float(unsigned int w, int b) {
  return __uint_as_float(__byte_perm(w, 0x4B000000u, 0x7440u | (unsigned)b));
}

// q - bias for the values of one 32-bit word of B (8 4-bit values or 4 8-bit values, in order).
template <int BITS> HIPEP_DEVICE void hipep_mnb_word(unsigned int w, float bias, float* out);

template <> HIPEP_DEVICE void hipep_mnb_word<4>(unsigned int w, float bias, float* out) {
  const unsigned int lo = w & 0x0F0F0F0Fu, hi = (w >> 4) & 0x0F0F0F0Fu;
#pragma unroll
  for (int b = 0; b < 4; ++b) {
    out[2 * b] = hipep_mnb_byte_float(lo, b) - bias;
    out[2 * b + 1] = hipep_mnb_byte_float(hi, b) - bias;
  }
}

template <> HIPEP_DEVICE void hipep_mnb_word<8>(unsigned int w, float bias, float* out) {
#pragma unroll
  for (int b = 0; b < 4; ++b) out[b] = hipep_mnb_byte_float(w, b) - bias;
}

// The zero point of block `blk` of row n as a float.
template <typename T, int BITS>
HIPEP_DEVICE float hipep_mnb_zero_point(const void* zp, hipep_i64 n, hipep_i64 blk, const hipep_mnb_args& a) {
  if (a.zp_mode == 0) return (float)(1 << (BITS - 1));
  if (a.zp_mode == 2) return hipep_to_float(static_cast<const T*>(zp)[n * a.nb + blk]);
  const unsigned char* z = static_cast<const unsigned char*>(zp) + n * a.zp_row;
  if (BITS == 8) return (float)z[blk];
  return (float)((z[blk >> 1] >> ((blk & 1) * 4)) & 0xF);
}

// ---- int8 quantization of A (accuracy_level 4) --------------------------------------------------

// (scale, inverse) of a block of A with max |a| = amax, as MLAS computes them (IEEE divisions).
HIPEP_DEVICE float2 hipep_mnb_int8_params(float amax) {
  return make_float2(amax / 127.0f, amax != 0.0f ? 127.0f / amax : 0.0f);
}

// a' = q * scale with q = rint(a * inverse): the value the int8 code stands for.
HIPEP_DEVICE float hipep_mnb_int8_value(float v, float2 p) { return rintf(v * p.y) * p.x; }

// The maximum over an aligned group of `lanes` lanes (a power of two up to the warp size); every
// lane of the warp calls it with the same `lanes`.
HIPEP_DEVICE float hipep_mnb_group_max(float v, int lanes) {
  for (int o = lanes >> 1; o > 0; o >>= 1) v = fmaxf(v, HIPEP_SHFL_XOR(v, o));
  return v;
}

// ---- loads of B shared by the GEMVs ---------------------------------------------------------------

template <typename T> struct alignas(4 * sizeof(T)) hipep_mnb_vec4 { T v[4]; };


// Loads of one step of a lane: chunks ch0 + u * step (u < U) of the tile at kt, for the warp's
// columns (zeros past the tile or past N), with the scale and zero point of each chunk's first
// half, all issued before any is used, so that none of them waits for another.
template <typename T, int BITS, int C, int U>
HIPEP_DEVICE void hipep_mnb_load_step(uint4 (&q)[U][C], float (&s)[U][C],
                                      float (&z)[U][C], const unsigned char* HIPEP_RESTRICT B,
                                      const T* HIPEP_RESTRICT scales, const void* HIPEP_RESTRICT zp, int ch0,
                                      int step, hipep_i64 kt, int tile_chunks, hipep_i64 col0,
                                      const hipep_mnb_args& a) {
  constexpr int VPL = 128 / BITS, VPH = VPL / 2;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int ch = ch0 + u * step;
    const hipep_i64 kv = kt + (hipep_i64)ch * VPL;  // first value of the chunk
#pragma unroll
    for (int c = 0; c < C; ++c) {
      const hipep_i64 n = col0 + c;
      q[u][c] = make_uint4(0u, 0u, 0u, 0u);
      s[u][c] = 0.0f;
      z[u][c] = 0.0f;
      if (ch < tile_chunks && n < a.n) {
        const hipep_i64 blk = kv >> a.log2_bs;
        s[u][c] = hipep_to_float(scales[n * a.nb + blk]);
        z[u][c] = hipep_mnb_zero_point<T, BITS>(zp, n, blk, a);
        const unsigned char* row = B + n * a.row_bytes + kv * BITS / 8;
        if (a.aligned16) {
          q[u][c] = *reinterpret_cast<const uint4*>(row);
        } else {
          const uint2 h0 = *reinterpret_cast<const uint2*>(row);
          uint2 h1 = make_uint2(0u, 0u);
          if (kv + VPH < a.k_pad) h1 = *reinterpret_cast<const uint2*>(row + 8);
          q[u][c] = make_uint4(h0.x, h0.y, h1.x, h1.y);
        }
      }
    }
  }
}


#define HIPEP_MNB_PARAMS(T)                                                                           \
  const T *HIPEP_RESTRICT A, const unsigned char *HIPEP_RESTRICT B, const T *HIPEP_RESTRICT scales,  \
      const void *HIPEP_RESTRICT zp, const T *HIPEP_RESTRICT bias, T *HIPEP_RESTRICT Y, const hipep_mnb_args a

#endif  // HIPEP_MATMUL_NBITS_H
