"""GPU binding of NonMaxSuppression (opsets 10 and 11): kernels/nms.hip.

Registered into the kernel table (hipep.runtime.gpu_kernels) when it is imported.

The output's length depends on the values, so hipep claims the op on a GPU only where the host
knows every input before any launch (the registry marks them all host inputs; hipep.partition
says which values qualify): the shape program runs the registry's reference on them and sizes the
[n, 3] int64 output, whose rows the binding takes as the count. The kernel still selects on the
device, from the device's copies of the inputs, in the reference's order and f32 arithmetic, so
both devices select the same boxes: one block walks the (batch, class) pairs, ranks a pair's
candidates by score in parallel, then keeps them greedily, each checked against the boxes kept
before it by the block's threads together.

The kernel keeps two int32 a box in the launch's shared memory (the candidates' order and the kept
boxes): a spatial dimension past MAX_BOXES is left to other EPs, with the reason.
"""
from __future__ import annotations

import ctypes

from ..errors import HipepError
from ..ops.detection import NMS, check_shapes
from .gpu_binding_core import KernelOp, NoKernel, _binding, ptr

MODULE = "nms"
# Dynamic shared memory a launch gets without the opt-in; the kernel keeps BYTES_PER_BOX there a box.
SMEM_LIMIT = 48 * 1024
BYTES_PER_BOX = 8
MAX_BOXES = SMEM_LIMIT // BYTES_PER_BOX
# Threads of the one block: the ranks are a box's count over the pair's boxes, the greedy pass
# waits at a barrier per candidate; more threads speed the first and slow the second.
MAX_THREADS = 256


class NmsArgs(ctypes.Structure):
    _fields_ = [("batches", ctypes.c_longlong), ("classes", ctypes.c_longlong), ("boxes", ctypes.c_longlong),
                ("count", ctypes.c_longlong), ("center", ctypes.c_int)]


def _too_many_boxes(boxes: int) -> str:
    return (f"spatial_dimension {boxes}: the kernel keeps {BYTES_PER_BOX} bytes a box in a block's shared memory, "
            f"at most {MAX_BOXES} boxes in the {SMEM_LIMIT // 1024} KiB a launch gets")


def _check(attrs, dtypes, shapes, values):
    boxes = shapes[0] if shapes else None
    if boxes is not None and len(boxes) == 3 and boxes[1] is not None and int(boxes[1]) > MAX_BOXES:
        return _too_many_boxes(int(boxes[1]))
    return None


@_binding(f"::{NMS}", check=_check, modules=(MODULE,))
def _nms_bind(ins, outs, attrs, target):
    ins = list(ins) + [None] * (5 - len(ins))
    boxes, scores, max_out, iou, score_threshold = ins[:5]
    y = outs[0]
    check_shapes(boxes.shape, scores.shape)
    if y is None:
        return []  # nobody reads the selection: nothing to compute
    if y.ndim != 2 or int(y.shape[1]) != 3:
        raise HipepError(f"{NMS}: output of shape {list(y.shape)} (expected [n, 3])")
    count = int(y.shape[0])
    if count == 0:  # nothing selected (a limit of 0, no score above the threshold): nothing to write
        return []
    batches, classes, n = (int(d) for d in scores.shape)
    if n > MAX_BOXES:
        raise NoKernel(f"{NMS}: {_too_many_boxes(n)}")
    threads = min(MAX_THREADS, -(-n // target.warp_size) * target.warp_size)
    args = NmsArgs(batches, classes, n, count, int(attrs.get("center_point_box", 0)))
    return [KernelOp("hipep_nms", (1, 1, 1), (threads, 1, 1),
                     [ptr(boxes), ptr(scores), ptr(max_out), ptr(iou), ptr(score_threshold), ptr(y), args],
                     module=MODULE, smem=BYTES_PER_BOX * n)]
