"""IR passes, one per file, each runnable alone through `hipep-opt -p <name>`.

PASSES maps pass names to ModulePass classes (hipep-opt registers exactly these);
DEFAULT_PIPELINE is the order the compiler runs them in.
"""
from __future__ import annotations

from ..ir.api import ModuleOp, ModulePass, PassPipeline, make_context
from .infer_shapes import InferShapesPass
from .lower_slices import LowerSlicesPass

PASSES: dict[str, type[ModulePass]] = {
    "hip-infer-shapes": InferShapesPass,
    "hip-lower-slices": LowerSlicesPass,
}

DEFAULT_PIPELINE: list[str] = [
    "hip-infer-shapes",
    "hip-lower-slices",
]


def run_pipeline(module: ModuleOp, spec: str | list[str] | None = None) -> ModuleOp:
    """Run a pipeline on `module` in place: `spec` is a pass-pipeline string as hipep-opt's -p
    takes it ("hip-infer-shapes{refine=false},hip-lower-slices") or a list of names; default
    DEFAULT_PIPELINE."""
    if spec is None:
        spec = DEFAULT_PIPELINE
    if not isinstance(spec, str):
        spec = ",".join(spec)
    available = {name: (lambda cls=cls: cls) for name, cls in PASSES.items()}
    PassPipeline.parse_spec(available, spec).apply(make_context(), module)
    return module
