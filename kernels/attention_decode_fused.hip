// GroupQueryAttention's decode of one token with its rotary and cache append (hipep_gqa_prepare's work)
// fused in (kernels/attention_decode.h holds the device code, kernels/attention.h the whole picture).
#include "attention_decode.h"

#define HIPEP_GQA_DECODE_FUSED(NAME, T, G)                                                                       \
  HIPEP_KERNEL void __launch_bounds__(hipep_dec_threads<G>::value) hipep_gqa_decode_fused_##NAME##_g##G(                   \
      const T* q, const T* k, const T* v, const int* seqlens, const int* total, const hipep_i64* pos_ids,        \
      const T* cos_cache, const T* sin_cache, T* cache_k, T* cache_v, const T* bias, const T* sink, T* out,      \
      float* part_acc, float* part_ml, unsigned int* counters, const hipep_gqa_args a,                           \
      const hipep_fault_site length_fault, const hipep_fault_site position_fault) {                              \
    hipep_grid_release();                                                                                        \
    hipep_gqa_decode_fused<T, G>(q, k, v, seqlens, total, pos_ids, cos_cache, sin_cache, cache_k, cache_v, bias, \
                                 sink, out, part_acc, part_ml, counters, a, length_fault, position_fault);        \
  }

#define HIPEP_GQA_DECODE_FUSED_ALL(NAME, T) \
  HIPEP_GQA_DECODE_FUSED(NAME, T, 1)        \
  HIPEP_GQA_DECODE_FUSED(NAME, T, 2)        \
  HIPEP_GQA_DECODE_FUSED(NAME, T, 4)        \
  HIPEP_GQA_DECODE_FUSED(NAME, T, 8)

// Each element type's kernels apart (HIPEP_TYPE_*, hipep_device.h), as in attention_decode.hip.
#if HIPEP_TYPE_f32
HIPEP_GQA_DECODE_FUSED_ALL(f32, float)
#endif
#if HIPEP_TYPE_f16
HIPEP_GQA_DECODE_FUSED_ALL(f16, hipep_half)
#endif
#if HIPEP_TYPE_bf16
HIPEP_GQA_DECODE_FUSED_ALL(bf16, hipep_bf16)
#endif
