// hipep's device portability header: one kernel source for NVIDIA (NVRTC, nvcc) and AMD (hiprtc,
// hipcc). Every kernels/*.hip file and every generated pointwise kernel includes it first.
//
// What differs between the two and is settled here:
//   * fp16/bf16 types: CUDA's cuda_fp16.h / cuda_bf16.h, HIP's hip_fp16.h / hip_bf16.h (before
//     ROCm 6.0: hip_bfloat16.h); kernels name them hipep_half / hipep_bf16 and convert through
//     hipep_to_float / hipep_from_float;
//   * the round-to-nearest intrinsics (__fmul_rn, __fsqrt_rn, ...): HIP's may be fused or
//     approximate, so on AMD they are replaced by versions with CUDA's rounding;
//   * warp shuffles: CUDA needs the participating-lane mask (__shfl_xor_sync), HIP has none
//     (__shfl_xor); NVRTC does not define the maskless form at all;
//   * the warp size: 32 on NVIDIA, 64 on CDNA and 32 on RDNA, so it is a compile-time define
//     HIPEP_WARP_SIZE that the runtime takes from the device;
//   * kernel entry points: HIPEP_KERNEL is `extern "C" __global__`, so the runtime finds them by
//     their plain names (module get-function) without C++ mangling.
// No hipify and no HIP-on-NVIDIA headers: on NVIDIA the CUDA headers are used directly (HIP's
// nvidia_detail headers include CUDA host headers that NVRTC cannot compile).
#ifndef HIPEP_DEVICE_H
#define HIPEP_DEVICE_H

#if defined(__HIPCC_RTC__) || (defined(__HIP__) && !defined(__CUDACC__))
#define HIPEP_AMD 1
#if !defined(__HIPCC_RTC__)
#include <hip/hip_runtime.h>
#endif
#include <hip/hip_fp16.h>
typedef __half hipep_half;
#if defined(__HIPCC_RTC__) || __has_include(<hip/hip_bf16.h>)
#include <hip/hip_bf16.h>
typedef __hip_bfloat16 hipep_bf16;
#else
// HIP before ROCm 6.0 (Debian's HIP 5.2, which CI's compile check uses) has no hip_bf16.h. Its
// hip_bfloat16 has the same 16-bit layout and rounds to nearest even; the CUDA-named conversions
// that kernels and generated pointwise code call are supplied for it, as hip_bf16.h defines them
// (double goes through float, as there).
#include <hip/hip_bfloat16.h>
typedef hip_bfloat16 hipep_bf16;
__device__ __forceinline__ float __bfloat162float(hipep_bf16 v) { return static_cast<float>(v); }
__device__ __forceinline__ hipep_bf16 __float2bfloat16(float v) { return hipep_bf16(v); }
__device__ __forceinline__ hipep_bf16 __double2bfloat16(double v) { return hipep_bf16(static_cast<float>(v)); }
#endif
#ifndef HIPEP_WARP_SIZE
#if defined(__AMDGCN_WAVEFRONT_SIZE)
#define HIPEP_WARP_SIZE __AMDGCN_WAVEFRONT_SIZE
#else
#define HIPEP_WARP_SIZE 64
#endif
#endif
#define HIPEP_SHFL_XOR(value, lane_mask) __shfl_xor((value), (lane_mask))
#else
#define HIPEP_NVIDIA 1
#include <cuda_fp16.h>
#include <cuda_bf16.h>
typedef __half hipep_half;
typedef __nv_bfloat16 hipep_bf16;
#ifndef HIPEP_WARP_SIZE
#define HIPEP_WARP_SIZE 32
#endif
#define HIPEP_SHFL_XOR(value, lane_mask) __shfl_xor_sync(0xffffffffu, (value), (lane_mask))
#endif

// NVRTC's front end lacks GCC's float builtins that nvcc and clang know; the generated
// pointwise kernels spell infinities and NaNs with them, so they are supplied here from bits.
#if defined(__CUDACC_RTC__)
#ifndef __builtin_inff
#define __builtin_inff() __int_as_float(0x7f800000)
#define __builtin_nanf(tag) __int_as_float(0x7fc00000)
#define __builtin_inf() __longlong_as_double(0x7ff0000000000000LL)
#define __builtin_nan(tag) __longlong_as_double(0x7ff8000000000000LL)
#endif
#endif
#define HIPEP_INF_F __builtin_inff()
#define HIPEP_INF_D __builtin_inf()

// Modules with kernels for several element types may be compiled for one of them only (the
// runtime's "<module>@<type>", hipep.runtime.kernel_cache.module_source): that compile defines
// HIPEP_ONLY_TYPE and HIPEP_TYPE_<type>; any other compile instantiates every type.
#ifndef HIPEP_ONLY_TYPE
#define HIPEP_TYPE_f32 1
#define HIPEP_TYPE_f16 1
#define HIPEP_TYPE_bf16 1
#endif
#define HIPEP_KERNEL extern "C" __global__
// A launch's dynamic shared memory (its size is the launch's smem bytes). A macro so that the unit
// tests' host stand-in (tests/unit/host_cuda) can give it storage of its own.
#ifndef HIPEP_DYNAMIC_SHARED
#define HIPEP_DYNAMIC_SHARED(type, name) extern __shared__ type name[]
#endif
#define HIPEP_DEVICE __device__ __forceinline__
#define HIPEP_RESTRICT __restrict__

// Launch configurations from the runtime never exceed this many threads per block; kernels that
// keep per-warp partial results in shared memory size them with it.
#define HIPEP_MAX_BLOCK 1024
#define HIPEP_MAX_WARPS (HIPEP_MAX_BLOCK / HIPEP_WARP_SIZE)

typedef long long hipep_i64;
typedef unsigned long long hipep_u64;

// ---- round-to-nearest float operations ------------------------------------------------------------
// Kernels that reproduce the CPU's exact operation order (RMS norm, rotary, the MLAS rational
// approximations) use CUDA's __fadd_rn / __fsub_rn / __fmul_rn, which are never contracted into an
// FMA, and __fsqrt_rn, which is correctly rounded. HIP spells them as plain `x * y` (clang then
// fuses a multiply and an add into one FMA, which changes the rounding) and __fsqrt_rn as the
// approximate hardware square root, so on AMD the names go to versions that keep CUDA's meaning.
// __fdiv_rn needs nothing: HIP's `x / y` is correctly rounded (-fhip-fp32-correctly-rounded-
// divide-sqrt, clang's default, which the runtime must keep; sqrtf relies on it too).
#if defined(HIPEP_AMD)
HIPEP_DEVICE float hipep_amd_fadd_rn(float a, float b) {
#pragma clang fp contract(off)
  return a + b;
}
HIPEP_DEVICE float hipep_amd_fsub_rn(float a, float b) {
#pragma clang fp contract(off)
  return a - b;
}
HIPEP_DEVICE float hipep_amd_fmul_rn(float a, float b) {
#pragma clang fp contract(off)
  return a * b;
}
HIPEP_DEVICE float hipep_amd_fsqrt_rn(float a) { return sqrtf(a); }
#define __fadd_rn hipep_amd_fadd_rn
#define __fsub_rn hipep_amd_fsub_rn
#define __fmul_rn hipep_amd_fmul_rn
#define __fsqrt_rn hipep_amd_fsqrt_rn
#endif

// ---- element conversion: math runs in f32 for f16/bf16 storage (rounded once on the way out) ----

HIPEP_DEVICE float hipep_to_float(float v) { return v; }
HIPEP_DEVICE float hipep_to_float(hipep_half v) { return __half2float(v); }
HIPEP_DEVICE float hipep_to_float(hipep_bf16 v) { return __bfloat162float(v); }

template <typename T> HIPEP_DEVICE T hipep_from_float(float v);
template <> HIPEP_DEVICE float hipep_from_float<float>(float v) { return v; }
template <> HIPEP_DEVICE hipep_half hipep_from_float<hipep_half>(float v) { return __float2half_rn(v); }
template <> HIPEP_DEVICE hipep_bf16 hipep_from_float<hipep_bf16>(float v) { return __float2bfloat16(v); }

// numpy's maximum: NaN in either operand gives NaN.
HIPEP_DEVICE float hipep_fmax_nan(float a, float b) { return (a != a || a > b) ? a : b; }
HIPEP_DEVICE double hipep_dmax_nan(double a, double b) { return (a != a || a > b) ? a : b; }

// ---- warp and block reductions -------------------------------------------------------------------
// Butterfly shuffles leave the result in every lane of the warp. `op(a, b)` combines two values
// (a + b, a NaN-propagating max, ...); it must be commutative and associative up to the rounding
// its callers accept, as the order is the butterfly's.

template <typename T, typename Op> HIPEP_DEVICE T hipep_warp_reduce(T v, Op op) {
#pragma unroll
  for (int m = HIPEP_WARP_SIZE / 2; m > 0; m >>= 1) v = op(v, (T)HIPEP_SHFL_XOR(v, m));
  return v;
}

// Block-wide over blockDim.x threads (one row per block): warps reduce by shuffles, warp 0
// combines the per-warp partials (`identity` pads the missing warps). `scratch` holds
// HIPEP_MAX_WARPS values; every thread gets the result. Safe to call repeatedly with the same
// scratch (the trailing barrier).
template <typename T, typename Op> HIPEP_DEVICE T hipep_block_reduce(T v, T* scratch, T identity, Op op) {
  const int lane = threadIdx.x % HIPEP_WARP_SIZE, warp = threadIdx.x / HIPEP_WARP_SIZE;
  const int warps = (blockDim.x + HIPEP_WARP_SIZE - 1) / HIPEP_WARP_SIZE;
  v = hipep_warp_reduce(v, op);
  if (warps == 1) return v;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T r = lane < warps ? scratch[lane] : identity;
  r = hipep_warp_reduce(r, op);
  __syncthreads();
  return r;
}

template <typename T> HIPEP_DEVICE T hipep_warp_sum(T v) {
  return hipep_warp_reduce(v, [](T a, T b) { return a + b; });
}
HIPEP_DEVICE float hipep_warp_max(float v) {
  return hipep_warp_reduce(v, [](float a, float b) { return hipep_fmax_nan(a, b); });
}
HIPEP_DEVICE double hipep_warp_dmax(double v) {
  return hipep_warp_reduce(v, [](double a, double b) { return hipep_dmax_nan(a, b); });
}

template <typename T> HIPEP_DEVICE T hipep_block_sum(T v, T* scratch) {
  return hipep_block_reduce(v, scratch, T(0), [](T a, T b) { return a + b; });
}
HIPEP_DEVICE float hipep_block_max(float v, float* scratch) {
  return hipep_block_reduce(v, scratch, -HIPEP_INF_F, [](float a, float b) { return hipep_fmax_nan(a, b); });
}
HIPEP_DEVICE double hipep_block_dmax(double v, double* scratch) {
  return hipep_block_reduce(v, scratch, -HIPEP_INF_D, [](double a, double b) { return hipep_dmax_nan(a, b); });
}

// ---- overlap with the previous kernel (programmatic dependent launch, NVIDIA sm_90+) -----------
// A kernel the runtime launches with KernelOp.overlaps_previous may start while the previous
// kernel of its stream still runs: it must call hipep_grid_wait() before it reads anything an
// earlier kernel wrote or writes anything an earlier kernel reads; before that it may read only
// what no kernel of the run writes (the session's weights; a KV cache's rows older than the step's,
// which only earlier runs wrote). hipep_grid_release() lets such a next kernel start once every
// block of this one has called it (or exited); it changes nothing for a next kernel launched the
// ordinary way, which still waits for this one to finish.
// Elsewhere (AMD, older NVIDIA, the host stand-in) both are nothing: launches are ordered as usual.
HIPEP_DEVICE void hipep_grid_wait() {
#if defined(HIPEP_NVIDIA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

HIPEP_DEVICE void hipep_grid_release() {
#if defined(HIPEP_NVIDIA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

// Loads in a kernel that may overlap the previous one. The read-only path (ld.global.nc: __ldg, or
// a plain load through a const __restrict__ pointer) promises data that does not change while the
// kernel runs, which what an earlier kernel writes does not keep while both run; ptxas moves such
// loads across griddepcontrol.wait either way (seen in the SASS: ACQBULK ahead of every
// LDG.E.CONSTANT of one kernel, one LDG.E.CONSTANT ahead of ACQBULK in another). So an
// overlapping kernel reads nothing through it:
//   hipep_ld_stream    the session's weights, which may be loaded before the wait: ld.global.cs
//                      (read once, evicted first), which stays where the code puts it;
//   hipep_ld_produced  what earlier kernels of the stream write (A), after the wait:
//                      ld.global.cg (coherent, cached in L2 only), which stays after it.
// Elsewhere plain loads (launches are ordered as usual).
#if defined(HIPEP_NVIDIA) && defined(__CUDA_ARCH__)
template <typename T> HIPEP_DEVICE T hipep_ld_stream(const T* p) { return __ldcs(p); }
template <typename T> HIPEP_DEVICE T hipep_ld_produced(const T* p) { return __ldcg(p); }
#else
template <typename T> HIPEP_DEVICE T hipep_ld_stream(const T* p) { return *p; }
template <typename T> HIPEP_DEVICE T hipep_ld_produced(const T* p) { return *p; }
#endif

// (x & MASK) | BITS as one instruction. A LOP3 takes one immediate operand, so ptxas turns C's
// AND and OR of two constants into two LOP3s (seen in the SASS of the dequantizing GEMVs, two per
// nibble pair); PTX's lop3 with both constants lets it keep one in a register for the whole kernel.
// Elsewhere the C expression (AMD's compiler emits v_and_or_b32 for it).
template <unsigned int MASK, unsigned int BITS> HIPEP_DEVICE unsigned int hipep_and_or(unsigned int x) {
#if defined(HIPEP_NVIDIA) && defined(__CUDA_ARCH__)
  unsigned int r;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(r) : "r"(x), "n"(MASK), "n"(BITS));  // 0xEA: (a & b) | c
  return r;
#else
  return (x & MASK) | BITS;
#endif
}

// Computes p here, once. NVVM otherwise sinks an address's computation into every predicated load
// that uses it (seen in the SASS of the row GEMV: a column's 64-bit scale base multiplied out again
// for each of its chunks); an empty asm that may change p keeps the one computed value.
template <typename P> HIPEP_DEVICE void hipep_materialize(P*& p) {
#if defined(HIPEP_NVIDIA) && defined(__CUDA_ARCH__)
  asm("" : "+l"(p));
#endif
}

// ---- tensor cores --------------------------------------------------------------------------------
// D += A B for a warp: mma.sync m16n8k16, A and B fp16 (or bf16: _bf16), D f32 (NVIDIA compute capability 8.0 and
// newer; the tests' host stand-in emulates it). Lane 4g + t holds A's rows g and g + 8 at k 2t, 2t + 1
// (a0, a1) and 2t + 8, 2t + 9 (a2, a3), B's column g at k 2t, 2t + 1 (b0) and 2t + 8, 2t + 9 (b1), D's
// rows g (d0, d1) and g + 8 (d2, d3) at columns 2t, 2t + 1; a register holds two halves, the lower k
// in its low half. HIPEP_HAS_MMA says where it exists: a binding selects a kernel using it only on a
// device that has it (Target.tensor_cores); elsewhere it makes D NaN, so that such a launch could not
// pass for a result.
#if (defined(HIPEP_NVIDIA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800) || defined(HIPEP_HOST_MMA)
#define HIPEP_HAS_MMA 1
#endif
// One function per operand type (hipep_mma_m16n8k16 + SUFFIX; TYPE: PTX's name of it), the host
// stand-in's emulation (hipep_host_mma_m16n8k16 + SUFFIX) where it builds.
#define HIPEP_MMA_M16N8K16(SUFFIX, TYPE)                                                                   \
  HIPEP_DEVICE void hipep_mma_m16n8k16##SUFFIX(float (&d)[4], unsigned int a0, unsigned int a1,            \
                                               unsigned int a2, unsigned int a3, unsigned int b0,          \
                                               unsigned int b1) {                                          \
    HIPEP_MMA_BODY(SUFFIX, TYPE)                                                                         \
  }
#if defined(HIPEP_HOST_MMA)
#define HIPEP_MMA_BODY(SUFFIX, TYPE) hipep_host_mma_m16n8k16##SUFFIX(d, a0, a1, a2, a3, b0, b1);
#elif defined(HIPEP_HAS_MMA)
#define HIPEP_MMA_BODY(SUFFIX, TYPE)                                                                     \
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." TYPE "." TYPE ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, " \
               "{%8,%9}, {%0,%1,%2,%3};"                                                                 \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                          \
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#else
#define HIPEP_MMA_BODY(SUFFIX, TYPE) \
  for (int i = 0; i < 4; ++i) d[i] = __int_as_float(0x7fc00000);
#endif
HIPEP_MMA_M16N8K16(, "f16")
HIPEP_MMA_M16N8K16(_bf16, "bf16")

// The mma of an element type T (hipep_half or hipep_bf16), A's four registers as an array: for the
// kernels templated on T (attention_prefill_tc.hip, matmul_nbits_gemm_tc.hip).
template <typename T> struct hipep_mma_of;
template <> struct hipep_mma_of<hipep_half> {
  HIPEP_DEVICE static void m16n8k16(float (&d)[4], const unsigned int (&a)[4], unsigned int b0, unsigned int b1) {
    hipep_mma_m16n8k16(d, a[0], a[1], a[2], a[3], b0, b1);
  }
};
template <> struct hipep_mma_of<hipep_bf16> {
  HIPEP_DEVICE static void m16n8k16(float (&d)[4], const unsigned int (&a)[4], unsigned int b0, unsigned int b1) {
    hipep_mma_m16n8k16_bf16(d, a[0], a[1], a[2], a[3], b0, b1);
  }
};

// ---- atomics ------------------------------------------------------------------------------------
// Same spelling on both platforms; wrapped so kernels do not depend on which overloads exist.
HIPEP_DEVICE float hipep_atomic_add(float* p, float v) { return atomicAdd(p, v); }
HIPEP_DEVICE int hipep_atomic_add(int* p, int v) { return atomicAdd(p, v); }
HIPEP_DEVICE unsigned int hipep_atomic_inc(unsigned int* p) { return atomicAdd(p, 1u); }

// The larger of *p and v into *p: the scatters' "last update wins" marks (kernels/indexing.hip,
// kernels/max_unpool.hip).
HIPEP_DEVICE void hipep_atomic_max_u32(unsigned int* p, unsigned int v) {
#if defined(__CUDACC__) || defined(__HIP__) || defined(__HIPCC_RTC__)
  atomicMax(p, v);
#else  // the unit tests' host stand-in for the device has no atomicMax
  unsigned int old = *(volatile unsigned int*)p;
  while (old < v) {
    const unsigned int seen = atomicCAS(p, old, v);
    if (seen == old) break;
    old = seen;
  }
#endif
}

// ---- fault reports ------------------------------------------------------------------------------
// A kernel cannot raise: where ONNX Runtime rejects a value only the kernel sees (an index or a
// position out of range), the kernel records it in its stream's fault record and goes on without
// leaving its buffers. The record is host-mapped pinned memory (hipep/runtime/gpu_faults.py reads it
// after the stream's work is done and raises an error naming the node); `site` tells the host which
// launch and which input. First fault wins: later ones are dropped until the host clears the record.
// The codes, and what `bound` means for each:
#define HIPEP_FAULT_INDEX 1u         // an index outside [-bound, bound - 1]
#define HIPEP_FAULT_POSITION 2u      // a rotary position outside [0, bound - 1] (bound: the cos/sin cache's rows)
#define HIPEP_FAULT_SEQLEN 3u        // a seqlens_k value outside [0, bound - 1] (bound: the KV cache rows it may fill)
#define HIPEP_FAULT_SEQLEN_SHORT 4u  // a seqlens_k value below bound - 1 (bound: the step's new tokens)
#define HIPEP_FAULT_WRITE_INDEX 5u   // a write index outside [0, bound] (bound -1: any index >= 0 is valid)
#define HIPEP_FAULT_KV_LENGTH 6u     // a count of valid keys (nonpad_kv_seqlen) outside [0, bound] (bound: the keys)
#define HIPEP_FAULT_AXIS 7u          // an axis outside [-bound, bound - 1] (bound: the input's rank)
#define HIPEP_FAULT_SEQUENCE_LENGTH 8u  // a sequence length outside [0, bound] (bound: the time axis' extent)
#define HIPEP_FAULT_FLAT_INDEX 9u    // an index outside [0, bound - 1] (bound: the elements of the flattened output)

struct hipep_fault_record {
  unsigned int code;  // 0: no fault; HIPEP_FAULT_*
  int site;           // the reporting launch's site (the host's table: node label, input)
  hipep_i64 value;    // the bad value
  hipep_i64 bound;    // the limit it broke (per code, above)
};

// The kernel parameter: where the launch reports (record null: it does not) and its site.
struct hipep_fault_site {
  hipep_fault_record* record;
  int site;
};

HIPEP_DEVICE void hipep_report_fault(const hipep_fault_site f, unsigned int code, hipep_i64 value, hipep_i64 bound) {
  hipep_fault_record* r = f.record;
  if (r == nullptr) return;
  // A plain read first: once a fault is recorded, further faulting threads do not each send an
  // atomic over the bus to host memory.
  if (*(volatile unsigned int*)&r->code != 0u) return;
  if (atomicCAS(&r->code, 0u, code) != 0u) return;
  // The host reads the record only after the stream's work has completed, so these plain stores
  // are visible by then.
  r->site = f.site;
  r->value = value;
  r->bound = bound;
}

// Reports an index outside [-bound, bound - 1] (the caller has found it so).
HIPEP_DEVICE void hipep_report_bad_index(const hipep_fault_site f, hipep_i64 index, hipep_i64 bound) {
  hipep_report_fault(f, HIPEP_FAULT_INDEX, index, bound);
}

#endif  // HIPEP_DEVICE_H
