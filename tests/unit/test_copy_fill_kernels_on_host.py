"""kernels/copy.hip's copy that fills outside its source runs on the CPU for the ops built on it:
Pad's constant mode (growing and cropping axes, constant_value from device memory, the attribute
form before opset 11), Trilu, ConstantOfShape and Dropout's mask. g++ compiles the unchanged
kernel source against the host stand-in for the CUDA headers; the launches the bindings give run
over host memory and are compared with the registry's references. Skipped without g++."""
from __future__ import annotations

import ctypes
import shutil

import numpy as np
import pytest

from hipep.ops.registry import OUTPUT_COUNT, SINCE_VERSION, lookup
from hipep.runtime import gpu_kernels as gk

from unit.host_kernels import HostMemory, compile_module, launch, run_on_host

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")


@pytest.fixture(scope="module")
def libraries(tmp_path_factory):
    return {"warp": 32, "copy": compile_module(tmp_path_factory.mktemp("copy_fill"), "copy", 32)}


def run(libs, op_key, inputs, attrs, **kw):
    return run_on_host(libs, op_key, inputs, attrs, **kw)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int64, np.uint8, np.bool_])
@pytest.mark.parametrize("shape,pads,value", [((3, 4), [1, 2, 0, 1], 1.5), ((2, 3, 4), [0, 1, 1, 0, 0, 2], None),
                                              ((5, 6), [-1, 2, 1, -2], 7), ((4,), [3, 0], 0)])
def test_pad_constant_mode(libraries, dtype, shape, pads, value):
    """Pad's constant mode, growing and cropping axes; constant_value read from device memory."""
    rng = np.random.default_rng(5)
    x = (rng.uniform(0, 9, shape)).astype(dtype)
    ins = [x, np.array(pads, np.int64)] + ([] if value is None else [np.array(value).astype(dtype)])
    (got,), (want,), ops = run(libraries, "::Pad", ins, {"mode": "constant"})
    assert [o.entry for o in ops] == [f"hipep_copy_fill_w{x.dtype.itemsize}"]
    np.testing.assert_array_equal(got, want)


def test_pad_with_attributes_as_before_opset_11(libraries):
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    (got,), (want,), _ = run(libraries, "::Pad", [x], {"mode": "constant", "pads": [0, 1, 2, 0], "value": -3.0})
    np.testing.assert_array_equal(got, want)
    assert got[0, 0] == -3.0 and got.shape == (5, 5)


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("shape,k", [((5, 7), 0), ((2, 6, 4), 2), ((3, 4, 4), -1), ((4, 9), 12), ((6, 3), -7)])
def test_trilu(libraries, upper, shape, k):
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape) + 1
    (got,), (want,), ops = run(libraries, "::Trilu", [x, np.array(k, np.int64)], {"upper": upper})
    assert [o.entry for o in ops] == ["hipep_copy_fill_w4"]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("value", [None, np.array([2.5], np.float32), np.array([7], np.int64), np.array([True]),
                                   np.array([-3], np.int8), np.array([0.25], np.float16)])
def test_constant_of_shape(libraries, value):
    attrs = {} if value is None else {"value": value}
    (got,), (want,), _ = run(libraries, "::ConstantOfShape", [np.array([2, 3, 5], np.int64)], attrs)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("version", [7, 10, 13])
def test_dropout_in_inference(libraries, version):
    """y is x (a copy); the mask is what ORT's CPU kernel writes for the opset (zeros of x's type,
    false, then true)."""
    x = np.random.default_rng(7).uniform(-1, 1, (3, 5)).astype(np.float32)
    op = lookup("", "Dropout")
    attrs = {"ratio": 0.5, "seed": None, OUTPUT_COUNT: 2, SINCE_VERSION: version}
    y_want, mask_want = op.reference([x], attrs)
    mem = HostMemory()
    (xa, _), (ya, y) = mem.put(x), mem.put(np.zeros_like(y_want))
    ma, mask = mem.put(np.full(mask_want.shape, 7, mask_want.dtype))
    outs = [gk.Arg(ya.ptr, ya.shape, ya.dtype), gk.Arg(ma.ptr, ma.shape, ma.dtype)]
    ops = gk.binding_for("::Dropout").bind([xa], outs, attrs, gk.Target(warp_size=32, scratch=lambda n: 0))
    for o in ops:
        if isinstance(o, gk.CopyOp):
            ctypes.memmove(o.dst, o.src, o.nbytes)
        else:
            launch(libraries[o.module], o)
    np.testing.assert_array_equal(y, y_want)
    assert mask.dtype == mask_want.dtype
    np.testing.assert_array_equal(mask, mask_want)


def test_trilu_needs_a_constant_k():
    assert "not a constant" in gk.kernel_reason("::Trilu", {"upper": 1}, ["float32", "int64"], [(4, 4), ()],
                                                [None, None])
    assert gk.kernel_reason("::Trilu", {"upper": 1}, ["float32", "int64"], [(4, 4), ()], [None, np.array(1)]) is None
    assert gk.kernel_reason("::Trilu", {"upper": 0}, ["float32"], [(4, 4)]) is None


def test_pad_other_modes_have_no_kernel():
    why = gk.kernel_reason("::Pad", {"mode": "reflect"}, ["float32", "int64"], [(3, 4), (4,)])
    assert why is not None and "constant only" in why
