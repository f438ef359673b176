"""Op families. Each module registers its OpDefs with `registry.register` when imported."""
from .registry import OpDef, all_ops, check_node, lookup, resolve_attributes  # noqa: F401

FAMILIES = ("elementwise", "linalg", "normalization", "shape", "reduce", "control_flow", "contrib_attention",
            "contrib_quant", "contrib_norm", "vision", "indexing", "quantize")


def _import_families():
    import importlib

    for name in FAMILIES:
        importlib.import_module(f"{__name__}.{name}")
