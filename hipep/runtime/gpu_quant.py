"""GPU bindings: MatMulNBits (4 and 8 bits: a dequantizing GEMV for few rows, a GEMM for prefill) and GatherBlockQuantized.

Registered into the kernel table (hipep.runtime.gpu_kernels) when it is imported."""
from __future__ import annotations
