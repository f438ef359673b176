// GroupNormalization and InstanceNormalization (an instance norm is a group norm with one channel
// per group). The runtime views X [N, C, *spatial] as rows of (n, group): row r holds the
// cpg = C / groups channels of its group, `len` = cpg * spatial contiguous elements. One row per
// block of blockDim.x threads, or for short rows one row per warp with blockDim.y rows per block.
// Statistics in f32 (f16 widened), each formula as ONNX Runtime's CPU EP evaluates it, with every
// product and sum rounded on its own (no contraction into FMAs) where the CPU rounds it:
//   instance:  mean = sum(x) / len, var = sum((x - mean)^2) / len, inv = 1 / sqrt(var + eps),
//              y = (x - mean) * (inv * scale[c]) + bias[c];
//   group18:   the ONNX function body: mean = sum(x) / len, mean_sq = sum(x * x) / len,
//              std = sqrt(mean_sq - mean * mean + eps), y = scale[g] * ((x - mean) / std) + bias[g];
//   group21:   the same statistics, then per channel in X's type: norm = T((x - mean) / std),
//              y = T(T(scale[c] * norm) + bias[c]) (f16 rounds each step; f32 the same numbers).
// BatchNormalization with training_mode=1 (hipep_batch_norm_train_*) takes its statistics over
// every element of a channel (all images and positions), one channel per row of threads:
//   mean = sum(x) / count, var = sum((x - mean)^2) / count (the biased variance),
//   s = scale[c] / sqrt(var + eps), y = x * s + (B[c] - mean * s),
//   running_mean = input_mean[c] * momentum + mean * (1 - momentum), running_var likewise,
// as ONNX Runtime's CPU kernel computes them in f32.
#include "hipep_device.h"

#define HIPEP_NORM_INSTANCE 0
#define HIPEP_NORM_GROUP18 1
#define HIPEP_NORM_GROUP21 2

struct hipep_group_norm_args {
  hipep_i64 rows;     // N * groups
  hipep_i64 len;      // elements of a row: cpg * spatial
  hipep_i64 spatial;  // elements of a channel
  hipep_i64 cpg;      // channels per group
  hipep_i64 groups;
  float eps;
  int mode;  // HIPEP_NORM_*
};

template <typename T>
HIPEP_DEVICE void hipep_group_norm(const T* HIPEP_RESTRICT x, const T* HIPEP_RESTRICT scale, const T* HIPEP_RESTRICT bias,
                                   T* HIPEP_RESTRICT y, const hipep_group_norm_args a) {
  __shared__ float scratch[HIPEP_MAX_WARPS];
  const hipep_i64 r = (hipep_i64)blockIdx.x * blockDim.y + threadIdx.y;
  if (r >= a.rows) return;  // only when blockDim.x is one warp: no block barrier below
  const T* px = x + r * a.len;
  T* py = y + r * a.len;
  const hipep_i64 group = r % a.groups;
  const float count = (float)a.len;
  float s = 0.0f, sq = 0.0f;
  for (hipep_i64 i = threadIdx.x; i < a.len; i += blockDim.x) {
    const float v = hipep_to_float(px[i]);
    s = __fadd_rn(s, v);
    sq = __fadd_rn(sq, __fmul_rn(v, v));
  }
  const float mean = hipep_block_sum(s, scratch) / count;
  float inv = 0.0f, stdev = 1.0f;
  if (a.mode == HIPEP_NORM_INSTANCE) {
    float c2 = 0.0f;  // centered: no cancellation for rows far from zero
    for (hipep_i64 i = threadIdx.x; i < a.len; i += blockDim.x) {
      const float d = __fsub_rn(hipep_to_float(px[i]), mean);
      c2 = __fadd_rn(c2, __fmul_rn(d, d));
    }
    inv = 1.0f / sqrtf(__fadd_rn(hipep_block_sum(c2, scratch) / count, a.eps));
  } else {
    const float mean_sq = hipep_block_sum(sq, scratch) / count;
    stdev = sqrtf(__fadd_rn(__fsub_rn(mean_sq, __fmul_rn(mean, mean)), a.eps));
  }
  if (a.mode == HIPEP_NORM_GROUP18) {
    const float sc = hipep_to_float(scale[group]), b = hipep_to_float(bias[group]);
    for (hipep_i64 i = threadIdx.x; i < a.len; i += blockDim.x) {
      const float norm = __fsub_rn(hipep_to_float(px[i]), mean) / stdev;
      py[i] = hipep_from_float<T>(__fadd_rn(__fmul_rn(sc, norm), b));
    }
    return;
  }
  const hipep_i64 channel0 = group * a.cpg;
  for (hipep_i64 i = threadIdx.x; i < a.len; i += blockDim.x) {
    const hipep_i64 c = channel0 + i / a.spatial;
    const float sc = hipep_to_float(scale[c]), b = hipep_to_float(bias[c]);
    const float d = __fsub_rn(hipep_to_float(px[i]), mean);
    if (a.mode == HIPEP_NORM_INSTANCE) {
      py[i] = hipep_from_float<T>(__fadd_rn(__fmul_rn(d, __fmul_rn(inv, sc)), b));
    } else {
      const float norm = hipep_to_float(hipep_from_float<T>(d / stdev));
      const float scaled = hipep_to_float(hipep_from_float<T>(__fmul_rn(sc, norm)));
      py[i] = hipep_from_float<T>(__fadd_rn(scaled, b));
    }
  }
}

#define HIPEP_GROUP_NORM(NAME, T)                                                                              \
  HIPEP_KERNEL void hipep_group_norm_##NAME(const T* HIPEP_RESTRICT x, const T* HIPEP_RESTRICT scale,          \
                                            const T* HIPEP_RESTRICT bias, T* HIPEP_RESTRICT y,                  \
                                            const hipep_group_norm_args a) {                                    \
    hipep_group_norm<T>(x, scale, bias, y, a);                                                                  \
  }

HIPEP_GROUP_NORM(f32, float)
HIPEP_GROUP_NORM(f16, hipep_half)

// ---- BatchNormalization, training mode --------------------------------------------------------
// X [N, C, spatial] as C rows of N strided runs of `spatial` elements; a row per block of
// blockDim.x threads (or per warp, blockDim.y rows a block), as the group norms' rows. An output no one
// reads comes as a null pointer; an empty batch gives NaN statistics (0 / 0), as on the CPU.

struct hipep_batch_norm_train_args {
  hipep_i64 channels;
  hipep_i64 images;
  hipep_i64 spatial;
  float eps;
  float momentum;
};

template <typename T, typename TS, typename TM>
HIPEP_DEVICE void hipep_batch_norm_train(const T* HIPEP_RESTRICT x, const TS* HIPEP_RESTRICT scale,
                                         const TS* HIPEP_RESTRICT bias, const TM* HIPEP_RESTRICT input_mean,
                                         const TM* HIPEP_RESTRICT input_var, T* HIPEP_RESTRICT y,
                                         TM* HIPEP_RESTRICT running_mean, TM* HIPEP_RESTRICT running_var,
                                         const hipep_batch_norm_train_args a) {
  __shared__ float scratch[HIPEP_MAX_WARPS];
  const hipep_i64 c = (hipep_i64)blockIdx.x * blockDim.y + threadIdx.y;
  if (c >= a.channels) return;  // only when blockDim.x is one warp: no block barrier below
  const hipep_i64 count = a.images * a.spatial;
  const hipep_i64 stride = a.channels * a.spatial;  // from one image's channel c to the next's
  const T* px = x + c * a.spatial;
  float s = 0.0f;
  for (hipep_i64 i = threadIdx.x; i < count; i += blockDim.x) {
    s = __fadd_rn(s, hipep_to_float(px[(i / a.spatial) * stride + i % a.spatial]));
  }
  const float mean = hipep_block_sum(s, scratch) / (float)count;
  float c2 = 0.0f;  // centered, as ORT sums it
  for (hipep_i64 i = threadIdx.x; i < count; i += blockDim.x) {
    const float d = __fsub_rn(hipep_to_float(px[(i / a.spatial) * stride + i % a.spatial]), mean);
    c2 = __fadd_rn(c2, __fmul_rn(d, d));
  }
  const float var = hipep_block_sum(c2, scratch) / (float)count;
  const float mul = __fmul_rn(1.0f / sqrtf(__fadd_rn(var, a.eps)), hipep_to_float(scale[c]));
  const float add = __fsub_rn(hipep_to_float(bias[c]), __fmul_rn(mean, mul));
  for (hipep_i64 i = threadIdx.x; y != nullptr && i < count; i += blockDim.x) {
    const hipep_i64 at = c * a.spatial + (i / a.spatial) * stride + i % a.spatial;
    y[at] = hipep_from_float<T>(__fadd_rn(__fmul_rn(hipep_to_float(x[at]), mul), add));
  }
  if (threadIdx.x == 0) {
    const float keep = a.momentum, take = __fsub_rn(1.0f, a.momentum);
    if (running_mean != nullptr) {
      running_mean[c] = hipep_from_float<TM>(__fadd_rn(__fmul_rn(hipep_to_float(input_mean[c]), keep),
                                                       __fmul_rn(mean, take)));
    }
    if (running_var != nullptr) {
      running_var[c] = hipep_from_float<TM>(__fadd_rn(__fmul_rn(hipep_to_float(input_var[c]), keep),
                                                      __fmul_rn(var, take)));
    }
  }
}

#define HIPEP_BATCH_NORM_TRAIN(NAME, T, TS, TM)                                                                \
  HIPEP_KERNEL void hipep_batch_norm_train_##NAME(                                                             \
      const T* HIPEP_RESTRICT x, const TS* HIPEP_RESTRICT scale, const TS* HIPEP_RESTRICT bias,               \
      const TM* HIPEP_RESTRICT input_mean, const TM* HIPEP_RESTRICT input_var, T* HIPEP_RESTRICT y,           \
      TM* HIPEP_RESTRICT running_mean, TM* HIPEP_RESTRICT running_var, const hipep_batch_norm_train_args a) { \
    hipep_batch_norm_train<T, TS, TM>(x, scale, bias, input_mean, input_var, y, running_mean, running_var, a); \
  }

// X's type, then scale and B's, then input_mean and input_var's (opset 15 lets the three differ)
HIPEP_BATCH_NORM_TRAIN(f32_f32_f32, float, float, float)
HIPEP_BATCH_NORM_TRAIN(f32_f32_f16, float, float, hipep_half)
HIPEP_BATCH_NORM_TRAIN(f32_f16_f32, float, hipep_half, float)
HIPEP_BATCH_NORM_TRAIN(f32_f16_f16, float, hipep_half, hipep_half)
HIPEP_BATCH_NORM_TRAIN(f16_f32_f32, hipep_half, float, float)
HIPEP_BATCH_NORM_TRAIN(f16_f32_f16, hipep_half, float, hipep_half)
HIPEP_BATCH_NORM_TRAIN(f16_f16_f32, hipep_half, hipep_half, float)
HIPEP_BATCH_NORM_TRAIN(f16_f16_f16, hipep_half, hipep_half, hipep_half)
