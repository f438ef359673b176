"""IR passes, one per file, each runnable alone through `hipep-opt -p <name>`.

PASSES maps pass names to ModulePass classes (hipep-opt registers exactly these);
DEFAULT_PIPELINE is the order the compiler runs them in.
"""
from __future__ import annotations

from ..ir.api import ModuleOp, ModulePass, PassPipeline, make_context
from .assign_memory_spaces import AssignMemorySpacesPass
from .bufferize import BufferizePass
from .emit_plan import EmitPlanPass
from .fuse_gated_matmul import FuseGatedMatMulPass
from .fuse_norm_matmul import FuseNormMatMulPass
from .fuse_pointwise import FusePointwisePass
from .infer_shapes import InferShapesPass
from .insert_syncs import InsertSyncsPass
from .lower_slices import LowerSlicesPass
from .materialize_host_scalars import MaterializeHostScalarsPass
from .reuse_buffers import ReuseBuffersPass

PASSES: dict[str, type[ModulePass]] = {
    "hip-infer-shapes": InferShapesPass,
    "hip-lower-slices": LowerSlicesPass,
    "hip-bufferize": BufferizePass,
    "hip-fuse-pointwise": FusePointwisePass,
    "hip-fuse-gated-matmul": FuseGatedMatMulPass,
    "hip-fuse-norm-matmul": FuseNormMatMulPass,
    "hip-assign-memory-spaces": AssignMemorySpacesPass,
    "hip-materialize-host-scalars": MaterializeHostScalarsPass,
    "hip-reuse-buffers": ReuseBuffersPass,
    "hip-insert-syncs": InsertSyncsPass,
    "hip-emit-plan": EmitPlanPass,
}

DEFAULT_PIPELINE: list[str] = list(PASSES)


def run_pipeline(module: ModuleOp, spec: str | list[str] | None = None, after_each=None) -> ModuleOp:
    """Run a pipeline on `module` in place: `spec` is a pass-pipeline string as hipep-opt's -p
    takes it ("hip-infer-shapes{refine=false},hip-lower-slices") or a list of names; default
    DEFAULT_PIPELINE. `after_each(pass, module)` is called after every pass."""
    if spec is None:
        spec = DEFAULT_PIPELINE
    if not isinstance(spec, str):
        spec = ",".join(spec)
    available = {name: (lambda cls=cls: cls) for name, cls in PASSES.items()}
    callback = None
    if after_each is not None:
        def callback(previous, op, _next):
            if previous is not None:
                after_each(previous, op)
    PassPipeline.parse_spec(available, spec, callback).apply(make_context(), module)
    return module


def pipeline_with_overrides(overrides: str = "", leave_out=()) -> str:
    """DEFAULT_PIPELINE as a spec, with passes replaced by `overrides` (comma-separated specs with
    options, e.g. "hip-assign-memory-spaces{host_rule=false}") and the passes named in
    `leave_out` left out (optional passes a provider option switches off). Unknown pass names
    are an error."""
    chosen = {name: name for name in DEFAULT_PIPELINE}
    for item in _split_specs(overrides):
        name = item.split("{", 1)[0].strip()
        if name not in chosen:
            raise ValueError(f"unknown pass '{name}' in pass options; passes: {', '.join(DEFAULT_PIPELINE)}")
        chosen[name] = item.strip()
    return ",".join(chosen[name] for name in DEFAULT_PIPELINE if name not in leave_out)


def _split_specs(text: str) -> list[str]:
    items, depth, current = [], 0, ""
    for ch in text:
        if ch == "," and depth == 0:
            items.append(current)
            current = ""
            continue
        depth += {"{": 1, "}": -1}.get(ch, 0)
        current += ch
    items.append(current)
    return [i for i in items if i.strip()]
