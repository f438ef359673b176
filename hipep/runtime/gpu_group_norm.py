"""GPU bindings of GroupNormalization, InstanceNormalization and BatchNormalization: kernels/group_norm.hip,
one row per (image, group) (a channel for the instance norm; every image's channel for BatchNormalization
in training mode), statistics in f32; BatchNormalization in inference is a generated pointwise kernel
(gpu_bindings_pointwise.batch_norm_expression). Registered in hipep.runtime.gpu_kernels' table on
import."""
from __future__ import annotations

import ctypes

from ..errors import HipepError
from .gpu_binding_core import Arg, KernelOp, NoKernel, _binding, _prod, ptr
from .gpu_bindings_pointwise import batch_norm_expression, expression_ops

# kernels/group_norm.hip's HIPEP_NORM_*
INSTANCE, GROUP18, GROUP21 = 0, 1, 2
_NORM_DT = {"float32": "f32", "float16": "f16"}


class BatchNormTrainArgs(ctypes.Structure):
    _fields_ = [("channels", ctypes.c_longlong), ("images", ctypes.c_longlong), ("spatial", ctypes.c_longlong),
                ("eps", ctypes.c_float), ("momentum", ctypes.c_float)]


class GroupNormArgs(ctypes.Structure):
    _fields_ = [("rows", ctypes.c_longlong), ("len", ctypes.c_longlong), ("spatial", ctypes.c_longlong),
                ("cpg", ctypes.c_longlong), ("groups", ctypes.c_longlong), ("eps", ctypes.c_float),
                ("mode", ctypes.c_int)]


def _row_config(rows: int, words: int, target) -> tuple[tuple, tuple]:
    # Looked up on gpu_kernels at each call, as the other row kernels' bindings do.
    from . import gpu_kernels

    return gpu_kernels.row_config(rows, words, target)


def _norm_check(min_rank: int):
    def check(attrs, dtypes, shapes, values):
        dtypes = list(dtypes or [])
        if not dtypes or any(d not in _NORM_DT for d in dtypes[:3] if d):
            return f"element types {dtypes}"
        if int(attrs.get("stash_type", 1)) != 1:
            return f"stash_type={attrs.get('stash_type')} (statistics in f32 only)"
        x = shapes[0] if shapes else None
        if x is not None and len(x) < min_rank:
            return f"an input of rank {len(x)} (at least {min_rank})"
        return None
    return check


def _norm_ops(x, scale, bias, y, groups: int, mode: int, eps: float, target) -> list:
    dt = _NORM_DT.get(x.dtype.name)
    if dt is None:
        raise NoKernel(f"a group norm on {x.dtype.name}")
    n, c = int(x.shape[0]), int(x.shape[1])
    spatial = _prod(x.shape[2:])
    rows, length = n * groups, (c // groups) * spatial
    if rows * length == 0:
        return []
    grid, block = _row_config(rows, length, target)
    args = GroupNormArgs(rows, length, spatial, c // groups, groups, eps, mode)
    return [KernelOp(f"hipep_group_norm_{dt}", grid, block, [ptr(x), ptr(scale), ptr(bias), ptr(y), args],
                     module="group_norm")]


@_binding("::GroupNormalization", check=_norm_check(2), modules=("group_norm",))
def _group_norm_bind(ins, outs, attrs, target):
    x, scale, bias = ins[:3]
    y = outs[0]
    if y is None:
        return []
    if x.ndim < 2:
        raise HipepError(f"GroupNormalization: X must have rank >= 2, got shape {list(x.shape)}")
    c, g = int(x.shape[1]), int(attrs["num_groups"])
    if g <= 0 or c % g:
        raise HipepError(f"GroupNormalization: num_groups={g} does not divide the {c} channels of {list(x.shape)}")
    if int(attrs.get("stash_type", 1)) != 1:
        raise NoKernel(f"GroupNormalization with stash_type={attrs.get('stash_type')}")
    if scale.shape != bias.shape or tuple(scale.shape) not in ((c,), (g,)):
        raise HipepError(f"GroupNormalization: scale and bias must have shape [{c}] or [{g}], got "
                         f"{list(scale.shape)} and {list(bias.shape)}")
    # As the registry's reference decides: one scale per group (opset 18) where they hold num_groups
    # values and that differs from the channel count, else one per channel (opset 21).
    mode = GROUP18 if tuple(scale.shape) == (g,) and g != c else GROUP21
    return _norm_ops(x, scale, bias, y, g, mode, float(attrs.get("epsilon", 1e-5)), target)


@_binding("::InstanceNormalization", check=_norm_check(3), modules=("group_norm",))
def _instance_norm_bind(ins, outs, attrs, target):
    x, scale, bias = ins[:3]
    y = outs[0]
    if y is None:
        return []
    if x.ndim < 3:
        raise HipepError(f"InstanceNormalization: X must have rank >= 3, got shape {list(x.shape)}")
    c = int(x.shape[1])
    for what, p in (("scale", scale), ("B", bias)):
        if tuple(p.shape) != (c,):
            raise HipepError(f"InstanceNormalization: {what} must have shape [{c}], got {list(p.shape)}")
    return _norm_ops(x, scale, bias, y, c, INSTANCE, float(attrs.get("epsilon", 1e-5)), target)


# ---- BatchNormalization ---------------------------------------------------------------------------

_BN_PARAMS = ("scale", "B", "input_mean", "input_var")


def _batch_norm_check(attrs, dtypes, shapes, values):
    if any(d not in _NORM_DT for d in dtypes[:5] if d):
        return f"element types {list(dtypes[:5])} (f32 and f16 have a kernel)"
    return None


@_binding("::BatchNormalization", check=_batch_norm_check, modules=("group_norm",))
def _batch_norm_bind(ins, outs, attrs, target):
    x = ins[0]
    if x.ndim < 2:
        raise HipepError(f"BatchNormalization: X must have rank >= 2, got shape {list(x.shape)}")
    c = int(x.shape[1])
    for what, a in zip(_BN_PARAMS, ins[1:5]):
        if a is None or a.size != c:
            raise HipepError(f"BatchNormalization: {what} must hold X's {c} channels, got shape "
                             f"{None if a is None else list(a.shape)}")
    eps = float(attrs.get("epsilon", 1e-5))
    if int(attrs.get("training_mode", 0)):
        return _batch_norm_train_ops(ins[:5], (list(outs) + [None] * 3)[:3], eps,
                                     float(attrs.get("momentum", 0.9)), target)
    params = [Arg(a.ptr, (c,) + (1,) * (x.ndim - 2), a.dtype) for a in ins[1:5]]
    expr = batch_norm_expression([a.dtype.name for a in [x] + params], eps)
    return expression_ops(expr, [x] + params, outs[:1], target, "BatchNormalization")


def _batch_norm_train_ops(ins, outs, eps: float, momentum: float, target) -> list:
    """The batch's statistics, Y and the running statistics in one launch: a row of threads per channel."""
    x, scale, bias, mean, var = ins
    y, running_mean, running_var = outs
    n, c = int(x.shape[0]), int(x.shape[1])
    spatial = _prod(x.shape[2:])
    tags = "_".join(_NORM_DT[a.dtype.name] for a in (x, scale, mean))
    grid, block = _row_config(c, n * spatial, target)
    args = BatchNormTrainArgs(c, n, spatial, eps, momentum)
    written = [ptr(o) for o in (y, running_mean, running_var)]  # None (nobody reads it): a null pointer
    return [KernelOp(f"hipep_batch_norm_train_{tags}", grid, block,
                     [ptr(x), ptr(scale), ptr(bias), ptr(mean), ptr(var)] + written + [args],
                     module="group_norm")]
