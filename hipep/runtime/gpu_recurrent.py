"""GPU bindings of RNN, GRU and LSTM (kernels/recurrent.hip): one launch, a block per (batch entry,
direction) looping over the entry's time steps, the state and each step's gate values in the
block's shared memory, sums in f32 (f16 inputs and outputs; the state stays f32 between steps, as
ORT's CPU kernels keep it). sequence_lens is read on the device; a length out of range is reported
for the node (fault code HIPEP_FAULT_SEQUENCE_LENGTH) and its entry computed as of length 0.

The shapes, the activations and their alpha/beta come from the registry's own rules
(hipep.ops.recurrent), so both devices read a node alike.

Registered into the kernel table (hipep.runtime.gpu_kernels) when it is imported."""
from __future__ import annotations

import ctypes

from ..errors import HipepError
from ..ops.recurrent import ACTIVATIONS, GATES, activations, dims, output_shapes
from .gpu_binding_core import KernelOp, NoKernel, _binding, ptr
from .gpu_faults import fault_param

_TYPES = {"float32": "f32", "float16": "f16"}
# A launch gets this much dynamic shared memory without the opt-in; the kernel keeps (G + 2) x
# hidden_size floats there (the state, an auxiliary row and the gate values).
SMEM_LIMIT = 48 * 1024
# Warps a block has at most: enough to keep a multiprocessor's schedulers fed on the step's
# matrix-vector products (a warp a gate row at a time), where one block per batch entry and
# direction is all the parallelism there is.
MAX_WARPS = 16


def smem_bytes(op_type: str, hidden: int) -> int:
    return 4 * (GATES[op_type] + 2) * int(hidden)


class RecurrentArgs(ctypes.Structure):
    _fields_ = [("steps", ctypes.c_longlong), ("batch", ctypes.c_longlong), ("input", ctypes.c_longlong),
                ("hidden", ctypes.c_longlong), ("directions", ctypes.c_int), ("reverse", ctypes.c_int),
                ("batch_first", ctypes.c_int), ("linear_before_reset", ctypes.c_int), ("input_forget", ctypes.c_int),
                ("has_clip", ctypes.c_int), ("clip", ctypes.c_float), ("act", (ctypes.c_int * 3) * 2),
                ("alpha", (ctypes.c_float * 3) * 2), ("beta", (ctypes.c_float * 3) * 2)]


def _check(op_type: str):
    def check(attrs, dtypes, shapes, values):
        if not dtypes or dtypes[0] not in _TYPES:
            return f"element type {dtypes[0] if dtypes else '?'}; the kernel runs f32 and f16"
        hidden = int(attrs.get("hidden_size", 0))
        if smem_bytes(op_type, hidden) > SMEM_LIMIT:
            return (f"hidden_size {hidden}: the kernel keeps {GATES[op_type] + 2} x hidden_size floats of state and "
                    f"gate values in a block's shared memory, {smem_bytes(op_type, hidden)} bytes, more than the "
                    f"{SMEM_LIMIT // 1024} KiB a launch gets")
        return None
    return check


def recurrent_args(op_type: str, ins, attrs) -> RecurrentArgs:
    """The kernel's argument struct for the launch's inputs (shapes checked by the registry's rule)."""
    seq, batch, inp, hidden, dirs = dims(op_type, attrs, [None if a is None else tuple(a.shape) for a in ins])
    acts, why = activations(op_type, attrs)
    if why is not None:
        raise NoKernel(f"{op_type}: {why}")
    a = RecurrentArgs(int(seq), int(batch), int(inp), int(hidden), dirs,
                      int(attrs.get("direction", "forward") == "reverse"), int(attrs.get("layout", 0)),
                      int(bool(attrs.get("linear_before_reset", 0))), int(bool(attrs.get("input_forget", 0))),
                      int(attrs.get("clip") is not None), float(attrs.get("clip") or 0.0))
    k = len(acts) // dirs
    for d in range(dirs):
        for j, (name, alpha, beta) in enumerate(acts[d * k:(d + 1) * k]):
            a.act[d][j], a.alpha[d][j], a.beta[d][j] = ACTIVATIONS.index(name), alpha, beta
    return a


def _bind(op_type: str):
    def bind(ins, outs, attrs, target):
        outs = list(outs) + [None] * (3 - len(outs))
        x = ins[0]
        dt = _TYPES.get(x.dtype.name)
        if dt is None:
            raise NoKernel(f"{op_type} has no kernel for element type {x.dtype.name}")
        a = recurrent_args(op_type, ins, attrs)
        want = output_shapes(a.steps, a.batch, a.hidden, a.directions, a.batch_first)
        for k, (o, shape) in enumerate(zip(outs, want)):
            if o is not None and tuple(o.shape) != shape:
                raise HipepError(f"{op_type}: output {k} of shape {list(o.shape)}, expected {list(shape)}")
        if a.batch == 0 or all(o is None for o in outs):
            return []
        if smem_bytes(op_type, a.hidden) > SMEM_LIMIT:
            raise NoKernel(_check(op_type)(attrs, [x.dtype.name], [], []))
        warps = max(1, min(MAX_WARPS, GATES[op_type] * a.hidden))
        params = [ptr(x)] + [ptr(ins[i] if i < len(ins) else None) for i in range(1, 8)]
        params += [ptr(outs[0]), ptr(outs[1]), ptr(outs[2]), a, fault_param(target, "input 4 (sequence_lens)")]
        return [KernelOp(f"hipep_{op_type.lower()}_{dt}", (a.batch, a.directions, 1), (warps * target.warp_size, 1, 1),
                         params, module="recurrent", smem=smem_bytes(op_type, a.hidden))]
    return bind


for _op in GATES:
    _binding(f"::{_op}", check=_check(_op), modules=("recurrent",))(_bind(_op))
