"""Op families. Each module registers its OpDefs with `registry.register` when imported; mlas.py
registers nothing: it holds the replays of ORT's MLAS arithmetic that several families' references
call."""
from .registry import OpDef, all_ops, check_node, lookup, resolve_attributes  # noqa: F401

FAMILIES = ("elementwise", "linalg", "normalization", "shape", "dims", "reduce", "control_flow", "contrib_attention",
            "rotary", "attention", "contrib_quant", "moe", "linear_attention", "contrib_norm", "vision", "conv_integer",
            "resize", "indexing", "quantize", "grid_sample", "signal", "detection", "unique", "recurrent",
            "max_unpool", "deform_conv")


def _import_families():
    import importlib

    for name in FAMILIES:
        importlib.import_module(f"{__name__}.{name}")
