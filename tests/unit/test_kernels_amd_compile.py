"""The AMD side of kernels/hipep_device.h, compiled with hipcc for gfx90a (skipped where hipcc is
not installed; CI installs Debian's HIP 5.2): a rendered pointwise kernel using every primitive
builds, and the round-to-nearest intrinsics keep CUDA's rounding in the machine code (a product
is never fused into the sum that uses it; the square root is corrected to the nearest float).
tools/check_kernels.sh compiles the kernels/*.hip modules themselves."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from hipep.ops.pointwise import Operand
from hipep.ops.pointwise_hip import render_hip_kernel
from hipep.ops.registry import lookup
from hipep.runtime.kernel_cache import pointwise_source

from unit.host_kernels import KERNELS
from unit.test_pointwise import every_primitive_expression

HIPCC = shutil.which("hipcc")
pytestmark = pytest.mark.skipif(HIPCC is None, reason="hipcc is not installed (Debian: apt-get install hipcc)")

TARGET, WARP = "gfx90a", 64
# Instructions that multiply and add with one rounding (or, for v_mad, none that CUDA's _rn allows).
FUSED = re.compile(r"^v_(fma|fmac|mac|mad|fmaak|fmamk)_f32")


def hipcc(tmp_path: Path, source: str, *flags: str) -> Path:
    """Compiles `source` (after the portability header) for TARGET; returns the output file."""
    src = tmp_path / "k.hip"
    src.write_text(source)
    out = tmp_path / ("k.s" if "-S" in flags else "k.o")
    # HIP_PLATFORM=amd: hipcc picks the NVIDIA platform wherever nvcc is on the PATH.
    r = subprocess.run([HIPCC, "-x", "hip", "-std=c++17", f"--offload-arch={TARGET}", "--cuda-device-only",
                        "-Wno-unused-command-line-argument", f"-DHIPEP_WARP_SIZE={WARP}", f"-I{KERNELS}",
                        *flags, str(src), "-o", str(out)],
                       capture_output=True, text=True, timeout=600, env={**os.environ, "HIP_PLATFORM": "amd"})
    assert r.returncode == 0, r.stderr[-4000:]
    return out


def instructions(tmp_path: Path, source: str) -> dict[str, list[str]]:
    """Kernel name → the mnemonics of its vector instructions, from hipcc's assembly."""
    kernels: dict[str, list[str]] = {}
    current = None
    for line in hipcc(tmp_path, source, "-S").read_text().splitlines():
        label = re.match(r"^([A-Za-z_]\w*):", line)
        if label:
            current = label.group(1)
            kernels.setdefault(current, [])
        elif current is not None and line.startswith("\t") and line.strip():
            mnemonic = line.split()[0]
            if mnemonic == "s_endpgm":
                current = None
            elif mnemonic.startswith("v_"):
                kernels[current].append(mnemonic)
    return kernels


def test_every_pointwise_primitive_compiles_for_amd(tmp_path):
    expr, dtypes = every_primitive_expression()
    source = pointwise_source(render_hip_kernel(expr, "fused_all", dtypes, ["float32"]))
    gelu = lookup("", "Gelu").pointwise([Operand(np.dtype(np.float16))], {"approximate": "tanh"})
    other = render_hip_kernel(gelu, "gelu_f16", ["float16"], ["float16"])
    source += other[other.index("struct hipep_pointwise_args"):]
    assert "__float2bfloat16(" in source and "__half2float(" in source and "__fmul_rn(" in source
    assert hipcc(tmp_path, source, "-c").stat().st_size > 0


RN_KERNELS = """#include "hipep_device.h"
HIPEP_KERNEL void rn_sum(const float* a, const float* b, const float* c, float* o) {
  const int i = threadIdx.x;
  o[i] = __fadd_rn(__fmul_rn(a[i], b[i]), c[i]);
}
HIPEP_KERNEL void rn_difference(const float* a, const float* b, const float* c, float* o) {
  const int i = threadIdx.x;
  o[i] = __fsub_rn(__fmul_rn(a[i], b[i]), c[i]);
}
HIPEP_KERNEL void plain_sum(const float* a, const float* b, const float* c, float* o) {
  const int i = threadIdx.x;
  o[i] = a[i] * b[i] + c[i];
}
HIPEP_KERNEL void rn_sqrt(const float* a, float* o) { o[threadIdx.x] = __fsqrt_rn(a[threadIdx.x]); }
HIPEP_KERNEL void native_sqrt(const float* a, float* o) { o[threadIdx.x] = __ocml_native_sqrt_f32(a[threadIdx.x]); }
"""


def test_rn_products_are_not_fused_on_amd(tmp_path):
    code = instructions(tmp_path, RN_KERNELS)
    # The plain expression is fused: the check sees a fused instruction where there is one.
    assert any(FUSED.match(m) for m in code["plain_sum"]), code["plain_sum"]
    for name in ("rn_sum", "rn_difference"):
        assert not any(FUSED.match(m) for m in code[name]), (name, code[name])
        assert "v_mul_f32_e32" in code[name], (name, code[name])


def test_rn_sqrt_is_corrected_on_amd(tmp_path):
    code = instructions(tmp_path, RN_KERNELS)
    # HIP's own __fsqrt_rn is the hardware's approximate square root: one instruction.
    assert code["native_sqrt"].count("v_sqrt_f32_e32") == 1
    assert not any(FUSED.match(m) for m in code["native_sqrt"]), code["native_sqrt"]
    # hipep's takes the approximation's neighbours and keeps the one an exact residual picks.
    assert code["rn_sqrt"].count("v_sqrt_f32_e32") == 1
    assert sum(1 for m in code["rn_sqrt"] if FUSED.match(m)) >= 2, code["rn_sqrt"]
