"""kernels/indexing.hip, kernels/scatter_reduce.hip and kernels/max_unpool.hip on the CPU:
GatherElements, GatherND (batch_dims), ScatterElements and Scatter, ScatterND, with every
reduction, negative and repeated indices, several element types, MaxUnpool, compared with the
registry's references (hipep.ops.indexing, hipep.ops.max_unpool). g++ compiles the unchanged
kernel source against the host stand-in for the CUDA headers (every GPU thread of a block a host
thread, so the atomics of the reductions and of the winner pass really race), and the launches
the bindings give run over host memory. An index out of range fills the fault record, names the
node, and leaves no write outside the buffers. Skipped without g++."""
from __future__ import annotations

import ctypes
import dataclasses
import shutil

import numpy as np
import pytest

from hipep.ops.registry import OUTPUT_COUNT, REQUIRED, SINCE_VERSION, lookup
from hipep.runtime import gpu_faults as gf
from hipep.runtime import gpu_kernels as gk

from helpers import max_unpool_indices
from unit.host_kernels import HostMemory, compile_module, launch, run_on_host

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")

# Small launches: the host runs every GPU thread of a block as a thread of its own.
SM = 1


def _build(out, warp):
    return {"warp": warp, **{m: compile_module(out, m, warp) for m in ("indexing", "scatter_reduce", "copy",
                                                                        "max_unpool")}}


@pytest.fixture(scope="module")
def libraries(tmp_path_factory):
    return _build(tmp_path_factory.mktemp("indexing"), 32)


@pytest.fixture(scope="module")
def libraries64(tmp_path_factory):
    """As AMD's CDNA GPUs build them (HIPEP_WARP_SIZE=64; these kernels use no warp primitives)."""
    return _build(tmp_path_factory.mktemp("indexing64"), 64)


def run(libs, op_key, inputs, attrs, **kw):
    (got,), (want,), ops = run_on_host(libs, op_key, inputs, attrs, sm_count=SM, workspace=True, **kw)
    assert got.dtype == want.dtype and got.shape == want.shape
    return got, want, ops


def entries(ops):
    return [o.entry for o in ops if isinstance(o, gk.KernelOp)]


def values(rng, shape, dtype):
    """Small integers in every type, so sums and products of a few are exact in any order."""
    if np.dtype(dtype) == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    lo = 0 if np.dtype(dtype).kind == "u" else -3
    return rng.integers(lo, 4, shape).astype(dtype)


# ---- GatherElements ------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int64, np.uint8, np.bool_])
@pytest.mark.parametrize("itype", [np.int32, np.int64])
@pytest.mark.parametrize("data_shape,idx_shape,axis", [((5, 4), (3, 4), 0), ((3, 6), (2, 7), 1),
                                                       ((2, 3, 4), (2, 2, 3), -1), ((4, 3, 5), (2, 6, 1), 1),
                                                       ((7,), (9,), 0)])
def test_gather_elements(libraries, dtype, itype, data_shape, idx_shape, axis):
    """Indices smaller than data on the other axes, negative ones, the last axis and a middle one."""
    rng = np.random.default_rng(1)
    extent = data_shape[axis]
    idx = rng.integers(-extent, extent, idx_shape).astype(itype)
    got, want, ops = run(libraries, "::GatherElements", [values(rng, data_shape, dtype), idx], {"axis": axis})
    it = np.dtype(itype).name.replace("int", "i")
    assert entries(ops) == [f"hipep_gather_elements_w{np.dtype(dtype).itemsize}_{it}"]
    np.testing.assert_array_equal(got, want)


# ---- GatherND ------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int64, np.bool_])
@pytest.mark.parametrize("data_shape,idx_shape,batch_dims", [((4, 5, 8), (3, 1), 0), ((4, 5, 8), (2, 3, 2), 0),
                                                             ((4, 5, 3), (6, 3), 0), ((2, 5, 8), (2, 3, 1), 1),
                                                             ((2, 3, 4, 6), (2, 3, 2, 1), 2),
                                                             ((3, 4, 5), (3, 2), 1)])
def test_gather_nd(libraries, dtype, data_shape, idx_shape, batch_dims):
    """Slices (the word widened where a slice allows), single elements, batch_dims."""
    rng = np.random.default_rng(2)
    k = idx_shape[-1]
    extents = np.array(data_shape[batch_dims:batch_dims + k], np.int64)
    idx = (rng.integers(0, 1 << 20, idx_shape) % np.maximum(extents, 1)).astype(np.int64)
    idx = np.where(rng.integers(0, 2, idx_shape) == 1, idx - extents, idx)  # half of them negative
    got, want, ops = run(libraries, "::GatherND", [values(rng, data_shape, dtype), idx], {"batch_dims": batch_dims})
    assert len(ops) == 1 and ops[0].entry.startswith("hipep_gather_nd_w")
    np.testing.assert_array_equal(got, want)


def test_gather_nd_moves_slices_as_wide_words(libraries):
    rng = np.random.default_rng(3)
    data = rng.uniform(-1, 1, (6, 16)).astype(np.float16)
    got, want, ops = run(libraries, "::GatherND", [data, np.array([[5], [-6], [2]], np.int64)], {})
    assert entries(ops) == ["hipep_gather_nd_w16_i64"]
    np.testing.assert_array_equal(got, want)
    got, want, ops = run(libraries, "::GatherND", [data, np.array([[1]], np.int64)], {}, offsets={0: 2})
    assert entries(ops) == ["hipep_gather_nd_w2_i64"]  # a misaligned table: element by element
    np.testing.assert_array_equal(got, want)


# ---- ScatterElements, Scatter ------------------------------------------------------------------

SCATTER_ELEMENTS = [((5, 4), (3, 4), 0), ((3, 6), (3, 5), 1), ((2, 3, 4), (2, 2, 6), -1), ((9,), (12,), 0)]


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int64, np.int8, np.bool_])
@pytest.mark.parametrize("itype", [np.int32, np.int64])
@pytest.mark.parametrize("data_shape,idx_shape,axis", SCATTER_ELEMENTS)
def test_scatter_elements_last_repeat_wins(libraries, dtype, itype, data_shape, idx_shape, axis):
    """reduction 'none' with repeated (and negative) indices: the update that comes last wins,
    as ONNX Runtime's CPU kernel applies them in order; the winners take the mark pass."""
    rng = np.random.default_rng(4)
    extent = data_shape[axis]
    idx = rng.integers(-extent, extent, idx_shape).astype(itype)
    upd = values(rng, idx_shape, dtype)
    data = values(rng, data_shape, dtype)
    got, want, ops = run(libraries, "::ScatterElements", [data, idx, upd], {"axis": axis})
    it = np.dtype(itype).name.replace("int", "i")
    assert entries(ops) == ["hipep_copy_fill_w4", f"hipep_scatter_elements_mark_{it}",
                            f"hipep_scatter_elements_w{np.dtype(dtype).itemsize}_{it}"]
    np.testing.assert_array_equal(got, want)


def test_scatter_elements_distinct_constant_indices_skip_the_winners(libraries):
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    idx = np.array([[2, 0, -1, 1], [0, 1, 0, 2]], np.int64)
    upd = -np.arange(8, dtype=np.float32).reshape(2, 4)
    got, want, ops = run(libraries, "::ScatterElements", [data, idx, upd], {"axis": 0})
    assert entries(ops) == ["hipep_scatter_elements_w4_i64"]
    np.testing.assert_array_equal(got, want)


def test_scatter_elements_winners_in_the_workspace_need_no_zeroing_by_the_caller(libraries):
    """The workspace holds anything from earlier launches: the binding zeroes the winners."""
    rng = np.random.default_rng(5)
    data = rng.uniform(-1, 1, (4, 5)).astype(np.float32)
    idx = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 1, 1], [3, 0, 1, 1, 2]], np.int64)
    upd = rng.uniform(-1, 1, (3, 5)).astype(np.float32)
    op = lookup("", "ScatterElements")
    attrs = {"axis": 0, "reduction": "none", OUTPUT_COUNT: 1, SINCE_VERSION: 18}
    want = op.reference([data, idx, upd], attrs)[0]
    mem = HostMemory()
    garbage = mem.put(np.full(64, 0xFFFFFFFF, np.uint32))[0].ptr
    (d, _), (i, _), (u, _) = mem.put(data), mem.put(idx), mem.put(upd)
    i = dataclasses.replace(i, constant=False, value=None)  # indices the host cannot read
    out, view = mem.put(np.full(data.shape, np.nan, np.float32))
    target = gk.Target(sm_count=SM, warp_size=32, workspace=lambda n: garbage)
    ops = gk.binding_for("::ScatterElements").bind([d, i, u], [gk.Arg(out.ptr, out.shape, out.dtype)], attrs, target)
    _run_ops(libraries, ops)
    np.testing.assert_array_equal(view, want)


@pytest.mark.parametrize("reduction", ["add", "mul", "max", "min"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64, np.int32, np.int64, np.int8, np.uint8,
                                   np.uint16, np.bool_])
def test_scatter_elements_reductions(libraries, reduction, dtype):
    """Every update of a repeated index combines (atomics racing on host threads): exact for
    integers and for the small integers in floats used here; int8 add and mul wrap as numpy's."""
    if dtype == np.bool_ and reduction in ("max", "min"):
        pytest.skip("not claimed for bool (ONNX Runtime has none either)")
    rng = np.random.default_rng(6)
    data = values(rng, (4, 6), dtype)
    idx = rng.integers(-4, 4, (5, 6)).astype(np.int64)
    upd = values(rng, (5, 6), dtype)
    if dtype == np.int8 and reduction in ("add", "mul"):
        data[0], upd[:] = 100, 90  # wraps around
        idx[:, 0] = 0
    got, want, ops = run(libraries, "::ScatterElements", [data, idx, upd], {"axis": 0, "reduction": reduction})
    names = {np.float32: "f32", np.float16: "f16", np.float64: "f64", np.int32: "i32", np.int64: "i64", np.int8: "i8",
             np.uint8: "u8", np.uint16: "u16", np.bool_: "b8"}
    name = names[dtype]
    if reduction in ("add", "mul") and name[0] == "u":
        name = "i" + name[1:]  # the same bits as the signed type's
    assert entries(ops) == [f"hipep_scatter_elements_{reduction}_{name}_i64"]
    np.testing.assert_array_equal(got, want)


def test_scatter_elements_float_add_within_rounding(libraries):
    """Float adds arrive in any order: equal to the in-order sums within rounding; NaN in max."""
    rng = np.random.default_rng(7)
    data = rng.uniform(-1, 1, (3, 8)).astype(np.float32)
    idx = rng.integers(0, 3, (16, 8)).astype(np.int32)
    upd = rng.uniform(-1, 1, (16, 8)).astype(np.float32)
    got, want, _ = run(libraries, "::ScatterElements", [data, idx, upd], {"axis": 0, "reduction": "add"})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    upd[3, 2] = np.nan
    got, want, _ = run(libraries, "::ScatterElements", [data, idx, upd], {"axis": 0, "reduction": "max"})
    np.testing.assert_array_equal(got, want)
    assert np.isnan(got[idx[3, 2], 2])


def test_scatter_opset_9(libraries):
    rng = np.random.default_rng(8)
    data = rng.uniform(-1, 1, (3, 5)).astype(np.float16)
    idx = np.array([[0, 4, -1], [4, 4, 2]], np.int64)
    upd = rng.uniform(-1, 1, (2, 3)).astype(np.float16)
    got, want, ops = run(libraries, "::Scatter", [data, idx, upd], {"axis": 1})
    assert entries(ops)[-1] == "hipep_scatter_elements_w2_i64"
    np.testing.assert_array_equal(got, want)


def test_warp_64_build(libraries64):
    rng = np.random.default_rng(9)
    data = values(rng, (4, 3), np.float32)
    idx = rng.integers(-4, 4, (6, 3)).astype(np.int64)
    got, want, _ = run(libraries64, "::ScatterElements", [data, idx, values(rng, (6, 3), np.float32)], {"axis": 0})
    np.testing.assert_array_equal(got, want)
    got, want, _ = run(libraries64, "::GatherND", [data, np.array([[3, 1], [-4, -1]], np.int64)], {})
    np.testing.assert_array_equal(got, want)


# ---- ScatterND -----------------------------------------------------------------------------------

SCATTER_ND = [((6, 4), (5, 1)), ((6, 4), (7, 2)), ((3, 4, 8), (2, 3, 1)), ((3, 4, 8), (4, 2)), ((5,), (4, 1))]


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int64, np.uint8])
@pytest.mark.parametrize("data_shape,idx_shape", SCATTER_ND)
def test_scatter_nd_last_repeat_wins(libraries, dtype, data_shape, idx_shape):
    rng = np.random.default_rng(10)
    k = idx_shape[-1]
    extents = np.array(data_shape[:k], np.int64)
    idx = (rng.integers(0, 1 << 20, idx_shape) % extents - rng.integers(0, 2, idx_shape) * extents).astype(np.int64)
    idx[-1] = idx[0] - extents * (idx[0] >= 0)  # at least one repeat, spelled negative
    upd = values(rng, idx_shape[:-1] + data_shape[k:], dtype)
    got, want, ops = run(libraries, "::ScatterND", [values(rng, data_shape, dtype), idx, upd], {})
    names = entries(ops)
    assert names[:2] == ["hipep_copy_fill_w4", "hipep_scatter_nd_mark_i64"]
    assert names[2].startswith("hipep_scatter_nd_w")
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("reduction", ["add", "mul", "max", "min"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32, np.int64, np.int16, np.bool_])
@pytest.mark.parametrize("data_shape,idx_shape", SCATTER_ND[1:4])
def test_scatter_nd_reductions(libraries, reduction, dtype, data_shape, idx_shape):
    if dtype == np.bool_ and reduction in ("max", "min"):
        pytest.skip("not claimed for bool")
    rng = np.random.default_rng(11)
    k = idx_shape[-1]
    idx = (rng.integers(0, 1 << 20, idx_shape) % np.array(data_shape[:k])).astype(np.int64)
    idx[-1] = idx[0]  # at least one repeat
    upd = values(rng, idx_shape[:-1] + data_shape[k:], dtype)
    got, want, ops = run(libraries, "::ScatterND", [values(rng, data_shape, dtype), idx, upd], {"reduction": reduction})
    assert entries(ops)[0].startswith(f"hipep_scatter_nd_{reduction}_")
    np.testing.assert_array_equal(got, want)


def test_scatter_nd_kv_cache_rows_as_wide_words(libraries):
    """A KV-cache style update: distinct constant positions, whole f16 rows as 16-byte words."""
    rng = np.random.default_rng(12)
    cache = rng.uniform(-1, 1, (2, 6, 16)).astype(np.float16)
    idx = np.array([[[0, 4]], [[1, -1]]], np.int64)
    upd = rng.uniform(-1, 1, (2, 1, 16)).astype(np.float16)
    got, want, ops = run(libraries, "::ScatterND", [cache, idx, upd], {})
    assert entries(ops) == ["hipep_scatter_nd_w16_i64"]
    np.testing.assert_array_equal(got, want)


def test_grid_stride_loops_cover_more_than_the_grid(libraries):
    """The same launches on one small block: every kernel loops over what its grid does not cover."""
    rng = np.random.default_rng(13)
    cases = [("::GatherElements", [values(rng, (6, 7), np.float32), rng.integers(-6, 6, (9, 7)).astype(np.int64)],
              {"axis": 0}),
             ("::GatherND", [values(rng, (5, 70), np.float32), rng.integers(-5, 5, (9, 1)).astype(np.int64)], {}),
             ("::ScatterElements", [values(rng, (6, 7), np.int32), rng.integers(-6, 6, (9, 7)).astype(np.int64),
                                    values(rng, (9, 7), np.int32)], {"axis": 0}),
             ("::ScatterElements", [values(rng, (6, 7), np.int32), rng.integers(-6, 6, (9, 7)).astype(np.int64),
                                    values(rng, (9, 7), np.int32)], {"axis": 0, "reduction": "add"}),
             ("::ScatterND", [values(rng, (5, 70), np.float32), rng.integers(-5, 5, (9, 1)).astype(np.int64),
                              values(rng, (9, 70), np.float32)], {}),
             ("::ScatterND", [values(rng, (5, 70), np.float32), rng.integers(-5, 5, (9, 1)).astype(np.int64),
                              values(rng, (9, 70), np.float32)], {"reduction": "mul"})]
    for key, inputs, attrs in cases:
        got, want, _ = _run_small(libraries, key, inputs, attrs)
        np.testing.assert_array_equal(got, want, err_msg=f"{key} {attrs}")


# ---- indices out of range: the fault record ----------------------------------------------------

FAULTS = [
    ("::GatherElements", lambda: [np.arange(12, dtype=np.float32).reshape(3, 4), np.array([[0, 3, -1, 1]], np.int64)],
     {"axis": 0}, "input 1 (indices) into data axis 0", 3, 3),
    ("::GatherND", lambda: [np.arange(24, dtype=np.float32).reshape(2, 3, 4), np.array([[1, 2], [0, -4]], np.int64)],
     {}, "input 1 (indices) into data axes 0..1", -4, 3),
    ("::GatherND", lambda: [np.arange(24, dtype=np.float32).reshape(2, 3, 4), np.array([[2], [7]], np.int64)],
     {"batch_dims": 1}, "input 1 (indices) into data axis 1", 7, 3),
    ("::ScatterElements", lambda: [np.zeros((3, 4), np.float32), np.array([[0, 1, 5, 1], [0, 1, 0, 1]], np.int32),
                                   np.ones((2, 4), np.float32)],
     {"axis": 0}, "input 1 (indices) into data axis 0", 5, 3),
    ("::ScatterElements", lambda: [np.zeros((3, 4), np.float32), np.array([[0, 1, 2, -4]], np.int64),
                                   np.ones((1, 4), np.float32)], {"axis": 0, "reduction": "add"},
     "input 1 (indices) into data axis 0", -4, 3),
    ("::ScatterND", lambda: [np.zeros((4, 5), np.float16), np.array([[1], [4], [1]], np.int64),
                             np.ones((3, 5), np.float16)], {}, "input 1 (indices) into data axis 0", 4, 4),
    ("::ScatterND", lambda: [np.zeros((4, 5), np.int64), np.array([[1, 9]], np.int64), np.ones(1, np.int64)],
     {"reduction": "max"}, "input 1 (indices) into data axes 0..1", 9, 5),
]


@pytest.mark.parametrize("key,make,attrs,what,bad,bound", FAULTS)
def test_an_index_out_of_range_is_reported_for_the_node(libraries, key, make, attrs, what, bad, bound):
    """The bad index fills the stream's fault record, which reads as an error naming the node,
    the input and the valid range; everything else is as with the bad update left out (scatters)
    or its element zero (gathers); nothing is written outside the output."""
    inputs = make()
    domain, op_type = key.split("::")
    op = lookup(domain, op_type)
    full = {**{k: v for k, v in op.attributes.items() if v is not REQUIRED}, **attrs, OUTPUT_COUNT: 1,
            SINCE_VERSION: max(op.since_versions)}
    mem = HostMemory()
    record = mem.put(np.zeros(gf.FAULT_RECORD_BYTES, np.uint8))[0].ptr
    sites = gf.FaultSites()
    label = f"node 'bad' ({op_type})"
    ins = [mem.put(x)[0] for x in inputs]
    out_shape = inputs[0].shape if "Scatter" in key else _gather_shape(key, inputs, full)
    guard = 8
    out_full, view_full = mem.put(np.full((int(np.prod(out_shape)) + 2 * guard,), 7, inputs[0].dtype))
    view = view_full[guard:-guard].reshape(out_shape)
    out = gk.Arg(out_full.ptr + guard * inputs[0].dtype.itemsize, out_shape, inputs[0].dtype)
    target = gk.Target(sm_count=SM, warp_size=32, workspace=lambda n: mem.put(np.zeros(n, np.uint8))[0].ptr,
                       fault=lambda w: gf.FaultSite(record, sites.site(label, w)))
    _run_ops(libraries, gk.binding_for(key).bind(ins, [out], full, target))
    error = gf.take_fault(record, sites)
    assert isinstance(error, gf.IndexFault)
    assert str(error) == (f"{label}: {what}: index {bad} is out of data bounds: it must be within the inclusive "
                          f"range [{-bound}, {bound - 1}]")
    assert gf.take_fault(record, sites) is None
    assert (view_full[:guard] == 7).all() and (view_full[-guard:] == 7).all()
    np.testing.assert_array_equal(view, _without_bad(key, inputs, full))


def _gather_shape(key, inputs, attrs):
    if key == "::GatherElements":
        return inputs[1].shape
    data, idx = inputs
    b = int(attrs.get("batch_dims", 0))
    return data.shape[:b] + idx.shape[b:-1] + data.shape[b + idx.shape[-1]:]


def _without_bad(key, inputs, attrs):
    """What the kernels leave: the reference with the bad index replaced (gathers: its output
    zero) or its update dropped (scatters)."""
    if key == "::GatherElements":
        data, idx = inputs
        ok = (idx >= -data.shape[0]) & (idx < data.shape[0])
        return np.where(ok, np.take_along_axis(data, np.where(ok, idx, 0), axis=0), 0)
    if key == "::GatherND":
        data, idx = inputs
        b = int(attrs.get("batch_dims", 0))
        ext = np.array(data.shape[b:b + idx.shape[-1]])
        ok = ((idx >= -ext) & (idx < ext)).all(axis=-1)
        op = lookup("", "GatherND")
        want = op.reference([data, np.where(ok[..., None], idx, 0)], attrs)[0]
        return np.where(ok.reshape(ok.shape + (1,) * (want.ndim - ok.ndim)), want, 0)
    data, idx, upd = inputs
    op = lookup("", key[2:])
    if key == "::ScatterND":
        ext = np.array(data.shape[:idx.shape[-1]])
        ok = ((idx >= -ext) & (idx < ext)).all(axis=-1)
        return op.reference([data, idx[ok], upd[ok]], attrs)[0]
    # ScatterElements: a bad update is dropped (here: pointing it at a copy of its target's value)
    ok = (idx >= -data.shape[0]) & (idx < data.shape[0])
    keep = np.where(ok, idx, 0)
    neutral = {"none": None, "add": 0, "mul": 1}.get(attrs.get("reduction", "none"))
    if neutral is None:  # 'none': the test's bad update aims where another, later one lands
        return op.reference([data, keep, upd], attrs)[0]
    return op.reference([data, keep, np.where(ok, upd, neutral).astype(upd.dtype)], attrs)[0]


def test_claim_reasons():
    """What is left unclaimed says why (the node then shows in the fallback report)."""
    f32 = "float32"

    def why(key, attrs, dtypes, shapes=None):
        return gk.binding_for(key).check(attrs, dtypes, shapes, None)

    assert why("::ScatterElements", {"reduction": "max"}, ["bool", "int64", "bool"]) == "reduction 'max' on bool"
    assert why("::ScatterND", {"reduction": "add"}, ["bfloat16", "int64", "bfloat16"]) == "reduction 'add' on bfloat16"
    assert why("::ScatterND", {"reduction": "none"}, ["bfloat16", "int64", "bfloat16"]) is None
    assert why("::GatherElements", {"axis": 0}, [f32, "int16"]) == "indices of type int16"
    assert why("::GatherND", {}, [f32, "int32"]) == "indices of type int32"
    assert why("::GatherElements", {"axis": 0}, [f32, "int64"], [(2,) * 17, (2,) * 17]) == \
        "indices of rank 17 (at most 16)"
    assert gk.kernel_reason("::ScatterElements", {"reduction": "min"}, ["bool", "int64", "bool"]) == \
        "no kernel for cuda: ScatterElements (reduction 'min' on bool)"
    for key in ("::GatherElements", "::GatherND", "::ScatterElements", "::Scatter", "::ScatterND"):
        assert gk.has_kernel(key, {}, [f32, "int64", f32])
        assert "indexing" in gk.binding_for(key).modules


# ---- helpers -------------------------------------------------------------------------------------

def _run_ops(libs, ops):
    for o in ops:
        if isinstance(o, gk.CopyOp):
            ctypes.memmove(o.dst, o.src, o.nbytes)
        else:
            launch(libs[o.module], o)


def _run_small(libs, key, inputs, attrs):
    """run_on_host with every launch shrunk to one block of 32 x 2 (or 64) threads."""
    domain, op_type = key.split("::")
    op = lookup(domain, op_type)
    full = {**{k: v for k, v in op.attributes.items() if v is not REQUIRED}, **attrs, OUTPUT_COUNT: 1,
            SINCE_VERSION: max(op.since_versions)}
    want = op.reference(list(inputs), full)[0]
    mem = HostMemory()
    ins = [mem.put(x)[0] for x in inputs]
    out, view = mem.put(np.full(want.shape, 7, want.dtype))
    target = gk.Target(sm_count=SM, warp_size=32, workspace=lambda n: mem.put(np.zeros(n, np.uint8))[0].ptr)
    ops = gk.binding_for(key).bind(ins, [gk.Arg(out.ptr, out.shape, out.dtype)], full, target)
    small = [dataclasses.replace(o, grid=(1, 1, 1), block=(32, 2, 1) if o.block[1] > 1 else (64, 1, 1))
             if isinstance(o, gk.KernelOp) else o for o in ops]
    _run_ops(libs, small)
    return view, want, small


# ---- the launches NVRTC builds -------------------------------------------------------------------

def test_every_launch_names_an_entry_point_that_takes_its_parameters():
    """For every element type of the registry, index type and reduction: the entry point a launch
    names exists in NVRTC's build of its module and takes as many parameters, of the sizes the
    launch passes (the ctypes structs mirror kernels/indexing.h's)."""
    from helpers import nvrtc_available

    if not nvrtc_available():
        pytest.skip("nvidia-cuda-nvrtc (cuda-bindings) is not installed")
    from unit.kernel_emulation import IDX, SRC, arg, out_arg
    from unit.nvrtc_ptx import param_bytes, ptx

    target = gk.Target(sm_count=4, warp_size=32, workspace=lambda n: 0x800000, fault=lambda w: gf.FaultSite(0x700000, 1))
    types = [np.float32, np.float16, np.float64, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
             np.uint32, np.uint64, np.bool_]
    launches = []
    for dt in types:
        data = np.zeros((4, 6, 8), dt)
        for it in (np.int32, np.int64):
            idx = np.zeros((2, 6, 8), it)
            idx[1] = 1  # repeated targets: the mark pass too
            launches += gk.BINDINGS["::GatherElements"].bind([arg(data, SRC), arg(idx, IDX, True)],
                                                             [out_arg(idx.shape, dt)], {"axis": 0}, target)
            for reduction in ("none", "add", "mul", "max", "min"):
                key = "::ScatterElements"
                if gk.binding_for(key).check({"reduction": reduction}, [np.dtype(dt).name, it.__name__], None, None):
                    continue
                launches += gk.BINDINGS[key].bind([arg(data, SRC), arg(idx, IDX, True), arg(idx.astype(dt), SRC)],
                                                  [out_arg(data.shape, dt)], {"axis": 0, "reduction": reduction},
                                                  target)
        nd_idx = np.zeros((3, 1), np.int64)
        for base in (SRC, SRC + 2):  # slices as wide words, and element by element
            launches += gk.BINDINGS["::GatherND"].bind([arg(data, base), arg(nd_idx, IDX, True)],
                                                       [out_arg((3, 6, 8), dt)], {"batch_dims": 0}, target)
        for reduction in ("none", "add", "mul", "max", "min"):
            if gk.binding_for("::ScatterND").check({"reduction": reduction}, [np.dtype(dt).name, "int64"], None, None):
                continue
            launches += gk.BINDINGS["::ScatterND"].bind(
                [arg(data, SRC), arg(nd_idx, IDX, True), arg(np.zeros((3, 6, 8), dt), SRC)], [out_arg(data.shape, dt)],
                {"reduction": reduction}, target)
    kernels = [op for op in launches if isinstance(op, gk.KernelOp)]
    params = {}
    for module in sorted({op.module for op in kernels}):
        params.update(param_bytes(ptx(module, "compute_90")))
    assert len({op.entry for op in kernels if op.module == "scatter_reduce"}) > 100
    for op in kernels:
        assert op.entry in params, f"{op.module}: {op.entry}"
        assert [ctypes.sizeof(p) for p in op.params] == params[op.entry], op.entry


# ---- MaxUnpool ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
@pytest.mark.parametrize("repeats", [False, True])
@pytest.mark.parametrize("shape_in,shape_out,attrs", [
    ((2, 3, 2, 2), (2, 3, 4, 4), {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ((1, 2, 3), (1, 2, 4), {"kernel_shape": [3], "pads": [1, 0]}),
    ((1, 1, 5, 5), (1, 1, 10, 10), {"kernel_shape": [2, 2], "strides": [2, 2]})])
def test_max_unpool(libraries, dtype, repeats, shape_in, shape_out, attrs):
    rng = np.random.default_rng(len(shape_in) + repeats)
    x = (rng.standard_normal(shape_in) * 4).astype(dtype)
    idx = max_unpool_indices(rng, shape_in, shape_out, repeats)
    got, want, ops = run(libraries, "::MaxUnpool", [x, idx], attrs)
    np.testing.assert_array_equal(got, want)
    assert "hipep_max_unpool_mark" in entries(ops)


def test_max_unpool_index_out_of_range_is_reported_for_the_node(libraries):
    x, idx = np.arange(1, 5, dtype=np.float32).reshape(1, 1, 2, 2), np.array([[[[0, 3], [16, 5]]]], np.int64)
    attrs = {"kernel_shape": [2, 2], "strides": [2, 2], OUTPUT_COUNT: 1, SINCE_VERSION: 22}
    mem = HostMemory()
    record = mem.put(np.zeros(gf.FAULT_RECORD_BYTES, np.uint8))[0].ptr
    sites = gf.FaultSites()
    out, view = mem.put(np.full((1, 1, 4, 4), 7, np.float32))
    target = gk.Target(sm_count=SM, warp_size=32, workspace=lambda n: mem.put(np.zeros(n, np.uint8))[0].ptr,
                       fault=lambda w: gf.FaultSite(record, sites.site("node 'u' (MaxUnpool)", w)))
    _run_ops(libraries, gk.binding_for("::MaxUnpool").bind([mem.put(x)[0], mem.put(idx)[0]], [out], attrs, target))
    error = gf.take_fault(record, sites)
    assert isinstance(error, gf.IndexFault)
    assert str(error) == ("node 'u' (MaxUnpool): input 1 (I) into Y: index 16 is out of range [0, 16) (the "
                          "output's 16 elements, flattened)")
    want = np.zeros((1, 1, 4, 4), np.float32)
    want.reshape(-1)[[0, 3, 5]] = [1, 2, 4]
    np.testing.assert_array_equal(view, want)  # the others written, the bad one dropped
