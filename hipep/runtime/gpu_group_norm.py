"""GPU bindings of GroupNormalization and InstanceNormalization: kernels/group_norm.hip, one row per
(image, group) (a channel for the instance norm), statistics in f32. Registered in
hipep.runtime.gpu_kernels' table on import."""
from __future__ import annotations

import ctypes

from ..errors import HipepError
from .gpu_binding_core import KernelOp, NoKernel, _binding, _prod, ptr

# kernels/group_norm.hip's HIPEP_NORM_*
INSTANCE, GROUP18, GROUP21 = 0, 1, 2
_NORM_DT = {"float32": "f32", "float16": "f16"}


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
