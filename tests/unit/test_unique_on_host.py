"""Unique's GPU launch (kernels/unique.hip, hipep/runtime/gpu_unique.py) runs on the host stand-in
(g++ over the unchanged kernel source, the block's threads as host threads) against the registry's
reference (hipep.ops.unique.distinct, what hipep's CPU device returns) and ONNX Runtime's CPU EP:
every output bit for bit, sorted and in order of first occurrence, without an axis and along each
axis (negative ones too), every element type the registry allows, repeats, -0 beside 0, NaN (the
reference's numpy semantics: ORT's CPU kernel orders NaN with `<`, under which it is equivalent to
every number, so it is compared with the reference only), a single element, more items than the
block has threads, outputs nobody reads, and nothing to do. Skipped without g++."""
from __future__ import annotations

import shutil

import numpy as np
import pytest
from onnx import TensorProto as T, helper as h

from hipep.errors import HipepError
from hipep.runtime import gpu_kernels as gk
from hipep.runtime.gpu_unique import MAX_ELEMENTS

from helpers import cpu_session, make_model, tensor
from selection_inputs import repeated_values
from unit.host_kernels import HostMemory, compile_module, run_on_host

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")

DTYPES = [np.float32, np.float64, np.int64, np.int8]
_ELEM = {np.float32: T.FLOAT, np.float64: T.DOUBLE, np.int64: T.INT64, np.int8: T.INT8}
OUTS = ["y", "indices", "inverse", "counts"]


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    return {"warp": 32, "unique": compile_module(tmp_path_factory.mktemp("host_unique"), "unique", 32)}


def assert_bitwise(got, want):
    """Equal dtype, shape and bytes: -0 is not 0 here, and NaN equals itself."""
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        w = np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape, (k, g.dtype, g.shape, w.dtype, w.shape)
        assert np.ascontiguousarray(g).tobytes() == np.ascontiguousarray(w).tobytes(), (k, g, w)


def _run(libs, x, attrs, **kw):
    got, want, ops = run_on_host(libs, "::Unique", [x], attrs, n_out=4, workspace=True, **kw)
    return got, want, ops


def _ort(x, attrs):
    node = h.make_node("Unique", ["x"], OUTS, **attrs)
    model = make_model([node], [tensor("x", _ELEM[x.dtype.type], list(x.shape))],
                       [tensor(o, _ELEM[x.dtype.type] if o == "y" else T.INT64, None) for o in OUTS], opset=11)
    return cpu_session(model).run(None, {"x": x})


CASES = [((6, 4), None), ((6, 4), 0), ((6, 4), 1), ((6, 4), -1), ((6, 4), -2), ((2, 4, 2), 1), ((3, 3, 2), 0),
         ((3, 2, 3), -1), ((9,), None), ((9,), 0), ((1,), None), ((1,), 0), ((), None), ((1, 1), 1)]


@pytest.mark.parametrize("shape,axis", CASES, ids=[f"{s}-axis{a}" for s, a in CASES])
@pytest.mark.parametrize("sort", [1, 0])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_outputs_are_the_references_and_the_cpu_eps(libs, shape, axis, sort, dtype):
    x = repeated_values(np.random.default_rng(len(shape) * 10 + (axis or 0)), shape, dtype)
    attrs = {"sorted": sort} | ({} if axis is None else {"axis": axis})
    got, want, ops = _run(libs, x, attrs)
    assert [o.entry for o in ops] == [f"hipep_unique_{_name(dtype)}"]
    assert_bitwise(got, want)
    assert_bitwise(got, _ort(x, attrs))


@pytest.mark.parametrize("sort", [1, 0])
@pytest.mark.parametrize("axis", [None, 0, 1])
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=lambda d: np.dtype(d).name)
def test_signed_zeros_are_one_value_and_y_keeps_the_first(libs, dtype, axis, sort):
    x = np.array([[-0.0, 1.0], [0.0, 1.0], [0.0, -0.0], [-0.0, 0.0], [1.0, 0.0]], dtype)
    attrs = {"sorted": sort} | ({} if axis is None else {"axis": axis})
    got, want, _ = _run(libs, x, attrs)
    assert_bitwise(got, want)
    assert_bitwise(got, _ort(x, attrs))


@pytest.mark.parametrize("sort", [1, 0])
@pytest.mark.parametrize("shape,axis", [((7,), None), ((7,), 0), ((7, 2), None), ((7, 2), 0), ((2, 7), 1),
                                        ((7, 1), 0)], ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=lambda d: np.dtype(d).name)
def test_nan_as_the_reference(libs, dtype, shape, axis, sort):
    """NaNs are one value, after every number, where numpy reads the input as 1-D (no axis, or a
    1-D input); a slice of a higher-rank input holding a NaN equals no other slice, and orders
    after the numbers in its position, slices alike in order by index."""
    rng = np.random.default_rng(sum(shape))
    x = repeated_values(rng, shape, dtype)
    flat = x.reshape(-1)
    flat[rng.permutation(flat.size)[: max(2, flat.size // 3)]] = np.nan
    if x.ndim == 2 and axis is not None:  # two slices alike but for their NaNs, and one without
        src = [slice(None)] * 2
        dst = list(src)
        src[axis], dst[axis] = 0, 1
        x[tuple(dst)] = x[tuple(src)]
    attrs = {"sorted": sort} | ({} if axis is None else {"axis": axis})
    got, want, _ = _run(libs, x, attrs)
    assert_bitwise(got, want)


@pytest.mark.parametrize("sort", [1, 0])
@pytest.mark.parametrize("dtype", [np.int8, np.float32], ids=lambda d: np.dtype(d).name)
def test_more_items_than_threads(libs, dtype, sort):
    """3000 elements: each of the block's 1024 threads takes items in turn in every pass."""
    rng = np.random.default_rng(3)
    x = (rng.integers(-60, 60, 3000) if dtype == np.int8 else rng.integers(-400, 400, 3000) / 4).astype(dtype)
    got, want, ops = _run(libs, x, {"sorted": sort})
    assert ops[0].block == (1024, 1, 1)
    assert_bitwise(got, want)
    assert_bitwise(got, _ort(x, {"sorted": sort}))


@pytest.mark.parametrize("drop", [(1, 2, 3), (0, 1, 3), (0, 2), (0, 1, 2)], ids=str)
@pytest.mark.parametrize("axis", [None, 1])
def test_outputs_nobody_reads_are_not_written(libs, drop, axis):
    x = repeated_values(np.random.default_rng(5), (4, 6), np.float32)
    attrs = {"sorted": 0} | ({} if axis is None else {"axis": axis})
    got, want, _ = _run(libs, x, attrs, drop=drop)
    for k in drop:
        assert got[k] is None
    assert_bitwise([g for g in got if g is not None], [w for k, w in enumerate(want) if k not in drop])


def test_a_node_asking_for_y_alone(libs):
    x = repeated_values(np.random.default_rng(6), (20,), np.int64)
    got, want, _ = run_on_host(libs, "::Unique", [x], {"sorted": 0}, n_out=1, workspace=True)
    assert_bitwise(got, want)


@pytest.mark.parametrize("shape,axis", [((0,), None), ((0, 3), 0), ((3, 0), 0), ((0, 3), 1)], ids=str)
def test_empty_inputs(libs, shape, axis):
    """No items: nothing to launch. Items of no elements: all alike, one distinct item."""
    x = np.zeros(shape, np.float32)
    attrs = {} if axis is None else {"axis": axis}
    got, want, ops = _run(libs, x, attrs)
    assert (ops == []) == (want[2].size == 0)
    assert_bitwise(got, want)


def test_outputs_sized_otherwise_are_a_clear_error():
    mem = HostMemory()
    x, _ = mem.put(np.arange(6, dtype=np.float32))
    out = [mem.put(np.zeros(n, dt))[0] for n, dt in ((4, np.float32), (4, np.int64), (6, np.int64), (3, np.int64))]
    target = gk.Target(workspace=lambda n: 0)
    with pytest.raises(HipepError, match=r"output 3 \(counts\) of shape \[3\] \(expected \[4\]\)"):
        gk.binding_for("::Unique").bind([x], out, {"sorted": 1}, target)
    out[0] = mem.put(np.zeros(7, np.float32))[0]
    with pytest.raises(HipepError, match="outputs sized for 7 distinct items of 6"):
        gk.binding_for("::Unique").bind([x], out, {"sorted": 1}, target)
    with pytest.raises(HipepError, match=r"output 0 \(Y\) of shape \[7\] \(expected rank 2\)"):
        gk.binding_for("::Unique").bind([gk.Arg(x.ptr, (2, 3), x.dtype)], out, {"sorted": 1, "axis": 1}, target)
    scalar = gk.Arg(x.ptr, (), x.dtype)
    with pytest.raises(HipepError, match="a scalar input has no axis"):
        gk.binding_for("::Unique").bind([scalar], [out[0]], {"sorted": 1, "axis": 0}, target)


def test_claim_reasons():
    assert gk.kernel_reason("::Unique", {"sorted": 1}, ["float64"], [(6, 4)]) is None
    assert gk.kernel_reason("::Unique", {"sorted": 1}, ["int8"], [None]) is None
    why = gk.kernel_reason("::Unique", {"sorted": 1}, ["float32"], [(MAX_ELEMENTS + 1,)])
    assert why == (f"no kernel for cuda: Unique (an input of {MAX_ELEMENTS + 1} elements, more than its one "
                   f"block's pairwise comparison takes ({MAX_ELEMENTS}))")
    assert "element type float16" in gk.kernel_reason("::Unique", {"sorted": 1}, ["float16"], [(4,)])


def _name(dtype) -> str:
    return {"float32": "f32", "float64": "f64", "int64": "i64", "int8": "i8"}[np.dtype(dtype).name]
