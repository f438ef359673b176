"""GatherElements, GatherND, ScatterElements, Scatter and ScatterND (kernels/indexing.hip,
kernels/scatter_reduce.hip), and MaxUnpool (kernels/max_unpool.hip) end to end: small ONNX models
through hipep.InferenceSession(device="cuda"), claimed whole, compared with ONNX Runtime's CPU EP
over three runs (first run, bound replay, CUDA graph replay): exactly for moves and integer
reductions, within rounding for float reductions (atomics combine in arrival order). Repeated
indices with reduction 'none' (and MaxUnpool's) give the last update, as the CPU EP does, on every
run. An index out of range is an error naming the node, and the session runs on."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import hipep

from hipep.ops.registry import OUTPUT_COUNT, REQUIRED, SINCE_VERSION, lookup
from hipep.runtime.cuda import cuda_status, get_device
from gpu_checks import check_on_cuda
from helpers import cpu_session, make_model, max_unpool_indices, tensor

pytestmark = pytest.mark.gpu
_ok, _why = cuda_status(0)
if not _ok:
    pytest.skip(f"no CUDA device: {_why}", allow_module_level=True)
device = get_device(0)

F32, F16, I64, I32, U8, BOOL, I8 = TP.FLOAT, TP.FLOAT16, TP.INT64, TP.INT32, TP.UINT8, TP.BOOL, TP.INT8
NP = {F32: np.float32, F16: np.float16, I64: np.int64, I32: np.int32, U8: np.uint8, BOOL: np.bool_, I8: np.int8}
n = helper.make_node


def tol(elem):
    return dict(rtol=1e-5, atol=1e-5) if elem == F32 else dict(rtol=1e-2, atol=1e-2)


def check(model, feeds, elem=F32, runs=3, exact=True, want=None):
    """Runs `model` on the CUDA device `runs` times, every node claimed, and compares every output
    with ORT's CPU EP (or `want`): equal where `exact`, else within tol(elem)."""
    return check_on_cuda(model, feeds, elem, runs, exact=exact, want=want, claimed=True, tol=tol(elem))


def init(name, a):
    return numpy_helper.from_array(np.asarray(a), name)


def values(rng, shape, elem):
    """Small integers in every type: sums and products of a few are exact in any order."""
    if elem == BOOL:
        return rng.integers(0, 2, shape).astype(bool)
    return rng.integers(0 if elem == U8 else -3, 4, shape).astype(NP[elem])


def reference(op_type, inputs, attrs):
    """hipep's registry reference (where the CPU EP's answer is not defined or not there)."""
    op = lookup("", op_type)
    full = {**{k: v for k, v in op.attributes.items() if v is not REQUIRED}, **attrs, OUTPUT_COUNT: 1,
            SINCE_VERSION: max(op.since_versions)}
    return op.reference(inputs, full)


# ---- gathers -------------------------------------------------------------------------------------

@pytest.mark.parametrize("elem", [F32, F16, I64, U8, BOOL])
@pytest.mark.parametrize("idx_elem", [I64, I32])
@pytest.mark.parametrize("data_shape,idx_shape,axis", [((5, 4), (3, 4), 0), ((3, 6), (2, 7), 1),
                                                       ((2, 3, 40), (2, 2, 64), -1), ((4, 300, 5), (2, 600, 1), 1)])
def test_gather_elements(rng, elem, idx_elem, data_shape, idx_shape, axis):
    extent = data_shape[axis]
    model = make_model([n("GatherElements", ["data", "idx"], ["y"], axis=axis, name="ge")],
                       [tensor("data", elem, list(data_shape)), tensor("idx", idx_elem, list(idx_shape))],
                       [tensor("y", elem, None)], opset=13)
    idx = rng.integers(-extent, extent, idx_shape).astype(NP[idx_elem])
    check(model, {"data": values(rng, data_shape, elem), "idx": idx})


@pytest.mark.parametrize("elem", [F32, F16, I64, BOOL])
@pytest.mark.parametrize("data_shape,idx_shape,batch_dims", [((40, 5, 64), (30, 1), 0), ((4, 5, 8), (2, 3, 2), 0),
                                                             ((4, 5, 3), (6, 3), 0), ((2, 50, 8), (2, 30, 1), 1),
                                                             ((2, 3, 4, 6), (2, 3, 2, 1), 2)])
def test_gather_nd(rng, elem, data_shape, idx_shape, batch_dims):
    k = idx_shape[-1]
    extents = np.array(data_shape[batch_dims:batch_dims + k])
    idx = rng.integers(0, 1 << 20, idx_shape) % extents - rng.integers(0, 2, idx_shape) * extents
    model = make_model([n("GatherND", ["data", "idx"], ["y"], batch_dims=batch_dims, name="gnd")],
                       [tensor("data", elem, list(data_shape)), tensor("idx", I64, list(idx_shape))],
                       [tensor("y", elem, None)], opset=13)
    check(model, {"data": values(rng, data_shape, elem), "idx": idx.astype(np.int64)})


# ---- ScatterElements, Scatter --------------------------------------------------------------------

@pytest.mark.parametrize("elem", [F32, F16, I64, I32, U8, BOOL])
@pytest.mark.parametrize("idx_elem", [I64, I32])
@pytest.mark.parametrize("data_shape,idx_shape,axis", [((5, 4), (3, 4), 0), ((3, 60), (3, 50), 1),
                                                       ((2, 3, 4), (2, 2, 6), -1), ((9,), (400,), 0)])
def test_scatter_elements_last_repeat_wins(rng, elem, idx_elem, data_shape, idx_shape, axis):
    """Indices fed at run time (the winners' mark pass), repeated and negative: the CPU EP's answer."""
    extent = data_shape[axis]
    model = make_model([n("ScatterElements", ["data", "idx", "upd"], ["y"], axis=axis, name="se")],
                       [tensor("data", elem, list(data_shape)), tensor("idx", idx_elem, list(idx_shape)),
                        tensor("upd", elem, list(idx_shape))], [tensor("y", elem, None)], opset=18)
    feeds = {"data": values(rng, data_shape, elem),
             "idx": rng.integers(-extent, extent, idx_shape).astype(NP[idx_elem]), "upd": values(rng, idx_shape, elem)}
    sess = check(model, feeds)
    for _ in range(3):  # other repeats, the same launches
        feeds["idx"] = rng.integers(-extent, extent, idx_shape).astype(NP[idx_elem])
        want = cpu_session(model).run(None, feeds)
        np.testing.assert_array_equal(sess.run(None, feeds)[0], want[0])


def test_scatter_elements_with_constant_indices(rng):
    data_shape, idx = (6, 8), np.array([[5, 0, -1, 2, 1, 3, 4, 0], [0, 1, 0, 3, 2, 2, 2, 5]], np.int64)
    for name, i in (("distinct", idx), ("repeated", np.array([[1] * 8, [1] * 8], np.int64))):
        model = make_model([n("ScatterElements", ["data", "idx", "upd"], ["y"], axis=0, name=name)],
                           [tensor("data", F32, list(data_shape)), tensor("upd", F32, [2, 8])],
                           [tensor("y", F32, None)], [init("idx", i)], opset=18)
        check(model, {"data": values(rng, data_shape, F32), "upd": values(rng, (2, 8), F32) + 10})


@pytest.mark.parametrize("reduction", ["add", "mul", "max", "min"])
@pytest.mark.parametrize("elem", [F32, F16, I64, I32, I8, U8])
def test_scatter_elements_reductions(rng, reduction, elem):
    data_shape, idx_shape = (4, 70), (30, 70)
    model = make_model([n("ScatterElements", ["data", "idx", "upd"], ["y"], axis=0, reduction=reduction, name="ser")],
                       [tensor("data", elem, list(data_shape)), tensor("idx", I64, list(idx_shape)),
                        tensor("upd", elem, list(idx_shape))], [tensor("y", elem, None)], opset=18)
    feeds = {"data": values(rng, data_shape, elem), "idx": rng.integers(-4, 4, idx_shape).astype(np.int64),
             "upd": values(rng, idx_shape, elem)}
    if reduction == "mul" and elem in (F32, F16):  # 30 factors a target at most: keep them near 1
        feeds["upd"] = rng.choice(np.array([0.5, 1.0, 2.0, -1.0], NP[elem]), idx_shape)
    try:
        want = cpu_session(model).run(None, feeds)
    except Exception:  # noqa: BLE001 - a type the CPU EP's reduction lacks: hipep's reference
        want = reference("ScatterElements", list(feeds.values()), {"axis": 0, "reduction": reduction})
    check(model, feeds, elem, want=want, exact=elem not in (F32, F16) or reduction in ("max", "min"))


def test_scatter_elements_float_add_within_rounding(rng):
    model = make_model([n("ScatterElements", ["data", "idx", "upd"], ["y"], axis=1, reduction="add", name="acc")],
                       [tensor("data", F32, [3, 16]), tensor("idx", I32, [3, 5000]), tensor("upd", F32, [3, 5000])],
                       [tensor("y", F32, None)], opset=18)
    feeds = {"data": rng.standard_normal((3, 16)).astype(np.float32),
             "idx": rng.integers(-16, 16, (3, 5000)).astype(np.int32),
             "upd": rng.standard_normal((3, 5000)).astype(np.float32)}
    sess = hipep.InferenceSession(model, device="cuda")
    want = cpu_session(model).run(None, feeds)[0]
    for _ in range(3):
        np.testing.assert_allclose(sess.run(None, feeds)[0], want, rtol=1e-4, atol=1e-4)


def test_scatter_opset_9(rng):
    model = make_model([n("Scatter", ["data", "idx", "upd"], ["y"], axis=1, name="sc")],
                       [tensor("data", F16, [3, 5]), tensor("idx", I64, [2, 3]), tensor("upd", F16, [2, 3])],
                       [tensor("y", F16, None)], opset=9)
    check(model, {"data": values(rng, (3, 5), F16), "idx": np.array([[0, 4, -1], [4, 4, 2]], np.int64),
                  "upd": values(rng, (2, 3), F16) + 8})


# ---- ScatterND -----------------------------------------------------------------------------------

ND = [((6, 4), (5, 1)), ((6, 40), (7, 2)), ((6, 4, 8), (2, 3, 1)), ((3, 4, 8), (4, 3)), ((5,), (4, 1))]


@pytest.mark.parametrize("elem", [F32, F16, I64, U8])
@pytest.mark.parametrize("data_shape,idx_shape", ND)
def test_scatter_nd(rng, elem, data_shape, idx_shape):
    """Distinct targets: the CPU EP's answer; repeated ones: the last wins (hipep's reference: the
    CPU EP may apply slices in parallel)."""
    k = idx_shape[-1]
    extents = np.array(data_shape[:k])
    model = make_model([n("ScatterND", ["data", "idx", "upd"], ["y"], name="snd")],
                       [tensor("data", elem, list(data_shape)), tensor("idx", I64, list(idx_shape)),
                        tensor("upd", elem, list(idx_shape[:-1] + data_shape[k:]))], [tensor("y", elem, None)],
                       opset=18)
    rows = int(np.prod(idx_shape[:-1]))
    flat = rng.permutation(int(np.prod(extents)))[:rows]
    distinct = np.stack(np.unravel_index(flat, tuple(extents)), axis=-1).reshape(idx_shape)
    feeds = {"data": values(rng, data_shape, elem), "idx": (distinct - extents * (distinct % 2)).astype(np.int64),
             "upd": values(rng, idx_shape[:-1] + data_shape[k:], elem)}
    check(model, feeds)
    repeated = feeds["idx"].reshape(-1, k).copy()
    repeated[-1] = repeated[0]
    feeds["idx"] = repeated.reshape(idx_shape)
    check(model, feeds, want=reference("ScatterND", list(feeds.values()), {}))


@pytest.mark.parametrize("reduction", ["add", "mul", "max", "min"])
@pytest.mark.parametrize("elem", [F32, F16, I64, I32])
def test_scatter_nd_reductions(rng, reduction, elem):
    data_shape, idx_shape = (5, 6, 40), (12, 2)
    model = make_model([n("ScatterND", ["data", "idx", "upd"], ["y"], reduction=reduction, name="sndr")],
                       [tensor("data", elem, list(data_shape)), tensor("idx", I64, list(idx_shape)),
                        tensor("upd", elem, [12, 40])], [tensor("y", elem, None)], opset=18)
    idx = np.stack([rng.integers(-5, 5, 12), rng.integers(-6, 6, 12)], axis=-1).astype(np.int64)
    idx[-3:] = idx[:3]
    feeds = {"data": values(rng, data_shape, elem), "idx": idx, "upd": values(rng, (12, 40), elem)}
    try:
        want = cpu_session(model).run(None, feeds)
    except Exception:  # noqa: BLE001 - a type the CPU EP's reduction lacks: hipep's reference
        want = reference("ScatterND", list(feeds.values()), {"reduction": reduction})
    check(model, feeds, elem, want=want, exact=elem not in (F32, F16) or reduction in ("max", "min"))


def test_scatter_nd_kv_cache_update(rng):
    """A KV-cache write: [batch, heads, capacity, head_size] f16 rows at positions fed at run time."""
    cache_shape = (2, 4, 64, 128)
    model = make_model([n("ScatterND", ["cache", "pos", "new"], ["out"], name="kv_write")],
                       [tensor("cache", F16, list(cache_shape)), tensor("pos", I64, [2, 4, 3, 3]),
                        tensor("new", F16, [2, 4, 3, 128])], [tensor("out", F16, None)], opset=18)
    b, h, s = np.meshgrid(np.arange(2), np.arange(4), np.array([10, 11, 12]), indexing="ij")
    feeds = {"cache": rng.standard_normal(cache_shape).astype(np.float16),
             "pos": np.stack([b, h, s], axis=-1).astype(np.int64),
             "new": rng.standard_normal((2, 4, 3, 128)).astype(np.float16)}
    check(model, feeds, F16)


# ---- indices out of range ------------------------------------------------------------------------

def bad_index_message(node, op_type, what, index, extent):
    return (rf"node '{node}' \({op_type}\): input 1 \(indices\) into {what}: index {index} is out of data bounds: "
            rf"it must be within the inclusive range \[{-extent}, {extent - 1}\]")


BAD = [
    ("GatherElements", {"axis": 1}, [("data", F32, [3, 5]), ("idx", I64, [3, 2])], "data axis 1", 5,
     {"data": np.arange(15, dtype=np.float32).reshape(3, 5), "idx": np.array([[0, 4], [-5, 1], [2, 3]], np.int64)},
     ("idx", (2, 0))),
    ("GatherND", {}, [("data", F32, [4, 6]), ("idx", I64, [3, 2])], "data axes 0..1", 6,
     {"data": np.arange(24, dtype=np.float32).reshape(4, 6), "idx": np.array([[0, 5], [3, -6], [1, 1]], np.int64)},
     ("idx", (1, 1))),
    ("ScatterElements", {"axis": 0}, [("data", F32, [4, 3]), ("idx", I32, [2, 3]), ("upd", F32, [2, 3])],
     "data axis 0", 4, {"data": np.zeros((4, 3), np.float32), "idx": np.array([[0, 1, 1], [1, 3, -4]], np.int32),
                        "upd": np.ones((2, 3), np.float32)}, ("idx", (0, 2))),
    ("ScatterElements", {"axis": 0, "reduction": "add"}, [("data", I64, [4, 3]), ("idx", I64, [2, 3]),
                                                          ("upd", I64, [2, 3])],
     "data axis 0", 4, {"data": np.zeros((4, 3), np.int64), "idx": np.array([[0, 1, 1], [1, 3, -4]], np.int64),
                        "upd": np.ones((2, 3), np.int64)}, ("idx", (1, 0))),
    ("ScatterND", {}, [("data", F16, [5, 8]), ("idx", I64, [3, 1]), ("upd", F16, [3, 8])], "data axis 0", 5,
     {"data": np.zeros((5, 8), np.float16), "idx": np.array([[4], [0], [4]], np.int64),
      "upd": np.ones((3, 8), np.float16)}, ("idx", (1, 0))),
]


@pytest.mark.parametrize("mode", ["graphs", "no graphs"])
@pytest.mark.parametrize("op_type,attrs,inputs,what,extent,good,bad_at", BAD)
def test_an_index_out_of_range_names_the_node_and_the_session_runs_on(monkeypatch, mode, op_type, attrs, inputs, what,
                                                                       extent, good, bad_at):
    if mode == "no graphs":
        monkeypatch.setattr(device, "use_graphs", False)
    model = make_model([n(op_type, [name for name, _, _ in inputs], ["y"], name="picky", **attrs),
                        n("Identity", ["y"], ["out"], name="after")],
                       [tensor(name, elem, shape) for name, elem, shape in inputs], [tensor("out", inputs[0][1], None)],
                       opset=18)
    sess = hipep.InferenceSession(model, device="cuda")
    want = cpu_session(model).run(None, good)
    for _ in range(3):  # first run, bound replay, CUDA graph replay
        np.testing.assert_array_equal(sess.run(None, good)[0], want[0])
    name, at = bad_at
    for bad_index in (extent, -extent - 1, 1 << 40 if good[name].dtype == np.int64 else (1 << 31) - 1):
        bad = {k: v.copy() for k, v in good.items()}
        bad[name][at] = bad_index
        with pytest.raises(Exception, match=bad_index_message("picky", op_type, what, bad_index, extent)):
            sess.run(None, bad)
        np.testing.assert_array_equal(sess.run(None, good)[0], want[0])  # the record was cleared


# ---- ReverseSequence -----------------------------------------------------------------------------

@pytest.mark.parametrize("elem", [F32, F16, I64, BOOL])
@pytest.mark.parametrize("shape,batch_axis,time_axis", [((5, 3), 1, 0), ((3, 5, 7), 0, 1), ((40, 8, 64), 1, 0)])
def test_reverse_sequence(rng, elem, shape, batch_axis, time_axis):
    """Lengths of 0, of the whole time axis and between, read on the device; ORT's CPU EP's values."""
    model = make_model([n("ReverseSequence", ["x", "lens"], ["y"], batch_axis=batch_axis, time_axis=time_axis,
                          name="rs")],
                       [tensor("x", elem, list(shape)), tensor("lens", I64, [shape[batch_axis]])],
                       [tensor("y", elem, None)], opset=10)
    lens = rng.integers(0, shape[time_axis] + 1, shape[batch_axis]).astype(np.int64)
    lens[0], lens[-1] = 0, shape[time_axis]
    check(model, {"x": values(rng, shape, elem), "lens": lens})


def test_a_sequence_length_out_of_range_names_the_node_and_the_session_runs_on(rng):
    model = make_model([n("ReverseSequence", ["x", "lens"], ["y"], batch_axis=0, time_axis=1, name="rs")],
                       [tensor("x", F32, [2, 4]), tensor("lens", I64, [2])], [tensor("y", F32, None)], opset=10)
    sess = hipep.InferenceSession(model, device="cuda")
    x = rng.standard_normal((2, 4)).astype(np.float32)
    with pytest.raises(Exception, match=r"node 'rs' \(ReverseSequence\): input 1 \(sequence_lens\): sequence length 5 "
                                        r"is out of range \[0, 4\]"):
        sess.run(None, {"x": x, "lens": np.array([1, 5], np.int64)})
    lens = np.array([3, 4], np.int64)
    np.testing.assert_array_equal(sess.run(None, {"x": x, "lens": lens})[0],
                                  cpu_session(model).run(None, {"x": x, "lens": lens})[0])


# ---- MaxUnpool (kernels/max_unpool.hip) ---------------------------------------------------------------

@pytest.mark.parametrize("elem", [F32, F16])
@pytest.mark.parametrize("repeats", [False, True])
@pytest.mark.parametrize("shape_in,shape_out,attrs", [
    ((2, 3, 2, 2), (2, 3, 4, 4), {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ((1, 2, 3), (1, 2, 4), {"kernel_shape": [3], "pads": [1, 0]}),
    ((4, 16, 32, 32), (4, 16, 64, 64), {"kernel_shape": [2, 2], "strides": [2, 2]})])
def test_max_unpool(rng, elem, repeats, shape_in, shape_out, attrs):
    model = make_model([n("MaxUnpool", ["x", "i"], ["y"], name="unpool", **attrs)],
                       [tensor("x", elem, list(shape_in)), tensor("i", I64, list(shape_in))],
                       [tensor("y", elem, None)], opset=22)
    check(model, {"x": values(rng, shape_in, elem), "i": max_unpool_indices(rng, shape_in, shape_out, repeats)})


def test_a_max_unpool_index_out_of_range_names_the_node_and_the_session_runs_on(rng):
    model = make_model([n("MaxUnpool", ["x", "i"], ["y"], name="unpool", kernel_shape=[2, 2], strides=[2, 2])],
                       [tensor("x", F32, [1, 1, 2, 2]), tensor("i", I64, [1, 1, 2, 2])], [tensor("y", F32, None)],
                       opset=22)
    sess = hipep.InferenceSession(model, device="cuda")
    x = rng.standard_normal((1, 1, 2, 2)).astype(np.float32)
    with pytest.raises(Exception, match=r"node 'unpool' \(MaxUnpool\): input 1 \(I\) into Y: index 16 is out of "
                                        r"range \[0, 16\)"):
        sess.run(None, {"x": x, "i": np.array([[[[0, 3], [16, 5]]]], np.int64)})
    good = np.array([[[[0, 3], [8, 15]]]], np.int64)
    np.testing.assert_array_equal(sess.run(None, {"x": x, "i": good})[0],
                                  cpu_session(model).run(None, {"x": x, "i": good})[0])
