"""Detection ops: NonMaxSuppression (opsets 10 and 11), as ONNX Runtime's CPU kernel computes it.

Per batch entry and class, the boxes whose score passes score_threshold (strictly above it, where
given) are taken in order of score (ties: the lower box index first), and each is selected unless
its IoU with a box already selected for that class exceeds iou_threshold, until
max_output_boxes_per_class are selected (none where it is absent or not positive). Coordinates and
IoU in f32, ORT's steps: corners [y1, x1, y2, x2] in either order (center_point_box 0), or
[x_center, y_center, width, height] (1); boxes of zero or negative area, or not overlapping,
never suppress. The output's length depends on the values: every input is a host input, so the
shape rule runs `select_boxes` on them and sizes the output; on a GPU kernels/nms.hip then selects
on the device with the same order and f32 arithmetic (hipep.runtime.gpu_detection).
"""
from __future__ import annotations

import numpy as np

from ..errors import RuntimeShapeError
from ._common import at, kernel, known_value, result, shape_of, shape_rule, tensor_type
from .registry import F32, I64, OpDef, register

NMS = "NonMaxSuppression"


def _scalar(value, what: str, dtype, default):
    if value is None:
        return default
    v = np.asarray(value)
    if v.size != 1:
        raise RuntimeShapeError(f"{NMS}: {what} must hold one value, got shape {list(v.shape)}")
    return dtype(v.reshape(-1)[0])


def check_shapes(boxes, scores) -> None:
    """RuntimeShapeError where the extents of boxes and scores (None: unknown) are not
    [num_batches, spatial_dimension, 4] and [num_batches, num_classes, spatial_dimension]."""
    if boxes is not None and (len(boxes) != 3 or boxes[2] not in (None, 4)):
        raise RuntimeShapeError(f"{NMS}: boxes must be [num_batches, spatial_dimension, 4], got {list(boxes)}")
    if scores is not None and len(scores) != 3:
        raise RuntimeShapeError(f"{NMS}: scores must be [num_batches, num_classes, spatial_dimension], got "
                                f"{list(scores)}")
    if boxes is not None and scores is not None:
        for what, b, s in (("num_batches", boxes[0], scores[0]), ("spatial_dimension", boxes[1], scores[2])):
            if None not in (b, s) and b != s:
                raise RuntimeShapeError(f"{NMS}: boxes {list(boxes)} and scores {list(scores)} disagree on {what}")


def _extents(box: np.ndarray, center: bool):
    """(x_min, x_max, y_min, y_max) of a box, in f32 as ORT computes them."""
    if center:
        half_w, half_h = box[2] / np.float32(2), box[3] / np.float32(2)
        return box[0] - half_w, box[0] + half_w, box[1] - half_h, box[1] + half_h
    return min(box[1], box[3]), max(box[1], box[3]), min(box[0], box[2]), max(box[0], box[2])


def _suppresses(a: np.ndarray, b: np.ndarray, center: bool, iou_threshold: np.float32) -> bool:
    ax0, ax1, ay0, ay1 = _extents(a, center)
    bx0, bx1, by0, by1 = _extents(b, center)
    ix0, ix1 = max(ax0, bx0), min(ax1, bx1)
    if ix1 <= ix0:
        return False
    iy0, iy1 = max(ay0, by0), min(ay1, by1)
    if iy1 <= iy0:
        return False
    inter = (ix1 - ix0) * (iy1 - iy0)
    area_a, area_b = (ax1 - ax0) * (ay1 - ay0), (bx1 - bx0) * (by1 - by0)
    union = area_a + area_b - inter
    if inter <= 0 or area_a <= 0 or area_b <= 0 or union <= 0:
        return False
    return bool(inter / union > iou_threshold)


def select_boxes(boxes, scores, max_out, iou_threshold, score_threshold, center: bool) -> np.ndarray:
    """The selected [batch, class, box] triples, [n, 3] int64."""
    check_shapes(boxes.shape, scores.shape)
    limit = _scalar(max_out, "max_output_boxes_per_class", int, 0)
    iou = _scalar(iou_threshold, "iou_threshold", np.float32, np.float32(0))
    if not 0 <= iou <= 1:
        raise RuntimeShapeError(f"{NMS}: iou_threshold must be within [0, 1], got {iou}")
    floor = None if score_threshold is None else _scalar(score_threshold, "score_threshold", np.float32, None)
    boxes, scores = boxes.astype(np.float32), scores.astype(np.float32)
    out = []
    if limit > 0:
        for b in range(scores.shape[0]):
            for c in range(scores.shape[1]):
                s = scores[b, c]
                order = np.argsort(-s, kind="stable")
                if floor is not None:
                    order = order[s[order] > floor]
                kept: list[int] = []
                for i in order:
                    if len(kept) >= limit:
                        break
                    if not any(_suppresses(boxes[b, k], boxes[b, i], center, iou) for k in kept):
                        kept.append(int(i))
                        out.append((b, c, int(i)))
    return np.array(out, np.int64).reshape(-1, 3)


@kernel(NMS)
def _nms(inputs, attrs):
    return [result(select_boxes(inputs[0], inputs[1], at(inputs, 2), at(inputs, 3), at(inputs, 4),
                                bool(attrs.get("center_point_box", 0))), np.int64)]


@shape_rule(NMS)
def _nms_shape(types, values, attrs, num_outputs):
    check_shapes(shape_of(types[0]), shape_of(types[1]))
    # The count depends on the values: every input is a host input, so at run time they are here.
    known = [known_value(types, values, i) for i in range(len(types))]
    if known[0] is None or known[1] is None or any(at(types, i) is not None and known[i] is None
                                                   for i in range(2, len(types))):
        return [tensor_type(I64, (None, 3))]
    picked = select_boxes(known[0], known[1], *(at(known, i) for i in (2, 3, 4)),
                          bool(attrs.get("center_point_box", 0)))
    return [tensor_type(I64, (len(picked), 3))]


def _claim_nms(node, graph, attrs):
    if int(attrs.get("center_point_box", 0)) not in (0, 1):
        return f"attribute center_point_box={attrs['center_point_box']} (0 or 1)"
    return None


register(OpDef(NMS, (10, 11), ("F", "F", "I", "F", "F"), ("I",),
               {"F": frozenset({F32}), "I": frozenset({I64})}, _nms, attributes={"center_point_box": 0},
               claim=_claim_nms, shape_rule=_nms_shape, host_inputs=(0, 1, 2, 3, 4), min_inputs=2))
