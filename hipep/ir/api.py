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
from xdsl.parser import Parser
from xdsl.passes import ModulePass, PassPipeline
from xdsl.printer import Printer
from xdsl.rewriter import InsertPoint, Rewriter
from xdsl.xdsl_opt_main import xDSLOptMain

__all__ = [
    "Context", "arith", "builtin", "func", "memref", "scf", "tensor", "DYNAMIC_INDEX", "ArrayAttr",
    "DenseIntOrFPElementsAttr", "DictionaryAttr", "FloatAttr", "FunctionType", "IndexType",
    "IntegerAttr", "MemRefType", "ModuleOp", "StringAttr", "TensorType", "UnitAttr", "UnrankedMemRefType",
    "UnrankedTensorType", "i64", "Attribute",
    "Block", "BlockArgument", "Dialect", "Operation", "OpResult", "Region", "SSAValue", "Parser",
    "ModulePass", "PassPipeline", "Printer", "InsertPoint", "Rewriter", "make_context", "print_ir",
    "parse_ir", "xDSLOptMain",
]


def make_context() -> Context:
    """A context with the dialects hipep's IR uses: hip, builtin, func, tensor, arith, memref, scf."""
    from .dialect import HipDialect

    ctx = Context()
    for d in (builtin.Builtin, func.Func, tensor.Tensor, arith.Arith, memref.MemRef, scf.Scf, HipDialect):
        ctx.load_dialect(d)
    return ctx


def print_ir(op: Operation, generic: bool = False) -> str:
    """The textual IR of `op` (for dumps, tests and error messages; never a cache format)."""
    import io

    stream = io.StringIO()
    Printer(stream=stream, print_generic_format=generic).print_op(op)
    return stream.getvalue()


def parse_ir(text: str, ctx: Context | None = None) -> ModuleOp:
    return Parser(ctx or make_context(), text).parse_module()
