"""MatMulInteger and QLinearMatMul on the CUDA device (kernels/matmul_integer.hip; QLinearMatMul
requantizes its product in a generated expression) against ORT's CPU EP, exactly: every int8/uint8
pairing ORT's CPU EP runs, no, per-tensor and per-column zero points (as graph inputs and as
initializers), per-tensor and per-column B scales, broadcast batch axes, partial tiles, the extreme
values and int32 wraparound. Single-node models through hipep.InferenceSession(device="cuda"), run
three times."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

from hipep.runtime.cuda import cuda_status
from gpu_checks import check_on_cuda
from helpers import cpu_session, make_model, tensor

pytestmark = pytest.mark.gpu
_ok, _why = cuda_status(0)
if not _ok:
    pytest.skip(f"no CUDA device: {_why}", allow_module_level=True)

_ELEM = {np.dtype(np.uint8): TP.UINT8, np.dtype(np.int8): TP.INT8}
TYPES = [(np.uint8, np.uint8), (np.uint8, np.int8), (np.int8, np.uint8), (np.int8, np.int8)]


def _rand(rng, dtype, shape):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


def _model(a, b, a_zp=None, b_zp=None, b_init=False):
    """A MatMulInteger node; B and the zero points are initializers where `b_init`, else inputs."""
    names, inputs, inits, feeds = [], [], [], {}
    for name, v, init in (("a", a, False), ("b", b, b_init), ("a_zp", a_zp, b_init), ("b_zp", b_zp, b_init)):
        if v is None:
            names.append("")
            continue
        v = np.asarray(v)
        names.append(name)
        if init:
            inits.append(numpy_helper.from_array(v, name))
        else:
            inputs.append(tensor(name, _ELEM[v.dtype], list(v.shape)))
            feeds[name] = v
    while names and not names[-1]:
        names.pop()
    node = helper.make_node("MatMulInteger", names, ["y"])
    return make_model([node], inputs, [tensor("y", TP.INT32, None)], inits, opset=13), feeds


def _check(model, feeds):
    try:
        want = cpu_session(model).run(None, feeds)
    except Exception as e:  # noqa: BLE001 - a type pairing ORT's CPU EP lacks: nothing to compare with
        if "NOT_IMPLEMENTED" in str(e) or "Could not find an implementation" in str(e):
            pytest.skip(f"ORT's CPU EP does not run this MatMulInteger: {e}")
        raise
    check_on_cuda(model, feeds, TP.INT32, exact=True, want=want, claimed=True)


SHAPES = [((1, 300), (300, 200)), ((130, 257), (257, 70)), ((2, 1, 64, 96), (3, 96, 80)), ((4, 33, 40), (40, 65)),
          ((2, 3, 17, 50), (2, 3, 50, 19)), ((96,), (96, 130)), ((5, 64), (64,))]


@pytest.mark.parametrize("ta,tb", TYPES)
@pytest.mark.parametrize("a_shape,b_shape", SHAPES)
@pytest.mark.parametrize("b_init", [False, True])
def test_matmul_integer_matches_ort(ta, tb, a_shape, b_shape, b_init):
    rng = np.random.default_rng(len(a_shape) * 10 + len(b_shape))
    a, b = _rand(rng, ta, a_shape), _rand(rng, tb, b_shape)
    _check(*_model(a, b, b_init=b_init))
    # Per column: [N] for a 2-D B; ORT's CPU EP takes a batched B's only as [..., 1, N].
    b_zp_shape = () if len(b_shape) == 1 else (b_shape[-1],) if len(b_shape) == 2 else (*b_shape[:-2], 1, b_shape[-1])
    b_zp = _rand(rng, tb, b_zp_shape)
    _check(*_model(a, b, _rand(rng, ta, ()), b_zp, b_init=b_init))
    _check(*_model(a, b, None, _rand(rng, tb, (1,)), b_init=b_init))


def test_per_column_zero_points_of_every_matrix_of_b():
    rng = np.random.default_rng(7)
    a, b = _rand(rng, np.uint8, (2, 1, 40, 70)), _rand(rng, np.int8, (3, 70, 90))
    _check(*_model(a, b, np.uint8(128), _rand(rng, np.int8, (3, 1, 90)), b_init=True))


def test_extreme_values_and_wraparound():
    a = np.full((3, 1000), -128, np.int8)
    b = np.full((1000, 70), 127, np.int8)
    _check(*_model(a, b, np.int8(127), np.int8(-128)))
    k = 40000  # 255 * 255 * k passes 2**31: the int32 sums wrap
    _check(*_model(np.full((2, k), 255, np.uint8), np.full((k, 3), 255, np.uint8)))


# ---- QLinearMatMul: the same product, requantized (gpu_matmul_integer.requantize_expression) ----

QTYPES = [(np.uint8, np.uint8, np.uint8), (np.uint8, np.int8, np.uint8), (np.int8, np.int8, np.int8)]


def _qlinear_model(a, b, ty, per_column: bool, rng, b_init: bool):
    """A QLinearMatMul node: A an input; B, the scales and zero points initializers where `b_init`,
    else inputs; B's scale and zero point per column where `per_column`."""
    n, k = b.shape[-1], a.shape[-1]
    values = {"a": a, "a_scale": np.array(0.05, np.float32), "a_zp": _rand(rng, a.dtype, ()), "b": b,
              "b_scale": (rng.uniform(0.01, 0.05, n) if per_column else np.array(0.03)).astype(np.float32),
              "b_zp": _rand(rng, b.dtype, (n,) if per_column else ()),
              "y_scale": np.array(0.02 * k, np.float32), "y_zp": _rand(rng, ty, ())}
    inputs, inits, feeds = [], [], {}
    for name, v in values.items():
        if b_init and name != "a":
            inits.append(numpy_helper.from_array(v, name))
        else:
            elem = TP.FLOAT if v.dtype == np.float32 else _ELEM[v.dtype]
            inputs.append(tensor(name, elem, list(v.shape)))
            feeds[name] = v
    node = helper.make_node("QLinearMatMul", list(values), ["y"])
    return make_model([node], inputs, [tensor("y", _ELEM[np.dtype(ty)], None)], inits, opset=21), feeds


@pytest.mark.parametrize("ta,tb,ty", QTYPES)
# Per-column parameters with a batched B: ORT's CPU EP takes them only as [..., 1, N], hipep's
# reference only as [N] (the node is then left to other EPs), so that pairing is not compared.
@pytest.mark.parametrize("a_shape,b_shape,per_column", [
    ((1, 300), (300, 200), False), ((1, 300), (300, 200), True), ((130, 257), (257, 70), False),
    ((130, 257), (257, 70), True), ((2, 1, 64, 96), (3, 96, 80), False)])
@pytest.mark.parametrize("b_init", [False, True])
def test_qlinear_matmul_matches_ort(ta, tb, ty, a_shape, b_shape, per_column, b_init):
    rng = np.random.default_rng(hash((a_shape, b_shape, per_column)) % 1000)
    model, feeds = _qlinear_model(_rand(rng, ta, a_shape), _rand(rng, tb, b_shape), ty, per_column, rng, b_init)
    try:
        want = cpu_session(model).run(None, feeds)
    except Exception as e:  # noqa: BLE001 - a combination ORT's CPU EP lacks: nothing to compare with
        if "NOT_IMPLEMENTED" in str(e) or "Could not find an implementation" in str(e):
            pytest.skip(f"ORT's CPU EP does not run this QLinearMatMul: {e}")
        raise
    check_on_cuda(model, feeds, _ELEM[np.dtype(ty)], exact=True, want=want, claimed=True)
