"""Differential fuzzing of hipep's CPU device against ONNX Runtime's CPU EP.

Each case is a model and one or more sets of feeds:

* **graphs**: random small graphs of ops hipep implements (elementwise, comparisons, Where,
  Cast, reductions, Reshape/Transpose/Concat/Slice/Gather/Squeeze/Unsqueeze/Expand/..., MatMul,
  Gemm, Softmax, LayerNormalization, TopK, NonZero ...), with random shapes (zero-sized dims and
  broadcasting included), dtypes (f32, f16, i32, i64, bool where the op takes them), symbolic
  input dims, and attributes that are valid or, now and then, out of range. A case may run the
  same sessions several times: new values, other extents for the symbolic dims, a repeat.
* **mutations** of such models: truncated bytes, flipped bytes, attributes of the wrong type,
  dangling inputs, cycles, huge dims (2^40, 2^62), wrong input names/dtypes/ranks at run time,
  NaN/Inf inputs, and a few more.

Every case builds `hipep.InferenceSession(model, device="cpu")` and the CPU EP's session from the
same bytes, runs both on the same feeds and is judged (`judge`):

* pass: the outputs agree (dtype, shape, NaN positions, values within the tolerance of the ops
  that made them, see `Check`); both reject; hipep rejects with a clear error: one of hipep's
  error types, or ORT's error carrying hipep's own error type and reason;
* finding: a crash or hang, different answers, hipep answering where the CPU EP rejects, an
  unclear error (a Python exception that is not hipep's, or a traceback).

Cases run in a pool of long-lived worker processes (`Pool`): a crash or hang ends only that
worker, the parent starts another and runs the case again alone in a fresh worker, and every
finding is saved with its seed as a reproducer (`model.onnx`, `feeds.npz`, `case.json`).

    python -m hipep.tools.fuzz --cases 10000 --workers 2 --seed 0
    python -m hipep.tools.fuzz --replay .cache/fuzz/findings/<case>

Generation reads its choices from a `Source`: `SeededSource(seed)` makes case `seed` the same on
every machine, `HypothesisSource` lets hypothesis drive (and shrink) the same generator through
the `cases()` strategy.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pickle
import random
import re
import selectors
import signal
import struct
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

import numpy as np
from onnx import AttributeProto, TensorProto as T, helper, numpy_helper

IR_VERSION = 10  # what onnxruntime >= 1.24 reads
NP = {T.FLOAT: np.float32, T.FLOAT16: np.float16, T.INT32: np.int32, T.INT64: np.int64, T.BOOL: np.bool_}
ELEM = {np.dtype(v): k for k, v in NP.items()}
FLOATS = (T.FLOAT, T.FLOAT16)
INTS = (T.INT32, T.INT64)
NUMERIC = FLOATS + INTS
ALL = NUMERIC + (T.BOOL,)
OPSETS = (11, 13, 17, 18, 18, 20, 21)
DEFAULT_OUT = ".cache/fuzz"

# Relative tolerance of one float op that may round differently from the CPU EP (a libm
# transcendental, a sum in another order), per dtype, as tests/unit/test_ops_reference.py uses
# them op by op: f32 1e-5 / 1e-6, f16 about one f16 ulp. Along a chain the budgets add up, times
# the op's AMPLIFY factor where it magnifies its input's error; ops that round exactly like the
# CPU EP (+ - * / in f32, sqrt, min/max, data movement, comparisons, casts) add nothing, so a
# value made of those alone must be equal.
RTOL = {T.FLOAT: 1e-5, T.FLOAT16: 2e-3}
ATOL = {T.FLOAT: 1e-6, T.FLOAT16: 1e-4}


# ---- where choices come from ----------------------------------------------------------------------

class SeededSource:
    """Choices from random.Random(seed); array data from numpy's generator on the same seed."""

    def __init__(self, seed: int):
        self.r = random.Random(seed)
        self.np = np.random.default_rng(seed)

    def int(self, lo: int, hi: int) -> int:  # inclusive
        return self.r.randint(lo, hi)

    def choice(self, seq):
        seq = list(seq)
        return seq[self.r.randrange(len(seq))]

    def chance(self, p: float) -> bool:
        return self.r.random() < p

    def permutation(self, seq) -> list:
        seq = list(seq)
        self.r.shuffle(seq)
        return seq


class HypothesisSource:
    """Choices drawn by hypothesis (so that it can shrink a failing case); each choice shrinks
    toward the first option, `chance` toward False."""

    def __init__(self, data):
        from hypothesis import strategies as st

        self.data, self.st = data, st
        self.np = np.random.default_rng(data.draw(st.integers(0, 2 ** 32 - 1), label="data seed"))

    def int(self, lo: int, hi: int) -> int:
        return self.data.draw(self.st.integers(lo, hi))

    def choice(self, seq):
        return self.data.draw(self.st.sampled_from(list(seq)))

    def chance(self, p: float) -> bool:
        return self.data.draw(self.st.integers(0, 999)) >= 1000 * (1 - p)

    def permutation(self, seq) -> list:
        return list(self.data.draw(self.st.permutations(list(seq))))


# ---- cases ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Check:
    """How an output is compared: "exact" (equal values, NaN positions equal), "close" (within
    rtol, atol + rtol * max|expected|, NaN positions equal) or "shape" (dtype and shape only: a
    discrete function, such as a comparison or an argmax, of values that may round differently)."""
    mode: str = "exact"
    rtol: float = 0.0
    atol: float = 0.0
    # "skip": positions where either side is NaN or infinite are not compared (the CPU EP's
    # ReduceMax/Min propagate a NaN or drop it depending on where it lies and which kernel path
    # runs; it runs f16 ops without an f16 kernel in f32, where an f16 overflow stays finite)
    nan: str = "equal"


@dataclass
class Case:
    seed: int | None
    kind: str  # "graph", "mutate:<mutation>", or "probe:<abort|hang|exit>" (testing the pool)
    what: str  # one line: opset, ops, deliberate mistakes
    model: bytes
    runs: list[dict[str, np.ndarray]]
    checks: dict[str, Check] = field(default_factory=dict)
    optimize: bool = False  # ORT's graph optimizations on for hipep's session (the CPU EP's: off)
    options: dict[str, str] = field(default_factory=dict)  # hipep provider options beyond device

    @property
    def name(self) -> str:
        return f"{self.seed if self.seed is not None else 'x'}-{self.kind.replace(':', '-')}"


@dataclass
class Outcome:
    verdict: str  # "pass" | "finding" | "oracle" (the CPU EP itself crashed or hung)
    category: str
    detail: str = ""
    stage: str = ""
    seconds: float = 0.0
    stderr: str = ""
    reproduced_alone: bool | None = None
    known: str = ""  # the KNOWN entry a finding matches, if any


# ---- graph generation -------------------------------------------------------------------------

@dataclass
class Val:
    name: str
    elem: int
    shape: tuple[int, ...]
    # relative error its value may carry against the CPU EP's: RTOL of its dtype for each op in
    # its cone that may round differently (0: it must be equal)
    inexact: float = 0.0
    unstable: bool = False  # a discrete function of inexact values: compare dtype and shape only
    special: bool = False  # may hold NaN or an infinity
    nanloose: bool = False  # NaN positions may differ from the CPU EP's (see Check.nan)

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))


@dataclass
class InputSpec:
    """How a graph input's data is drawn, so that later runs can draw it again in other shapes."""
    name: str
    elem: int
    shape: tuple[int, ...]
    declared: list  # per dim: int (static), str (symbol) or None
    kind: str = "value"  # "value" | "nonzero" | "index" | "shape"
    lo: int = -20
    hi: int = 20
    specials: bool = False


class Invalid(Exception):
    """An op could not be placed on the values at hand."""


def _registry_types(op_type: str, position: int = 0) -> set[int]:
    from ..ops.registry import lookup

    op = lookup("", op_type)
    if op is None or not op.inputs:
        return set(ALL)
    return set(op.constraints.get(op.inputs[min(position, len(op.inputs) - 1)], ALL)) & set(ALL)


class GraphGen:
    """Builds one random graph; shapes are tracked concretely for the first run's feeds."""

    def __init__(self, src, opset: int | None = None):
        self.src = src
        self.opset = opset or src.choice(OPSETS)
        self.nodes: list = []
        self.inits: list = []
        self.specs: list[InputSpec] = []
        self.feeds: dict[str, np.ndarray] = {}
        self.values: list[Val] = []  # what later ops may read
        self.made: list[Val] = []  # op results that can be graph outputs
        self.dead: list[Val] = []  # results of deliberately invalid nodes: outputs, never read
        self.notes: list[str] = []
        self.ops: list[str] = []
        self.symbols: dict[str, int] = {}
        self.n = 0

    # -- names, inputs, constants
    def fresh(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}{self.n}"

    def bad(self, what: str, p: float = 0.05) -> bool:
        """Whether to make a deliberately invalid choice here (recorded in the case's line)."""
        if self.src.chance(p):
            self.notes.append(what)
            return True
        return False

    def dims(self, rank: int, zero: float = 0.08) -> tuple[int, ...]:
        return tuple(0 if self.src.chance(zero) else self.src.choice((1, 2, 3, 4, 5)) for _ in range(rank))

    def declared_dim(self, d: int):
        r = self.src.int(0, 99)
        if r < 40:
            return d
        if r < 85:
            same = [s for s, v in self.symbols.items() if v == d]
            if same and self.src.chance(0.6):
                return self.src.choice(same)
            name = f"s{len(self.symbols)}"
            self.symbols[name] = d
            return name
        return None

    def draw(self, spec: InputSpec, shape) -> np.ndarray:
        return np.asarray(self._draw(spec, shape))  # 0-d arrays, never numpy scalars: ORT takes arrays only

    def _draw(self, spec: InputSpec, shape):
        rng, dt = self.src.np, NP[spec.elem]
        if spec.elem == T.BOOL:
            return rng.random(shape) < 0.5
        if spec.elem in FLOATS:
            a = np.asarray(rng.standard_normal(shape) * 2, np.float32)
            flat = a.reshape(-1)
            if spec.specials and flat.size:
                k = min(3, flat.size)
                special = np.array([0.0, -0.0, 0.5, -3.0, 40.0, np.inf, -np.inf, np.nan], np.float32)
                flat[rng.integers(0, flat.size, size=k)] = rng.choice(special, k)
            return a.astype(dt)
        if spec.hi < spec.lo:  # indices into an empty axis, drawn for a non-empty shape: all out of range
            return np.full(shape, spec.lo, dt)
        a = rng.integers(spec.lo, spec.hi + 1, size=shape).astype(dt)
        if spec.kind == "nonzero":
            a[a == 0] = 1
        return a

    def add_input(self, elem: int, shape, kind="value", lo=-20, hi=20, static=False) -> Val:
        name = self.fresh("x")
        shape = tuple(shape)
        declared = list(shape) if static else [self.declared_dim(d) for d in shape]
        spec = InputSpec(name, elem, shape, declared, kind, lo, hi, specials=elem in FLOATS and self.src.chance(0.3))
        self.specs.append(spec)
        self.feeds[name] = self.draw(spec, shape)
        v = Val(name, elem, shape, special=spec.specials)
        if kind == "value":
            self.values.append(v)
        return v

    def const(self, array, prefix="c") -> str:
        name = self.fresh(prefix)
        array = np.asarray(array)
        if self.src.chance(0.15):  # a Constant node now and then: ORT loads those as initializers
            self.nodes.append(helper.make_node("Constant", [], [name], name=f"n_{name}",
                                               value=numpy_helper.from_array(array, name)))
        else:
            self.inits.append(numpy_helper.from_array(array, name))
        return name

    def operand(self, elem: int, shape, kind="value", lo=-20, hi=20) -> Val:
        """A new leaf: a graph input most of the time, else a constant."""
        if self.src.chance(0.6):
            return self.add_input(elem, shape, kind, lo, hi)
        spec = InputSpec("", elem, tuple(shape), [], kind, lo, hi)
        return Val(self.const(self.draw(spec, tuple(shape))), elem, tuple(shape))

    def int_param(self, values, elem=T.INT64, runtime: float = 0.1, prefix="p") -> str:
        """A 1-D integer parameter operand (axes, shape, starts ...): a constant, or now and then a
        graph input whose value the host reads at run time."""
        a = np.asarray(values, NP[elem]).reshape(-1)
        if self.src.chance(runtime):
            name = self.fresh("x")
            spec = InputSpec(name, elem, a.shape, list(a.shape), "shape")
            self.specs.append(spec)
            self.feeds[name] = a
            return name
        return self.const(a, prefix)

    # -- picking values
    def pick(self, pred=lambda v: True, fresh_elem=None, fresh_rank=None) -> Val:
        choices = [v for v in self.values if pred(v)]
        if choices and (fresh_elem is None or self.src.chance(0.85)):
            # the newest values more often, so that chains grow deep
            return choices[max(0, len(choices) - 1 - self.src.int(0, len(choices) - 1) // 2)] \
                if self.src.chance(0.7) else self.src.choice(choices)
        if fresh_elem is None:
            raise Invalid("nothing to read")
        rank = fresh_rank if fresh_rank is not None else self.src.int(0, 4)
        return self.add_input(fresh_elem, self.dims(rank))

    def pick_typed(self, types, min_rank=0) -> Val:
        types = tuple(t for t in ALL if t in types)
        return self.pick(lambda v: v.elem in types and v.rank >= min_rank and not v.unstable,
                         fresh_elem=self.src.choice(types), fresh_rank=self.src.int(min_rank, 4))

    def node(self, op: str, inputs: list[str], outs: list[tuple[int, tuple | None]], inexact=0,
             unstable=False, read=(), domain="", special=False, nanloose=False, **attrs) -> list[Val]:
        names = [self.fresh("v") for _ in outs]
        self.nodes.append(helper.make_node(op, inputs, names, name=f"n{len(self.nodes)}_{op.lower()}",
                                           domain=domain or None, **attrs))
        self.ops.append(op)
        cone = max([v.inexact for v in read], default=0.0) * AMPLIFY.get(op, 1)
        # ORT's CPU EP runs f16 ops without an f16 kernel in f32 (casts it inserts), and drops the
        # casts between two such ops: their intermediate is not rounded to f16 as hipep rounds it
        rounds = bool(inexact) or op not in F16_EXACT
        # ... and so an f16 NaN or infinity may be a finite f32 value there, or the reverse
        if any(v.elem == T.FLOAT16 and v.special for v in read) and op not in F16_EXACT - {"Sign"}:
            nanloose = True
        unstable = unstable or any(v.unstable for v in read)
        special = special or any(v.special for v in read) or op in SPECIAL_MAKERS
        nanloose = nanloose or any(v.nanloose for v in read)
        vals = []
        for name, (elem, shape) in zip(names, outs):
            own = RTOL[elem] if elem in FLOATS and (inexact or (elem == T.FLOAT16 and rounds)) else 0.0
            v = Val(name, elem, tuple(shape) if shape is not None else (), cone + own, unstable,
                    special or (elem == T.FLOAT16 and op in F16_OVERFLOW), nanloose)
            if shape is None:  # a deliberately invalid node: nothing reads its result
                self.dead.append(v)
            else:
                self.values.append(v)
                self.made.append(v)
            vals.append(v)
        return vals

    def broadcast_partner(self, shape) -> tuple[int, ...]:
        """A shape that broadcasts with `shape` (or, rarely and on purpose, does not)."""
        rank = len(shape)
        r2 = max(0, min(4, rank + self.src.choice((-2, -1, 0, 0, 0, 1))))
        out = []
        for i in range(r2):
            j = rank - r2 + i
            if j < 0:
                out.append(self.src.choice((1, 2, 3)))
            else:
                d = shape[j]
                out.append(self.src.choice((d, d, 1)) if d != 1 else self.src.choice((1, 1, 2, 3, 0)))
        if out and self.bad("broadcast mismatch", 0.03):
            k = self.src.int(0, len(out) - 1)
            out[k] = out[k] + 2
        return tuple(out)

    def tail(self, shape) -> tuple | None:
        try:
            return tuple(np.broadcast_shapes(*shape))
        except ValueError:
            return None


# ---- ops ------------------------------------------------------------------------------------------

# Ops whose float results may be NaN or infinite for finite inputs (or overflow f16).
SPECIAL_MAKERS = {"Exp", "Log", "Sqrt", "Reciprocal", "Softplus", "Div", "Pow", "Mod", "ReduceProd", "ReduceLogSum",
                  "ReduceLogSumExp", "ReduceSumSquare", "Sin", "Cos"}
F16_OVERFLOW = {"Add", "Sub", "Mul", "Sum", "MatMul", "Gemm", "ReduceSum", "ReduceL1", "ReduceL2", "ReduceMean",
                "CumSum", "Cast", "CastLike", "Elu", "Selu", "HardSwish"}
# How much an op may multiply the relative error its input already carries (the condition
# number, bounded for the inputs the generator draws): exp(x) turns x's relative error into
# |x| times it, cos(x) an absolute error |x| * e into a relative one 1/|cos x| times larger ...
AMPLIFY = {"Sin": 100, "Cos": 100, "Tan": 100, "Exp": 10, "Pow": 10, "Softplus": 10, "Mish": 10, "Elu": 10,
           "Selu": 10, "Log": 10, "Reciprocal": 10, "Div": 10, "Softmax": 10, "LogSoftmax": 10,
           "LayerNormalization": 10, "ReduceLogSumExp": 10}
# Ops whose f16 results cannot depend on whether their f16 inputs were rounded to f16.
F16_EXACT = {"Abs", "Neg", "Relu", "Floor", "Ceil", "Round", "Sign", "Max", "Min", "Clip", "Where", "Cast",
             "CastLike", "Identity", "Reshape", "Transpose", "Concat", "Slice", "Gather", "GatherElements",
             "Squeeze", "Unsqueeze", "Expand", "Flatten", "Tile", "Split", "Pad", "Trilu", "TopK", "ReduceMax",
             "ReduceMin", "ConstantOfShape"}
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


# ---- mutations ------------------------------------------------------------------------------------

def _mutation(fn):
    """Names the case after the mutation applied (a mutation that cannot apply hands over to
    another, which then names it)."""
    def apply(src, case, m):
        case.kind = "mutate:" + fn.__name__[4:]
        return fn(src, case, m)
    apply.__name__ = fn.__name__
    return apply


def _model_of(case: Case):
    from onnx import ModelProto

    m = ModelProto()
    m.ParseFromString(case.model)
    return m


@_mutation
def mut_truncate(src, case, m):
    n = src.int(0, max(0, len(case.model) - 1))
    return case.model[:n], f"truncated to {n} of {len(case.model)} bytes"


@_mutation
def mut_flip(src, case, m):
    b = bytearray(case.model)
    k = src.int(1, 8)
    for _ in range(k):
        i = src.int(0, len(b) - 1)
        b[i] ^= src.int(1, 255)
    return bytes(b), f"{k} bytes flipped"


@_mutation
def mut_attr_type(src, case, m):
    nodes = [n for n in m.graph.node if n.attribute]
    if not nodes:
        nodes = list(m.graph.node)
        n = src.choice(nodes)
        name, value = src.choice(("axis", "bogus", "perm")), src.choice((1, 2.5, "x", [1, 2]))
        n.attribute.append(helper.make_attribute(name, value))
        return m, f"attribute added to {n.op_type}"
    n = src.choice(nodes)
    a = src.choice(list(n.attribute))
    old = AttributeProto.AttributeType.Name(a.type)
    repl = src.choice((2.5, 7, "seven", [1, 2, 3], [0.5], ["a", "b"], 2 ** 40, -(2 ** 62)))
    if a.type == AttributeProto.TENSOR or src.chance(0.2):
        n.attribute.remove(a)
        return m, f"{n.op_type} attribute '{a.name}' removed"
    new = helper.make_attribute(a.name, repl)
    n.attribute.remove(a)
    n.attribute.append(new)
    return m, f"{n.op_type} attribute '{a.name}' {old} -> {AttributeProto.AttributeType.Name(new.type)} {repl!r}"


@_mutation
def mut_dangling(src, case, m):
    nodes = [n for n in m.graph.node if n.input]
    if not nodes:
        return mut_flip(src, case, m)
    n = src.choice(nodes)
    i = src.int(0, len(n.input) - 1)
    n.input[i] = "nowhere"
    return m, f"{n.op_type} input {i} reads a value nothing makes"


@_mutation
def mut_cycle(src, case, m):
    nodes = list(m.graph.node)
    if not nodes:
        return mut_flip(src, case, m)
    i = src.int(0, len(nodes) - 1)
    j = src.int(i, len(nodes) - 1)
    if not nodes[i].input:
        return mut_dangling(src, case, m)
    nodes[i].input[src.int(0, len(nodes[i].input) - 1)] = nodes[j].output[0]
    return m, f"node {i} ({nodes[i].op_type}) reads node {j}'s output: a cycle"


@_mutation
def mut_huge(src, case, m):
    huge = src.choice((2 ** 40, 2 ** 62, 2 ** 31, 2 ** 32 + 1))
    k = src.int(0, 3)
    if k == 0 and m.graph.input:  # a declared dim
        i = src.choice(list(m.graph.input))
        dims = i.type.tensor_type.shape.dim
        if dims:
            d = dims[src.int(0, len(dims) - 1)]
            d.Clear()
            d.dim_value = huge
            return m, f"input '{i.name}' declares a dim of {huge}"
    x = m.graph.input[0].name if m.graph.input else None
    if x is None:
        return mut_flip(src, case, m)
    elem = m.graph.input[0].type.tensor_type.elem_type
    name = f"huge{k}"
    shape = [huge] if src.chance(0.5) else [huge, huge // 2 or 1]
    if k == 1:
        m.graph.node.append(helper.make_node("ConstantOfShape", [f"{name}_s"], [name], name=name))
        m.graph.initializer.append(numpy_helper.from_array(np.asarray(shape, np.int64), f"{name}_s"))
        m.graph.output.append(helper.make_tensor_value_info(name, T.FLOAT, None))
        return m, f"ConstantOfShape {shape}"
    if k == 2:
        m.graph.node.append(helper.make_node("Expand", [x, f"{name}_s"], [name], name=name))
        m.graph.initializer.append(numpy_helper.from_array(np.asarray([1] * 0 + shape, np.int64), f"{name}_s"))
        m.graph.output.append(helper.make_tensor_value_info(name, elem, None))
        return m, f"Expand to {shape}"
    rank = len(m.graph.input[0].type.tensor_type.shape.dim)
    if rank == 0:
        return mut_flip(src, case, m)
    m.graph.node.append(helper.make_node("Tile", [x, f"{name}_s"], [name], name=name))
    m.graph.initializer.append(numpy_helper.from_array(np.asarray([huge] + [1] * (rank - 1), np.int64), f"{name}_s"))
    m.graph.output.append(helper.make_tensor_value_info(name, elem, None))
    return m, f"Tile by {huge}"


@_mutation
def mut_opset(src, case, m):
    v = src.choice((1, 5, 99, 10000))
    m.opset_import[0].version = v
    return m, f"opset import {v}"


@_mutation
def mut_dup_output(src, case, m):
    if len(m.graph.node) < 2:
        return mut_cycle(src, case, m)
    a, b = m.graph.node[0], m.graph.node[-1]
    b.output[0] = a.output[0]
    return m, "two nodes write one value"


@_mutation
def mut_initializer(src, case, m):
    if not m.graph.initializer:
        return mut_attr_type(src, case, m)
    t = src.choice(list(m.graph.initializer))
    k = src.int(0, 2)
    if k == 0 and t.raw_data:
        t.raw_data = t.raw_data[: len(t.raw_data) // 2] + b"\x01"
        return m, f"initializer '{t.name}' raw data too short"
    if k == 1 or not t.dims:
        t.dims.append(3)
        return m, f"initializer '{t.name}' dims and data disagree"
    t.data_type = src.choice((T.FLOAT16, T.INT32, T.BOOL, T.STRING))
    return m, f"initializer '{t.name}' element type changed"


@_mutation
def mut_input_type(src, case, m):
    if not m.graph.input:
        return mut_flip(src, case, m)
    i = src.choice(list(m.graph.input))
    old = i.type.tensor_type.elem_type
    i.type.tensor_type.elem_type = src.choice(tuple(e for e in ALL if e != old))
    case.runs = [{k: (v.astype(NP[i.type.tensor_type.elem_type]) if k == i.name else v) for k, v in r.items()}
                 for r in case.runs]
    return m, f"input '{i.name}' declared as {T.DataType.Name(i.type.tensor_type.elem_type)}"


@_mutation
def mut_feeds(src, case, m):
    """Run-time mistakes: the model stays valid, the feeds do not."""
    if not case.runs or not case.runs[0]:
        return mut_flip(src, case, m)
    run = dict(case.runs[0])
    name = src.choice(sorted(run))
    a = run[name]
    k = src.int(0, 6)
    if k == 0:
        run[name + "_typo"] = run.pop(name)
        what = f"feed '{name}' renamed"
    elif k == 1:
        run.pop(name)
        what = f"feed '{name}' missing"
    elif k == 2:
        run["extra"] = np.zeros(1, np.float32)
        what = "an extra feed"
    elif k == 3:
        dt = src.choice(tuple(NP[e] for e in ALL if NP[e] != a.dtype))
        run[name] = a.astype(dt)
        what = f"feed '{name}' as {np.dtype(dt).name}"
    elif k == 4:
        if src.chance(0.5) or a.ndim == 0:
            run[name] = a.reshape(a.shape + (1,))
        else:
            run[name] = a.reshape(a.shape[1:] if a.shape[0] == 1 else (-1,))
        what = f"feed '{name}' of rank {run[name].ndim}"
    elif k == 5:
        shape = tuple(d + 1 for d in a.shape)
        run[name] = np.zeros(shape, a.dtype)
        what = f"feed '{name}' of shape {shape}"
    else:
        what = "every float feed NaN/Inf"
        for n2, v in run.items():
            if v.dtype.kind == "f":
                run[n2] = src.np.choice(np.array([np.nan, np.inf, -np.inf, 0.0, -0.0], v.dtype), size=v.shape)
        case.runs = [run]
        # the graph was drawn for finite inputs: which NaN wins (ReduceMax, ArgMax, a comparison
        # of NaN-dependent values) is the CPU EP's kernel path's business, so only types and shapes
        case.checks = {k: Check("shape") for k in case.checks}
        return case.model, what
    case.runs = [run]
    return case.model, what


MUTATIONS = [(mut_truncate, 2), (mut_flip, 3), (mut_attr_type, 4), (mut_dangling, 2), (mut_cycle, 2), (mut_huge, 4),
             (mut_opset, 1), (mut_dup_output, 1), (mut_initializer, 2), (mut_input_type, 2), (mut_feeds, 6)]


def gen_mutation(src) -> Case:
    case = gen_graph(src)
    m = _model_of(case)
    fn = src.choice([f for f, w in MUTATIONS for _ in range(w)])
    out, what = fn(src, case, m)
    case.model = out if isinstance(out, bytes) else out.SerializeToString()
    case.what = f"{what} | {case.what}"
    return case


def gen_case(seed: int) -> Case:
    src = SeededSource(seed)
    case = gen_mutation(src) if src.chance(0.3) else gen_graph(src)
    case.seed = seed
    return case


def cases():
    """A hypothesis strategy drawing the same cases as `gen_case` (seed None), shrinkable."""
    from hypothesis import strategies as st

    @st.composite
    def strategy(draw):
        src = HypothesisSource(_DrawData(draw))
        return gen_mutation(src) if src.chance(0.3) else gen_graph(src)

    return strategy()


class _DrawData:
    """Adapts a composite strategy's `draw` to the data.draw(strategy) interface."""

    def __init__(self, draw):
        self._draw = draw

    def draw(self, strategy, label=None):
        return self._draw(strategy)


# ---- judging --------------------------------------------------------------------------------------

HIPEP_ERRORS = {"HipepError", "OptionError", "ModelError", "RuntimeShapeError", "FallbackError", "DataDependent",
                "NoKernel", "KernelCompileError", "CudaError"}
_STATUS = re.compile(r"hipep: (.*?) failed(?: with)?:? (.*)", re.S)
_PYERR = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Warning|Interrupt|Exit))\b")


@dataclass
class Result:
    """What one step (session creation, one run) did, in plain data."""
    ok: bool
    outputs: list | None = None
    etype: str = ""
    message: str = ""

    @classmethod
    def error(cls, e: BaseException) -> "Result":
        return cls(False, None, type(e).__name__ if not _is_hipep(e) else "hipep." + type(e).__name__, str(e))


def _is_hipep(e) -> bool:
    from ..errors import HipepError

    return isinstance(e, HipepError)


def error_clarity(r: Result) -> tuple[str, bool, str]:
    """(origin, clear, why) for a failed step of hipep's session: origin "hipep" when hipep raised
    it (directly, or through ORT with hipep's status), else "ort" (ORT's own checks: the model,
    the feeds)."""
    if r.etype.startswith("hipep."):
        inner = _inner_error(r.message)
        if inner:
            return "hipep", False, f"{r.etype} wrapping an internal {inner}"
        return "hipep", True, r.etype
    msg = r.message
    m = _STATUS.search(msg)
    if m:
        detail = m.group(2)
        if "\nAt:\n" in detail or "Traceback (most recent call last)" in detail:
            return "hipep", False, "a Python traceback in hipep's error"
        name = _PYERR.match(detail)
        if name:
            base = name.group(1).rsplit(".", 1)[-1]
            if base not in HIPEP_ERRORS:
                return "hipep", False, f"{base} (not a hipep error) from hipep"
            inner = _inner_error(detail)
            if inner:
                return "hipep", False, f"{base} wrapping an internal {inner}"
            return "hipep", True, base
        if "unknown C++ exception" in detail:
            return "hipep", False, "an unknown C++ exception"
        return "hipep", True, "hipep's bridge"
    if "Traceback (most recent call last)" in msg:
        return "ort", False, "a Python traceback"
    return "ort", True, f"{r.etype} from ONNX Runtime"


def _inner_error(text: str) -> str:
    """The name of a Python exception other than hipep's that a hipep error quotes ("compiling
    failed: AttributeError: ..."): an internal error dressed as a clear one."""
    for m in re.finditer(r"(?:failed|error|\))(?: with)?: ([A-Za-z_][\w.]*(?:Error|Exception))\b", text, re.I):
        name = m.group(1).rsplit(".", 1)[-1]
        if name not in HIPEP_ERRORS:
            return name
    return ""


def compare(got: np.ndarray, want: np.ndarray, check: Check) -> str | None:
    """None if `got` agrees with `want` under `check`, else what differs."""
    if not isinstance(got, np.ndarray) or not isinstance(want, np.ndarray):
        return f"not tensors: {type(got).__name__} vs {type(want).__name__}"
    if got.dtype != want.dtype:
        return f"dtype {got.dtype} vs {want.dtype}"
    if got.shape != want.shape:
        return f"shape {got.shape} vs {want.shape}"
    if check.mode == "shape" or got.size == 0:
        return None
    if got.dtype.kind == "f":
        gn, wn = np.isnan(got), np.isnan(want)
        if check.nan == "skip":  # NaN and infinities on either side
            gn = wn = gn | wn | np.isinf(got) | np.isinf(want)
        if not np.array_equal(gn, wn):
            i = np.argwhere(gn != wn)[0]
            return f"NaN positions differ first at {tuple(int(j) for j in i)}: {got[tuple(i)]} vs {want[tuple(i)]}"
        g64, w64 = np.where(gn, 0, got).astype(np.float64), np.where(wn, 0, want).astype(np.float64)
        if check.mode == "exact":
            bad = g64 != w64
        else:
            finite = np.isfinite(w64)
            scale = np.max(np.abs(w64[finite])) if finite.any() else 0.0
            with np.errstate(invalid="ignore"):
                diff = np.abs(g64 - w64)
                bad = np.where(np.isfinite(g64) & finite, diff > check.atol + check.rtol * (np.abs(w64) + scale),
                               g64 != w64)
    else:
        bad = got != want
    if np.any(bad):
        i = tuple(int(j) for j in np.argwhere(bad)[0])
        return (f"{int(np.count_nonzero(bad))} of {got.size} elements differ ({check.mode}"
                f"{'' if check.mode == 'exact' else f' rtol {check.rtol:g}'}), first at {i}: {got[i]!r} vs {want[i]!r}")
    return None


def judge(case: Case, h_create: Result, c_create: Result, runs: list[tuple[Result, Result | None]],
          out_names: list[str]) -> Outcome:
    """The verdict for one case from what hipep's and the CPU EP's sessions did (c is None for a
    run when the CPU EP has no session)."""
    if not h_create.ok:
        if h_create.etype == "hipep.FallbackError":
            return Outcome("pass", "hipep-leaves-nodes", _first_line(h_create.message, 2))
        origin, clear, why = error_clarity(h_create)
        if origin == "hipep" and not clear:
            return Outcome("finding", "unclear-error", f"session creation: {why}: {_clip(h_create.message)}",
                           "hipep-create")
        if not c_create.ok:
            return Outcome("pass", "both-reject", _first_line(h_create.message))
        if origin == "hipep":
            return Outcome("pass", "hipep-rejects", _first_line(h_create.message))
        return Outcome("finding", "ort-rejects-hipep-session",
                       f"session creation: ORT refuses hipep's session only: {_clip(h_create.message)}", "hipep-create")
    cpu_missing = not c_create.ok and ("NOT_IMPLEMENTED" in c_create.message
                                       or "Could not find an implementation" in c_create.message)
    if not c_create.ok and not cpu_missing:
        # ORT's CPU EP refuses what hipep's session accepted: hipep must not then answer
        answered = [i for i, (h, _) in enumerate(runs) if h.ok]
        if answered:
            return Outcome("finding", "accepts-invalid",
                           f"the CPU EP refuses the model ({_first_line(c_create.message)}) but hipep answers "
                           f"run {answered[0]}", "hipep-run")
    category, detail = "match", ""
    for i, (h, c) in enumerate(runs):
        if not h.ok:
            origin, clear, why = error_clarity(h)
            if not clear:
                return Outcome("finding", "unclear-error", f"run {i}: {why}: {_clip(h.message)}", "hipep-run")
            if c is not None and c.ok:
                if origin == "ort":  # ORT's own checks refuse hipep's run only: hipep's outputs, say
                    return Outcome("finding", "ort-rejects-hipep-run", f"run {i}: {_clip(h.message)}", "hipep-run")
                category, detail = "hipep-rejects-run", f"run {i}: {_hipep_reason(h.message)}"
            elif category == "match":
                category, detail = "both-reject-run", f"run {i}: {_hipep_reason(h.message)}"
            continue
        if c is None:
            if category == "match":
                category, detail = "hipep-only", _first_line(c_create.message)
            continue
        if not c.ok:
            return Outcome("finding", "accepts-invalid",
                           f"run {i}: the CPU EP rejects the run ({_first_line(c.message)}) but hipep answers",
                           "hipep-run")
        if len(h.outputs) != len(c.outputs):
            return Outcome("finding", "mismatch", f"run {i}: {len(h.outputs)} outputs vs {len(c.outputs)}")
        for name, got, want in zip(out_names, h.outputs, c.outputs):
            why = compare(got, want, case.checks.get(name, Check("close", 1e-4, 1e-5)))
            if why:
                return Outcome("finding", "mismatch", f"run {i}: output '{name}': {why}", "hipep-run")
    return Outcome("pass", category, detail)


def _hipep_reason(message: str) -> str:
    """The part of an error that says why: hipep's own text after ORT's wrapping."""
    m = _STATUS.search(message)
    return _first_line(m.group(2) if m else message)


# Findings described in docs/reliability.md whose fixes lie outside the op registry (the runtime,
# the bridge) or that are deliberate: (name, pattern over "category: detail"). A campaign counts
# them apart from new findings; once fixed they simply stop matching.
KNOWN = [
    ("alloc-error-traceback", r"^unclear-error: .*(Failed to allocate memory|MemoryError: Unable to allocate|"
                              r"ValueError: array is too big|allocate_outputs: shape \d+ = )"),
    ("signature-reads-missing-element", r"^unclear-error: .*IndexError: index \d+ is out of bounds.*signature"),
    ("prelu-slope-wider-than-x", r"^accepts-invalid: .*running PRelu node"),
    ("bufferize-castop-result", r"^unclear-error: .*AttributeError: 'CastOp' object has no attribute 'result'"),
    ("bufferize-empty-name-hint", r"^unclear-error: .*ValueError: \('Invalid OpResult name format ``"),
    # deliberate: ONNX 20 defines an empty bool ReduceMax/Min (false/true), ORT's CPU EP refuses it
    ("reduce-empty-bool", r"^accepts-invalid: .*Reduce(Max|Min) is not defined for empty set with bool type"),
    # not hipep's: the CPU EP refuses an empty Tile result whose other extents are huge
    ("tile-empty-beyond-4gib", r"^accepts-invalid: .*Tile output tensor would require more than"),
    ("capability-non-utf8-name", r"^ort-rejects-hipep-session: .*assigned to the default CPU EP"),
]


def known_finding(o: Outcome) -> str:
    if o.verdict != "finding":
        return ""
    text = f"{o.category}: {o.detail}"
    return next((name for name, pattern in KNOWN if re.search(pattern, text, re.S)), "")


def _first_line(s: str, n: int = 1) -> str:
    return " / ".join(s.strip().splitlines()[:n])[:300]


def _clip(s: str, n: int = 1500) -> str:
    return s if len(s) <= n else s[:n] + " ..."


# ---- running one case (in a worker) ------------------------------------------------------------------

def execute(case: Case, stage: Callable[[str], None] = lambda s: None) -> Outcome:
    """Runs a case in this process: hipep's session and the CPU EP's, then judges."""
    import onnxruntime as ort

    import hipep

    if case.kind.startswith("probe:"):
        _probe(case.kind[6:])
    start = time.perf_counter()

    def options(optimize):
        so = ort.SessionOptions()
        so.log_severity_level = 3
        so.intra_op_num_threads = 1
        so.inter_op_num_threads = 1
        so.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize
                                       else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
        return so

    stage("hipep-create")
    hs = cs = None
    try:
        hs = hipep.InferenceSession(case.model, sess_options=options(case.optimize), device="cpu", **case.options)
        h_create = Result(True)
    except Exception as e:  # noqa: BLE001 - the judge decides what any error means
        h_create = Result.error(e)
    stage("cpu-create")
    try:
        cs = ort.InferenceSession(case.model, sess_options=options(False), providers=["CPUExecutionProvider"])
        c_create = Result(True)
    except Exception as e:  # noqa: BLE001
        c_create = Result.error(e)
    runs = []
    out_names = [o.name for o in hs.get_outputs()] if hs is not None else []
    if hs is not None:
        for i, feeds in enumerate(case.runs):
            stage(f"hipep-run {i}")
            try:
                h = Result(True, hs.run(None, feeds))
            except Exception as e:  # noqa: BLE001
                h = Result.error(e)
            c = None
            if cs is not None:
                stage(f"cpu-run {i}")
                try:
                    c = Result(True, cs.run(None, feeds))
                except Exception as e:  # noqa: BLE001
                    c = Result.error(e)
            runs.append((h, c))
    outcome = judge(case, h_create, c_create, runs, out_names)
    outcome.seconds = time.perf_counter() - start
    outcome.known = known_finding(outcome)
    return outcome


def _probe(what: str):
    """Misbehaviours the pool must survive (its own tests use them)."""
    if what == "abort":
        os.abort()
    if what == "exit":
        os._exit(3)
    if what == "hang":
        time.sleep(10 ** 6)


# ---- the worker pool -------------------------------------------------------------------------------

def _send(f, obj):
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    f.write(struct.pack("<Q", len(data)) + data)
    f.flush()


def _recv(f):
    head = f.read(8)
    if len(head) < 8:
        return None
    (n,) = struct.unpack("<Q", head)
    return pickle.loads(f.read(n))


def limit_memory(gib: float):
    """Caps this process's address space: the huge-dim cases must fail to allocate, not take the
    machine's memory."""
    import resource

    limit = int(gib * 2 ** 30)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def worker_main(memory_gib: float = 6.0) -> int:
    """The worker loop: cases in on stdin, ("stage", name) and ("done", Outcome) frames out on the
    original stdout; anything else printed goes to stderr."""
    import warnings

    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    limit_memory(memory_gib)
    warnings.simplefilter("ignore")
    import onnxruntime as ort

    import hipep

    ort.set_default_logger_severity(3)
    hipep.register()
    _send(out, ("ready", os.getpid()))
    stdin = sys.stdin.buffer
    while True:
        case = _recv(stdin)
        if case is None:
            return 0
        try:  # this case's stderr only: the parent reads it back after a crash
            os.ftruncate(2, 0)
            os.lseek(2, 0, os.SEEK_SET)
        except OSError:
            pass
        try:
            outcome = execute(case, lambda s: _send(out, ("stage", s)))
        except BaseException as e:  # noqa: BLE001 - a bug in the harness itself is a finding too
            outcome = Outcome("finding", "harness-error", "".join(traceback.format_exception(e))[-2000:])
        _send(out, ("done", outcome))


class _Worker:
    def __init__(self, index: int, env: dict, log_dir: Path):
        self.index = index
        self.log = open(log_dir / f"worker{index}.stderr", "w+b")
        # -P: a checkout's own hipep/ (no native library) must not shadow the installed package
        self.proc = subprocess.Popen([sys.executable, "-P", "-m", "hipep.tools.fuzz", "--worker"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log, env=env)
        os.set_blocking(self.proc.stdout.fileno(), False)
        self.buf = b""
        self.case: Case | None = None
        self.deadline = 0.0
        self.started = 0.0
        self.stage = ""
        self.ready = False
        self.done = 0

    def send(self, case: Case, timeout: float):
        self.case, self.stage = case, "sent"
        self.started = time.monotonic()
        self.deadline = self.started + timeout
        _send(self.proc.stdin, case)

    def frames(self) -> list:
        try:
            chunk = os.read(self.proc.stdout.fileno(), 1 << 20)
        except BlockingIOError:
            return []
        if not chunk:
            raise EOFError
        self.buf += chunk
        out = []
        while len(self.buf) >= 8:
            (n,) = struct.unpack("<Q", self.buf[:8])
            if len(self.buf) < 8 + n:
                break
            out.append(pickle.loads(self.buf[8:8 + n]))
            self.buf = self.buf[8 + n:]
        return out

    def stderr_tail(self, n: int = 4000) -> str:
        try:
            self.log.flush()
            self.log.seek(0, os.SEEK_END)
            size = self.log.tell()
            self.log.seek(max(0, size - n))
            return self.log.read().decode(errors="replace")
        except OSError:
            return ""

    def kill(self):
        if self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass
        self.log.close()

    def close(self):
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.kill()


class Pool:
    """Long-lived workers, one case each at a time. A worker that dies or passes the timeout is
    killed and replaced; its case becomes a finding ("crash" or "hang"; "oracle" when it died in
    the CPU EP's own steps) and is run again alone in a fresh worker to tell a problem of that
    case from one a previous case left behind. Workers are also replaced every `recycle` cases
    so that whatever a long run accumulates stays bounded."""

    def __init__(self, workers: int = 2, timeout: float = 30.0, recycle: int = 1000, memory_gib: float = 6.0):
        self.n, self.timeout, self.recycle, self.memory_gib = workers, timeout, recycle, memory_gib
        self.env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1",
                        PYTHONWARNINGS="ignore", HIPEP_FUZZ_MEMORY_GIB=str(memory_gib))
        root = str(Path(__file__).resolve().parents[2])
        self.env["PYTHONPATH"] = root + (os.pathsep + self.env["PYTHONPATH"] if self.env.get("PYTHONPATH") else "")
        self.logs = Path(tempfile.mkdtemp(prefix="hipep-fuzz-"))
        self.workers: list[_Worker] = []
        self.sel = selectors.DefaultSelector()
        self.restarts = 0  # workers replaced after a crash or a hang (not counting recycling)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        for w in self.workers:
            self.sel.unregister(w.proc.stdout)
            w.close()
        self.workers = []

    def _start(self, index: int) -> _Worker:
        w = _Worker(index, self.env, self.logs)
        self.sel.register(w.proc.stdout, selectors.EVENT_READ, w)
        return w

    def _replace(self, w: _Worker, lost: bool = True) -> _Worker:
        self.sel.unregister(w.proc.stdout)
        w.kill()
        self.restarts += int(lost)
        nw = self._start(w.index)
        self.workers[self.workers.index(w)] = nw
        return nw

    def run(self, cases: Iterable[Case], on_outcome: Callable[[Case, Outcome], None], isolate: bool = True):
        """Runs every case; calls on_outcome(case, outcome) as each finishes (in any order)."""
        pending = iter(cases)
        if not self.workers:
            self.workers = [self._start(i) for i in range(self.n)]
        busy = 0
        exhausted = False
        start_deadline = time.monotonic() + 300

        def feed(w):
            nonlocal busy, exhausted
            if exhausted:
                return
            case = next(pending, None)
            if case is None:
                exhausted = True
                return
            w.send(case, self.timeout)
            busy += 1

        while True:
            for w in list(self.workers):
                if w.ready and w.case is None and not exhausted:
                    if w.done >= self.recycle:
                        self._replace(w, lost=False)
                        continue
                    feed(w)
            if exhausted and busy == 0:
                return
            now = time.monotonic()
            deadlines = [w.deadline for w in self.workers if w.case is not None]
            wait = max(0.0, min(deadlines) - now) if deadlines else 1.0
            for key, _ in self.sel.select(timeout=min(wait, 1.0)):
                w = key.data
                try:
                    frames = w.frames()
                except EOFError:
                    frames = None
                if frames is None:
                    case, stage = w.case, w.stage
                    code = w.proc.wait()
                    tail = w.stderr_tail()
                    self._replace(w)
                    if case is None:
                        if time.monotonic() > start_deadline:
                            raise RuntimeError(f"fuzz worker exits at start (code {code}):\n{tail}")
                        continue
                    busy -= 1
                    why = f"signal {-code} ({signal.Signals(-code).name})" if code < 0 else f"exit code {code}"
                    outcome = self._lost(case, "crash", f"the worker died: {why}", stage, tail, isolate)
                    on_outcome(case, outcome)
                    continue
                for frame in frames:
                    if frame[0] == "ready":
                        w.ready = True
                    elif frame[0] == "stage":
                        w.stage = frame[1]
                    elif frame[0] == "done":
                        case, w.case = w.case, None
                        w.done += 1
                        busy -= 1
                        on_outcome(case, frame[1])
            now = time.monotonic()
            for w in list(self.workers):
                if w.case is not None and now > w.deadline:
                    case, stage, tail = w.case, w.stage, w.stderr_tail()
                    self._replace(w)
                    busy -= 1
                    on_outcome(case, self._lost(case, "hang", f"no answer within {self.timeout:g} s", stage, tail,
                                                isolate))

    def _lost(self, case: Case, category: str, detail: str, stage: str, tail: str, isolate: bool) -> Outcome:
        verdict = "oracle" if stage.startswith("cpu-") else "finding"
        out = Outcome(verdict, category if verdict == "finding" else f"cpu-ep-{category}", detail, stage,
                      stderr=tail)
        out.known = known_finding(out)
        if isolate:  # again, alone, in a fresh worker: is it this case or what came before it?
            again: list[Outcome] = []
            with Pool(1, self.timeout, memory_gib=self.memory_gib) as alone:
                alone.run([case], lambda c, o: again.append(o), isolate=False)
            out.reproduced_alone = bool(again) and again[0].category == out.category
        return out


    def run_case(self, case: Case, isolate: bool = False) -> Outcome:
        """One case on this pool's workers, waiting for its outcome."""
        got: list[Outcome] = []
        self.run([case], lambda c, o: got.append(o), isolate=isolate)
        return got[0]


def run_one(case: Case, timeout: float = 60.0) -> Outcome:
    """One case in a fresh worker (as the pool runs it, crash and hang included)."""
    with Pool(1, timeout) as pool:
        return pool.run_case(case)


# ---- campaigns, findings, reports --------------------------------------------------------------------

def save_case(case: Case, outcome: Outcome | None, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.onnx").write_bytes(case.model)
    arrays = {f"run{i}/{k}": v for i, run in enumerate(case.runs) for k, v in run.items()}
    np.savez(folder / "feeds.npz", **arrays)
    meta = {"seed": case.seed, "kind": case.kind, "what": case.what, "optimize": case.optimize,
            "options": case.options, "runs": [sorted(r) for r in case.runs],
            "checks": {k: dataclasses.asdict(c) for k, c in case.checks.items()},
            "outcome": dataclasses.asdict(outcome) if outcome else None,
            "replay": f"python -m hipep.tools.fuzz --replay {folder}"}
    (folder / "case.json").write_text(json.dumps(meta, indent=1, default=str))
    return folder


def load_case(folder: Path) -> Case:
    folder = Path(folder)
    meta = json.loads((folder / "case.json").read_text())
    feeds = np.load(folder / "feeds.npz")
    runs = [{} for _ in meta["runs"]]
    for key in feeds.files:
        run, name = key.split("/", 1)
        runs[int(run[3:])][name] = feeds[key]
    checks = {k: Check(**c) for k, c in meta["checks"].items()}
    return Case(meta["seed"], meta["kind"], meta["what"], (folder / "model.onnx").read_bytes(), runs, checks,
                meta["optimize"], meta["options"])


def signature(case: Case, o: Outcome) -> str:
    """Findings that are one problem share this: category, stage and the message without numbers
    and names."""
    text = re.sub(r"'[^']*'", "'_'", o.detail)
    text = re.sub(r"\d+(\.\d+)?(e[-+]?\d+)?", "#", text)
    text = re.sub(r"HipExecutionProvider_\S+", "HipExecutionProvider_#", text)
    return f"{o.category} | {o.stage.split(' ')[0]} | {text[:160]}"


def campaign(cases: int, workers: int = 2, seed: int = 0, out: Path | str = DEFAULT_OUT, timeout: float = 30.0,
             progress: Callable[[str], None] | None = None) -> dict:
    """Runs cases seed .. seed+cases-1; saves every finding; returns (and writes) the summary."""
    out = Path(out)
    found = out / "findings"
    counts: Counter = Counter()
    kinds: Counter = Counter()
    sigs: dict[str, dict] = {}
    start = time.monotonic()
    done = 0

    def on_outcome(case: Case, o: Outcome):
        nonlocal done
        done += 1
        counts[("known" if o.known else o.verdict, o.known or o.category)] += 1
        kinds[case.kind] += 1
        if o.verdict != "pass":
            folder = save_case(case, o, found / case.name)
            s = signature(case, o)
            entry = sigs.setdefault(s, {"count": 0, "seeds": [], "example": str(folder), "what": case.what,
                                        "detail": o.detail[:600], "verdict": o.verdict, "known": o.known})
            entry["count"] += 1
            entry["seeds"].append(case.seed)
        if progress and (done % 500 == 0 or (o.verdict != "pass" and not o.known)):
            progress(f"[{done}/{cases} {time.monotonic() - start:.0f}s] "
                     + (f"{o.verdict}: {case.name}: {o.category}: {o.detail[:200]}" if o.verdict != "pass" else "ok"))

    with Pool(workers, timeout) as pool:
        pool.run((gen_case(s) for s in range(seed, seed + cases)), on_outcome)
        restarts = pool.restarts
    summary = {"cases": done, "seed": seed, "workers": workers, "seconds": round(time.monotonic() - start, 1),
               "outcomes": {f"{v}/{c}": n for (v, c), n in sorted(counts.items())},
               "kinds": dict(sorted(kinds.items())), "worker_restarts": restarts,
               "findings": sum(n for (v, _), n in counts.items() if v == "finding"),
               "known": sum(n for (v, _), n in counts.items() if v == "known"),
               "signatures": dict(sorted(sigs.items(), key=lambda kv: -kv[1]["count"]))}
    out.mkdir(parents=True, exist_ok=True)
    (out / f"summary-{seed}-{cases}.json").write_text(json.dumps(summary, indent=1))
    return summary


def format_summary(s: dict) -> str:
    lines = [f"{s['cases']} cases (seeds {s['seed']}..{s['seed'] + s['cases'] - 1}) on {s['workers']} workers in "
             f"{s['seconds']} s; {s['findings']} new findings, {s['known']} known; {s['worker_restarts']} workers "
             f"lost to a crash or hang"]
    lines += [f"  {k}: {n}" for k, n in s["outcomes"].items()]
    for sig, e in s["signatures"].items():
        tag = f" [known: {e['known']}]" if e["known"] else ""
        lines.append(f"- {e['count']}x{tag} {sig}\n    e.g. seed {e['seeds'][0]}: {e['what'][:200]}\n"
                     f"    {e['example']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hipep.tools.fuzz", description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", type=int, default=200)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--seed", type=int, default=0, help="first case's seed (case i has seed + i)")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds per case before it counts as a hang")
    p.add_argument("--out", default=DEFAULT_OUT, help="where findings and the summary go")
    p.add_argument("--replay", metavar="FOLDER", help="run a saved case again in this process and print the verdict")
    p.add_argument("--show", type=int, metavar="SEED", help="print case SEED's model and feeds")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        return worker_main(float(os.environ.get("HIPEP_FUZZ_MEMORY_GIB", "6")))
    if args.replay:
        limit_memory(float(os.environ.get("HIPEP_FUZZ_MEMORY_GIB", "6")))
        case = load_case(Path(args.replay))
        print(f"seed {case.seed}: {case.kind}: {case.what}")
        o = execute(case)
        print(f"{o.verdict}: {o.category}: {o.detail}")
        return 0 if o.verdict == "pass" else 1
    if args.show is not None:
        case = gen_case(args.show)
        print(f"seed {case.seed}: {case.kind}: {case.what}\n{_model_text(case.model)}")
        for i, run in enumerate(case.runs):
            for k, v in run.items():
                print(f"run {i} {k}: {v.dtype} {v.shape}\n{v}")
        return 0
    s = campaign(args.cases, args.workers, args.seed, args.out, args.timeout,
                 progress=lambda line: print(line, file=sys.stderr, flush=True))
    print(format_summary(s))
    return 1 if s["findings"] else 0


def _model_text(data: bytes) -> str:
    from onnx import ModelProto, printer

    m = ModelProto()
    try:
        m.ParseFromString(data)
        return printer.to_text(m)
    except Exception as e:  # noqa: BLE001 - a mutated model need not parse
        return f"(does not parse: {e})"


if __name__ == "__main__":
    # run as the imported module, so that cases and outcomes pickle under its name on both ends
    from hipep.tools.fuzz import main as _main

    sys.exit(_main())
