"""GPU binding: Einsum (registered in hipep.runtime.gpu_kernels' table on import).

The equations it runs are those that are a (batched) matrix product or a plain rearrangement
once the operands are seen through strides; each "..." stands for subscripts of its own (the
operands' ranks are known at launch), broadcast where an operand's extent is 1.
  * Two operands: every subscript is a batch one (in both operands and the output), a row one
    (first operand and output), a column one (second operand and output) or a contracted one
    (both operands, not the output). Each group is one GEMM axis where the operand's strides
    merge it into one (gpu_linalg's GemmProblem: any strides, up to 4 batch axes); an operand
    whose groups do not merge (or that broadcasts within one) is first copied into the stream's
    workspace as [batch, rows, contracted] (or [batch, contracted, columns]) by the strided
    copy. The product writes Y directly when the output lists its subscripts as batch, rows,
    columns (or batch, columns, rows: the operands swap); else it writes the workspace and a
    strided copy permutes it into Y. "i,i->" is a 1 x 1 product over i.
  * One operand: a Transpose (strided copy) where no subscript is summed; else ReduceSum over
    the summed subscripts, after a copy that moves them last where they are not adjacent or the
    kept ones are out of the output's order.
  * Two f64 operands: kernels/einsum.hip, one sum of products per output in double (there is no
    f64 GEMM), any subscripts (one summed within one operand alone too).
A subscript repeated within an operand's term (a diagonal) is one axis of that operand whose
stride is the sum of its axes' strides: copies and the f64 kernel read the diagonal directly; the
GEMM path copies such an operand out first, so the product sees the layouts it sees elsewhere.
Refused, naming the equation: more than two operands, a subscript summed within one of two f32 /
f16 operands alone, integer products and sums, "..." in an operand of unknown rank, terms of more
than COPY_MAX_RANK subscripts, and f64 products summing more than EINSUM_MAX_RANK subscripts.
"""
from __future__ import annotations

import ctypes
import dataclasses
from typing import Sequence

from ..errors import HipepError
from ..ops.linalg import EinsumError, parse_einsum
from .gpu_binding_core import workspace_after, workspace_regions
from .gpu_kernels import (COPY_MAX_RANK, Arg, KernelOp, NoKernel, _binding, _prod, contiguous_strides, merge_dims,
                          ptr, row_config, strided_copy)
from .gpu_linalg import GEMM_MAX_BATCH_RANK, GemmProblem, gemm_ops

_FLOATS = ("float32", "float16", "float64")  # element types with products and sums
_TYPES = _FLOATS + ("int32", "int64")
EINSUM_MAX_RANK = 8  # kernels/einsum.hip's HIPEP_EINSUM_MAX_RANK: output axes, and summed axes, each


class EinsumArgs(ctypes.Structure):
    """kernels/einsum.hip's hipep_einsum_args."""
    _fields_ = [("outputs", ctypes.c_longlong), ("summed", ctypes.c_longlong),
                *((name, ctypes.c_longlong * EINSUM_MAX_RANK)
                  for name in ("out_dims", "a_out", "b_out", "sum_dims", "a_sum", "b_sum")),
                ("out_rank", ctypes.c_int), ("sum_rank", ctypes.c_int)]


_ELLIPSIS_LETTERS = "0123456789"  # fresh subscripts for the axes of "..." (letters are a-z, A-Z)


def _expand_ellipsis(terms: list[str], out: str, ranks: Sequence[int | None]) -> tuple[list[str], str] | str:
    """The terms with each "..." replaced by one fresh subscript per axis (right-aligned across the
    operands, as numpy broadcasts them), or why that cannot be done."""
    if not any("." in t for t in terms):
        return terms, out
    widths = []
    for t, r in zip(terms, ranks):
        if "." not in t:
            widths.append(0)
        elif r is None:
            return f"'...' in an operand of unknown rank ('{t.replace('.', '...')}')"
        else:
            widths.append(r - (len(t) - 1))
    width = max(widths)
    if width > len(_ELLIPSIS_LETTERS):
        return f"'...' standing for {width} axes"
    fresh = _ELLIPSIS_LETTERS[len(_ELLIPSIS_LETTERS) - width:]
    expanded = [t.replace(".", fresh[width - w:]) for t, w in zip(terms, widths)]
    return expanded, out.replace(".", fresh)


def _distinct(term: str) -> str:
    """A term's subscripts, each once, in the order they first occur."""
    return "".join(dict.fromkeys(term))


def _structure(equation: str, n_inputs: int, ranks: Sequence[int | None],
               dtype: str) -> tuple[list[str], str] | str:
    """(terms, output) of an equation the binding runs on `dtype` operands, "..." expanded, or why
    it has no kernel."""
    try:
        terms, out, _ = parse_einsum(equation, n_inputs)
    except EinsumError as e:
        return str(e)
    if n_inputs not in (1, 2):
        return f"{n_inputs} operands (one or two have a kernel)"
    expanded = _expand_ellipsis(terms, out, ranks)
    if isinstance(expanded, str):
        return expanded
    terms, out = expanded
    for t in terms + [out]:
        if len(_distinct(t)) > COPY_MAX_RANK:
            return f"a term of {len(_distinct(t))} subscripts (at most {COPY_MAX_RANK})"
    if n_inputs == 2:
        a, b = terms
        summed = _distinct("".join(ch for ch in a + b if ch not in out))
        if dtype == "float64":
            if len(summed) > EINSUM_MAX_RANK:
                return f"{len(summed)} summed subscripts (at most {EINSUM_MAX_RANK})"
        else:
            alone = [ch for ch in summed if (ch in a) != (ch in b)]
            if alone:
                return f"subscript '{alone[0]}' is summed within one operand alone"
    return terms, out


def _einsum_check(attrs, dtypes, shapes, values):
    equation = attrs.get("equation")
    if equation is None:
        return "no equation"
    n_inputs = len(dtypes)
    shapes = list(shapes) + [None] * n_inputs
    dtype = dtypes[0] if dtypes else "?"
    structure = _structure(str(equation), n_inputs, [None if s is None else len(s) for s in shapes[:n_inputs]],
                           dtype)
    if isinstance(structure, str):
        return f"equation '{equation}': {structure}"
    terms, out = structure
    if dtype not in _TYPES:
        return f"element type {dtype}"
    summed = n_inputs == 2 or any(ch not in out for ch in terms[0])
    if summed and dtype not in _FLOATS:
        return f"equation '{equation}' on {dtype} (products and sums have float kernels only)"
    return None


@_binding("::Einsum", check=_einsum_check, modules=("copy", "gemm", "reduce", "einsum"))
def _einsum_bind(ins, outs, attrs, target):
    equation = str(attrs["equation"])
    y = outs[0]
    structure = _structure(equation, len(ins), [x.ndim for x in ins], ins[0].dtype.name)
    if isinstance(structure, str):
        raise NoKernel(f"Einsum: equation '{equation}': {structure}")
    terms, out = structure
    extent: dict[str, int] = {}
    for t, x in zip(terms, ins):
        for ch, d in zip(t, x.shape):
            extent[ch] = max(extent.get(ch, 1), int(d)) if int(d) != 0 else 0
    if y.size != _prod(extent[ch] for ch in out):
        raise HipepError(f"Einsum: equation '{equation}': output of shape {list(y.shape)}, expected "
                         f"{[extent[ch] for ch in out]}")
    if y.size == 0:
        return []
    operands = [_Operand(x, t, extent) for x, t in zip(ins, terms)]
    if len(ins) == 1:
        return _one_operand_ops(operands[0], y, out, extent, target)
    if y.dtype.name == "float64":
        return _f64_product_ops(operands[0], operands[1], y, out, extent, target)
    return _product_ops(operands[0], operands[1], y, out, extent, target)


@dataclasses.dataclass
class _Operand:
    arg: Arg
    axes: str  # the subscript of each of arg's axes (one repeats along a diagonal)
    extent: dict

    @property
    def term(self) -> str:
        """The operand's subscripts, each once."""
        return _distinct(self.axes)

    @property
    def diagonal(self) -> bool:
        return len(self.term) != len(self.axes)

    def stride(self, ch: str) -> int:
        """Elements per step of subscript ch (0 where the operand broadcasts it or lacks it): the
        sum of the strides of the axes it names, a diagonal's step where it names several."""
        strides = contiguous_strides(self.arg.shape)
        return sum(s for c, s, d in zip(self.axes, strides, self.arg.shape) if c == ch and int(d) != 1)

    def copy_to(self, letters: str, at: int, target) -> tuple["_Operand", list]:
        """This operand copied to `at`, laid out contiguously along `letters` (broadcasts expanded)."""
        dims = [self.extent[ch] for ch in letters]
        dst = Arg(at, tuple(dims), self.arg.dtype)
        ops = strided_copy(self.arg, dst, dims, [self.stride(ch) for ch in letters], 0, target)
        return _Operand(dst, letters, self.extent), ops


class _Workspace:
    """Consecutive regions of one request to the stream's workspace; what lies past them is the
    products' own workspace."""

    def __init__(self, target, sizes: Sequence[int]):
        # Without a workspace and with nothing to put there, the products run hipep's own kernels.
        self.pointers = workspace_regions(target, "Einsum", sizes) if sizes else []
        self.after = workspace_after(target, sizes)

    def at(self, i: int) -> int:
        return self.pointers[i]


def _group(op: _Operand, letters: str) -> tuple[int, int] | None:
    """(extent, stride) of `letters` seen as one axis of op, or None where they do not merge into
    one (or op broadcasts along them). Stride 0 stands for an axis of extent 1."""
    dims, (strides,) = merge_dims([op.extent[ch] for ch in letters], [[op.stride(ch) for ch in letters]])
    if not dims:
        return 1, 0
    if len(dims) > 1 or strides[0] == 0:
        return None
    return dims[0], strides[0]


def _matrix(op: _Operand, rows: str, cols: str) -> tuple[int, int, int, int] | None:
    """(rows, cols, row stride, column stride) of op as a matrix, one of the strides 1 (as
    cuBLASLt takes them), or None where it is not one."""
    r, c = _group(op, rows), _group(op, cols)
    if r is None or c is None:
        return None
    (m, sm), (k, sk) = r, c
    if sm == 0:  # one row: its stride only has to suit the layout
        sm = k if sk == 1 else 1
    if sk == 0:
        sk = m if sm == 1 and m > 1 else 1
    if sm != 1 and sk != 1:
        return None
    return m, k, sm, sk


def _product_ops(a: _Operand, b: _Operand, y: Arg, out: str, extent: dict, target) -> list:
    batch = "".join(ch for ch in out if ch in a.term and ch in b.term)
    rest = [ch for ch in out if ch not in batch]
    if rest and rest[0] in b.term:  # the output lists B's subscripts first: Y = B' A'
        a, b = b, a
    rows = "".join(ch for ch in out if ch in a.term and ch not in b.term)
    cols = "".join(ch for ch in out if ch in b.term and ch not in a.term)
    inner = "".join(ch for ch in a.term if ch in b.term and ch not in out)
    direct = out == batch + rows + cols
    m, n = _prod(extent[ch] for ch in rows), _prod(extent[ch] for ch in cols)
    e = y.dtype.itemsize

    def batch_axes(ops_: list[_Operand]):
        out_strides = [s * m * n for s in contiguous_strides([extent[ch] for ch in batch])]
        return merge_dims([extent[ch] for ch in batch], [[o.stride(ch) for ch in batch] for o in ops_] + [out_strides])

    need_a = a.diagonal or _matrix(a, rows, inner) is None
    need_b = b.diagonal or _matrix(b, inner, cols) is None
    dims, _ = batch_axes([a, b])
    if len(dims) > GEMM_MAX_BATCH_RANK:
        need_a = need_b = True  # copied contiguously, the batch axes merge into one
    sizes = [a.arg.dtype.itemsize * _prod(extent[ch] for ch in batch + rows + inner) if need_a else 0,
             b.arg.dtype.itemsize * _prod(extent[ch] for ch in batch + inner + cols) if need_b else 0,
             0 if direct else e * _prod(extent[ch] for ch in batch) * m * n]
    space = _Workspace(target, sizes)
    ops: list = []
    if need_a:
        a, copy = a.copy_to(batch + rows + inner, space.at(0), target)
        ops += copy
    if need_b:
        b, copy = b.copy_to(batch + inner + cols, space.at(1), target)
        ops += copy
    (_, k, a_sm, a_sk), (_, _, b_sk, b_sn) = _matrix(a, rows, inner), _matrix(b, inner, cols)
    dims, (a_batch, b_batch, _) = batch_axes([a, b])
    product = y if direct else Arg(space.at(2), (_prod(extent[ch] for ch in batch) * m * n,), y.dtype)
    problem = GemmProblem(m, n, k, a_sm=a_sm, a_sk=a_sk, b_sk=b_sk, b_sn=b_sn, batch_dims=dims, a_batch=a_batch,
                          b_batch=b_batch)
    ops += gemm_ops(problem, a.arg, b.arg, None, product, space.after)
    if not direct:
        done = batch + rows + cols
        strides = contiguous_strides([extent[ch] for ch in done])
        ops += strided_copy(product, y, [extent[ch] for ch in out], [strides[done.index(ch)] for ch in out], 0,
                            target)
    return ops


def _one_operand_ops(x: _Operand, y: Arg, out: str, extent: dict, target) -> list:
    summed = "".join(ch for ch in x.term if ch not in out)
    if not summed:  # a rearrangement
        return strided_copy(x.arg, y, [extent[ch] for ch in out], [x.stride(ch) for ch in out], 0, target)
    from .gpu_bindings_reduce import _reduce_bind, reduce_blocks

    kept = "".join(ch for ch in x.term if ch in out)
    axes = [x.axes.index(ch) for ch in summed]
    ops: list = []
    src = x.arg
    if x.diagonal or kept != out or isinstance(reduce_blocks(src.shape, axes, False), str):
        space = _Workspace(target, [src.dtype.itemsize * _prod(extent[ch] for ch in out + summed)])
        moved, ops = x.copy_to(out + summed, space.at(0), target)
        src, axes = moved.arg, list(range(len(out), len(out) + len(summed)))
    flat = Arg(y.ptr, (y.size,), y.dtype)
    return ops + _reduce_bind("ReduceSum")([src, None], [flat], {"axes": axes, "keepdims": 0}, target)


def _f64_product_ops(a: _Operand, b: _Operand, y: Arg, out: str, extent: dict, target) -> list:
    """Two f64 operands: kernels/einsum.hip reads them through their strides, the output's axes
    and the summed ones each merged where both operands step through them as one."""
    summed = _distinct("".join(ch for ch in a.term + b.term if ch not in out))
    out_dims, (a_out, b_out) = merge_dims([extent[ch] for ch in out],
                                          [[a.stride(ch) for ch in out], [b.stride(ch) for ch in out]])
    sum_dims, (a_sum, b_sum) = merge_dims([extent[ch] for ch in summed],
                                          [[a.stride(ch) for ch in summed], [b.stride(ch) for ch in summed]])
    args = EinsumArgs()
    args.outputs, args.summed = y.size, _prod(sum_dims)
    args.out_rank, args.sum_rank = len(out_dims), len(sum_dims)
    for d, (e, sa, sb) in enumerate(zip(out_dims, a_out, b_out)):
        args.out_dims[d], args.a_out[d], args.b_out[d] = e, sa, sb
    for d, (e, sa, sb) in enumerate(zip(sum_dims, a_sum, b_sum)):
        args.sum_dims[d], args.a_sum[d], args.b_sum[d] = e, sa, sb
    grid, block = row_config(y.size, max(args.summed, 1), target)
    return [KernelOp("hipep_einsum_f64", grid, block, [ptr(a.arg), ptr(b.arg), ptr(y), args], module="einsum")]
