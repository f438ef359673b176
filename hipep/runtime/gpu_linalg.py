"""GPU bindings: MatMul and Gemm, LayerNormalization and SkipLayerNormalization.

Registered into the kernel table (hipep.runtime.gpu_kernels) when it is imported."""
from __future__ import annotations
