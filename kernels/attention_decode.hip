// GroupQueryAttention's split-KV kernel for a few query tokens (kernels/attention_decode.h holds the
// device code, kernels/attention.h the whole picture).
#include "attention_decode.h"

// The split-KV kernel for blocks of up to G query rows.
#define HIPEP_GQA_DECODE(NAME, T, G)                                                                             \
  HIPEP_KERNEL void __launch_bounds__(hipep_dec_threads<G>::value) hipep_gqa_decode_##NAME##_g##G(                         \
      const T* q, const T* cache_k, const T* cache_v, const int* seqlens, const int* total, const T* bias,       \
      const T* sink, T* out, float* part_acc, float* part_ml, unsigned int* counters, const hipep_gqa_args a) {   \
    hipep_grid_release();                                                                                        \
    hipep_gqa_decode<T, G>(q, cache_k, cache_v, seqlens, total, bias, sink, out, part_acc, part_ml, counters, a); \
  }

#define HIPEP_GQA_DECODE_ALL(NAME, T) \
  HIPEP_GQA_DECODE(NAME, T, 1)        \
  HIPEP_GQA_DECODE(NAME, T, 2)        \
  HIPEP_GQA_DECODE(NAME, T, 4)        \
  HIPEP_GQA_DECODE(NAME, T, 8)

// Each element type's kernels apart (HIPEP_TYPE_*, hipep_device.h): the runtime compiles this
// module for the model's type only, a third of the whole module's NVRTC time.
#if HIPEP_TYPE_f32
HIPEP_GQA_DECODE_ALL(f32, float)
#endif
#if HIPEP_TYPE_f16
HIPEP_GQA_DECODE_ALL(f16, hipep_half)
#endif
#if HIPEP_TYPE_bf16
HIPEP_GQA_DECODE_ALL(bf16, hipep_bf16)
#endif
