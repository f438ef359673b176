// com.microsoft::GatherBlockQuantized with uint8 data, gather_axis 0, quantize_axis the last:
// out[i, r, :] = dequantize(data[indices[i], r, :]), the runtime viewing data as [n_axis, R, dp]
// bytes (R: the product of the middle dims), scales as [n_axis, R, n_blocks] of T and zero points
// as [n_axis, R, zp_row] bytes (`BITS` per value, packed like the data) or absent (2^(BITS-1)).
// Each byte holds 8 / BITS values, least significant bits first; value v of a row belongs to
// block v / block_size. Output = (q - zp) * scale in f32, rounded once to T (exactly the
// reference's arithmetic). Negative indices count from the end; an index still out of range
// gives a row of zeros (ONNX Runtime's behaviour).
//
// Threads along x walk a row's bytes, WB (1 or 4) at a time (4 where dp is a multiple of 4 and
// the data is 4-byte aligned: one 32-bit load per thread, all its values in one block since
// block_size >= 16), blockDim.y rows per block, grid-stride in both directions.
#include "hipep_device.h"

struct hipep_gbq_args {
  hipep_i64 rows;     // n_idx * R output rows
  hipep_i64 r;        // R
  hipep_i64 dp;       // bytes per data row
  hipep_i64 n_axis;   // extent of the gathered axis
  hipep_i64 nb;       // scales per row
  hipep_i64 zp_row;   // zero-point bytes per row (0: none)
  int log2_bs;
};

template <typename T, int BITS, typename I, int WB>
HIPEP_DEVICE void hipep_gbq(const unsigned char* HIPEP_RESTRICT data, const I* HIPEP_RESTRICT indices,
                            const T* HIPEP_RESTRICT scales, const unsigned char* HIPEP_RESTRICT zp,
                            T* HIPEP_RESTRICT out, const hipep_gbq_args a) {
  constexpr int PER_BYTE = 8 / BITS;
  constexpr unsigned int MASK = (1u << BITS) - 1u;
  const hipep_i64 width = a.dp * PER_BYTE;
  const hipep_i64 words = a.dp / WB;
  const hipep_i64 row_step = (hipep_i64)gridDim.y * blockDim.y;
  const hipep_i64 col_step = (hipep_i64)gridDim.x * blockDim.x;
  for (hipep_i64 row = (hipep_i64)blockIdx.y * blockDim.y + threadIdx.y; row < a.rows; row += row_step) {
    const hipep_i64 i = row / a.r, rr = row - i * a.r;
    hipep_i64 j = (hipep_i64)indices[i];
    if (j < 0) j += a.n_axis;
    const bool ok = j >= 0 && j < a.n_axis;
    const hipep_i64 src = (ok ? j : 0) * a.r + rr;
    T* dst = out + row * width;
    for (hipep_i64 w = (hipep_i64)blockIdx.x * blockDim.x + threadIdx.x; w < words; w += col_step) {
      const hipep_i64 v0 = w * WB * PER_BYTE;  // first value of this word
      unsigned int bits = 0;
      if (WB == 4) {
        bits = *reinterpret_cast<const unsigned int*>(data + src * a.dp + w * 4);
      } else {
        bits = data[src * a.dp + w];
      }
      const hipep_i64 blk = v0 >> a.log2_bs;
      const float s = ok ? hipep_to_float(scales[src * a.nb + blk]) : 0.0f;
      int z = 1 << (BITS - 1);
      if (a.zp_row) z = (int)((zp[src * a.zp_row + blk / PER_BYTE] >> ((blk % PER_BYTE) * BITS)) & MASK);
#pragma unroll
      for (int t = 0; t < WB * PER_BYTE; ++t) {
        const int q = (int)((bits >> (t * BITS)) & MASK);
        dst[v0 + t] = hipep_from_float<T>(ok ? (float)(q - z) * s : 0.0f);
      }
    }
  }
}

#define HIPEP_GBQ_I(NAME, T, BITS, INAME, I)                                                          \
  HIPEP_KERNEL void hipep_gbq_##NAME##_b##BITS##_##INAME(                                            \
      const unsigned char* HIPEP_RESTRICT data, const I* HIPEP_RESTRICT indices,                      \
      const T* HIPEP_RESTRICT scales, const unsigned char* HIPEP_RESTRICT zp, T* HIPEP_RESTRICT out,  \
      const hipep_gbq_args a) {                                                                       \
    hipep_gbq<T, BITS, I, 1>(data, indices, scales, zp, out, a);                                      \
  }                                                                                                   \
  HIPEP_KERNEL void hipep_gbq_##NAME##_b##BITS##_##INAME##_w4(                                       \
      const unsigned char* HIPEP_RESTRICT data, const I* HIPEP_RESTRICT indices,                      \
      const T* HIPEP_RESTRICT scales, const unsigned char* HIPEP_RESTRICT zp, T* HIPEP_RESTRICT out,  \
      const hipep_gbq_args a) {                                                                       \
    hipep_gbq<T, BITS, I, 4>(data, indices, scales, zp, out, a);                                      \
  }

#define HIPEP_GBQ(NAME, T)                                                                            \
  HIPEP_GBQ_I(NAME, T, 2, i32, int)                                                                   \
  HIPEP_GBQ_I(NAME, T, 2, i64, hipep_i64)                                                             \
  HIPEP_GBQ_I(NAME, T, 4, i32, int)                                                                   \
  HIPEP_GBQ_I(NAME, T, 4, i64, hipep_i64)                                                             \
  HIPEP_GBQ_I(NAME, T, 8, i32, int)                                                                   \
  HIPEP_GBQ_I(NAME, T, 8, i64, hipep_i64)

HIPEP_GBQ(f32, float)
HIPEP_GBQ(f16, hipep_half)
HIPEP_GBQ(bf16, hipep_bf16)
