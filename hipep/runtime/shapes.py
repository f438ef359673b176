"""The shape program of a plan: every value's shape as expressions over the inputs' dims.

`trace_shapes` walks a plan once with the shapes (and, where a rule needs them, the small values)
of one run's inputs, calling each op's registry shape rule on symbolic dims
(hipep.symbolic.SymInt). No kernel runs. The result, a `ShapeProgram`, is plain data:

  * `shapes`: value id → tuple of expressions (ints and symbols `i<input>.<axis>`, or
    `d<input>.<element>` for an element of a small integer input a rule reads);
  * `guards`: the constraints the rules' decisions rest on (`i3.1 <= i9.2`, `i0.0 == i1.0`, ...),
    each with the result it had. A run whose dims satisfy every guard has exactly the shapes the
    expressions give, so the runtime evaluates expressions instead of rules; a run that breaks a
    guard is traced anew, and there a rule that finds a mismatch raises RuntimeShapeError naming
    the node, before any launch.

Rules marked `symbolic` (see ops/_common.shape_rule) yield expressions; any other rule gets its
inputs' symbols pinned (a guard `expr == value` each), which is always sound and only costs a new
trace when those dims change.

A small float or bool input a rule reads (Resize's scales, Range's bounds, OneHot's depth, an If's
condition handed in) has no symbols: floats follow no integer arithmetic a guard could record.
Its values are *pinned* instead (`pins`: input position → the bytes the trace used). A run whose
input holds other bytes does not keep the program and is traced anew, as one that breaks a guard;
the comparison is bit for bit, so a NaN equals itself and does not make every run trace again.
A launch that only moves such a value (the plan's copy of it into host-visible memory, where the
host reads it) is followed where a rule reads its result; values that kernels only move or
compute on are not pinned, so data does not make a program trace again.

Host steps that compute shape arithmetic (Shape → Gather → Cast → Concat ...) are evaluated
symbolically too, so a value such as total_sequence_length = Shape(mask)[1] is the expression
`i3.1`, not a number a guard must pin. Small integer results of device launches whose inputs
the host knows (arithmetic on shapes and small integer inputs) are evaluated on the host when a
rule reads them, their inputs pinned. Values the host would read from device memory (a rule
reading what a kernel computed from other data) cannot be known before the run: tracing stops
with `DataDependent`, and the executor runs such plans step by step (hipep.runtime.interpreter),
which GPU devices do not run.

An If whose condition the host knows this way (comparisons of known integers stay symbolic, each
decision a guard; a bool input is pinned) is traced through the branch it takes, recorded in
`branches`; a run that keeps the guards takes the same branch, so the executor replays it like any
other step.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import HipepError, RuntimeShapeError
from ..graph import TensorType, elem_type_of
from ..ops.registry import lookup
from ..plan import HostStep, If, Launch, Loop, Plan, Sync, split_op_key
from ..symbolic import SymInt, Trace, expr_of, sym, symbols_of, value

# Inputs at most this long may have their values read by shape rules (Reshape's shape, Slice's
# bounds as graph inputs): each integer element becomes a symbol the run reads on the host; float
# and bool inputs are read whole and pinned (see the module doc).
MAX_READ_ELEMENTS = 64
# Host steps' results are followed element by element as expressions (host_values, note_integers)
# up to this many elements a step: shape arithmetic is far smaller, and a larger integer result
# (ConstantOfShape of an input's shape, say) runs as the host step it is instead of becoming a
# Python object per element and a generated function as long.
MAX_SYMBOLIC_ELEMENTS = 1 << 16


def pinnable(dtype) -> bool:
    """Whether an input of element type `dtype` (numpy dtype or name) is pinned where a rule reads
    it: the floats and bool, whose values are not symbols (integers are)."""
    return (dtype if isinstance(dtype, str) else np.dtype(dtype).name) in _PINNABLE


_PINNABLE = frozenset({"float16", "float32", "float64", "bfloat16", "bool"})

# Host ops that only move elements: evaluated on an index proxy, so symbolic elements move with
# them. Value: the input positions whose elements move (the rest are indices, axes, shapes).
_MOVING = {"Gather": (0,), "Slice": (0,), "Concat": None, "Squeeze": (0,), "Unsqueeze": (0,),
           "Reshape": (0,), "Identity": (0,), "Flatten": (0,), "Transpose": (0,), "Expand": (0,),
           "Tile": (0,), "Split": (0,)}
_INT_KINDS = "iu"
# Device launches whose results the host follows when their inputs are known integers, whatever
# their own element type (Cast to float of a Shape: Resize's scales); the partitioner's view of
# host values on a GPU (hipep.partition) follows the same ops.
# Comparisons of known integers (LongRoPE's `Shape(mask)[1] > original_max`, an If's condition) stay
# symbolic: each element's decision is a guard, so the condition holds for every run that keeps it.
_COMPARISONS = {"Greater": np.greater, "Less": np.less, "GreaterOrEqual": np.greater_equal,
                "LessOrEqual": np.less_equal, "Equal": np.equal}
TRACKED_ON_DEVICE = frozenset(_MOVING) | frozenset(_COMPARISONS) | {"Shape", "Size", "Cast", "Add", "Sub", "Mul"}


MAX_BYTES = 1 << 62  # a tensor's byte count beyond this is an error, not an int64 wrap-around
MAX_EXTENT = (1 << 63) - 1  # ONNX's extents are int64 (an empty tensor's other extents too)


def oversize(dims: list[int], itemsize: int) -> tuple[int, str]:
    """(the byte count of a tensor of these extents, why no tensor can have them: "" when one can).
    Python ints: a count past int64 is an answer, not a wrap-around."""
    n = 1
    for d in dims:
        n *= d
    nbytes = n * itemsize
    if any(d > MAX_EXTENT for d in dims):
        return nbytes, "has an extent past int64's range (2^63 - 1)"
    if nbytes > MAX_BYTES:
        return nbytes, f"would take {nbytes} bytes, more than a tensor can hold (2^62)"
    return nbytes, ""


def check_bytes(where: str, spec, shape) -> int:
    """The byte count of a `spec.dtype` tensor of `shape`, or RuntimeShapeError when no tensor can
    be that large (checked before anything is allocated)."""
    dims = [value(d) for d in shape]
    nbytes, why = oversize(dims, np.dtype(spec.dtype).itemsize)
    if why:
        raise RuntimeShapeError(f"{where}: '{spec.name}' of shape {dims} ({spec.dtype}) {why}")
    return nbytes


def check_static(where: str, spec, shape) -> None:
    """RuntimeShapeError where a run's extents contradict the ones the plan was compiled with
    (ValueSpec.static: a model's declared shapes refine what the rules derive, and a declaration
    that does not hold for these inputs would give wrong extents, not an error). A symbolic extent
    compared here records a guard, so a shape program reused for other inputs checks it again."""
    static = spec.static
    if not static:  # unranked, or rank 0: a branch's results may be typed as scalars they are not
        return
    if len(static) != len(shape) or any(s >= 0 and d != s for s, d in zip(static, shape)):
        declared = "[" + ", ".join("?" if s < 0 else str(s) for s in static) + "]"
        raise RuntimeShapeError(f"{where}: '{spec.name}' has shape {[value(d) for d in shape]} in this run, but the "
                                f"graph was compiled with {declared} for it, from the model's declared shapes (its "
                                f"value_info or outputs), which do not hold for these inputs")


class DataDependent(HipepError):
    """A shape depends on values computed on the device: the plan runs step by step."""


class Placeholder:
    """An input of known shape and dtype but no data: what compile time traces with."""

    def __init__(self, shape, dtype):
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.ndim = len(self.shape)
        self.size = 1
        for d in self.shape:
            self.size *= d


# Values for symbolic dims at compile time: each more than twice the one before, so that no sum of
# two of them equals a third (an accidental equality would become a guard no real run meets).
_GENERIC_DIMS = (17, 37, 79, 163, 331, 673, 1361, 2729, 5471, 10949)


def compile_time_program(plan: Plan, input_types, constants: dict[int, np.ndarray],
                         weights: dict | None = None) -> "ShapeProgram | None":
    """The shape program derived when the plan is compiled: symbolic dims (ORT's dim names; the
    same name, the same symbol) take generic placeholder extents, and the guards the rules record
    say for which runs the result holds (a run that breaks one is traced then). None where the
    shapes need input data or device values, or a rule rejects the placeholders."""
    names: dict = {}
    inputs = []
    for pos, t in enumerate(input_types):
        if t is None or t.shape is None:
            return None
        dims = []
        for d in t.shape:
            if isinstance(d, int) and not isinstance(d, bool):
                dims.append(d)
                continue
            key = d if isinstance(d, str) and d else ("anonymous", pos, len(dims))
            if key not in names:
                if len(names) >= len(_GENERIC_DIMS):
                    return None
                names[key] = _GENERIC_DIMS[len(names)]
            dims.append(names[key])
        vid = plan.inputs[pos]
        given = constants.get(pos)
        inputs.append(given if given is not None else Placeholder(dims, plan.values[vid].dtype))
    plan_constants = {vid: np.asarray(plan.constants[v.constant], dtype=v.dtype)
                      for vid, v in plan.values.items() if v.kind == "constant"}
    plan_constants.update(weights or {})  # weights hipep holds, by value id (arrays or Placeholders)
    try:
        return trace_shapes(plan, inputs, plan_constants)
    except HipepError:
        return None


@dataclass
class ShapeProgram:
    ranks: tuple  # per plan input: its rank, or None when omitted
    shapes: dict[int, tuple]  # value id → expressions
    guards: dict[tuple, bool]
    reads: tuple = ()  # (input position, element) pairs whose values are symbols
    pins: dict[int, bytes] = field(default_factory=dict)  # input position → its bytes (see module doc)
    branches: dict[tuple, bool] = field(default_factory=dict)  # branch_key(If) → then-branch taken
    # value id → its elements (row-major) as expressions, for the integer results of host steps that
    # follow from shapes alone (total_sequence_length = Cast(Shape(mask)[1])): the executor writes
    # them from the run's symbols instead of running the steps (hipep.runtime.host_values)
    host_values: dict[int, tuple] = field(default_factory=dict)
    symbols: list[str] = field(default_factory=list)

    def to_data(self) -> dict:
        """Plain data for the plan (hipep.plan_io stores it)."""
        return {"ranks": tuple(self.ranks), "shapes": dict(self.shapes),
                "guards": tuple((op, a, b, r) for (op, a, b), r in self.guards.items()), "reads": tuple(self.reads),
                "branches": tuple((node, tuple(outs), taken) for (node, outs), taken in self.branches.items()),
                "host_values": dict(self.host_values),
                "pins": tuple((pos, data.hex()) for pos, data in sorted(self.pins.items()))}

    @staticmethod
    def from_data(d: dict) -> "ShapeProgram":
        return ShapeProgram(ranks=tuple(d["ranks"]), shapes={int(k): tuple(v) for k, v in d["shapes"].items()},
                            guards={(op, a, b): bool(r) for op, a, b, r in d["guards"]}, reads=tuple(d["reads"]),
                            branches={(node, tuple(outs)): bool(taken) for node, outs, taken in d.get("branches", ())},
                            host_values={int(k): tuple(v) for k, v in d.get("host_values", {}).items()},
                            pins={int(pos): bytes.fromhex(data) for pos, data in d.get("pins", ())})

    def pinned_elements(self, dtypes) -> int:
        """How many elements a run reads to check the pins (`dtypes`: per input position)."""
        return sum(len(data) // np.dtype(dtypes[pos]).itemsize for pos, data in self.pins.items())

    def __post_init__(self):
        if not self.symbols:
            names: set = set()
            for exprs in (*self.shapes.values(), *self.host_values.values()):
                for e in exprs:
                    symbols_of(e, names)
            for (_, a, b) in self.guards:
                symbols_of(a, names)
                symbols_of(b, names)
            self.symbols = sorted(names, key=_symbol_order)


def branch_key(step: If) -> tuple:
    """An If step's name in a shape program's branches: its node and its outputs' value ids (unique
    in a plan, nested Ifs included)."""
    return (step.node, tuple(step.outputs))


def _symbol_order(name: str):
    """Input dims (`i<input>.<axis>`) before input elements (`d<input>.<k>`), each by position."""
    a, _, b = name[1:].partition(".")
    return (0 if name[0] == "i" else 1, int(a), int(b))


class _Tracer:
    def __init__(self, plan: Plan, inputs, constants: dict[int, np.ndarray]):
        self.plan = plan
        self.values = plan.values
        self.inputs = inputs
        self.shape: dict[int, tuple] = {}
        self.sval: dict[int, Any] = {}  # value id → its value as the host knows it (object array)
        self.reads: set = set()
        self.pins: dict[int, bytes] = {}  # input position → the bytes its pinned values came from
        # value id → (launch, op, op type, label, moves): the integer launch that computes it, or
        # a launch that only moves a float or bool value (moves=True), evaluated where a rule reads it
        self.pending: dict[int, tuple] = {}
        self.branches: dict[tuple, bool] = {}  # branch_key(If) → whether it takes the then-branch
        self.folded: dict[int, tuple] = {}  # host steps' integer results as expressions (host_values)
        self.constants = constants
        self.where = f"plan '{plan.name}'"

    # ---- values ----------------------------------------------------------------------------

    def bind(self) -> tuple:
        ranks = []
        for pos, vid in enumerate(self.plan.inputs):
            spec = self.values[vid]
            a = self.inputs[pos] if pos < len(self.inputs) else None
            if a is None:
                ranks.append(None)
                continue
            ranks.append(len(a.shape))
            if spec.kind == "weight":  # the same every run: plain ints, its value a constant
                self.shape[vid] = tuple(int(d) for d in a.shape)
                if a.dtype.kind in _INT_KINDS and a.size <= MAX_READ_ELEMENTS and not isinstance(a, Placeholder):
                    self.sval[vid] = _objects(a)
            else:
                self.shape[vid] = tuple(SymInt(int(d), sym(f"i{pos}.{j}")) for j, d in enumerate(a.shape))
                check_static(f"plan '{self.plan.name}' input {pos}", spec, self.shape[vid])
        for vid, c in self.constants.items():
            self.shape[vid] = tuple(int(d) for d in c.shape)
            if self.values[vid].kind == "weight":  # a weight hipep holds: as one given in, above
                if c.dtype.kind in _INT_KINDS and c.size <= MAX_READ_ELEMENTS and not isinstance(c, Placeholder):
                    self.sval[vid] = _objects(c)
                continue
            self.sval[vid] = _objects(c) if c.dtype.kind in _INT_KINDS + "b" else c
        return tuple(ranks)

    def host_value(self, vid: int, pin: bool = True):
        """The value of `vid` as the host knows it before any launch, or DataDependent. `pin=False`:
        a float or bool input not yet pinned stays unknown (only a rule or an If reading it makes
        the program depend on its values, not a launch or host step that uses it)."""
        if vid in self.sval:
            return self.sval[vid]
        if vid in self.pending:
            step, op, op_type, label, moves = entry = self.pending[vid]
            for out in step.outputs:
                self.pending.pop(out, None)
            self.host_values(step, op, op_type, label, host=False, pin=pin and moves)
            if vid in self.sval:
                return self.sval[vid]
            if moves and not pin:  # a rule may still read it, pinning what it moves
                for out in step.outputs:
                    if out >= 0:
                        self.pending[out] = entry
        spec = self.values[vid]
        if spec.kind == "input":
            a = self.inputs[spec.index]
            if isinstance(a, Placeholder):
                raise DataDependent(f"{self.where}: a shape depends on the data of input '{spec.name}'")
            if a.dtype.kind in _INT_KINDS and a.size <= MAX_READ_ELEMENTS:
                # its elements are symbols for this length only: the program holds for runs whose
                # input has the same extents (a longer one has elements no symbol stands for)
                for d in self.shape.get(vid, ()):
                    _pin(d)
                flat = a.reshape(-1)
                out = np.empty(a.size, dtype=object)
                for k in range(a.size):
                    out[k] = SymInt(int(flat[k]), sym(f"d{spec.index}.{k}"))
                    self.reads.add((spec.index, k))
                self.sval[vid] = out.reshape(a.shape)
                return self.sval[vid]
            if pin and pinnable(a.dtype) and a.size <= MAX_READ_ELEMENTS:
                # no symbols: the values themselves are part of the program (`pins`), for inputs
                # of these extents holding these bytes
                for d in self.shape.get(vid, ()):
                    _pin(d)
                data = a.tobytes()  # numpy's, or one read of a tensor in GPU memory (OrtDeviceArray)
                self.pins[spec.index] = data
                v = np.frombuffer(data, dtype=a.dtype).reshape(a.shape)
                self.sval[vid] = _objects(v) if v.dtype.kind == "b" else v  # bool as constants hold it
                return self.sval[vid]
            raise DataDependent(f"{self.where}: a shape depends on the values of input '{spec.name}' ({a.dtype}, "
                                f"{a.size} elements), which the host does not read")
        raise DataDependent(f"{self.where}: a shape depends on the value of '{spec.name}', which is computed "
                            f"on the device")

    def shape_of(self, vid: int) -> tuple:
        try:
            return self.shape[vid]
        except KeyError:
            spec = self.values[vid]
            if spec.kind in ("input", "weight"):
                raise HipepError(f"{self.where}: value %{vid} ('{spec.name}') is an omitted input") from None
            raise HipepError(f"{self.where}: value %{vid} ('{spec.name}') is read before any step produced it") \
                from None

    # ---- steps -----------------------------------------------------------------------------

    def run(self, block) -> None:
        for step in block:
            if isinstance(step, (Launch, HostStep)):
                self.op(step, host=isinstance(step, HostStep))
            elif isinstance(step, Sync):
                continue
            elif isinstance(step, If):
                self.branch(step)
            elif isinstance(step, Loop):
                raise DataDependent(f"{self.plan.name}: control flow (Loop '{step.node}')")
            else:
                raise HipepError(f"{self.plan.name}: unknown plan step {step!r}")

    def branch(self, step: If) -> None:
        """An If whose condition the host knows before any launch (a comparison of shapes: the
        builder's LongRoPE picks its rotary caches by the sequence length): the branch it takes is
        part of the program, decided by the guards its condition recorded, and only that branch's
        steps are traced. A condition computed on the device raises DataDependent."""
        label = self.where = f"node '{step.node}' (If)"
        cond = np.asarray(self.host_value(step.cond)).reshape(-1)
        if cond.size != 1:
            raise RuntimeShapeError(f"{label}: the condition has {cond.size} elements, expected 1")
        taken = bool(cond[0])
        self.branches[branch_key(step)] = taken
        block, results = (step.then_body, step.then_results) if taken else (step.else_body, step.else_results)
        self.run(block)
        for result, out in zip(results, step.outputs):
            if out < 0:
                continue
            self.shape[out] = self.shape_of(result)
            if result in self.sval:
                self.sval[out] = self.sval[result]

    def op(self, step, host: bool) -> None:
        domain, op_type = split_op_key(step.op)
        op = lookup(domain, op_type)
        label = self.where = f"node '{step.node}' ({op_type})"
        if op is None or op.shape_rule is None:
            raise DataDependent(f"{label}: no shape rule")
        symbolic = getattr(op.shape_rule, "symbolic", False)
        types, vals = [], []
        for pos, vid in enumerate(step.inputs):
            if vid < 0 or (self.values[vid].kind in ("input", "weight") and vid not in self.shape):
                types.append(None)
                vals.append(None)
                continue
            spec = self.values[vid]
            shape = self.shape_of(vid)
            if not symbolic:
                shape = tuple(_pin(d) for d in shape)
            types.append(TensorType(elem_type_of(np.dtype(spec.dtype)), shape))
            if pos in op.host_inputs or spec.kind == "constant":
                v = self.host_value(vid)
                vals.append(v if symbolic else _concrete(v, spec.dtype))
            else:
                vals.append(None)
        try:
            result = op.shape_rule(types, vals, step.attributes, len(step.outputs))
        except HipepError as e:
            raise type(e)(f"{label}: {e}") from None
        except (ValueError, IndexError, TypeError) as e:
            raise RuntimeShapeError(f"{label}: {e}") from None
        for j, vid in enumerate(step.outputs):
            if vid < 0:
                continue
            t = result[j] if j < len(result) else None
            dims = None if t is None else t.shape
            if dims is None or not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) and value(d) >= 0
                                       for d in dims):
                ins = ", ".join("None" if t_ is None else str(_plain_type(t_)) for t_ in types)
                raise RuntimeShapeError(f"{label}: the shape rule gave output {j} "
                                        f"{'no type' if t is None else _plain_type(t)}, not a static shape, for "
                                        f"inputs ({ins})")
            self.shape[vid] = tuple(d if isinstance(d, SymInt) else int(d) for d in dims)
            check_bytes(label, self.values[vid], self.shape[vid])
            check_static(label, self.values[vid], self.shape[vid])
        if host or op_type in TRACKED_ON_DEVICE:
            # A launch that only moves or re-types known integers (the copy of an input's shape
            # operand into host-visible memory) has values the host knows without reading them.
            self.host_values(step, op, op_type, label, host)
            if host:
                self.note_integers(step)
            elif op_type in _MOVING and any(vid >= 0 and vid not in self.sval for vid in step.outputs):
                # A move of a float or bool value (the plan's copy of an input into host-visible
                # memory, where the host reads it): followed where a rule reads the result, which
                # pins the input; a move nothing reads leaves the program free of its values.
                for vid in step.outputs:
                    if vid >= 0:
                        self.pending[vid] = (step, op, op_type, label, True)
        elif self._small_integers(step):
            # Other integer arithmetic on the device (CenterCropPad's Slice bounds from Shape(x)
            # and a small integer input): its values follow on the host too, but only a rule
            # that reads them asks (evaluating them pins their inputs with guards).
            for vid in step.outputs:
                if vid >= 0:
                    self.pending[vid] = (step, op, op_type, label, False)

    def note_integers(self, step) -> None:
        """Records a host step's results as expressions (`ShapeProgram.host_values`) where every
        result is an integer tensor whose elements all follow from the symbols."""
        found = {}
        for vid in step.outputs:
            if vid < 0:
                continue
            sv = self.sval.get(vid)
            if np.dtype(self.values[vid].dtype).kind not in _INT_KINDS or not isinstance(sv, np.ndarray) \
                    or sv.dtype != object:
                return
            flat = sv.reshape(-1).tolist()
            if not all(isinstance(x, (int, SymInt)) and not isinstance(x, bool) for x in flat):
                return
            found[vid] = tuple(expr_of(x) for x in flat)
        self.folded.update(found)

    def _elements(self, vid: int) -> int:
        n = 1
        for d in self.shape[vid]:
            n *= value(d)
        return n

    def _small_integers(self, step) -> bool:
        """Whether every result of `step` is an integer tensor of at most MAX_READ_ELEMENTS."""
        outs = [vid for vid in step.outputs if vid >= 0]
        for vid in outs:
            if np.dtype(self.values[vid].dtype).kind not in _INT_KINDS or self._elements(vid) > MAX_READ_ELEMENTS:
                return False
        return bool(outs)

    def host_values(self, step, op, op_type: str, label: str, host: bool = True, pin: bool = False) -> None:
        """The symbolic values of a host step's outputs (shape arithmetic), where they follow.
        `pin`: a launch that only moves values, evaluated because a rule reads its result: float
        and bool inputs are pinned and moved as they are."""
        outs = [vid for vid in step.outputs if vid >= 0]
        if not outs or any(self._elements(vid) > MAX_SYMBOLIC_ELEMENTS for vid in outs):
            return
        ins = []
        for pos, vid in enumerate(step.inputs):
            if vid < 0:
                ins.append(None)
            elif pos in op.extent_only_inputs:
                ins.append(None)  # only its extents matter
            else:
                try:
                    v = self.host_value(vid, pin=pin)
                except DataDependent:
                    return  # computed from device data: known after a sync only (no rule read it yet)
                if not host and not pin and v is not None and v.dtype != object:
                    # a device op on plain data: its values are the device's business (and the
                    # inputs after this one are not read, which would add symbols and guards)
                    return
                ins.append(v)
        try:
            svals = _symbolic_host(op_type, op, step, ins, self.shape, self.values)
        except Exception as e:  # the run itself reports the real error with its message
            raise RuntimeShapeError(f"{label}: {e}") from None
        for vid, sv in zip(step.outputs, svals):
            if vid >= 0 and sv is not None:
                self.sval[vid] = sv


def _plain_type(t):
    if t.shape is None:
        return t
    return TensorType(t.elem_type, tuple(None if d is None else value(d) for d in t.shape), t.kind)


def _objects(a: np.ndarray) -> np.ndarray:
    out = np.empty(a.shape, dtype=object)
    flat = out.reshape(-1)
    for k, v in enumerate(a.reshape(-1).tolist()):
        flat[k] = v
    return out


def _pin(d):
    return d.pin() if isinstance(d, SymInt) else d


def _concrete(v, dtype):
    """A host value as plain numbers (pinning any symbolic element)."""
    if v is None:
        return None
    if isinstance(v, np.ndarray) and v.dtype == object:
        return np.array([_pin(x) for x in v.reshape(-1)], dtype=dtype).reshape(v.shape)
    return v


def _symbolic_host(op_type, op, step, ins, shape_table, values):
    """The output values of host op `op_type` as object arrays (SymInt elements where they follow
    from symbols), or plain values computed by the reference with pinned inputs."""
    out_ids = step.outputs
    if op_type == "Shape":
        dims = shape_table[step.inputs[0]]
        start = int(step.attributes.get("start", 0) or 0)
        end = step.attributes.get("end")
        sel = list(dims[start:] if end is None else dims[start:int(end)])
        out = np.empty(len(sel), dtype=object)
        for k, d in enumerate(sel):
            out[k] = d
        return [out]
    if op_type == "Size":
        n = 1
        for d in shape_table[step.inputs[0]]:
            n = n * d
        out = np.empty((), dtype=object)
        out[()] = n
        return [out]
    if op_type == "Cast" and ins[0] is not None and ins[0].dtype == object:
        to = values[out_ids[0]].dtype
        if np.dtype(to).kind in _INT_KINDS:
            return [ins[0].copy()]
    if op_type in ("Add", "Sub", "Mul") and all(x is not None and x.dtype == object for x in ins):
        fn = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply}[op_type]
        return [np.asarray(fn(ins[0], ins[1]), dtype=object)]
    if op_type in _COMPARISONS and all(x is not None and x.dtype == object for x in ins):
        return [np.asarray(_COMPARISONS[op_type](ins[0], ins[1], dtype=object), dtype=bool)]
    if op_type in _MOVING and all(x is not None for x in ins[:1]):
        moving = _MOVING[op_type] or tuple(range(len(ins)))
        if all(ins[p] is not None and ins[p].dtype == object for p in moving if p < len(ins)):
            return _moved(op, step, ins, moving, values)
    # anything else: the reference on plain values (symbolic inputs pinned)
    plain = [None if x is None else _concrete(x, values[v].dtype) for x, v in zip(ins, step.inputs)]
    if any(x is None for x, v in zip(plain, step.inputs) if v >= 0):
        return [None] * len(out_ids)
    results = op.reference(plain, step.attributes)
    return [_objects(np.asarray(r)) if np.asarray(r).dtype.kind in _INT_KINDS else np.asarray(r) for r in results]


def _moved(op, step, ins, moving, values):
    """Runs the reference on arrays of element indices, then picks the symbolic elements."""
    pool, proxies, offset = [], [], 0
    for pos, x in enumerate(ins):
        if pos in moving and x is not None:
            pool.extend(x.reshape(-1).tolist())
            proxies.append(np.arange(offset, offset + x.size, dtype=np.int64).reshape(x.shape))
            offset += x.size
        else:
            proxies.append(None if x is None else _concrete(x, values[step.inputs[pos]].dtype))
    results = op.reference(proxies, step.attributes)
    outs = []
    for r in results:
        r = np.asarray(r)
        o = np.empty(r.shape, dtype=object)
        of = o.reshape(-1)
        for k, idx in enumerate(r.reshape(-1).tolist()):
            of[k] = pool[idx]
        outs.append(o)
    return outs


def trace_shapes(plan: Plan, inputs, constants: dict[int, np.ndarray]) -> ShapeProgram:
    """The shape program of `plan` for runs shaped like `inputs` (arrays or None per plan input).
    Raises DataDependent when shapes need device values, RuntimeShapeError on a mismatch."""
    tracer = _Tracer(plan, inputs, constants)
    with Trace() as trace:
        ranks = tracer.bind()
        tracer.run(plan.steps)
    shapes = {vid: tuple(expr_of(d) for d in dims) for vid, dims in tracer.shape.items()}
    return ShapeProgram(ranks=ranks, shapes=shapes, guards=dict(trace.guards), reads=tuple(sorted(tracer.reads)),
                        pins=tracer.pins, branches=tracer.branches, host_values=tracer.folded)
