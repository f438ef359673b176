"""kernels/copy.hip's copies that fill or map outside their source run on the CPU for the ops built
on them: Pad in every mode (constant: growing and cropping axes, constant_value from device memory,
the attribute form before opset 11; edge, reflect and wrap: crops with growth, pads wider than the
axis, axes that pass through as wide words), Trilu (k read from device memory: omitted, past the
matrix, at int64's ends), ConstantOfShape and Dropout's mask. g++ compiles the unchanged kernel
source against the host stand-in for the CUDA headers; the launches the bindings give run over
host memory and are compared with the registry's references (bit for bit: these are copies).
Skipped without g++; the entry points' parameters are checked against NVRTC's build."""
from __future__ import annotations

import ctypes
import shutil

import numpy as np
import pytest

from hipep.errors import HipepError
from hipep.ops.registry import OUTPUT_COUNT, SINCE_VERSION, lookup
from hipep.runtime import gpu_kernels as gk

from helpers import needs_nvrtc
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
@pytest.mark.parametrize("shape,k", [((5, 7), 0), ((2, 6, 4), 2), ((3, 4, 4), -1), ((4, 9), 12), ((6, 3), -7),
                                     ((2, 1, 5), 1), ((3, 1), 0), ((5, 7), None)])
def test_trilu(libraries, upper, shape, k):
    """k read by the kernel (None: the input left out, k = 0), inside and past the matrix."""
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape) + 1
    ins = [x] if k is None else [x, np.array(k, np.int64)]
    (got,), (want,), ops = run(libraries, "::Trilu", ins, {"upper": upper})
    assert [o.entry for o in ops] == ["hipep_trilu_w4"]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", [np.float16, np.int64, np.int32, np.uint8, np.bool_])
def test_trilu_element_types(libraries, dtype):
    x = np.random.default_rng(3).integers(1, 9, (2, 5, 6)).astype(dtype)
    for upper, k in ((1, -1), (0, 2)):
        (got,), (want,), ops = run(libraries, "::Trilu", [x, np.array([k], np.int64)], {"upper": upper})
        assert [o.entry for o in ops] == [f"hipep_trilu_w{x.dtype.itemsize}"]
        np.testing.assert_array_equal(got, want)


_I64 = np.iinfo(np.int64)


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [_I64.max, _I64.max - 1, _I64.min, _I64.min + 1, 2 ** 62, -(2 ** 62)])
def test_trilu_k_at_the_ends_of_int64(libraries, upper, k):
    """Keeps what ONNX Runtime's CPU kernel keeps for any k (column - row compared with k, which
    cannot overflow): everything or nothing here. numpy's tril/triu, the CPU reference, fail at
    some of these, so the expectation is written out."""
    x = np.arange(1, 13, dtype=np.float32).reshape(3, 4)
    mem = HostMemory()
    (xa, _), (ka, _) = mem.put(x), mem.put(np.array(k, np.int64))
    ya, y = mem.put(np.full(x.shape, np.nan, np.float32))
    ops = gk.binding_for("::Trilu").bind([xa, ka], [gk.Arg(ya.ptr, ya.shape, ya.dtype)], {"upper": upper},
                                         gk.Target(warp_size=32, scratch=lambda n: 0))
    for o in ops:
        launch(libraries[o.module], o)
    rows, cols = np.indices(x.shape)
    keep = (cols - rows >= k) if upper else (cols - rows <= k)
    np.testing.assert_array_equal(y, np.where(keep, x, 0))
    assert keep.all() or not keep.any()


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


def test_trilu_takes_a_k_known_only_at_run_time():
    assert gk.kernel_reason("::Trilu", {"upper": 1}, ["float32", "int64"], [(4, 4), ()], [None, None]) is None
    assert gk.kernel_reason("::Trilu", {"upper": 1}, ["float32", "int64"], [(4, 4), ()], [None, np.array(1)]) is None
    assert gk.kernel_reason("::Trilu", {"upper": 0}, ["float32"], [(4, 4)]) is None
    assert not gk.binding_for("::Trilu").reads_values  # bound once, k read on the device every run


def test_trilu_refuses_a_k_of_several_values():
    mem = HostMemory()
    x, k = mem.put(np.ones((3, 3), np.float32))[0], mem.put(np.array([1, 2], np.int64))[0]
    y = gk.Arg(mem.put(np.ones((3, 3), np.float32))[0].ptr, (3, 3), np.dtype(np.float32))
    with pytest.raises(HipepError, match="one value"):
        gk.binding_for("::Trilu").bind([x, k], [y], {"upper": 1}, gk.Target(warp_size=32))


# ---- Pad's edge, reflect and wrap modes ---------------------------------------------------------

PAD_MODES = [  # (shape, pads: begins then ends)
    ((3, 4), [1, 2, 2, 1]),
    ((2, 3, 5), [0, 2, 1, 1, 0, 3]),
    ((5, 6), [-1, 2, 1, -2]),           # crops, then pads what is left
    ((4, 5), [2, -1, -2, 3]),           # a crop and growth on the same axis
    ((1, 4), [2, 0, 3, 0]),             # an axis of one element
    ((2, 3, 8), [0, 1, 0, 0, 2, 0]),    # the last axis passes through: wide words
    ((6,), [3, 4]),
    ((2, 2, 3, 4), [0, 0, 1, 2, 0, 0, 2, 1]),
]


def _accepted(mode, shape, pads) -> bool:
    """Whether ONNX Runtime pads `shape` by `pads` in `mode` (reflect's pads are at most the kept
    extent minus one; refusals are tested below)."""
    from hipep.ops.dims import _pad_check as pad_extents, _pad_widths

    try:
        pad_extents("Pad", list(shape), _pad_widths("Pad", shape, pads, None), mode)
    except Exception:  # noqa: BLE001 - the reference's shape error
        return False
    return True


PAD_MODE_CASES = [(m, s, p) for m in ("edge", "reflect", "wrap") for s, p in PAD_MODES if _accepted(m, s, p)]


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int64, np.uint8, np.bool_])
@pytest.mark.parametrize("mode,shape,pads", PAD_MODE_CASES)
def test_pad_modes(libraries, mode, dtype, shape, pads):
    """Edge, reflect and wrap against the reference (numpy's pad of the input cropped by the
    negative pads, as ONNX Runtime pads), bit for bit."""
    x = np.random.default_rng(11).integers(0, 100, shape).astype(dtype)
    (got,), (want,), ops = run(libraries, "::Pad", [x, np.array(pads, np.int64)], {"mode": mode})
    assert {o.entry.rsplit("_", 1)[0] for o in ops} == {"hipep_pad"}
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("mode", ["edge", "reflect", "wrap"])
def test_pad_modes_equal_onnx_runtimes_cpu_ep(libraries, mode):
    """The kernel against ONNX Runtime's CPU EP itself (not only the reference): crops and growth
    on every axis of a 3-D input, wrap and edge wider than the kept extent."""
    from onnx import TensorProto as TP
    from onnx import helper

    from helpers import cpu_session, make_model, tensor

    x = np.random.default_rng(12).standard_normal((3, 4, 5)).astype(np.float32)
    pads_cases = [[1, -1, 2, 0, 2, -1], [-1, 2, -2, 1, 0, 2]]
    if mode != "reflect":
        pads_cases.append([4, 0, 7, 5, 9, -2])
    for pads in pads_cases:
        model = make_model([helper.make_node("Pad", ["x", "pads"], ["y"], mode=mode)],
                           [tensor("x", TP.FLOAT, list(x.shape)), tensor("pads", TP.INT64, [6])],
                           [tensor("y", TP.FLOAT, None)], opset=19)
        (ort_y,) = cpu_session(model).run(None, {"x": x, "pads": np.array(pads, np.int64)})
        (got,), _, _ = run(libraries, "::Pad", [x, np.array(pads, np.int64)], {"mode": mode})
        np.testing.assert_array_equal(got, ort_y)


@pytest.mark.parametrize("mode", ["edge", "wrap"])
def test_pad_wider_than_the_axis(libraries, mode):
    """Edge and wrap pads longer than the axis (wrap goes round it several times), with crops."""
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    for pads in ([7, 9, 5, 10], [-1, 8, 6, -2], [0, 11, 0, 0]):
        (got,), (want,), _ = run(libraries, "::Pad", [x, np.array(pads, np.int64)], {"mode": mode})
        np.testing.assert_array_equal(got, want)


def test_pad_moves_axes_that_pass_through_as_wide_words(libraries):
    x = np.arange(2 * 3 * 8, dtype=np.float32).reshape(2, 3, 8)
    (got,), (want,), ops = run(libraries, "::Pad", [x, np.array([0, 2, 0, 0, 1, 0], np.int64)], {"mode": "reflect"})
    assert [o.entry for o in ops] == ["hipep_pad_w16"]
    args = ops[0].params[2]
    assert args.rank == 3 and args.dims[2] == 2  # the last axis's 8 floats are two 16-byte words
    np.testing.assert_array_equal(got, want)
    (got,), (want,), ops = run(libraries, "::Pad", [x, np.array([0, 2, 0, 0, 1, 0], np.int64)], {"mode": "edge"},
                               offsets={0: 4})
    assert [o.entry for o in ops] == ["hipep_pad_w4"]  # a source that is not 16-byte aligned
    np.testing.assert_array_equal(got, want)


def test_pad_modes_with_axes_and_before_opset_11(libraries):
    x = np.arange(2 * 3 * 5, dtype=np.float32).reshape(2, 3, 5)
    ins = [x, np.array([2, -1, 1, 3], np.int64), None, np.array([-1, 1], np.int64)]
    (got,), (want,), _ = run(libraries, "::Pad", ins, {"mode": "wrap"})
    np.testing.assert_array_equal(got, want)
    for mode in ("edge", "reflect"):
        (got,), (want,), _ = run(libraries, "::Pad", [x], {"mode": mode, "pads": [0, 1, 2, 0, 1, 2],
                                                            SINCE_VERSION: 2})
        np.testing.assert_array_equal(got, want)


def test_pad_modes_that_change_nothing_copy(libraries):
    x = np.arange(6, dtype=np.float32).reshape(1, 6)
    (got,), (want,), ops = run(libraries, "::Pad", [x, np.zeros(4, np.int64)], {"mode": "edge"})
    assert [type(o).__name__ for o in ops] == ["CopyOp"]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("mode,pads", [("reflect", [3, 0, 0, 0]), ("reflect", [0, 0, 0, 4]),
                                       ("reflect", [-2, 0, 1, 0]), ("edge", [0, -4, 0, 1])])
def test_pad_modes_refuse_what_onnx_runtime_refuses(libraries, mode, pads):
    """Reflect pads beyond the kept extent minus one; any growth of an axis cropped to nothing
    (ONNX Runtime's errors, raised when the launch is bound)."""
    x = np.ones((3, 4), np.float32)
    mem = HostMemory()
    xa, pa = mem.put(x)[0], mem.put(np.array(pads, np.int64))[0]
    y = gk.Arg(mem.put(np.zeros((8, 8), np.float32))[0].ptr, (8, 8), np.dtype(np.float32))
    with pytest.raises(HipepError, match=mode):
        gk.binding_for("::Pad").bind([xa, pa], [y], {"mode": mode}, gk.Target(warp_size=32))


def test_pad_modes_are_claimed():
    for mode in ("constant", "edge", "reflect", "wrap"):
        assert gk.kernel_reason("::Pad", {"mode": mode}, ["float32", "int64"], [(3, 4), (4,)]) is None
    assert "mode='mirror'" in gk.kernel_reason("::Pad", {"mode": "mirror"}, ["float32", "int64"], [(3, 4), (4,)])
    assert "at most 8" in gk.kernel_reason("::Pad", {"mode": "edge"}, ["float32", "int64"], [(1,) * 9, (18,)])


@needs_nvrtc
def test_new_entry_points_take_what_the_bindings_pass():
    """hipep_pad_w* and hipep_trilu_w* exist in NVRTC's sm_90 build of kernels/copy.hip and take
    parameters of the sizes the bindings pass (PadArgs, TriluArgs mirror the kernel's structs)."""
    from unit.nvrtc_ptx import param_bytes, ptx

    params = param_bytes(ptx("copy", "compute_90"))
    mem = HostMemory()
    launches = []
    for dtype, shape in ((np.uint8, (3, 5)), (np.float16, (3, 5)), (np.float32, (3, 5)), (np.int64, (3, 5)),
                         (np.float32, (2, 3, 8))):
        x = mem.put(np.zeros(shape, dtype))[0]
        rest = [0] * (len(shape) - 1)
        pads = mem.put(np.array([1] + rest + [2] + rest, np.int64))[0]  # axis 0 grows by 3, the others pass
        y_shape = (shape[0] + 3, *shape[1:])
        y = gk.Arg(mem.put(np.zeros(y_shape, dtype))[0].ptr, y_shape, np.dtype(dtype))
        launches += gk.binding_for("::Pad").bind([x, pads], [y], {"mode": "edge"}, gk.Target(warp_size=32))
        k = mem.put(np.array(1, np.int64))[0]
        out = gk.Arg(mem.put(np.zeros(shape, dtype))[0].ptr, shape, np.dtype(dtype))
        launches += gk.binding_for("::Trilu").bind([x, k], [out], {"upper": 1}, gk.Target(warp_size=32))
    entries = {op.entry for op in launches}
    assert {"hipep_pad_w1", "hipep_pad_w2", "hipep_pad_w4", "hipep_pad_w8", "hipep_pad_w16"} <= entries
    assert {"hipep_trilu_w1", "hipep_trilu_w2", "hipep_trilu_w4", "hipep_trilu_w8"} <= entries
    for op in launches:
        assert [ctypes.sizeof(p) for p in op.params] == params[op.entry], op.entry
