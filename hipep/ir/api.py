"""The xDSL surface hipep uses, re-exported so that only hipep/ir imports xdsl.

Passes (hipep/passes), the frontend and hipep-opt import these names from here. xDSL renames
things between minor releases; when it does, fix the imports here (xdsl is pinned in
pyproject.toml).
"""
from __future__ import annotations

from xdsl.context import Context
from xdsl.dialects import arith, builtin, func, memref, scf, tensor
from xdsl.dialects.builtin import (DYNAMIC_INDEX, ArrayAttr, DenseIntOrFPElementsAttr,
                                   DictionaryAttr, FloatAttr, FunctionType, IndexType,
                                   IntegerAttr, MemRefType, ModuleOp, StringAttr, TensorType,
                                   UnitAttr, UnrankedMemRefType, UnrankedTensorType, i64)
from xdsl.ir import Attribute, Block, BlockArgument, Dialect, Operation, OpResult, Region, SSAValue
from xdsl.passes import ModulePass, PassPipeline
from xdsl.rewriter import InsertPoint, Rewriter

__all__ = [
    "Context", "arith", "builtin", "func", "memref", "scf", "tensor", "DYNAMIC_INDEX", "ArrayAttr",
    "DenseIntOrFPElementsAttr", "DictionaryAttr", "FloatAttr", "FunctionType", "IndexType",
    "IntegerAttr", "MemRefType", "ModuleOp", "StringAttr", "TensorType", "UnitAttr", "UnrankedMemRefType",
    "UnrankedTensorType", "i64", "Attribute",
    "Block", "BlockArgument", "Dialect", "Operation", "OpResult", "Region", "SSAValue", "Parser",
    "ModulePass", "PassPipeline", "Printer", "InsertPoint", "Rewriter", "make_context", "print_ir",
    "parse_ir", "xDSLOptMain",
]


# The textual IR (parser, printer) and hipep-opt's driver are imported on first use: a session
# compiles without them, and they are several MiB of modules every process would otherwise hold.
_LAZY = {"Parser": ("xdsl.parser", "Parser"), "Printer": ("xdsl.printer", "Printer"),
         "xDSLOptMain": ("xdsl.xdsl_opt_main", "xDSLOptMain")}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def make_context() -> Context:
    """A context with the dialects hipep's IR uses: hip, builtin, func, tensor, arith, memref, scf."""
    from .dialect import hip_dialect

    ctx = Context()
    for d in (builtin.Builtin, func.Func, tensor.Tensor, arith.Arith, memref.MemRef, scf.Scf):
        ctx.load_dialect(d)
    # Registered, not loaded: the whole hip dialect is built only when something looks an op up by
    # name (parsing text IR); compiling a model makes the op classes it uses on demand.
    ctx.register_dialect("hip", hip_dialect)
    return ctx


def print_ir(op: Operation, generic: bool = False) -> str:
    """The textual IR of `op` (for dumps, tests and error messages; never a cache format)."""
    import io

    from xdsl.printer import Printer

    stream = io.StringIO()
    Printer(stream=stream, print_generic_format=generic).print_op(op)
    return stream.getvalue()


def parse_ir(text: str, ctx: Context | None = None) -> ModuleOp:
    from xdsl.parser import Parser

    return Parser(ctx or make_context(), text).parse_module()
