// Host stand-in for CUDA's round-to-nearest intrinsics (__fadd_rn, __fmul_rn, __fdiv_rn,
// __fsqrt_rn and the double forms __dadd_rn ...), force-included (g++ -include) by tests that run
// kernels using them on the CPU. Each is one IEEE operation rounded to nearest, as on the GPU;
// the tests compile with -ffp-contract=off, so no multiply and add are fused unless the kernel
// calls fmaf.
// Templates, so that a plain definition elsewhere in the stand-in headers wins overload resolution
// instead of clashing with these.
#pragma once
#include <cmath>

template <class T> inline T __fadd_rn(T a, T b) { return a + b; }
template <class T> inline T __fsub_rn(T a, T b) { return a - b; }
template <class T> inline T __fmul_rn(T a, T b) { return a * b; }
template <class T> inline T __fdiv_rn(T a, T b) { return a / b; }
template <class T> inline T __fsqrt_rn(T a) { return std::sqrt(a); }
template <class T> inline T __dadd_rn(T a, T b) { return a + b; }
template <class T> inline T __dsub_rn(T a, T b) { return a - b; }
template <class T> inline T __dmul_rn(T a, T b) { return a * b; }
template <class T> inline T __ddiv_rn(T a, T b) { return a / b; }
template <class T> inline T __dsqrt_rn(T a) { return std::sqrt(a); }
