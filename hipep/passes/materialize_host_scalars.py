"""hip-materialize-host-scalars: small host-visible buffers get a scratch place of their own.

Shape arithmetic makes many tiny host-visible values (extents, indices, lengths). Each gets its
own offset in the host-visible pool (marked `scratch`), so `hip-reuse-buffers` never shares it:
host steps write these at once, and a shared scalar slot would be a host/host hazard with no sync
to guard it. `max_bytes` is the largest buffer that counts as a scalar (statically sized only).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.api import Context, ModuleOp, ModulePass, UnitAttr

from ..ir.buffer_ops import HOST_VISIBLE, AllocOp, memory_space
from .buffer_effects import walk


def static_bytes(t) -> int | None:
    shape = t.get_shape()
    if any(d < 0 for d in shape):
        return None
    n = 1
    for d in shape:
        n *= d
    width = getattr(t.element_type, "bitwidth", None) or getattr(t.element_type, "width", None)
    width = width.data if hasattr(width, "data") else width
    return n * max(1, (width or 8) // 8)


@dataclass(frozen=True)
class MaterializeHostScalarsPass(ModulePass):
    name = "hip-materialize-host-scalars"
    max_bytes: int = 64

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for f in op.ops:
            for inner in walk(f.regions[0].blocks[0]) if f.regions else ():
                if isinstance(inner, AllocOp) and memory_space(inner.result.type) == HOST_VISIBLE:
                    size = static_bytes(inner.result.type)
                    if size is not None and size <= self.max_bytes:
                        inner.properties["scratch"] = UnitAttr()
