"""What a fuzz case is and where its choices come from: the shared constants and tolerances, the
seeded and hypothesis-driven sources, `Case`/`Check`/`Outcome`, and `GraphGen`, which builds one
random graph while tracking its values' shapes, dtypes and error budgets."""
from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np
from onnx import TensorProto as T, helper, numpy_helper


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

# Ops whose float results may be NaN or infinite for finite inputs (or overflow f16).
SPECIAL_MAKERS = {"Exp", "Log", "Sqrt", "Reciprocal", "Softplus", "Div", "Pow", "Mod", "ReduceProd", "ReduceLogSum",
                  "ReduceLogSumExp", "ReduceSumSquare", "Sin", "Cos"}
F16_OVERFLOW = {"Add", "Sub", "Mul", "Sum", "MatMul", "Gemm", "ReduceSum", "ReduceL1", "ReduceL2", "ReduceMean",
                "CumSum", "Cast", "CastLike", "Elu", "Selu", "HardSwish"}
# How much an op may multiply the relative error its input already carries (the condition
# number, bounded for the inputs the generator draws): exp(x) turns x's relative error into
# |x| times it, cos(x) an absolute error |x| * e into a relative one 1/|cos x| times larger, and
# ReduceLogSum the log of a sum that may cancel, as Log of such a sum ...
AMPLIFY = {"Sin": 100, "Cos": 100, "Tan": 100, "Exp": 10, "Pow": 10, "Softplus": 10, "Mish": 10, "Elu": 10,
           "Selu": 10, "Log": 10, "Reciprocal": 10, "Div": 10, "Softmax": 10, "LogSoftmax": 10,
           "LayerNormalization": 10, "ReduceLogSumExp": 10, "ReduceLogSum": 10}
# Ops whose f16 results cannot depend on whether their f16 inputs were rounded to f16.
F16_EXACT = {"Abs", "Neg", "Relu", "Floor", "Ceil", "Round", "Sign", "Max", "Min", "Clip", "Where", "Cast",
             "CastLike", "Identity", "Reshape", "Transpose", "Concat", "Slice", "Gather", "GatherElements",
             "Squeeze", "Unsqueeze", "Expand", "Flatten", "Tile", "Split", "Pad", "Trilu", "TopK", "ReduceMax",
             "ReduceMin", "ConstantOfShape"}

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
    from ...ops.registry import lookup

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
