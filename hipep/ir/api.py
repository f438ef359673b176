"""The xDSL surface hipep uses, re-exported so that only hipep/ir imports xdsl.

Passes (hipep/passes), the frontend and hipep-opt import these names from here. xDSL renames
things between minor releases; when it does, fix the imports here (xdsl is pinned in
pyproject.toml).
"""
from __future__ import annotations

import importlib

from xdsl.context import Context
from xdsl.dialects import builtin, func
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


# Imported on first use: hipep-opt's driver, and the dialects only some models' IR holds (tensor
# and arith for lowered slices; memref and scf only in text IR). A session compiles without them,
# and they are ~2 MiB of modules every process would otherwise hold. (The parser and printer come
# with func.)
_LAZY = {"Parser": ("xdsl.parser", "Parser"), "Printer": ("xdsl.printer", "Printer"),
         "xDSLOptMain": ("xdsl.xdsl_opt_main", "xDSLOptMain")}
_LAZY_DIALECTS = {"arith": "Arith", "memref": "MemRef", "scf": "Scf", "tensor": "Tensor"}


def __getattr__(name: str):
    if name in _LAZY:
        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    if name in _LAZY_DIALECTS:
        return importlib.import_module(f"xdsl.dialects.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def make_context() -> Context:
    """A context with the dialects hipep's IR uses: hip, builtin, func, tensor, arith, memref, scf."""
    from .dialect import hip_dialect

    ctx = Context()
    for d in (builtin.Builtin, func.Func):
        ctx.load_dialect(d)
    # Registered, not loaded: a dialect is built (and its module imported) only when something looks
    # one of its ops up by name (parsing text IR); compiling a model makes the op classes it uses.
    for name, dialect in _LAZY_DIALECTS.items():
        ctx.register_dialect(name, lambda name=name, dialect=dialect: getattr(__getattr__(name), dialect))
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
