"""HIP C source for pointwise expressions: renders a pointwise expression (hipep.ops.pointwise)
as the source of an elementwise HIP kernel.

`render_hip_kernel` turns an `Expr` into an `extern "C" __global__` kernel: a grid-stride loop over
flat output indices, each input read through its per-input broadcast strides, every node one
`const` local. Float arithmetic goes through the round-to-nearest intrinsics so each operation
rounds once, as the numpy evaluator's do; the f32 MLAS tanh/logistic replays, numpy's
NaN-propagating min/max and C's pow as integer Pow reads it come from the prelude below. Plain
Python: nothing here imports the compiler.
"""
from __future__ import annotations

import math
from typing import Sequence

from .pointwise import (BF16, BOOL, F16, F32, F64, _LOGISTIC_P, _LOGISTIC_Q, _TANH_P, _TANH_Q, Expr, _kind,
                        _name, check)

_C_TYPES = {F16: "__half", BF16: "hipep_bf16", F32: "float", F64: "double", BOOL: "bool",
            "int8": "signed char", "uint8": "unsigned char", "int16": "short", "uint16": "unsigned short",
            "int32": "int", "uint32": "unsigned int", "int64": "long long", "uint64": "unsigned long long"}
# Element types kept in storage formats: their values are widened to float to compute.
_STORAGE = {F16: ("__half2float", "__float2half_rn", "__double2half"),
            BF16: ("__bfloat162float", "__float2bfloat16", "__double2bfloat16")}
MAX_RANK = 8

# The runtime compiles the source after kernels/hipep_device.h (types, NVRTC's missing builtins);
# compiled alone (nvcc, hipcc) it brings its own includes.
_PRELUDE = r"""#ifndef HIPEP_DEVICE_H
#if defined(__HIPCC__) || defined(__HIPCC_RTC__)
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#include <hip/hip_bf16.h>
typedef __hip_bfloat16 hipep_bf16;
#else
#include <cuda_fp16.h>
#include <cuda_bf16.h>
typedef __nv_bfloat16 hipep_bf16;
#endif
__device__ __forceinline__ void hipep_grid_release() {}
#endif

// numpy's maximum/minimum: NaN in either operand gives NaN.
template <typename T> __device__ __forceinline__ T hipep_max(T a, T b) { return (a != a || a > b) ? a : (b != b ? b : (a == b ? a : b)); }
template <typename T> __device__ __forceinline__ T hipep_min(T a, T b) { return (a != a || a < b) ? a : (b != b ? b : (a == b ? a : b)); }
// C integer division and remainder; ONNX Runtime rejects a zero divisor, the kernel yields 0.
template <typename T> __device__ __forceinline__ T hipep_idiv(T a, T b) { return b == 0 ? T(0) : a / b; }
template <typename T> __device__ __forceinline__ T hipep_ifmod(T a, T b) { return b == 0 ? T(0) : a % b; }
template <typename T> __device__ __forceinline__ T hipep_imod(T a, T b) {
  if (b == 0) return T(0);
  T r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
// ONNX's BitShift: a shift amount below 0 or past the width leaves the sign fill (-1 for a right
// shift of a negative value, else 0), which C leaves undefined. The left shift goes through the
// unsigned type, whose overflow C defines (a signed one it does not); the right shift of a signed
// value is arithmetic on every GPU compiler (C++20 defines it so).
template <typename T> struct hipep_unsigned_of { typedef T type; };
template <> struct hipep_unsigned_of<signed char> { typedef unsigned char type; };
template <> struct hipep_unsigned_of<short> { typedef unsigned short type; };
template <> struct hipep_unsigned_of<int> { typedef unsigned int type; };
template <> struct hipep_unsigned_of<long long> { typedef unsigned long long type; };
template <typename T> __device__ __forceinline__ bool hipep_shift_out_of_range(T b) {
  return b < T(0) || (unsigned long long)b >= 8ULL * sizeof(T);
}
template <typename T> __device__ __forceinline__ T hipep_shl(T a, T b) {
  typedef typename hipep_unsigned_of<T>::type U;
  return hipep_shift_out_of_range(b) ? T(0) : (T)(U)((U)a << (int)b);
}
template <typename T> __device__ __forceinline__ T hipep_shr(T a, T b) {
  return hipep_shift_out_of_range(b) ? (a < T(0) ? T(-1) : T(0)) : (T)(a >> (int)b);
}
__device__ __forceinline__ float hipep_fmodf(float a, float b) { return fmodf(a, b); }
__device__ __forceinline__ double hipep_fmodd(double a, double b) { return fmod(a, b); }
__device__ __forceinline__ float hipep_modf(float a, float b) {
  float r = fmodf(a, b);
  return (r != 0.0f && ((r < 0.0f) != (b < 0.0f))) ? r + b : (r == 0.0f ? copysignf(0.0f, b) : r);
}
__device__ __forceinline__ double hipep_modd(double a, double b) {
  double r = fmod(a, b);
  return (r != 0.0 && ((r < 0.0) != (b < 0.0))) ? r + b : (r == 0.0 ? copysign(0.0, b) : r);
}
// C's pow in double where ONNX Runtime's integer Pow truncates it (glibc's pow, within 0.52 ulp):
// an integer base to a non-negative integer power below 2^64 in magnitude is computed exactly and
// rounded once to nearest even, which is glibc's value (exact below 2^53) except where the power
// lies exactly halfway between two doubles (its odd part 54 bits long, e.g. 3^34), which glibc
// may round the other way. Everything else (fractional and negative exponents, powers past 2^64)
// is the device's pow: a few ulps from glibc's at most, so the same once truncated to an integer
// unless the true value is an integer (4^0.5), where the device's pow must be exact too.
__device__ __forceinline__ double hipep_libm_pow(double a, double b) {
  const bool integral = a == trunc(a) && b == trunc(b) && b > -9223372036854775808.0 && b < 9223372036854775808.0;
  if (!integral) return pow(a, b);
  const double m = a < 0.0 ? -a : a;
  const bool odd = ((long long)b & 1LL) != 0LL;
  if (m == 1.0) return odd ? a : 1.0;  // -1 to any integer power, negative ones too
  if (b < 0.0 || m >= 18446744073709551616.0) return pow(a, b);
  unsigned long long base = (unsigned long long)m, r = 1ULL;
  for (unsigned long long e = (unsigned long long)b; e != 0ULL; e >>= 1) {  // square and multiply
    if (e & 1ULL) {
      if (base != 0ULL && r > 18446744073709551615ULL / base) return pow(a, b);  // past 2^64
      r *= base;
    }
    if (e > 1ULL) {
      if (base > 4294967295ULL) return pow(a, b);  // base^2 >= 2^64, and a higher power follows
      base *= base;
    }
  }
  return odd ? copysign((double)r, a) : (double)r;
}
// numpy's sign: +0 for either zero, NaN stays NaN.
template <typename T> __device__ __forceinline__ T hipep_sign(T a) { return a > T(0) ? T(1) : (a < T(0) ? T(-1) : (a == T(0) ? T(0) : a)); }
__device__ __forceinline__ float hipep_logaddexpf(float a, float b) {
  if (a == b) return a + 0.69314718055994530942f;
  float m = fmaxf(a, b);
  return m + log1pf(expf(-fabsf(a - b)));
}
__device__ __forceinline__ double hipep_logaddexpd(double a, double b) {
  if (a == b) return a + 0.69314718055994530942;
  double m = fmax(a, b);
  return m + log1p(exp(-fabs(a - b)));
}
// MLAS's f32 tanh and logistic (FMA3 kernels): clamped odd rational polynomials, fused multiply-adds.
__device__ __forceinline__ float hipep_mlas_rational(float x, float bound, const float* p, int np_, const float* q, int nq) {
  float v = fminf(fmaxf(x, -bound), bound);
  if (x != x) v = x;
  float v2 = __fmul_rn(v, v);
  float pp = fmaf(v2, p[0], p[1]);
  for (int i = 2; i < np_; ++i) pp = fmaf(pp, v2, p[i]);
  pp = __fmul_rn(pp, v);
  float qq = fmaf(v2, q[0], q[1]);
  for (int i = 2; i < nq; ++i) qq = fmaf(qq, v2, q[i]);
  return __fdiv_rn(pp, qq);
}
__device__ __forceinline__ float hipep_mlas_tanh(float x) {
  const float p[7] = {@TANH_P@};
  const float q[4] = {@TANH_Q@};
  return hipep_mlas_rational(x, 9.0f, p, 7, q, 4);
}
__device__ __forceinline__ float hipep_mlas_logistic(float x) {
  const float p[5] = {@LOGISTIC_P@};
  const float q[6] = {@LOGISTIC_Q@};
  float r = __fadd_rn(hipep_mlas_rational(x, 18.0f, p, 5, q, 6), 0.5f);
  return r != r ? r : fminf(fmaxf(r, 0.0f), 1.0f);
}
""".replace("@TANH_P@", ", ".join(f"{float(v)!r}f" for v in _TANH_P)) \
   .replace("@TANH_Q@", ", ".join(f"{float(v)!r}f" for v in _TANH_Q)) \
   .replace("@LOGISTIC_P@", ", ".join(f"{float(v)!r}f" for v in _LOGISTIC_P)) \
   .replace("@LOGISTIC_Q@", ", ".join(f"{float(v)!r}f" for v in _LOGISTIC_Q))

# C spellings of the primitives: per operand kind ("f" float, "d" double, "i" integer, "b" bool).
# Float arithmetic through the round-to-nearest intrinsics: a compiler may not contract them into
# fused multiply-adds (nvcc and hipcc do by default), so each op rounds once, as numpy does.
_ROUNDED = {"add": "add", "sub": "sub", "mul": "mul", "div": "div"}
_INFIX = {"add": "+", "sub": "-", "mul": "*", "eq": "==", "lt": "<", "gt": ">", "le": "<=", "ge": ">=",
          "and": "&&", "or": "||", "xor": "!=", "bitand": "&", "bitor": "|", "bitxor": "^"}
_MATH = {"sqrt", "exp", "expm1", "log", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh",
         "asinh", "acosh", "atanh", "tanh", "floor", "ceil", "rint", "erf"}


# The other primitives' C spellings: {0}, {1}, {2} the operands; {f} math.h's float suffix ("f" for
# f32, "" for f64), {fd} hipep_device.h's ("f" or "d"). A pair is (integer form, float form).
_SPELLINGS = {
    "div": "hipep_idiv({0}, {1})",  # integers: float division is one of _ROUNDED
    "fmod": ("hipep_ifmod({0}, {1})", "hipep_fmod{fd}({0}, {1})"),
    "mod": ("hipep_imod({0}, {1})", "hipep_mod{fd}({0}, {1})"),
    "min": "hipep_min({0}, {1})", "max": "hipep_max({0}, {1})",
    "pow": "pow{f}({0}, {1})",
    "libm_pow": "hipep_libm_pow({0}, {1})",
    "logaddexp": "hipep_logaddexp{fd}({0}, {1})",
    "neg": "(-{0})",
    "abs": ("({0} < 0 ? -{0} : {0})", "fabs{f}({0})"),
    "sign": "hipep_sign({0})",
    "recip": "__{fd}rcp_rn({0})",
    "sqrt": "__{fd}sqrt_rn({0})",
    "mlas_tanh": "hipep_mlas_tanh({0})", "mlas_logistic": "hipep_mlas_logistic({0})",
    "isnan": "({0} != {0})",
    "isposinf": "({0} == __builtin_inf())", "isneginf": "({0} == -__builtin_inf())",
    "not": "(!{0})", "bitnot": "(~{0})",
    "shl": "hipep_shl({0}, {1})", "shr": "hipep_shr({0}, {1})",
    "where": "({0} ? {1} : {2})",
}


def _c_literal(text: str, dtype: str) -> str:
    if dtype == BOOL:
        return text
    if _kind(dtype) == "int":
        v = int(text)
        return f"({_C_TYPES[dtype]})({v}{'ULL' if v >= 0 and dtype.startswith('u') else 'LL'})"
    v = float(text)
    suffix = "f" if dtype != F64 else ""
    if math.isnan(v):
        s = "__builtin_nanf(\"\")" if suffix else "__builtin_nan(\"\")"
    elif math.isinf(v):
        s = ("-" if v < 0 else "") + ("__builtin_inff()" if suffix else "__builtin_inf()")
    else:
        s = f"{v!r}{suffix}"
    if dtype in _STORAGE:
        return f"{_STORAGE[dtype][1]}({s})"
    return s


def _c_call(op: str, dtype: str, operand_dtype: str, args: list[str]) -> str:
    """One primitive as a C expression on `args` (already of the operands' C type)."""
    if operand_dtype in _STORAGE and op != "where":
        # Exact on f16/bf16 (comparisons, min/max, neg/abs, tests): compute in float, round back.
        widen, narrow = _STORAGE[operand_dtype][0], _STORAGE[operand_dtype][1]
        inner = _c_call(op, dtype if dtype == BOOL else F32, F32, [f"{widen}({a})" for a in args])
        return inner if dtype == BOOL else f"{narrow}({inner})"
    kind = _kind(operand_dtype)
    f = "f" if operand_dtype == F32 else ""
    if op in _ROUNDED and kind == "float":
        return f"__{'f' if f else 'd'}{_ROUNDED[op]}_rn({args[0]}, {args[1]})"
    if op in _INFIX:
        return f"({args[0]} {_INFIX[op]} {args[1]})"
    spelling = _SPELLINGS.get(op)
    if spelling is not None:
        if isinstance(spelling, tuple):  # (integer form, float form)
            spelling = spelling[kind == "float"]
        return spelling.format(*args, f=f, fd="f" if f else "d")
    if op in _MATH:
        return f"{op}{f}({args[0]})"
    raise ValueError(f"no C spelling for primitive {op!r}")


def _c_cast(value: str, src: str, dst: str) -> str:
    if src == dst:
        return value
    if src in _STORAGE:
        return _c_cast(f"{_STORAGE[src][0]}({value})", F32, dst)
    if dst in _STORAGE:
        if src == F64:
            return f"{_STORAGE[dst][2]}({value})"
        return f"{_STORAGE[dst][1]}({_c_cast(value, src, F32)})"
    if dst == BOOL:
        return f"({value} != 0)"
    return f"static_cast<{_C_TYPES[dst]}>({value})"


def render_hip_kernel(expr: Expr, name: str, input_dtypes: Sequence[str], output_dtypes: Sequence[str]) -> str:
    """The HIP C++ source of an elementwise kernel computing `expr`.

    `extern "C" __global__ void <name>(const T0* in0, ..., U0* out0, ..., hipep_pointwise_args_<name> a)`:
    a grid-stride loop over the flat output index i < a.n; i's coordinates in the output extents
    a.dims (row-major, a.rank of them) times input k's element strides a.strides[k] (0 along a
    broadcast axis) give input k's element; scalar inputs read element 0. Every node becomes one
    `const` local. Float arithmetic uses the round-to-nearest intrinsics, which are never
    contracted into fused multiply-adds, so each operation rounds once, as the evaluator's do;
    integer division by zero yields 0 (ONNX Runtime raises there)."""
    check(expr)
    n_in = len(input_dtypes)
    lines = [_PRELUDE, f"struct hipep_pointwise_args_{name} {{",
             "  long long n;  // output elements",
             "  int rank;",
             f"  long long dims[{MAX_RANK}];  // output extents",
             f"  long long strides[{max(n_in, 1)}][{MAX_RANK}];  // per input, in elements; 0 on broadcast axes",
             "};", ""]
    params = [f"const {_C_TYPES[_name(d)]}* __restrict__ in{k}" for k, d in enumerate(input_dtypes)]
    params += [f"{_C_TYPES[_name(d)]}* __restrict__ out{j}" for j, d in enumerate(output_dtypes)]
    params.append(f"const hipep_pointwise_args_{name} a")
    lines.append(f'extern "C" __global__ void {name}({", ".join(params)}) {{')
    lines.append("  hipep_grid_release();  // the next kernel may start loading its weights (hipep_device.h)")
    lines.append("  const long long step = (long long)gridDim.x * blockDim.x;")
    lines.append("  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < a.n; i += step) {")
    broadcast = [k for k in expr.broadcast if k < n_in]
    if broadcast:
        lines.append("    long long rem = i;")
        for k in broadcast:
            lines.append(f"    long long off{k} = 0;")
        # One axis (what merging axes leaves of same-shape operands): no division per element.
        lines.append("    if (a.rank == 1) {")
        for k in broadcast:
            lines.append(f"      off{k} = i * a.strides[{k}][0];")
        lines.append("    } else {")
        lines.append("    for (int d = a.rank - 1; d >= 0; --d) {")
        lines.append("      const long long c = rem % a.dims[d];")
        lines.append("      rem /= a.dims[d];")
        for k in broadcast:
            lines.append(f"      off{k} += c * a.strides[{k}][d];")
        lines.append("    }")
        lines.append("    }")
    lines += _node_lines(expr, lambda k: f"in{k}[off{k}]", lambda k: f"in{k}[0]", "    ")
    for j, o in enumerate(expr.outputs):
        lines.append(f"    out{j}[i] = v{o};")
    lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _node_lines(expr: Expr, element, scalar, indent: str) -> list[str]:
    """Every node of `expr` as one `const` local v<index>; input k's value is `element(k)`
    (broadcasting) or `scalar(k)`."""
    lines = []
    for idx, node in enumerate(expr.nodes):
        op, dtype, args = node[0], node[1], node[2:]
        ctype = _C_TYPES[dtype]
        if op == "in":
            value = element(args[0])
        elif op == "scalar":
            value = scalar(args[0])
        elif op == "const":
            value = _c_literal(args[0], dtype)
        elif op == "cast":
            value = _c_cast(f"v{args[0]}", expr.nodes[args[0]][1], dtype)
        else:
            operand_dtype = expr.nodes[args[-1]][1]
            value = _c_call(op, dtype, operand_dtype, [f"v{a}" for a in args])
        lines.append(f"{indent}const {ctype} v{idx} = {value};")
    return lines


def render_hip_functor(expr: Expr, name: str, input_dtypes: Sequence[str]) -> str:
    """The HIP C++ source of `struct <name>` whose `operator()(in0, in1, ...)` returns `expr`'s one
    output for one element of each input: a kernel's epilogue (hipep::GatedMatMulNBits). The
    nodes round as render_hip_kernel's do. Preceded by the prelude (the MLAS replays, numpy's
    min/max), which the including source must not repeat."""
    check(expr)
    if len(expr.outputs) != 1:
        raise ValueError(f"an epilogue has one output, the program has {len(expr.outputs)}")
    params = ", ".join(f"const {_C_TYPES[_name(d)]} in{k}" for k, d in enumerate(input_dtypes))
    out_type = _C_TYPES[expr.nodes[expr.outputs[0]][1]]
    lines = [_PRELUDE, f"struct {name} {{",
             f"  __device__ __forceinline__ {out_type} operator()({params}) const {{"]
    lines += _node_lines(expr, lambda k: f"in{k}", lambda k: f"in{k}", "    ")
    lines += [f"    return v{expr.outputs[0]};", "  }", "};"]
    return "\n".join(lines) + "\n"
