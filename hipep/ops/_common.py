"""Helpers shared by the op family modules (not a family itself: registers nothing).

Reference kernels are the CPU oracle device. Conventions every kernel follows:
  * results are fresh C-contiguous arrays (never views of inputs), of exactly the ONNX output
    dtype, 0-d arrays for scalars (never numpy/python scalars);
  * f16 math is done in f32 and rounded once, as ONNX Runtime's CPU kernels do;
  * invalid run-time inputs raise RuntimeShapeError naming expected vs got shapes; numpy's own
    ValueError/IndexError never escape (the `kernel` decorator converts any that slip through).
"""
from __future__ import annotations

import functools

import ml_dtypes
import numpy as np

from ..errors import HipepError, RuntimeShapeError
from ..graph import GraphView, Node, elem_type_name
from ..symbolic import SymInt
from .registry import BF16, BOOL, F16, F32, I32, I64

NP_DTYPES = {F32: np.dtype(np.float32), F16: np.dtype(np.float16), I32: np.dtype(np.int32),
             I64: np.dtype(np.int64), BOOL: np.dtype(np.bool_), BF16: np.dtype(ml_dtypes.bfloat16)}
F16_DT = np.dtype(np.float16)
F32_DT = np.dtype(np.float32)
BF16_DT = np.dtype(ml_dtypes.bfloat16)
# The 16-bit float types, whose math runs in f32 with each result rounded once (as ORT's kernels,
# and its CUDA EP's bf16 ones, do).
HALF_DTS = (F16_DT, BF16_DT)


def shape_str(shape) -> str:
    return "[" + ", ".join(str(int(d)) for d in shape) + "]"


def result(x, dtype=None) -> np.ndarray:
    """A fresh C-contiguous array (a copy, so never aliasing an input), 0-d for scalars."""
    return np.array(x, dtype=dtype, order="C", copy=True)


def is_float(a: np.ndarray) -> bool:
    return a.dtype.kind == "f" or a.dtype == BF16_DT


def compute_dtype(dtype) -> np.dtype:
    """The dtype float math runs in: f32 for f16 and bf16 (rounded once at the end), else the dtype."""
    dtype = np.dtype(dtype)
    return F32_DT if dtype in HALF_DTS else dtype


def upcast(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float32) if a.dtype in HALF_DTS else a


def kernel(op_type: str):
    """Wraps a reference kernel: numpy floating-point warnings off (inf/nan are the IEEE answer),
    and any raw numpy ValueError/IndexError turned into a RuntimeShapeError naming the op."""
    def wrap(fn):
        @functools.wraps(fn)
        def reference(inputs, attrs):
            try:
                with np.errstate(all="ignore"):
                    return fn(inputs, attrs)
            except HipepError:
                raise
            except (ValueError, IndexError) as e:
                raise RuntimeShapeError(f"{op_type}: {e}") from e
        return reference
    return wrap


def broadcast_shape(op_type: str, *arrays, names=None) -> tuple[int, ...]:
    """ONNX multidirectional broadcasting of the given arrays' shapes, or RuntimeShapeError."""
    shapes = [a.shape for a in arrays]
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        names = names or [chr(ord("A") + i) for i in range(len(shapes))]
        desc = ", ".join(f"{n} is {shape_str(s)}" for n, s in zip(names, shapes))
        raise RuntimeShapeError(f"{op_type}: shapes cannot be broadcast together: {desc} "
                                f"({_first_conflict(shapes)})") from None


def _first_conflict(shapes) -> str:
    rank = max(len(s) for s in shapes)
    padded = [(1,) * (rank - len(s)) + tuple(s) for s in shapes]
    for axis in range(rank):
        dims = {p[axis] for p in padded} - {1}
        if len(dims) > 1:
            return (f"dimension {axis - rank} has extents "
                    f"{', '.join(str(p[axis]) for p in padded)}")
    return "incompatible shapes"


def int_list(op_type: str, what: str, a: np.ndarray | None) -> list[int] | None:
    if a is None:
        return None
    a = np.asarray(a)
    if a.ndim > 1:
        raise RuntimeShapeError(f"{op_type}: '{what}' must be a 1-D tensor, got shape {shape_str(a.shape)}")
    return [dim_value(v) for v in a.reshape(-1)]


def dim_value(v):
    """An element of an integer operand as a dim: a SymInt stays symbolic, anything else is int."""
    return v if isinstance(v, SymInt) else int(v)


def normalize_axis(op_type: str, axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < rank:
        raise RuntimeShapeError(f"{op_type}: {what} {axis} is out of range for a rank-{rank} input "
                                f"(expected {-rank} <= {what} < {rank})" if rank else
                                f"{op_type}: {what} {axis} is out of range for a rank-0 input")
    return axis + rank if axis < 0 else axis


def normalize_axes(op_type: str, axes, rank: int, what: str = "axes") -> list[int]:
    out = [normalize_axis(op_type, int(a), rank, "axis") for a in axes]
    if len(set(out)) != len(out):
        raise RuntimeShapeError(f"{op_type}: {what} {list(axes)} repeat an axis (rank {rank})")
    return out


def scalar_operand(op_type: str, what: str, a: np.ndarray):
    a = np.asarray(a)
    if a.size != 1:
        raise RuntimeShapeError(f"{op_type}: '{what}' must be a scalar (one element), "
                                f"got shape {shape_str(a.shape)}")
    return a.reshape(())


# ---- claim-time helpers ----------------------------------------------------------------------

def input_type(node: Node, graph: GraphView, i: int):
    if i >= len(node.inputs) or not node.inputs[i]:
        return None
    return graph.type_of(node.inputs[i])


def input_rank(node: Node, graph: GraphView, i: int = 0) -> int | None:
    t = input_type(node, graph, i)
    return None if t is None else t.rank


def has_input(node: Node, i: int) -> bool:
    return i < len(node.inputs) and bool(node.inputs[i])


def type_name(elem_type: int) -> str:
    return elem_type_name(elem_type)


# ---- shape-rule helpers ----------------------------------------------------------------------
# Shape rules (see registry.ShapeRule) work on partial shapes: a shape is a tuple of dims, each an
# int (static) or None (dynamic), or None as a whole (unranked). Symbolic dims (strings) that a
# GraphView may carry are read as None: rules promise static extents only.

def shape_rule(op_type: str, symbolic: bool = False):
    """Wraps a shape rule: input types normalized to int/None dims, `values` padded to the length
    of `types`, outputs trimmed to `num_outputs`, and raw numpy ValueError/IndexError turned into
    a RuntimeShapeError naming the op (as `kernel` does for references).

    `symbolic=True` says the rule was checked to keep symbolic dims (hipep.symbolic.SymInt) and
    symbolic values symbolic: it computes output dims with int arithmetic, comparisons and
    indexing only (no numpy on dims, no int() on a dim it returns), reads operand values through
    `int_list`/`dim_value`, and every static int it returns is a constant. The runtime then
    derives output shapes as expressions from it; other rules get their inputs pinned."""
    def wrap(fn):
        @functools.wraps(fn)
        def rule(types, values, attrs, num_outputs):
            types = [norm_type(t) for t in types]
            values = list(values) + [None] * (len(types) - len(values))
            try:
                out = list(fn(types, values, attrs, num_outputs))
            except HipepError:
                raise
            except (ValueError, IndexError) as e:
                raise RuntimeShapeError(f"{op_type}: {e}") from e
            return out[:num_outputs] if len(out) > num_outputs else out
        rule.symbolic = symbolic
        return rule
    return wrap


def norm_dim(d):
    if isinstance(d, (bool, np.bool_)):
        return None
    if isinstance(d, SymInt):
        return d
    if isinstance(d, (int, np.integer)):
        return int(d)
    return None


def norm_type(t):
    """The TensorType with int/None dims (or None for an omitted input)."""
    if t is None:
        return None
    from ..graph import TensorType

    shape = None if t.shape is None else tuple(norm_dim(d) for d in t.shape)
    return TensorType(t.elem_type, shape, t.kind)


def tensor_type(elem_type: int, shape):
    from ..graph import TensorType

    return TensorType(int(elem_type or 0), None if shape is None else tuple(shape), "tensor")


def at(seq, i):
    """seq[i], or None past the end (omitted trailing optional inputs)."""
    return seq[i] if i < len(seq) else None


def shape_of(t):
    return None if t is None else t.shape


def elem_of(t) -> int:
    return 0 if t is None else t.elem_type


def pshape_str(shape) -> str:
    if shape is None:
        return "[*]"
    return "[" + ", ".join("?" if d is None else str(int(d)) for d in shape) + "]"


def is_static(shape) -> bool:
    return shape is not None and all(d is not None for d in shape)


def num_elements(shape):
    """Product of the dims, or None unless all are static."""
    if not is_static(shape):
        return None
    return int(np.prod([int(d) for d in shape], dtype=np.int64))


def product(dims):
    """The product of static dims, in Python ints (symbolic dims stay symbolic)."""
    n = 1
    for d in dims:
        n = n * d
    return n


def known_value(types, values, i):
    """The value of input i where known, else None (also None for an omitted input)."""
    if at(types, i) is None:
        return None
    v = at(values, i)
    return None if v is None else np.asarray(v)


def operand_length(t) -> int | None:
    """The length of a 1-D operand (axes, shape, starts...) from its type, where static."""
    if t is None or t.shape is None or len(t.shape) != 1:
        return None
    return t.shape[0]


def broadcast_partial(op_type: str, shapes, names=None):
    """ONNX multidirectional broadcasting of partial shapes: None if any is unranked. Per axis:
    the static non-1 extent if there is one (a dynamic dim broadcast with it must equal it), 1 if
    all are 1, else None. Static extents that conflict raise RuntimeShapeError, as the references do."""
    if any(s is None for s in shapes):
        return None
    rank = max((len(s) for s in shapes), default=0)
    padded = [(1,) * (rank - len(s)) + tuple(s) for s in shapes]
    out = []
    for axis in range(rank):
        dims = [p[axis] for p in padded]
        static = {d for d in dims if d is not None and d != 1}
        if any(d is not None and d < 0 for d in dims) or len(static) > 1:
            names = names or [chr(ord("A") + i) for i in range(len(shapes))]
            desc = ", ".join(f"{n} is {pshape_str(s)}" for n, s in zip(names, shapes))
            raise RuntimeShapeError(
                f"{op_type}: shapes cannot be broadcast together: {desc} (dimension {axis - rank} "
                f"has extents {', '.join('?' if d is None else str(d) for d in dims)})")
        if static:
            out.append(static.pop())
        elif any(d is None for d in dims):
            out.append(None)
        else:
            out.append(1)
    return tuple(out)


def unidirectional_ok(src, dst) -> bool | None:
    """Whether partial shape `src` broadcasts to `dst` unchanged: True/False where decided, None
    where dynamic dims leave it open."""
    if src is None or dst is None:
        return None
    if len(src) > len(dst):
        return False
    undecided = False
    for s, d in zip(reversed(src), reversed(dst)):
        if s == 1:
            continue
        if s is None or d is None:
            undecided = True
        elif s != d:
            return False
    return None if undecided else True
