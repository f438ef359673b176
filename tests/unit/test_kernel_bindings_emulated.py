"""The GPU kernels' bindings checked by emulating their launches in numpy (unit/kernel_emulation.py):
copy, transpose, slice, expand, split, concat and gather move every element where numpy does, the
Gather kernel's fault record names a bad index, reductions and row kernels (Softmax, norms) pick
their blocks and shapes, pointwise kernels get the broadcast strides, and a partition for a GPU
leaves nodes without a GPU program to another EP."""
from __future__ import annotations

import ctypes
import itertools
import re

import numpy as np
import pytest

from hipep.ops.registry import OUTPUT_COUNT, REQUIRED, SINCE_VERSION
from hipep.runtime import gpu_faults as gf
from hipep.runtime import gpu_kernels as gk

from unit.kernel_emulation import DST, IDX, SRC, TARGET, Memory, arg, out_arg, run_binding, run_ops

@pytest.mark.parametrize("dtype", [np.uint8, np.float16, np.float32, np.int64])
def test_transpose_binding_moves_every_element(dtype):
    rng = np.random.default_rng(0)
    shapes = [(7,), (3, 5), (2, 3, 4), (2, 1, 3, 5), (4, 64, 48), (3, 33, 70), (2, 4, 8, 16), (1, 37, 1, 40)]
    for shape in shapes:
        x = (rng.random(shape) * 100).astype(dtype)
        for perm in itertools.permutations(range(len(shape))):
            (y,), _ = run_binding("::Transpose", [x], [tuple(shape[p] for p in perm)], {"perm": list(perm)})
            np.testing.assert_array_equal(y, np.transpose(x, perm), err_msg=f"{shape} {perm}")


def test_transpose_uses_the_tiled_kernel_for_swapped_last_axes():
    x = np.arange(2 * 64 * 48, dtype=np.float32).reshape(2, 64, 48)
    (y,), ops = run_binding("::Transpose", [x], [(2, 48, 64)], {"perm": [0, 2, 1]})
    assert ops[0].entry == "hipep_transpose_tiled_w4"
    np.testing.assert_array_equal(y, x.transpose(0, 2, 1))
    (y,), ops = run_binding("::Transpose", [x.reshape(2, 8, 8, 48)], [(2, 48, 8, 8)], {"perm": [0, 3, 1, 2]})
    assert ops[0].entry == "hipep_transpose_tiled_w4"  # axes 1, 2 merge
    (y,), ops = run_binding("::Transpose", [x.reshape(2, 64, 3, 16)], [(2, 3, 64, 16)], {"perm": [0, 2, 1, 3]})
    assert ops[0].entry.startswith("hipep_copy_w16_r4")  # rows of 16 floats move as 16-byte words
    np.testing.assert_array_equal(y, x.reshape(2, 64, 3, 16).transpose(0, 2, 1, 3))


def test_slice_binding_with_steps_and_negative_bounds():
    from hipep.ops.shape import _slice

    rng = np.random.default_rng(1)
    x = rng.random((4, 10, 6)).astype(np.float32)
    cases = [([1, 0], [100, 8], [1, 2], [2, 3]), ([-1], [-100], [1], [-2]), ([0], [3], [-1], [1]),
             ([2, -3, 1], [4, -1, 5], [0, 1, 2], [1, 1, 1]), ([9], [2], [1], [-3]), ([0], [0], [0], [1])]
    for starts, ends, axes, steps in cases:
        ops = [np.array(v, np.int64) for v in (starts, ends, axes, steps)]
        want = _slice([x, *ops], {"starts": None, "ends": None, "axes": None})[0]
        (y,), _ = run_binding("::Slice", [x, *ops], [want.shape], {"starts": None, "ends": None, "axes": None,
                                                           SINCE_VERSION: 13})
        np.testing.assert_array_equal(y, want, err_msg=str((starts, ends, axes, steps)))


def test_expand_and_split_and_concat_bindings():
    rng = np.random.default_rng(2)
    x = rng.random((3, 1, 5)).astype(np.float16)
    (y,), _ = run_binding("::Expand", [x, np.array([2, 3, 4, 5], np.int64)], [(2, 3, 4, 5)], {})
    np.testing.assert_array_equal(y, np.broadcast_to(x, (2, 3, 4, 5)))

    x = rng.random((4, 9, 8)).astype(np.float32)
    outs, _ = run_binding("::Split", [x, np.array([2, 3, 4], np.int64)], [(4, 2, 8), (4, 3, 8), (4, 4, 8)],
                   {"axis": 1, OUTPUT_COUNT: 3, SINCE_VERSION: 18})
    for got, want in zip(outs, np.split(x, [2, 5], axis=1)):
        np.testing.assert_array_equal(got, want)

    parts = [rng.random((2, n, 3)).astype(np.float32) for n in (1, 4, 0, 2, 1, 1, 1, 1, 1, 1, 1)]
    (y,), ops = run_binding("::Concat", parts, [(2, 14, 3)], {"axis": 1})
    assert len(ops) == 2  # ten non-empty inputs: 8 per launch
    np.testing.assert_array_equal(y, np.concatenate(parts, axis=1))
    parts = [rng.random((3, 4)).astype(np.float16) for _ in range(3)]
    (y,), ops = run_binding("::Concat", parts, [(9, 4)], {"axis": 0})
    assert ops[0].entry == "hipep_concat_w8"
    np.testing.assert_array_equal(y, np.concatenate(parts, axis=0))


@pytest.mark.parametrize("dtype", [np.bool_, np.float16, np.float32, np.int64])
def test_tile_depth_to_space_and_space_to_depth_bindings_equal_the_references(dtype):
    """Each is one strided copy (Tile: every output axis read as (repeat, position) with stride 0
    over the repeats; the block rearrangements: a 6-D view of the input, permuted)."""
    from hipep.ops.registry import lookup

    rng = np.random.default_rng(4)

    def values(shape):
        return (rng.random(shape) * 100).astype(dtype)

    def check(op_type, inputs, attrs):
        op = lookup("", op_type)
        full = {**{k: v for k, v in op.attributes.items() if v is not REQUIRED}, **attrs}
        (want,) = op.reference(list(inputs), full)
        (got,), ops = run_binding(f"::{op_type}", inputs, [want.shape], full, constants=(1,))
        np.testing.assert_array_equal(got, want, err_msg=f"{op_type} {attrs} {[a.shape for a in inputs]}")
        return ops

    for shape, reps in (((2, 3), (2, 1)), ((3, 1, 4), (1, 5, 2)), ((7,), (3,)), ((2, 3, 4), (2, 0, 1)),
                        ((1, 5, 16), (4, 1, 1))):
        check("Tile", [values(shape), np.array(reps, np.int64)], {})
    for mode in ("DCR", "CRD"):
        check("DepthToSpace", [values((2, 8, 3, 5))], {"blocksize": 2, "mode": mode})
        check("DepthToSpace", [values((1, 9, 2, 2))], {"blocksize": 3, "mode": mode})
    check("SpaceToDepth", [values((2, 3, 4, 6))], {"blocksize": 2})
    ops = check("SpaceToDepth", [values((1, 2, 9, 3))], {"blocksize": 3})
    assert all(o.entry.startswith(("hipep_copy", "hipep_transpose")) for o in ops if hasattr(o, "entry"))


@pytest.mark.parametrize("itype", [np.int32, np.int64])
def test_gather_binding(itype):
    rng = np.random.default_rng(3)
    table = rng.random((10, 64)).astype(np.float16)
    idx = np.array([[1, -1, 3], [9, 0, 12]], itype)  # 12 is out of range: zeros
    (y,), ops = run_binding("::Gather", [table, idx], [(2, 3, 64)], {"axis": 0})
    assert ops[0].entry == f"hipep_gather_w16_{'i32' if itype == np.int32 else 'i64'}"
    want = table[np.where(idx < 0, idx + 10, np.minimum(idx, 9))]
    want[1, 2] = 0
    np.testing.assert_array_equal(y, want)
    data = rng.random((3, 5, 7)).astype(np.float32)
    (y,), _ = run_binding("::Gather", [data, np.array([4, 0], itype)], [(3, 2, 7)], {"axis": 1})
    np.testing.assert_array_equal(y, np.take(data, [4, 0], axis=1))


@pytest.mark.parametrize("itype", [np.int32, np.int64])
def test_gather_reports_an_index_out_of_range(itype):
    """The Gather kernel writes zeros for an index out of range and fills the stream's fault
    record (the first bad index); the host's reading names the node, input, index and range,
    and clears the record."""
    record_at, sites = 0x700000, gf.FaultSites()
    target = gk.Target(sm_count=4, warp_size=32,
                       fault=lambda what: gf.FaultSite(record_at, sites.site("node 'take' (Gather)", what)))
    mem = Memory()
    mem.alloc(record_at, gf.FAULT_RECORD_BYTES)
    data = np.arange(4 * 6, dtype=np.float32).reshape(4, 6)
    for idx, bad in (([1, 4, -5], 4), ([-5, 0], -5), ([2, -1], None)):
        ind = np.array(idx, itype)
        mem.put(SRC, data)
        mem.put(IDX, ind)
        mem.alloc(DST, ind.size * 6 * 4)
        ops = gk.binding_for("::Gather").bind([arg(data, SRC), arg(ind, IDX)], [out_arg((ind.size, 6), np.float32)],
                                              {"axis": 0}, target)
        assert ops[0].params[-1].record == record_at
        run_ops(mem, ops)
        ok = (ind >= -4) & (ind < 4)
        want = np.where(ok[:, None], data[np.where(ok, ind, 0)], 0)
        np.testing.assert_array_equal(mem.get(DST, (ind.size, 6), np.float32), want)
        record_host = mem.buffers[record_at].ctypes.data
        error = gf.take_fault(record_host, sites)
        if bad is None:
            assert error is None
            continue
        assert isinstance(error, gf.IndexFault)
        assert str(error) == (f"node 'take' (Gather): input 1 (indices) into data axis 0: index {bad} is out of "
                              f"data bounds: it must be within the inclusive range [-4, 3]")
        assert gf.take_fault(record_host, sites) is None  # cleared: the next run starts clean
    # A binding outside a stream (no fault record) reports nowhere.
    ops = gk.binding_for("::Gather").bind([arg(data, SRC), arg(ind, IDX)], [out_arg((2, 6), np.float32)],
                                          {"axis": 0}, TARGET)
    assert ops[0].params[-1].record == 0


def test_fault_record_layout_matches_the_device_header():
    """FaultRecord and FaultSite mirror hipep_device.h's structs, field by field."""
    from hipep.runtime import kernel_cache

    header = (kernel_cache.kernels_dir() / "hipep_device.h").read_text()
    record = re.search(r"struct hipep_fault_record \{(.*?)\};", header, re.S).group(1)
    site = re.search(r"struct hipep_fault_site \{(.*?)\};", header, re.S).group(1)
    fields = lambda body: re.findall(r"^\s*[\w ]+?\*?\s*(\w+);", body, re.M)  # noqa: E731
    assert fields(record) == [f[0] for f in gf.FaultRecord._fields_] == ["code", "site", "value", "bound"]
    assert fields(site) == [f[0] for f in gf.FaultSite._fields_] == ["record", "site"]
    assert ctypes.sizeof(gf.FaultRecord) == 24 and ctypes.sizeof(gf.FaultSite) == 16
    codes = {name: int(value) for name, value in re.findall(r"#define HIPEP_FAULT_(\w+) (\d+)u", header)}
    assert codes == {"INDEX": gf.FAULT_INDEX, "POSITION": gf.FAULT_POSITION, "SEQLEN": gf.FAULT_SEQLEN,
                     "SEQLEN_SHORT": gf.FAULT_SEQLEN_SHORT, "WRITE_INDEX": gf.FAULT_WRITE_INDEX,
                     "KV_LENGTH": gf.FAULT_KV_LENGTH, "AXIS": gf.FAULT_AXIS,
                     "SEQUENCE_LENGTH": gf.FAULT_SEQUENCE_LENGTH, "FLAT_INDEX": gf.FAULT_FLAT_INDEX}
    assert len(set(codes.values())) == len(codes) and gf.FAULT_NONE not in codes.values()


def test_fault_messages_name_the_value_and_its_range():
    """Each code's message names the launch, what it checks, the bad value and the valid range;
    an unknown code still gives an error with its numbers."""
    sites = gf.FaultSites()
    site = sites.site("node 'n' (Op)", "input 1 (position_ids)")

    def message(code, value, bound):
        error = gf.fault_error(gf.FaultRecord(code, site, value, bound), sites)
        assert isinstance(error, gf.InputFault)
        return str(error)

    assert gf.fault_error(gf.FaultRecord(gf.FAULT_NONE, site, 0, 0), sites) is None
    assert message(gf.FAULT_POSITION, 4100, 4096) == (
        "node 'n' (Op): input 1 (position_ids): position 4100 is out of range for cos_cache of 4096 rows: it must be "
        "within [0, 4095]")
    assert message(gf.FAULT_SEQLEN, 9, 8) == (
        "node 'n' (Op): input 1 (position_ids): seqlens_k 9 is out of range [0, 8): seqlens_k + 1 = 10 keys do not "
        "fit the KV cache of 8 rows")
    assert message(gf.FAULT_SEQLEN, -3, 8).endswith("seqlens_k -3 is out of range [0, 8): a length is never negative")
    assert message(gf.FAULT_SEQLEN_SHORT, 1, 4).endswith(
        "seqlens_k 1 is too small for sequence_length 4: it must be at least 3")
    assert message(gf.FAULT_WRITE_INDEX, 22, 21).endswith(
        "write index 22 is out of range [0, 21]: write index + sequence_length must not exceed max_sequence_length")
    assert message(gf.FAULT_WRITE_INDEX, -1, -1).endswith("write index -1 is negative")
    assert isinstance(gf.fault_error(gf.FaultRecord(gf.FAULT_WRITE_INDEX, site, 9, 3), sites), gf.IndexFault)
    assert message(gf.FAULT_KV_LENGTH, 14, 13).endswith(
        "14 valid keys is out of range [0, 13]: a batch entry has at most the 13 keys of K and V")
    assert isinstance(gf.fault_error(gf.FaultRecord(gf.FAULT_KV_LENGTH, site, -1, 13), sites), gf.RangeFault)
    assert message(gf.FAULT_FLAT_INDEX, 16, 16).endswith(
        "index 16 is out of range [0, 16) (the output's 16 elements, flattened)")
    assert isinstance(gf.fault_error(gf.FaultRecord(gf.FAULT_FLAT_INDEX, site, -1, 16), sites), gf.IndexFault)
    assert message(99, 5, 6).endswith("the kernel reported fault code 99 (value 5, bound 6)")
    assert isinstance(gf.fault_error(gf.FaultRecord(gf.FAULT_POSITION, site, 1, 1), sites), gf.RangeFault)


def test_reduction_blocks_agree_with_numpy():
    rng = np.random.default_rng(4)
    x = rng.random((2, 3, 1, 4, 5))
    for k in range(1, 6):
        for axes in itertools.combinations(range(5), k):
            res = gk.reduce_blocks(x.shape, list(axes), False)
            if isinstance(res, str):
                assert "not adjacent" in res
                continue
            outer, r, inner = res
            got = x.reshape(outer, r, inner).sum(axis=1)
            np.testing.assert_allclose(got.reshape(-1), x.sum(axis=axes).reshape(-1), err_msg=str(axes))
    assert gk.reduce_blocks(x.shape, [], True) == (x.size, 1, 1)
    assert gk.reduce_blocks(x.shape, [], False) == (1, x.size, 1)
    assert gk.reduce_blocks(x.shape, [1, 3], False) == (2, 12, 5)  # the extent-1 axis between does not count


def test_row_kernels_pick_warp_or_block_shapes():
    f32 = np.float32
    x = np.zeros((6, 3, 40), f32)
    ops = gk.BINDINGS["::Softmax"].bind([arg(x, SRC)], [out_arg(x.shape, f32)], {"axis": -1, SINCE_VERSION: 13},
                                        TARGET)
    assert ops[0].block == (32, 8, 1) and ops[0].grid == (3, 1, 1) and ops[0].entry == "hipep_softmax_f32_vec"
    x = np.zeros((2, 5000), f32)
    ops = gk.BINDINGS["::Softmax"].bind([arg(x, SRC + 4)], [out_arg(x.shape, f32)], {"axis": -1, SINCE_VERSION: 13},
                                        TARGET)
    assert ops[0].entry == "hipep_softmax_f32" and ops[0].grid == (2, 1, 1) and ops[0].block[0] % 32 == 0
    with pytest.raises(gk.NoKernel):
        gk.BINDINGS["::Softmax"].bind([arg(np.zeros((2, 3, 4), f32), SRC)], [out_arg((2, 3, 4), f32)],
                                      {"axis": 1, SINCE_VERSION: 13}, TARGET)
    # opset 11 flattens at the axis: one row per leading index
    ops = gk.BINDINGS["::Softmax"].bind([arg(np.zeros((2, 3, 4), f32), SRC)], [out_arg((2, 3, 4), f32)],
                                        {"axis": 1, SINCE_VERSION: 11}, TARGET)
    assert bytes(ops[0].params[2]) == bytes(gk.SoftmaxArgs(2, 12))


def test_skip_norm_binding_handles_broadcast_skip_and_missing_outputs():
    f16 = np.float16
    x, skip, g = np.zeros((2, 3, 64), f16), np.zeros((3, 64), f16), np.zeros(64, f16)
    ops = gk.BINDINGS["com.microsoft::SkipSimplifiedLayerNormalization"].bind(
        [arg(x, SRC), arg(skip, SRC + 0x1000), arg(g, SRC + 0x2000)], [out_arg(x.shape, f16)],
        {"epsilon": 1e-5}, TARGET)
    p = ops[0].params
    assert ops[0].entry == "hipep_skip_rms_norm_f16_vec" and p[3].value == 0 and p[5].value == 0
    assert (p[8].rows, p[8].n, p[8].skip_rows) == (6, 64, 3)


def test_pointwise_binding_broadcast_strides():
    f32 = np.float32
    a, b = np.zeros((4, 1, 5), f32), np.zeros((3, 1), f32)
    op = gk.binding_for("::Add").bind([arg(a, SRC), arg(b, SRC + 0x1000)], [out_arg((4, 3, 5), f32)],
                                      {OUTPUT_COUNT: 1, SINCE_VERSION: 14}, TARGET)[0]
    s = op.params[-1]
    dims = list(s.dims[:s.rank])
    assert int(np.prod(dims)) == s.n == 60
    out_idx = np.arange(60)
    coords = np.stack(np.unravel_index(out_idx, (4, 3, 5)), axis=1)
    for k, src in enumerate((a, b)):
        strides = list(s.strides[k][:s.rank])
        off = np.zeros(60, np.int64)
        rem = out_idx.copy()
        for d in range(s.rank - 1, -1, -1):
            off += (rem % dims[d]) * strides[d]
            rem //= dims[d]
        full = np.broadcast_to(np.arange(src.size).reshape(src.shape), (4, 3, 5))
        np.testing.assert_array_equal(off, full[tuple(coords.T)])
    # same shapes merge into one axis (the kernel's rank-1 path)
    op = gk.binding_for("::Mul").bind([arg(a, SRC), arg(a, SRC)], [out_arg(a.shape, f32)], {OUTPUT_COUNT: 1}, TARGET)[0]
    assert op.params[-1].rank == 1


def test_has_kernel_answers():
    f32 = "float32"
    assert gk.has_kernel("::Add", {}, [f32, f32])
    assert gk.has_kernel("hipep::FusedElementwise", {"nodes": [["in", f32, 0], ["exp", f32, 0]], "outputs": [1],
                                                     "broadcast": [0], "input_dtypes": [f32], "output_dtypes": [f32]},
                         [f32])
    assert gk.has_kernel("::Einsum", {"equation": "ij,jk->ik"}, [f32, f32])
    assert gk.has_kernel("::Einsum", {"equation": "ii->i"}, [f32])  # a diagonal, read through its strides
    assert gk.kernel_reason("::Einsum", {"equation": "ij,jk,kl->il"}, [f32] * 3) == \
        "no kernel for cuda: Einsum (equation 'ij,jk,kl->il': 3 operands (one or two have a kernel))"
    assert gk.has_kernel("::Pow", {}, [f32, f32], [(3,), ()], [None, np.array(2.0, np.float32)])
    assert gk.has_kernel("::Pow", {}, ["int32", "int32"], [(3,), (3,)])
    assert gk.has_kernel("::ReduceMean", {"keepdims": 1}, [f32, "int64"], [(2, 3, 4), (1,)], [None, np.array([-1])])
    # axes that are not adjacent, or not the last, are moved there by a copy first
    assert gk.has_kernel("::ReduceMean", {"keepdims": 1}, [f32, "int64"], [(2, 3, 4), (2,)], [None, np.array([0, 2])])
    assert gk.has_kernel("::Softmax", {"axis": 0, SINCE_VERSION: 13}, [f32], [(2, 3)])
    assert not gk.has_kernel("::ReduceProd", {"keepdims": 1}, ["int64", "int64"], [(2, 3), (1,)], [None, np.array([0])])
    assert gk.has_kernel("::Reshape", {}, [f32, "int64"])
    assert gk.has_kernel("com.microsoft::SkipSimplifiedLayerNormalization", {"epsilon": 1e-5}, ["float16"] * 3)


def test_partition_for_a_gpu_leaves_nodes_without_a_program():
    """On a GPU device a node without a GPU program is not claimed ("no kernel for cuda"), unless
    it becomes host work (integer shape arithmetic on host values); symbolic dims are fine."""
    from onnx import TensorProto as TP
    from onnx import helper, numpy_helper

    from hipep.graph import GraphView
    from hipep.partition import partition

    n = helper.make_node
    nodes = [n("Softmax", ["x"], ["s"], axis=-1, name="sm"), n("Einsum", ["s", "w", "w"], ["m"], equation="bij,jk,kl->bil", name="mm"),
             n("Shape", ["x"], ["shape"], name="shape"), n("Gather", ["shape", "one"], ["t"], axis=0, name="take"),
             n("Range", ["zero", "t", "one_s"], ["r"], name="range"), n("Cast", ["r"], ["rf"], to=TP.FLOAT, name="cast"),
             n("Add", ["m", "rf"], ["y"], name="add"), n("ReduceSum", ["x", "axes02"], ["bad"], name="rsum"),
             n("Range", ["zero", "limit", "one_s"], ["r2"], name="range_of_input")]
    inits = [numpy_helper.from_array(np.ones((8, 8), np.float32), "w"),
             numpy_helper.from_array(np.array([1], np.int64), "one"),
             numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array(1, np.int64), "one_s"),
             numpy_helper.from_array(np.array([0, 2], np.int64), "axes02")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TP.FLOAT, ["b", 4, 8]),
                                           helper.make_tensor_value_info("limit", TP.INT64, [])],
                              [helper.make_tensor_value_info(v, TP.FLOAT, None) for v in ("y", "bad")] +
                              [helper.make_tensor_value_info("r2", TP.INT64, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    view = GraphView.from_onnx(model)
    assert not partition(view).rejections  # the CPU device runs everything
    report = partition(view, device="cuda")
    reasons = {r.node.name: r.reason for r in report.rejections}
    # Range of host values (Shape -> Gather) is host work; of a graph input (device memory) it runs
    # its GPU kernel (test_partition_gpu_host_work.py: ops without one are not claimed there)
    # (a reduction over axes that are not adjacent is claimed: they are moved last first)
    assert set(reasons) == {"mm"}, reasons
    assert reasons["mm"].startswith("no kernel for cuda: Einsum (equation 'bij,jk,kl->bil': 3 operands")


def test_every_binding_check_takes_the_claim_arguments():
    """The claim step calls check(attrs, dtypes, shapes, values) for every GPU binding; a check
    with another signature would turn every claim of its op into a TypeError."""
    import inspect

    for key, binding in gk.BINDINGS.items():
        inspect.signature(binding.check).bind({}, ["float32"], [None], [None])  # raises TypeError
        if key not in ("com.microsoft::MatMulNBits", "hipep::GatedMatMulNBits",
                       "hipep::SkipNormMatMulNBits"):  # need their required attributes
            why = binding.check({}, ["float32"], [None], [None])
            assert why is None or isinstance(why, str), key
