"""The op families a random graph is built from (`FAMILIES`: one function per family, each adding
one node to a `GraphGen`, sometimes with a deliberately invalid attribute) and `gen_graph`, which
turns a `GraphGen` into a graph case with its runs, checks and options."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto as T, helper, numpy_helper

from .cases import (ALL, ATOL, FLOATS, INTS, IR_VERSION, NP, NUMERIC, RTOL, Case, Check, GraphGen, InputSpec, Invalid,
                    Val, _registry_types)


# ---- ops ------------------------------------------------------------------------------------------

UNARY_EXACT = ("Abs", "Neg", "Relu", "Floor", "Ceil", "Round", "Sqrt", "Sign", "Reciprocal", "Identity")
UNARY_INEXACT = ("Exp", "Log", "Sigmoid", "Tanh", "Erf", "Sin", "Cos", "Softplus", "Softsign", "Elu",
                 "Selu", "HardSigmoid", "HardSwish", "Atan", "Gelu", "Mish")
UNARY_ATTRS = {"Elu": {"alpha": (1.0, 0.5)}, "Selu": {"alpha": (1.5,), "gamma": (1.05,)},
               "HardSigmoid": {"alpha": (0.2, 0.5), "beta": (0.5, 0.1)}, "LeakyRelu": {"alpha": (0.01, 0.3)}}
MIN_OPSET = {"Gelu": 20, "Mish": 18, "HardSwish": 14, "LayerNormalization": 17, "BitwiseAnd": 18,
             "BitwiseOr": 18, "BitwiseXor": 18, "BitwiseNot": 18, "Trilu": 14, "CumSum": 11}


def op_unary(g: GraphGen):
    op = g.src.choice(UNARY_EXACT + UNARY_EXACT + UNARY_INEXACT + ("LeakyRelu", "IsNaN", "IsInf", "Not"))
    if g.opset < MIN_OPSET.get(op, 0):
        raise Invalid(op)
    if op == "Not":
        x = g.pick_typed((T.BOOL,))
        return g.node(op, [x.name], [(T.BOOL, x.shape)], read=[x])
    types = _registry_types(op)
    if op == "IsInf" and g.opset < 20:
        types -= {T.FLOAT16}
    x = g.pick_typed(types)
    if op in ("IsNaN", "IsInf"):
        attrs = {}
        if op == "IsInf" and g.src.chance(0.3):
            attrs = {"detect_negative": g.src.int(0, 1), "detect_positive": g.src.int(0, 1)}
        return g.node(op, [x.name], [(T.BOOL, x.shape)], unstable=x.nanloose, read=[x], **attrs)
    attrs = {k: g.src.choice(v) for k, v in UNARY_ATTRS.get(op, {}).items() if g.src.chance(0.5)}
    if op == "Gelu":
        attrs = {"approximate": g.src.choice(("none", "tanh"))}
        if g.bad("Gelu approximate='fast'", 0.03):
            attrs["approximate"] = "fast"
            return g.node(op, [x.name], [(x.elem, None)], read=[x], **attrs)
    inexact = op in UNARY_INEXACT or (x.elem == T.FLOAT16 and op in ("Sqrt", "Reciprocal"))
    # a step function of a value that may be one rounding off: compare the shape only
    unstable = op in ("Floor", "Ceil", "Round", "Sign") and (x.inexact > 0 or x.nanloose)
    return g.node(op, [x.name], [(x.elem, x.shape)], inexact=int(inexact), unstable=unstable, read=[x], **attrs)


def op_binary(g: GraphGen):
    op = g.src.choice(("Add", "Sub", "Mul", "Div", "Max", "Min", "Pow", "Mod", "Sum", "Mean", "PRelu",
                       "Add", "Mul", "BitwiseAnd", "BitwiseOr", "BitwiseXor"))
    if g.opset < MIN_OPSET.get(op, 0):
        raise Invalid(op)
    types = _registry_types(op) & (set(FLOATS) if op in ("Sum", "Mean") else set(NUMERIC))
    if op.startswith("Bitwise"):
        types = set(INTS)
    if op in ("Max", "Min") and g.opset < 12:
        types &= set(FLOATS)
    if op == "Pow" and g.opset < 12:
        types &= set(FLOATS)
    x = g.pick_typed(types)
    shape = g.broadcast_partner(x.shape)
    attrs = {}
    if op in ("Div", "Mod") and x.elem in INTS:
        y = g.operand(x.elem, shape, kind="nonzero", lo=-7, hi=7)
        if op == "Mod":
            attrs["fmod"] = g.src.int(0, 1)
    elif op == "Pow":
        if g.src.chance(0.6):
            e = g.src.choice((2, 3, 1, 0, -1, 0.5, 1.5) if x.elem in FLOATS else (2, 3, 1, 0))
            eshape = () if g.src.chance(0.5) else shape
            y = Val(g.const(np.full(eshape, e, NP[x.elem])), x.elem, eshape)
        else:
            y = g.operand(x.elem, shape, kind="value", lo=0, hi=3)
    elif op == "Mod":
        attrs["fmod"] = 1  # fmod=0 on floats is invalid
        if g.bad("float Mod with fmod=0", 0.05):
            attrs["fmod"] = 0
        y = g.operand(x.elem, shape)
    elif op == "PRelu":
        y = g.operand(x.elem, shape)
    else:
        same = [v for v in g.values if v.elem == x.elem and not v.unstable and g.tail((x.shape, v.shape))]
        y = g.src.choice(same) if same and g.src.chance(0.5) else g.operand(x.elem, shape)
    out = g.tail((x.shape, y.shape))
    if op == "PRelu" and out != x.shape:  # the slope broadcasts to X's shape, never beyond
        out = None
        g.notes.append("PRelu slope wider than X")
    inexact = op in ("Pow", "Mean") and x.elem in FLOATS
    if x.elem == T.FLOAT16 and op in ("Div", "Mod"):
        inexact = True
    ins = [x.name, y.name]
    if op in ("Sum", "Mean", "Max", "Min") and g.src.chance(0.3):
        z = g.operand(x.elem, g.broadcast_partner(x.shape))
        ins.append(z.name)
        out = None if out is None else g.tail((out, z.shape))
        inexact = inexact or (op == "Sum" and x.elem == T.FLOAT16)
    return g.node(op, ins, [(x.elem, out)], inexact=int(inexact), read=[x, y], **attrs)


def op_compare(g: GraphGen):
    op = g.src.choice(("Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual", "And", "Or", "Xor"))
    if op in ("GreaterOrEqual", "LessOrEqual") and g.opset < 12:
        raise Invalid(op)
    types = {T.BOOL} if op in ("And", "Or", "Xor") else _registry_types(op)
    if op == "Equal" and g.opset < 13:
        types &= set(INTS) | {T.BOOL, T.FLOAT}
    x = g.pick(lambda v: v.elem in types and not v.unstable, fresh_elem=g.src.choice(sorted(types)))
    same = [v for v in g.values if v.elem == x.elem and not v.unstable and g.tail((x.shape, v.shape))]
    y = g.src.choice(same) if same and g.src.chance(0.5) else g.operand(x.elem, g.broadcast_partner(x.shape))
    unstable = (x.inexact + y.inexact) > 0 or x.nanloose or y.nanloose
    return g.node(op, [x.name, y.name], [(T.BOOL, g.tail((x.shape, y.shape)))], unstable=unstable, read=[x, y])


def op_where(g: GraphGen):
    c = g.pick(lambda v: v.elem == T.BOOL, fresh_elem=T.BOOL)
    types = _registry_types("Where", 1)
    if g.src.chance(0.8):  # the CPU EP has no f16 Where: nothing to compare hipep's with
        types -= {T.FLOAT16}
    x = g.pick(lambda v: v.elem in types and not v.unstable and g.tail((c.shape, v.shape)) is not None,
               fresh_elem=g.src.choice(sorted(types)), fresh_rank=c.rank)
    if g.tail((c.shape, x.shape)) is None:
        x = g.operand(x.elem, g.broadcast_partner(c.shape))
    y = g.operand(x.elem, g.broadcast_partner(g.tail((c.shape, x.shape)) or x.shape))
    out = g.tail((c.shape, x.shape, y.shape))
    return g.node("Where", [c.name, x.name, y.name], [(x.elem, out)], read=[c, x, y])


def op_clip(g: GraphGen):
    x = g.pick_typed(_registry_types("Clip"))
    ins = [x.name]
    lo, hi = sorted(np.asarray(g.draw(InputSpec("", x.elem, (2,), [], lo=-5, hi=5), (2,)), np.float64).tolist())
    if g.bad("Clip min > max", 0.05):
        lo, hi = hi + 1, lo
    if g.src.chance(0.8):
        ins.append(g.const(np.asarray(lo, NP[x.elem])) if g.src.chance(0.8) else "")
        if g.src.chance(0.7):
            ins.append(g.const(np.asarray(hi, NP[x.elem])))
    return g.node("Clip", ins, [(x.elem, x.shape)], read=[x])


def op_cast(g: GraphGen):
    x = g.pick_typed(_registry_types("Cast"))
    to = g.src.choice(ALL)
    # float -> int of NaN, infinities or values out of range is undefined in ONNX: compare only
    # the shape then
    unstable = (x.elem in FLOATS and to in INTS) or ((x.inexact > 0 or x.nanloose) and to in INTS + (T.BOOL,))
    if x.elem == T.FLOAT and to == T.FLOAT16 and x.inexact:
        unstable = False
    if g.src.chance(0.25) and g.opset >= 15:
        like = g.pick(lambda v: v.elem == to, fresh_elem=to)
        return g.node("CastLike", [x.name, like.name], [(to, x.shape)], unstable=unstable, read=[x])
    attrs = {"to": to}
    if g.bad("Cast to an undefined type", 0.02):
        attrs["to"] = 99
        return g.node("Cast", [x.name], [(to, None)], read=[x], **attrs)
    return g.node("Cast", [x.name], [(to, x.shape)], unstable=unstable, read=[x], **attrs)


REDUCE = ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
          "ReduceSumSquare", "ReduceLogSumExp", "ReduceLogSum", "ArgMax", "ArgMin")


def op_reduce(g: GraphGen):
    op = g.src.choice(REDUCE + ("ReduceSum", "ReduceMax", "ReduceMean"))
    types = _registry_types(op) & set(ALL)
    if op in ("ReduceLogSumExp", "ReduceLogSum", "ReduceL2", "ReduceMean"):
        types &= set(FLOATS) | (set(INTS) if op == "ReduceMean" else set())
    if g.opset < 18 and op in ("ReduceMax", "ReduceMin"):
        types -= {T.BOOL}
    x = g.pick_typed(types)
    r = x.rank
    if op.startswith("Arg"):
        if r == 0:
            raise Invalid("ArgMax of a scalar")
        axis = g.src.int(-r, r - 1)
        if g.bad("Arg axis out of range", 0.04):
            axis = r + 1
        keep = g.src.int(0, 1)
        attrs = {"axis": axis, "keepdims": keep}
        if g.opset >= 12 and g.src.chance(0.4):
            attrs["select_last_index"] = g.src.int(0, 1)
        a = axis % r if -r <= axis < r else None
        shape = None if a is None else (x.shape[:a] + ((1,) if keep else ()) + x.shape[a + 1:])
        # where NaN lies decides the CPU EP's answer (see Check.nan)
        unstable = x.inexact > 0 or x.nanloose or (x.elem in FLOATS and x.special)
        return g.node(op, [x.name], [(T.INT64, shape)], unstable=unstable, read=[x], **attrs)
    axes = sorted(set(g.src.int(0, r - 1) for _ in range(g.src.int(0, r)))) if r else []
    axes = [a - r if g.src.chance(0.3) else a for a in axes]
    keep = g.src.int(0, 1)
    noop = g.src.int(0, 1) if g.src.chance(0.2) else 0
    omit = not axes and g.src.chance(0.5)
    invalid = False
    if g.bad(f"{op} axes out of range or repeated", 0.04):
        axes = axes + [r] if g.src.chance(0.5) or not axes else axes + [axes[0]]
        invalid = True
    input_form = g.opset >= (13 if op == "ReduceSum" else 18)
    ins, attrs = [x.name], {"keepdims": keep}
    if input_form:
        if not omit:
            ins.append(g.int_param(axes, prefix="axes"))
        if noop:
            attrs["noop_with_empty_axes"] = noop
    elif not omit and axes:
        attrs["axes"] = axes
    elif not omit:
        pass  # an empty axes attribute is written as none at all
    norm = {a % r for a in axes} if r else set()
    if (omit or not axes) and input_form and noop:
        shape = x.shape
    elif omit or not axes:
        shape = tuple(1 for _ in x.shape) if keep else ()
    else:
        shape = tuple((1 if keep else None) if i in norm else d for i, d in enumerate(x.shape))
        shape = tuple(d for d in shape if d is not None)
    inexact = x.elem in FLOATS and op not in ("ReduceMax", "ReduceMin")
    nanloose = op in ("ReduceMax", "ReduceMin") and x.elem in FLOATS and x.special
    return g.node(op, ins, [(x.elem, None if invalid else shape)], inexact=int(inexact), read=[x], nanloose=nanloose,
                  **attrs)


def _factor(n: int, rank: int, src) -> list[int]:
    """A random shape of `rank` dims with product n."""
    if rank == 0:
        return []
    if n == 0:
        dims = [src.choice((1, 2, 3)) for _ in range(rank)]
        dims[src.int(0, rank - 1)] = 0
        return dims
    dims = [1] * rank
    m = n
    p = 2
    primes = []
    while p * p <= m:
        while m % p == 0:
            primes.append(p)
            m //= p
        p += 1
    if m > 1:
        primes.append(m)
    for q in primes:
        dims[src.int(0, rank - 1)] *= q
    return dims


def op_reshape(g: GraphGen):
    x = g.pick(lambda v: not v.unstable, fresh_elem=g.src.choice(ALL))
    n = x.size
    rank = g.src.int(0 if n == 1 else 1, 4)
    target = _factor(n, rank, g.src)
    shape = list(target)
    attrs = {}
    spec = list(target)
    if spec and n and g.src.chance(0.4):
        spec[g.src.int(0, len(spec) - 1)] = -1
    if g.opset >= 14 and (g.src.chance(0.15) or 0 in target):
        attrs["allowzero"] = 1  # a 0 in the target is then an extent, not "copy the input's"
    elif spec and g.src.chance(0.3):
        i = g.src.int(0, min(len(spec), x.rank) - 1) if x.rank else None
        if i is not None and spec[i] != -1 and x.shape[i] == target[i]:
            spec[i] = 0  # copy the input's dim
    if g.bad("Reshape to another element count", 0.05):
        spec = spec + [7] if -1 not in spec else spec + [0] * (not attrs) + [7]
        shape = None
    if n == 0 and -1 in spec:  # -1 next to a 0 extent is ambiguous
        spec[spec.index(-1)] = target[spec.index(-1)]
    if not attrs and any(t == 0 and (i >= x.rank or x.shape[i] != 0) for i, t in enumerate(target)):
        raise Invalid("a 0 extent in Reshape's target needs allowzero (opset 14)")
    if g.src.chance(0.1) and shape is not None:  # the shape computed from another value
        like = [v for v in g.values if v.size == n and v.shape == tuple(target)]
        if like:
            s = g.node("Shape", [g.src.choice(like).name], [(T.INT64, (len(target),))])[0]
            return g.node("Reshape", [x.name, s.name], [(x.elem, tuple(target))], read=[x], **attrs)
    return g.node("Reshape", [x.name, g.int_param(spec, runtime=0.15, prefix="shape")],
                  [(x.elem, None if shape is None else tuple(shape))], read=[x], **attrs)


def op_transpose(g: GraphGen):
    x = g.pick(lambda v: not v.unstable, fresh_elem=g.src.choice(ALL))
    perm = g.src.permutation(range(x.rank))
    attrs = {}
    shape = tuple(x.shape[p] for p in perm)
    if g.src.chance(0.8) and perm:
        attrs["perm"] = perm
    else:
        shape = x.shape[::-1]
    if g.bad("Transpose perm invalid", 0.05):
        attrs["perm"] = perm + [x.rank] if g.src.chance(0.5) or not perm else perm[:-1] + [perm[0]]
        shape = None
    return g.node("Transpose", [x.name], [(x.elem, shape)], read=[x], **attrs)


def op_concat(g: GraphGen):
    x = g.pick(lambda v: v.rank >= 1 and not v.unstable, fresh_elem=g.src.choice(ALL), fresh_rank=g.src.int(1, 3))
    if x.rank == 0:
        raise Invalid("Concat of a scalar")
    axis = g.src.int(-x.rank, x.rank - 1)
    a = axis % x.rank
    parts = [x]
    for _ in range(g.src.int(0, 2)):
        fits = [v for v in g.values if v.elem == x.elem and v.rank == x.rank and not v.unstable
                and all(d == e for i, (d, e) in enumerate(zip(v.shape, x.shape)) if i != a)]
        if fits and g.src.chance(0.5):
            parts.append(g.src.choice(fits))
        else:
            shape = list(x.shape)
            shape[a] = g.src.choice((0, 1, 2, 3))
            parts.append(g.operand(x.elem, shape))
    shape = list(x.shape)
    shape[a] = sum(p.shape[a] for p in parts)
    if g.bad("Concat axis out of range or extents that disagree", 0.05):
        if g.src.chance(0.5) or x.rank == 1:
            axis = x.rank + 1
        else:
            other = list(x.shape)
            other[(a + 1) % x.rank] += 1
            parts.append(g.operand(x.elem, other))
        shape = None
    return g.node("Concat", [p.name for p in parts], [(x.elem, None if shape is None else tuple(shape))],
                  read=parts, axis=axis)


def _slice_len(d: int, start: int, end: int, step: int) -> int:
    """ONNX Slice's extent for one axis (starts/ends clamped as the spec says)."""
    if start < 0:
        start += d
    if end < 0:
        end += d
    if step > 0:
        start, end = min(max(start, 0), d), min(max(end, 0), d)
        return max(0, -(-(end - start) // step))
    start, end = min(max(start, 0), d - 1), min(max(end, -1), d - 1)
    return max(0, -(-(start - end) // -step))


def op_slice(g: GraphGen):
    x = g.pick(lambda v: v.rank >= 1 and not v.unstable, fresh_elem=g.src.choice(ALL), fresh_rank=g.src.int(1, 4))
    r = x.rank
    axes = sorted(set(g.src.int(0, r - 1) for _ in range(g.src.int(1, r))))
    starts, ends, steps = [], [], []
    shape = list(x.shape)
    big = 2 ** 63 - 1
    for a in axes:
        d = x.shape[a]
        step = g.src.choice((1, 1, 1, 2, 3, -1, -2))
        start = g.src.int(-d - 2, d + 2)
        end = g.src.choice((g.src.int(-d - 2, d + 2), big, -big - 1)) if g.src.chance(0.3) else g.src.int(-d - 2, d + 2)
        starts.append(start)
        ends.append(end)
        steps.append(step)
        shape[a] = _slice_len(d, start, end, step)
    invalid = False
    if g.bad("Slice step 0, repeated axis or ragged bounds", 0.05):
        k = g.src.int(0, 2)
        if k == 0:
            steps[0] = 0
        elif k == 1:
            axes, starts, ends, steps = axes + axes[:1], starts + starts[:1], ends + ends[:1], steps + steps[:1]
        else:
            ends = ends + [1]
        invalid = True
    signed = [a - r if g.src.chance(0.3) else a for a in axes]
    elem = g.src.choice((T.INT64, T.INT64, T.INT32))
    if elem == T.INT32:
        starts = [min(max(s, -2 ** 31), 2 ** 31 - 1) for s in starts]
        ends = [min(max(s, -2 ** 31), 2 ** 31 - 1) for s in ends]
        if not invalid:
            shape = list(x.shape)
            for a, s, e, st_ in zip(axes, starts, ends, steps):
                shape[a] = _slice_len(x.shape[a], s, e, st_)
    ins = [x.name, g.int_param(starts, elem, runtime=0.1), g.int_param(ends, elem, runtime=0.1)]
    default_axes = signed == list(range(len(signed)))
    if not default_axes or g.src.chance(0.5) or any(s != 1 for s in steps):
        ins.append(g.int_param(signed, elem, runtime=0.05))
        if any(s != 1 for s in steps) or g.src.chance(0.5):
            ins.append(g.int_param(steps, elem, runtime=0.05))
    return g.node("Slice", ins, [(x.elem, None if invalid else tuple(shape))], read=[x])


def op_gather(g: GraphGen):
    x = g.pick(lambda v: v.rank >= 1 and not v.unstable, fresh_elem=g.src.choice(ALL), fresh_rank=g.src.int(1, 3))
    r = x.rank
    axis = g.src.int(-r, r - 1)
    a = axis % r
    d = x.shape[a]
    ishape = g.dims(g.src.int(0, 2), zero=0.1)
    if d == 0 and int(np.prod(ishape)) != 0:
        ishape = ishape[:-1] + (0,) if ishape else (0,)
    elem = g.src.choice((T.INT64, T.INT64, T.INT32))
    lo, hi = -d, d - 1
    invalid = False
    if g.bad("Gather index out of range", 0.04) and int(np.prod(ishape)):
        lo, hi = d, d + 2
        invalid = True
    spec = InputSpec("", elem, ishape, [], "index", lo, hi)
    if g.src.chance(0.3):
        ind = g.add_input(elem, ishape, kind="index", lo=lo, hi=hi)
    else:
        ind = Val(g.const(g.draw(spec, ishape), "idx"), elem, ishape)
    if g.src.chance(0.2) and not invalid:
        kind = "GatherElements"
        eshape = tuple(g.src.choice((e, 1, 0)) if i != a else g.src.int(0, 3) for i, e in enumerate(x.shape))
        if d == 0:
            eshape = eshape[:a] + (0,) + eshape[a + 1:]
        espec = InputSpec("", elem, eshape, [], "index", -d, d - 1)
        ind = Val(g.const(g.draw(espec, eshape), "idx"), elem, eshape)
        return g.node(kind, [x.name, ind.name], [(x.elem, eshape)], read=[x], axis=axis)
    shape = x.shape[:a] + tuple(ishape) + x.shape[a + 1:]
    # an out-of-range index is found at run time; the shape is still the declared one
    return g.node("Gather", [x.name, ind.name], [(x.elem, None if invalid else shape)], read=[x], axis=axis)


def op_squeeze(g: GraphGen):
    x = g.pick(lambda v: not v.unstable, fresh_elem=g.src.choice(ALL))
    ones = [i for i, d in enumerate(x.shape) if d == 1]
    axes = sorted(set(g.src.choice(ones) for _ in range(g.src.int(1, len(ones))))) if ones else []
    invalid = False
    if g.bad("Squeeze of an axis whose extent is not 1", 0.05):
        others = [i for i, d in enumerate(x.shape) if d != 1]
        axes = sorted(set(axes + [g.src.choice(others) if others else x.rank]))
        invalid = True
    if axes or not ones:
        shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
    else:
        shape = tuple(d for d in x.shape if d != 1)
    signed = [a - x.rank if g.src.chance(0.3) else a for a in axes]
    ins, attrs = [x.name], {}
    if axes:
        if g.opset >= 13:
            ins.append(g.int_param(signed, runtime=0.05, prefix="axes"))
        else:
            attrs["axes"] = signed
    return g.node("Squeeze", ins, [(x.elem, None if invalid else shape)], read=[x], **attrs)


def op_unsqueeze(g: GraphGen):
    x = g.pick(lambda v: v.rank <= 3 and not v.unstable, fresh_elem=g.src.choice(ALL), fresh_rank=g.src.int(0, 3))
    k = g.src.int(1, 2)
    out_rank = x.rank + k
    axes = sorted(g.src.permutation(range(out_rank))[:k])
    shape, it = [], iter(x.shape)
    for i in range(out_rank):
        shape.append(1 if i in axes else next(it))
    signed = [a - out_rank if g.src.chance(0.3) else a for a in axes]
    invalid = False
    if g.bad("Unsqueeze axes repeated or out of range", 0.05):
        signed = signed + [signed[0]] if g.src.chance(0.5) else signed + [out_rank + 2]
        invalid = True
    ins, attrs = [x.name], {}
    if g.opset >= 13:
        ins.append(g.int_param(signed, runtime=0.05, prefix="axes"))
    else:
        attrs["axes"] = signed
    return g.node("Unsqueeze", ins, [(x.elem, None if invalid else tuple(shape))], read=[x], **attrs)


def op_expand(g: GraphGen):
    x = g.pick(lambda v: not v.unstable, fresh_elem=g.src.choice(ALL))
    lead = g.src.int(0, max(0, 2 - x.rank + 1))
    target = [g.src.choice((1, 2, 3)) for _ in range(lead)]
    for d in x.shape:
        target.append(g.src.choice((1, 2, 3, 0)) if d == 1 else g.src.choice((d, d, 1)))
    invalid = False
    if g.bad("Expand to a shape that does not broadcast", 0.05) and x.shape and any(d > 1 for d in x.shape):
        i = next(j for j, d in enumerate(x.shape) if d > 1)
        target[lead + i] = x.shape[i] + 1
        invalid = True
    out = None if invalid else g.tail((x.shape, tuple(target)))
    like = [v for v in g.values if v.shape == tuple(target)]
    if like and g.src.chance(0.25) and not invalid:
        s = g.node("Shape", [g.src.choice(like).name], [(T.INT64, (len(target),))])[0]
        return g.node("Expand", [x.name, s.name], [(x.elem, out)], read=[x])
    return g.node("Expand", [x.name, g.int_param(target, runtime=0.1, prefix="shape")], [(x.elem, out)], read=[x])


def op_misc_movement(g: GraphGen):
    op = g.src.choice(("Flatten", "Tile", "Split", "Identity", "Shape", "Size", "ConstantOfShape", "Pad",
                       "Trilu", "CumSum", "NonZero", "TopK"))
    if g.opset < MIN_OPSET.get(op, 0):
        raise Invalid(op)
    if op == "Flatten":
        x = g.pick(lambda v: not v.unstable, fresh_elem=g.src.choice(ALL))
        axis = g.src.int(-x.rank, x.rank)
        a = axis % (x.rank + 1) if axis < 0 else axis
        outer = int(np.prod(x.shape[:a], dtype=np.int64))
        inner = int(np.prod(x.shape[a:], dtype=np.int64))
        shape = (outer, inner)
        if g.bad("Flatten axis out of range", 0.05):
            axis, shape = x.rank + 1, None
        return g.node("Flatten", [x.name], [(x.elem, shape)], read=[x], axis=axis)
    if op == "Tile":
        x = g.pick(lambda v: v.rank >= 1 and not v.unstable, fresh_elem=g.src.choice(ALL), fresh_rank=g.src.int(1, 3))
        reps = [g.src.choice((1, 1, 2, 3, 0)) for _ in x.shape]
        shape = tuple(d * k for d, k in zip(x.shape, reps))
        if g.bad("Tile repeats of the wrong length", 0.05):
            reps, shape = reps + [2], None
        return g.node("Tile", [x.name, g.int_param(reps, runtime=0.1, prefix="reps")], [(x.elem, shape)], read=[x])
    if op == "Split":
        x = g.pick(lambda v: v.rank >= 1 and not v.unstable, fresh_elem=g.src.choice(ALL), fresh_rank=g.src.int(1, 3))
        axis = g.src.int(-x.rank, x.rank - 1)
        a = axis % x.rank
        d = x.shape[a]
        k = g.src.int(1, 3)
        ins, attrs = [x.name], {"axis": axis}
        if g.src.chance(0.5):
            cuts = sorted(g.src.int(0, d) for _ in range(k - 1))
            sizes = [b - c for b, c in zip(cuts + [d], [0] + cuts)]
            invalid = g.bad("Split sizes that do not add up", 0.05)
            if invalid:
                sizes[-1] += 1
            if g.opset >= 13:
                ins.append(g.int_param(sizes, runtime=0.05, prefix="split"))
            else:
                attrs["split"] = sizes
        elif g.opset >= 18:
            attrs["num_outputs"] = k
            chunk = -(-d // k) if d else 0
            sizes = [min(chunk, max(0, d - i * chunk)) for i in range(k)]
            invalid = d < k and d != 0 and sizes.count(0) > 0  # ORT refuses empty chunks there
            if d and chunk * (k - 1) >= d:
                invalid = True
        else:
            invalid = d % k != 0
            sizes = [d // k] * k
        outs = []
        for s in sizes:
            shape = list(x.shape)
            shape[a] = s
            outs.append((x.elem, None if invalid else tuple(shape)))
        return g.node("Split", ins, outs, read=[x], **attrs)
    if op == "Identity":
        x = g.pick(fresh_elem=g.src.choice(ALL))
        return g.node("Identity", [x.name], [(x.elem, x.shape)], read=[x])
    if op == "Shape":
        x = g.pick(fresh_elem=g.src.choice(ALL))
        attrs = {}
        n = x.rank
        if g.opset >= 15 and g.src.chance(0.4):
            start, end = g.src.int(-n - 1, n + 1), g.src.int(-n - 1, n + 1)
            attrs = {"start": start, "end": end}
            s, e = (start + n if start < 0 else start), (end + n if end < 0 else end)
            s, e = min(max(s, 0), n), min(max(e, 0), n)
            n = max(0, e - s)
        return g.node("Shape", [x.name], [(T.INT64, (n,))], **attrs)
    if op == "Size":
        x = g.pick(fresh_elem=g.src.choice(ALL))
        return g.node("Size", [x.name], [(T.INT64, ())])
    if op == "ConstantOfShape":
        x = g.pick(lambda v: v.rank <= 4, fresh_elem=g.src.choice(ALL))
        s = g.node("Shape", [x.name], [(T.INT64, (x.rank,))])[0]
        elem = g.src.choice(ALL)
        value = numpy_helper.from_array(np.asarray([g.src.choice((0, 1, 3))], NP[elem]), "value")
        return g.node("ConstantOfShape", [s.name], [(elem, x.shape)], value=value)
    if op == "Pad":
        x = g.pick(lambda v: v.rank >= 1 and not v.unstable, fresh_elem=g.src.choice(NUMERIC),
                   fresh_rank=g.src.int(1, 3))
        mode = g.src.choice(("constant", "constant", "reflect", "edge"))
        pads = [g.src.int(-1 if mode == "constant" else 0, 2) for _ in range(2 * x.rank)]
        shape = [d + pads[i] + pads[i + x.rank] for i, d in enumerate(x.shape)]
        invalid = any(s < 0 for s in shape)
        if mode == "reflect":
            invalid = invalid or any(p and (pads[i] >= d or pads[i + x.rank] >= d) for i, (d, p)
                                     in enumerate(zip(x.shape, (pads[i] or pads[i + x.rank] for i in range(x.rank)))))
        if mode == "edge":
            invalid = invalid or any(d == 0 and (pads[i] or pads[i + x.rank]) for i, d in enumerate(x.shape))
        ins = [x.name, g.int_param(pads, runtime=0.05, prefix="pads")]
        if mode == "constant" and g.src.chance(0.5):
            ins.append(g.const(np.asarray(g.src.choice((0, 1, -2)), NP[x.elem])))
        if x.elem == T.FLOAT16:
            raise Invalid("Pad f16")
        return g.node("Pad", ins, [(x.elem, None if invalid else tuple(shape))], read=[x], mode=mode)
    if op == "Trilu":
        x = g.pick(lambda v: v.rank >= 2 and v.elem in (T.FLOAT, T.INT64, T.INT32) and not v.unstable,
                   fresh_elem=g.src.choice((T.FLOAT, T.INT64)), fresh_rank=g.src.int(2, 3))
        ins = [x.name]
        if g.src.chance(0.5):
            ins.append(g.const(np.asarray(g.src.int(-3, 3), np.int64)))
        return g.node("Trilu", ins, [(x.elem, x.shape)], read=[x], upper=g.src.int(0, 1))
    if op == "CumSum":
        x = g.pick(lambda v: v.rank >= 1 and v.elem in (T.FLOAT, T.INT32, T.INT64) and not v.unstable,
                   fresh_elem=g.src.choice((T.FLOAT, T.INT64, T.INT32)), fresh_rank=g.src.int(1, 3))
        axis = g.src.int(-x.rank, x.rank - 1)
        invalid = g.bad("CumSum axis out of range", 0.05)
        if invalid:
            axis = x.rank
        ax = g.const(np.asarray(axis, g.src.choice((np.int32, np.int64))))
        return g.node("CumSum", [x.name, ax], [(x.elem, None if invalid else x.shape)], inexact=int(x.elem == T.FLOAT),
                      read=[x], exclusive=g.src.int(0, 1), reverse=g.src.int(0, 1))
    if op == "NonZero":
        x = g.pick(lambda v: v.elem in (T.FLOAT, T.INT32, T.INT64, T.BOOL) and not v.unstable,
                   fresh_elem=g.src.choice((T.FLOAT, T.BOOL, T.INT64)))
        # the count is data-dependent: nothing downstream tracks it, so it is an output only
        v = g.node("NonZero", [x.name], [(T.INT64, None)], unstable=x.inexact > 0, read=[x])[0]
        g.dead.remove(v)
        g.made.append(v)
        return [v]
    # TopK
    types = _registry_types("TopK") & set(NUMERIC)
    x = g.pick(lambda v: v.rank >= 1 and v.elem in types and not v.unstable,
               fresh_elem=g.src.choice(sorted(types)), fresh_rank=g.src.int(1, 3))
    axis = g.src.int(-x.rank, x.rank - 1)
    d = x.shape[axis % x.rank]
    k = g.src.int(0, d)
    invalid = g.bad("TopK k beyond the axis", 0.05)
    if invalid:
        k = d + 1
    shape = list(x.shape)
    shape[axis % x.rank] = k
    attrs = {"axis": axis}
    if g.opset >= 11:
        attrs.update(largest=g.src.int(0, 1), sorted=1)
    ins = [x.name, g.const(np.asarray([k], np.int64), "k")] if g.opset >= 10 else [x.name]
    shape = None if invalid else tuple(shape)
    # ties (integers, repeated values) order indices differently between implementations
    # only where ONNX leaves it open; the CPU EP keeps the lower index first, as hipep does
    unstable = x.inexact > 0 or x.nanloose or (x.elem in FLOATS and x.special)
    return g.node("TopK", ins, [(x.elem, shape), (T.INT64, shape)], unstable=unstable, read=[x], **attrs)


def op_matmul(g: GraphGen):
    types = _registry_types("MatMul") & set(NUMERIC)
    x = g.pick(lambda v: v.rank >= 1 and v.elem in types and not v.unstable,
               fresh_elem=g.src.choice(sorted(types)), fresh_rank=g.src.int(1, 3))
    k = x.shape[-1]
    if g.bad("MatMul inner dimensions disagree", 0.04):
        k += 1
    n = g.src.choice((1, 2, 3, 4, 0))
    r2 = g.src.int(1, 3)
    if r2 == 1:
        yshape = (k,)
    else:
        batch = []
        xb = x.shape[:-2]
        for i in range(r2 - 2):
            j = len(xb) - (r2 - 2) + i
            batch.append(g.src.choice((xb[j], 1)) if j >= 0 else g.src.choice((1, 2)))
        yshape = tuple(batch) + (k, n)
    y = g.operand(x.elem, yshape, lo=-4, hi=4)
    try:
        a = np.empty(x.shape, np.int8)
        b = np.empty(yshape, np.int8)
        shape = np.matmul(a, b).shape
    except ValueError:
        shape = None
    return g.node("MatMul", [x.name, y.name], [(x.elem, shape)], inexact=int(x.elem in FLOATS), read=[x, y])


def op_gemm(g: GraphGen):
    types = _registry_types("Gemm") & set(NUMERIC)
    if g.opset < 11:
        raise Invalid("Gemm")
    elem = g.src.choice(sorted(types))
    m, k, n = g.src.choice((1, 2, 3, 0)), g.src.choice((1, 2, 4, 0)), g.src.choice((1, 3, 5, 0))
    ta, tb = g.src.int(0, 1), g.src.int(0, 1)
    a = g.pick(lambda v: v.elem == elem and v.shape == ((k, m) if ta else (m, k)) and not v.unstable,
               fresh_elem=None) if any(v.elem == elem and v.shape == ((k, m) if ta else (m, k)) for v in g.values) \
        else g.operand(elem, (k, m) if ta else (m, k))
    bk = k + 1 if g.bad("Gemm inner dimensions disagree", 0.04) else k
    b = g.operand(elem, (n, bk) if tb else (bk, n))
    ins = [a.name, b.name]
    if g.src.chance(0.6):
        c = g.operand(elem, g.src.choice(((m, n), (n,), (1, n), (m, 1), ())))
        ins.append(c.name)
    attrs = {"transA": ta, "transB": tb}
    if g.src.chance(0.4):
        attrs["alpha"] = g.src.choice((1.0, 0.5, 2.0, -1.0))
        attrs["beta"] = g.src.choice((1.0, 0.0, 0.25))
    return g.node("Gemm", ins, [(elem, None if bk != k else (m, n))], inexact=int(elem in FLOATS), read=[a, b], **attrs)


def op_norm(g: GraphGen):
    op = g.src.choice(("Softmax", "LogSoftmax", "LayerNormalization", "Softmax"))
    if g.opset < MIN_OPSET.get(op, 0):
        raise Invalid(op)
    x = g.pick(lambda v: v.elem in FLOATS and v.rank >= 1 and not v.unstable,
               fresh_elem=g.src.choice(FLOATS), fresh_rank=g.src.int(1, 3))
    axis = g.src.int(-x.rank, x.rank - 1)
    invalid = g.bad(f"{op} axis out of range", 0.05)
    if invalid:
        axis = x.rank + g.src.int(0, 2)
    if op != "LayerNormalization":
        attrs = {"axis": axis} if g.src.chance(0.8) or invalid else {}
        return g.node(op, [x.name], [(x.elem, None if invalid else x.shape)], inexact=1, read=[x],
                      nanloose=x.special, **attrs)
    a = axis % x.rank if not invalid else x.rank
    scale = g.operand(x.elem, x.shape[a:]) if not invalid else g.operand(x.elem, (2,))
    ins = [x.name, scale.name]
    if g.src.chance(0.6):
        ins.append(g.operand(x.elem, x.shape[a:] if not invalid else (2,)).name)
    stat = tuple(d if i < a else 1 for i, d in enumerate(x.shape))
    outs = [(x.elem, None if invalid else x.shape)]
    for _ in range(g.src.int(0, 2)):
        outs.append((T.FLOAT, None if invalid else stat))
    attrs = {"axis": axis, "epsilon": g.src.choice((1e-5, 1e-3, 0.1))}
    if x.elem == T.FLOAT16 and len(outs) > 1:
        attrs["stash_type"] = 1
    # an infinity makes the statistics NaN or infinite depending on how they are summed
    vals = g.node(op, ins, outs, inexact=1, read=[x, scale], nanloose=x.special, **attrs)
    return vals


FAMILIES = [(op_unary, 5), (op_binary, 6), (op_compare, 2), (op_where, 2), (op_clip, 1), (op_cast, 2),
            (op_reduce, 4), (op_reshape, 3), (op_transpose, 2), (op_concat, 2), (op_slice, 3), (op_gather, 2),
            (op_squeeze, 1), (op_unsqueeze, 2), (op_expand, 2), (op_misc_movement, 4), (op_matmul, 2),
            (op_gemm, 1), (op_norm, 2)]


def check_for(v: Val, optimize: bool) -> Check:
    if v.unstable:
        return Check("shape")
    nan = "skip" if v.nanloose else "equal"
    if v.elem in FLOATS and (v.inexact or optimize):
        rtol = max(v.inexact, RTOL[v.elem]) * (4 if optimize else 1)
        return Check("close", rtol, max(rtol / 10, ATOL[v.elem]), nan)
    return Check("exact", nan=nan)


def gen_graph(src) -> Case:
    g = GraphGen(src)
    size = src.int(1, 8)
    table = [f for f, w in FAMILIES for _ in range(w)]
    attempts = 0
    while len(g.ops) < size and attempts < 60:
        attempts += 1
        try:
            src.choice(table)(g)
        except Invalid:
            continue
    if not g.made and not g.dead:
        op_unary(g)
    candidates = g.made + g.dead
    outs = [candidates[-1]]
    for v in candidates[:-1]:
        if v in g.dead or (src.chance(0.2) and len(outs) < 4):
            outs.append(v)
    optimize = src.chance(0.15)
    graph_outs = []
    for v in outs:
        shape = None
        if v not in g.dead and src.chance(0.15):
            shape = list(v.shape)
        graph_outs.append(helper.make_tensor_value_info(v.name, v.elem, shape))
    inputs = [helper.make_tensor_value_info(s.name, s.elem, s.declared) for s in g.specs]
    graph = helper.make_graph(g.nodes, "fuzz", inputs, graph_outs, g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", g.opset)], ir_version=IR_VERSION)
    feeds = {s.name: g.feeds[s.name] for s in g.specs}
    runs = [feeds]
    if src.chance(0.4):  # the same shapes, other values: a replay of the specialized plan
        runs.append({s.name: (g.draw(s, s.shape) if s.kind != "shape" else feeds[s.name]) for s in g.specs})
    if g.symbols and src.chance(0.35):  # other extents for the symbolic dims
        new = {k: src.choice(tuple(e for e in (0, 1, 2, 3, 4, 6) if e != v)) for k, v in g.symbols.items()}
        run = {}
        for s in g.specs:
            shape = tuple(new[d] if isinstance(d, str) else (src.choice((1, 2, 3)) if d is None and src.chance(0.3)
                                                              else e) for d, e in zip(s.declared, s.shape))
            run[s.name] = g.draw(s, shape) if s.kind != "shape" else feeds[s.name]
        runs.append(run)
        if src.chance(0.5):
            runs.append(feeds)
    options = {}
    if src.chance(0.25):
        options["cpu_schedule"] = src.choice(("deferred", "random"))
        options["seed"] = str(src.int(0, 99))
    if src.chance(0.15):
        options["fusion"] = "off"
    what = f"opset {g.opset}: {', '.join(g.ops)}" + (f"; invalid: {'; '.join(g.notes)}" if g.notes else "")
    checks = {v.name: check_for(v, optimize) for v in outs}
    return Case(None, "graph", what, model.SerializeToString(), runs, checks, optimize, options)
