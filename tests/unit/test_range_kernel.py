"""Range on the GPU without a GPU: kernels/range.hip compiles with NVRTC for sm_90, the binding's
launches are emulated in numpy (integers element by element, f32 by one thread's running sum) and
compared with the registry's reference (ONNX Runtime's running sum), and a GPU partition claims
Range whose bounds come from another EP (AffineGrid's expanded form: an If yields them)."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest
from onnx import TensorProto as T, helper as h

from hipep.graph import GraphView
from hipep.ops.registry import lookup
from hipep.partition import partition
from hipep.runtime import gpu_kernels as gk

from helpers import make_model, needs_nvrtc, tensor


TARGET = gk.Target(sm_count=2)
CASES = [
    (np.int64, 0, 7, 1), (np.int64, 10, -3, -4), (np.int64, -5, 1000, 3), (np.int32, 3, 40, 7),
    (np.int32, 2**31 - 5, 2**31 - 1, 1), (np.int16, -7, 300, 11), (np.float32, 0.0, 1.0, 0.1),
    (np.float32, 1.5, -2.25, -0.3), (np.float32, 0.0, 4096.0, 0.7), (np.int64, 5, 5, 1),
]


def _arg(a: np.ndarray, addr: int) -> gk.Arg:
    return gk.Arg(addr, a.shape, a.dtype, None)


def _emulate(op: gk.KernelOp, memory: dict[int, np.ndarray]) -> None:
    """Runs a hipep_range_* launch over `memory` (address -> array) as the kernel would."""
    start, delta, out = (memory[p.value] for p in op.params[:3])
    n = op.params[3].value
    threads = op.grid[0] * op.block[0]
    if op.entry == "hipep_range_f32":
        assert threads == 1, "the f32 running sum is one thread's"
        v = np.float32(start[0])
        for i in range(n):
            out[i] = v
            v = np.float32(v + delta[0])
        return
    bits = 64 if op.entry == "hipep_range_i64" else 32
    mask = (1 << bits) - 1
    for t in range(threads):  # the grid-stride loop of every thread
        for i in range(t, n, threads):
            u = (int(start[0]) + i * int(delta[0])) & mask  # unsigned wrap-around, then the cast
            out[i] = np.array(u, np.uint64).astype(out.dtype) if out.dtype != np.int64 else np.uint64(u).view(np.int64)


@pytest.mark.parametrize("dtype,start,limit,delta", CASES)
def test_range_launch_matches_the_reference(dtype, start, limit, delta):
    s, l, d = (np.array(v, dtype) for v in (start, limit, delta))
    want = lookup("", "Range").reference([s, l, d], {})[0]
    out = np.full(want.shape, 99, dtype)
    memory = {0x1000: s.reshape(1), 0x2000: l.reshape(1), 0x3000: d.reshape(1), 0x4000: out}
    ops = gk.BINDINGS["::Range"].bind([_arg(s, 0x1000), _arg(l, 0x2000), _arg(d, 0x3000)], [_arg(out, 0x4000)],
                                      {}, TARGET)
    if want.size == 0:
        assert ops == []
        return
    (op,) = ops
    assert op.module == "range" and isinstance(op.params[3], ctypes.c_longlong)
    _emulate(op, memory)
    np.testing.assert_array_equal(out, want)


def test_range_has_a_gpu_program_for_its_types():
    for dt in ("int16", "int32", "int64"):
        assert gk.kernel_reason("::Range", {}, [dt] * 3) is None
    # float bounds too: where they are known only at run time, the partitioner leaves the Range
    # to other EPs (tests/unit/test_partition_gpu_shapes.py), not the kernel table
    scalars = [np.array(v, np.float32) for v in (0.0, 1.0, 0.1)]
    assert gk.kernel_reason("::Range", {}, ["float32"] * 3, values=scalars) is None
    assert "range" in gk.modules()


@needs_nvrtc
def test_the_range_module_compiles_with_every_entry_point():
    from hipep.runtime import kernel_cache

    data, _ = kernel_cache.compile_cubin(kernel_cache.module_source("range"), "range", "sm_90",
                                         {"HIPEP_WARP_SIZE": 32}, use_cache=False)
    for t in ("i16", "i32", "i64", "f32"):
        assert f"hipep_range_{t}".encode() + b"\0" in data


def test_a_gpu_partition_claims_range_whose_bounds_come_from_another_ep():
    then = h.make_graph([h.make_node("Constant", [], ["a"], value=h.make_tensor("va", T.INT64, [], [4]))],
                        "then", [], [tensor("a", T.INT64, [])])
    other = h.make_graph([h.make_node("Constant", [], ["b"], value=h.make_tensor("vb", T.INT64, [], [6]))],
                         "else", [], [tensor("b", T.INT64, [])])
    # the If's condition from x's values: the GPU leaves the If to another EP, whose result Range reads
    nodes = [
        h.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
        h.make_node("Greater", ["total", "zero_f"], ["is_four"]),
        h.make_node("If", ["is_four"], ["limit"], then_branch=then, else_branch=other),
        h.make_node("Range", ["zero", "limit", "one"], ["r"]),
    ]
    inits = [h.make_tensor(k, T.INT64, [], [v]) for k, v in (("four", 4), ("zero", 0), ("one", 1))]
    inits.append(h.make_tensor("zero_f", T.FLOAT, [], [0.0]))
    g = GraphView.from_onnx(make_model(nodes, [tensor("x", T.FLOAT, [2, 2])], [tensor("r", T.INT64, [None])], inits))
    report = partition(g, device="cuda")
    assert [r.node.op_type for r in report.rejections] == ["If"], report.format()


def test_range_after_an_if_on_a_shape_condition_is_claimed_and_binds():
    """The If's condition from x's size: the GPU claims it with the Range after it, and each branch's
    limit reaches Range's binding as a value the host knows."""
    from hipep.tools.cuda_dry_run import dry_run

    then = h.make_graph([h.make_node("Constant", [], ["a"], value=h.make_tensor("va", T.INT64, [], [4]))],
                        "then", [], [tensor("a", T.INT64, [])])
    other = h.make_graph([h.make_node("Constant", [], ["b"], value=h.make_tensor("vb", T.INT64, [], [6]))],
                         "else", [], [tensor("b", T.INT64, [])])
    nodes = [
        h.make_node("Size", ["x"], ["n"]),
        h.make_node("Equal", ["n", "four"], ["is_four"]),
        h.make_node("If", ["is_four"], ["limit"], then_branch=then, else_branch=other),
        h.make_node("Range", ["zero", "limit", "one"], ["r"]),
    ]
    inits = [h.make_tensor(k, T.INT64, [], [v]) for k, v in (("four", 4), ("zero", 0), ("one", 1))]
    model = make_model(nodes, [tensor("x", T.FLOAT, [None, 2])], [tensor("r", T.INT64, [None])], inits)
    report = partition(GraphView.from_onnx(model), device="cuda")
    assert report.all_claimed, report.format()
    for rows in (2, 3):
        assert dry_run(model, {"x": np.zeros((rows, 2), np.float32)}) == 1
