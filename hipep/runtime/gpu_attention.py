"""GPU bindings: GroupQueryAttention (decode split over the KV length, prefill tiled and causal) and RotaryEmbedding.

Registered into the kernel table (hipep.runtime.gpu_kernels) when it is imported."""
from __future__ import annotations
