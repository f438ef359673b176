"""Test helpers: model building, sessions, comparison with ORT's CPU EP."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

REPO = Path(__file__).resolve().parents[1]
IR_VERSION = 10  # onnxruntime >= 1.24 reads it; onnx's newest IR may be ahead of ORT
ORT_VERSION = tuple(int(p) for p in ort.__version__.split(".")[:2])
# onnxruntime 1.24 (the oldest hipep supports) says some things otherwise than 1.25 and newer
ORT_1_24 = ORT_VERSION < (1, 25)


def load_script(path: str, name: str):
    """A script of the repository that is not in a package (benchmarks/*.py, tools/*.py), loaded
    as module `name` from its path relative to the repository's root."""
    spec = importlib.util.spec_from_file_location(name, REPO / path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cpu_ep() -> str:
    """The EP name of hipep's CPU reference device in this process (hipep.provider_for("cpu")):
    HipCpuExecutionProvider where HipExecutionProvider runs on a GPU, HipExecutionProvider
    elsewhere. Tests of the CPU device select it by this name, so they run the same beside a GPU.
    Registers hipep's plugin with onnxruntime."""
    import hipep

    return hipep.provider_for("cpu")


def make_model(nodes, inputs, outputs, initializers=(), opset=18, name="g", extra_opsets=()):
    graph = helper.make_graph(nodes, name, inputs, outputs, list(initializers))
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in extra_opsets]
    return helper.make_model(graph, opset_imports=opsets, ir_version=IR_VERSION)


def tensor(name, elem=TensorProto.FLOAT, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def session(model, providers=None, disable_fallback=False, optimization=None, record=True, **config):
    """A plain onnxruntime session on `providers` (default: hipep's CPU reference device)."""
    providers = [cpu_ep()] if providers is None else providers
    so = ort.SessionOptions()
    if disable_fallback:
        so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    if record:
        so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    if optimization is not None:
        so.graph_optimization_level = optimization
    for k, v in config.items():
        so.add_session_config_entry(k, v)
    data = model if isinstance(model, (bytes, str)) else model.SerializeToString()
    return ort.InferenceSession(data, sess_options=so, providers=providers_for(so, providers))


HIPEP_EPS = ("HipExecutionProvider", "HipCpuExecutionProvider")


def providers_for(so, providers):
    """`providers` as this onnxruntime takes them. A list of one hipep EP (a name, or a name and
    its options) goes through hipep.ort_compat: onnxruntime 1.24 cannot select a plugin EP by
    name, so there it is added to `so` by its devices. Any other list is passed as it is."""
    providers = list(providers)
    if len(providers) == 1:
        name, options = providers[0] if isinstance(providers[0], tuple) else (providers[0], {})
        if name in HIPEP_EPS:
            import hipep
            from hipep.ort_compat import session_providers

            hipep.register()
            return session_providers(so, name, options)
    return providers


def plain_ort_session(model, ep_name, **options):
    """An onnxruntime.InferenceSession on one hipep EP, made as a user of plain onnxruntime makes
    it (no hipep.InferenceSession): fallback and ORT's Python-level retry left as they are."""
    so = ort.SessionOptions()
    data = model if isinstance(model, (bytes, str)) else model.SerializeToString()
    return ort.InferenceSession(data, sess_options=so, providers=providers_for(so, [(ep_name, options)]))


def cpu_session(model):
    data = model if isinstance(model, (bytes, str)) else model.SerializeToString()
    return ort.InferenceSession(data, providers=["CPUExecutionProvider"])


def assignment(sess) -> dict[str, list[list[str]]]:
    """EP name → list of subgraphs, each a list of node names (op type when unnamed)."""
    out: dict[str, list[list[str]]] = {}
    for sub in sess.get_provider_graph_assignment_info():
        out.setdefault(sub.ep_name, []).append([n.name or n.op_type for n in sub.get_nodes()])
    return out


def assert_matches_cpu(sess, model, feeds, rtol=1e-5, atol=1e-6):
    want = cpu_session(model).run(None, feeds)
    got = sess.run(None, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return got


def external_cache_model(dtype, kv_heads: int, capacity: int, head: int, heads: int, **attention):
    """A decoder step on an external cache, as opset-24 exports write it: TensorScatter puts the
    step's keys and values into the caches at write_indices, Attention-25 reads the caches with
    nonpad_kv_seqlen (each batch entry's valid rows)."""
    f = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    n, i64 = helper.make_node, TensorProto.INT64
    nodes = [n("TensorScatter", ["past_key", "k", "write_indices"], ["present_key"], name="key_update"),
             n("TensorScatter", ["past_value", "v", "write_indices"], ["present_value"], name="value_update"),
             n("Attention", ["q", "present_key", "present_value", "", "", "", "nonpad"], ["y"], name="attention",
               **attention)]
    cache = ["batch", kv_heads, capacity, head]
    inputs = [tensor("q", f, ["batch", heads, "seq", head]), tensor("k", f, ["batch", kv_heads, "seq", head]),
              tensor("v", f, ["batch", kv_heads, "seq", head]), tensor("past_key", f, cache),
              tensor("past_value", f, cache), tensor("write_indices", i64, ["batch"]), tensor("nonpad", i64, ["batch"])]
    outputs = [tensor("y", f, ["batch", heads, "seq", head]), tensor("present_key", f, cache),
               tensor("present_value", f, cache)]
    return make_model(nodes, inputs, outputs, opset=25)


# An op hipep does not implement and ORT's CPU EP runs: the fallback tests' unclaimed node
# (tests/ort/test_fallback.py checks that it is unclaimed, so they say so if that changes).
UNSUPPORTED = "GlobalLpPool"


def middle_model():
    """Add → GlobalLpPool (hipep does not implement it) → Mul."""
    nodes = [
        helper.make_node("Add", ["x", "y"], ["a"], name="first_add"),
        helper.make_node(UNSUPPORTED, ["a"], ["d"], name="the_pool"),
        helper.make_node("Mul", ["d", "d"], ["z"], name="last_mul"),
    ]
    return make_model(nodes, [tensor("x", TensorProto.FLOAT, ["n", 3, 3]), tensor("y", TensorProto.FLOAT, [3])],
                      [tensor("z", TensorProto.FLOAT, ["n", 3, 1])])


def rotate_half_loop_model(trips: int = 2):
    """A Loop whose body rotates half of a [1, seq, 12, 32] tensor, vision-RoPE style, with an
    opset-13 Slice whose bounds are computed at run time from Shape(x)."""
    import numpy as np
    from onnx import numpy_helper

    f = TensorProto.FLOAT
    i64 = TensorProto.INT64
    n = helper.make_node
    body_nodes = [
        n("Identity", ["cond_in"], ["cond_out"], name="keep_going"),
        n("Shape", ["v"], ["v_shape"], name="v_shape"),
        n("Gather", ["v_shape", "last_axis"], ["width"], name="width", axis=0),
        n("Div", ["width", "two"], ["half"], name="half"),
        n("Unsqueeze", ["half", "zero_axis"], ["half1"], name="half1"),
        n("Unsqueeze", ["width", "zero_axis"], ["width1"], name="width1"),
        n("Slice", ["v", "zero1", "half1", "axis3"], ["x1"], name="first_half"),
        n("Slice", ["v", "half1", "width1", "axis3"], ["x2"], name="second_half"),
        n("Neg", ["x2"], ["nx2"], name="negate"),
        n("Concat", ["nx2", "x1"], ["rot"], name="rotate", axis=3),
        n("Mul", ["v", "cos"], ["vc"], name="times_cos"),
        n("Mul", ["rot", "sin"], ["rs"], name="times_sin"),
        n("Add", ["vc", "rs"], ["v_out"], name="rope"),
    ]
    body = helper.make_graph(
        body_nodes, "rope_body",
        [tensor("i", i64, []), tensor("cond_in", TensorProto.BOOL, []), tensor("v", f, [1, "seq", 12, 32])],
        [tensor("cond_out", TensorProto.BOOL, []), tensor("v_out", f, [1, "seq", 12, 32])])
    rng = np.random.default_rng(7)
    inits = [
        numpy_helper.from_array(np.array(trips, np.int64), "trips"),
        numpy_helper.from_array(np.array(True), "go"),
        numpy_helper.from_array(np.array(3, np.int64), "last_axis"),
        numpy_helper.from_array(np.array(2, np.int64), "two"),
        numpy_helper.from_array(np.array([0], np.int64), "zero_axis"),
        numpy_helper.from_array(np.array([0], np.int64), "zero1"),
        numpy_helper.from_array(np.array([3], np.int64), "axis3"),
        numpy_helper.from_array(rng.uniform(-1, 1, 32).astype(np.float32), "cos"),
        numpy_helper.from_array(rng.uniform(-1, 1, 32).astype(np.float32), "sin"),
    ]
    nodes = [n("Loop", ["trips", "go", "x"], ["y"], name="rope_loop", body=body)]
    return make_model(nodes, [tensor("x", f, [1, "seq", 12, 32])], [tensor("y", f, [1, "seq", 12, 32])],
                      inits, opset=17)


def equal_split_model():
    """An equal Split of a static axis whose declared outputs leave that axis dynamic."""
    f = TensorProto.FLOAT
    nodes = [
        helper.make_node("Split", ["x"], ["a", "b"], name="halves", axis=1, num_outputs=2),
        helper.make_node("Mul", ["a", "b"], ["y"], name="product"),
    ]
    graph = helper.make_graph(nodes, "split", [tensor("x", f, ["n", 8])], [tensor("y", f, ["n", None])])
    graph.value_info.extend([tensor("a", f, ["n", None]), tensor("b", f, ["n", None])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=IR_VERSION)


def gqa_preamble_model():
    """The GQA preamble: seqlens_k = Cast(ReduceSum(mask, 1) - 1) on the device, and
    total_sequence_length = Cast(Gather(Shape(·), 1)) stored by the host, both feeding further
    device ops. The Shape reads a device-made copy of the mask's extents (mask + 0·seqlens), so
    the host steps come after queued device work in every topological order, as they do in a
    full decoder; ORT would otherwise run the Shape first."""
    import numpy as np
    from onnx import numpy_helper

    i64, i32 = TensorProto.INT64, TensorProto.INT32
    n = helper.make_node
    nodes = [
        n("ReduceSum", ["attention_mask", "axis1"], ["mask_sum"], name="mask_sum", keepdims=0),
        n("Sub", ["mask_sum", "one"], ["seqlens_k64"], name="minus_one"),
        n("Cast", ["seqlens_k64"], ["seqlens_k"], name="seqlens_k", to=i32),
        n("Mul", ["seqlens_k64", "zero"], ["nothing"], name="nothing"),
        n("Unsqueeze", ["nothing", "axis1"], ["nothing2d"], name="nothing2d"),
        n("Add", ["attention_mask", "nothing2d"], ["mask_again"], name="mask_again"),
        n("Shape", ["mask_again"], ["mask_shape"], name="mask_shape"),
        n("Gather", ["mask_shape", "one_scalar"], ["total64"], name="total_len", axis=0),
        n("Cast", ["total64"], ["total_sequence_length"], name="total_sequence_length", to=i32),
        # further device ops reading both
        n("Sub", ["total_sequence_length", "seqlens_k"], ["padding"], name="padding"),
        n("Mul", ["padding", "seqlens_k"], ["mixed"], name="mixed"),
        n("Add", ["mixed", "total_sequence_length"], ["out"], name="out"),
    ]
    inits = [numpy_helper.from_array(np.array([1], np.int64), "axis1"),
             numpy_helper.from_array(np.array(1, np.int64), "one"),
             numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array(1, np.int64), "one_scalar")]
    return make_model(nodes, [tensor("attention_mask", i64, ["batch", "total"])],
                      [tensor("out", i32, ["batch"]), tensor("seqlens_k", i32, ["batch"])], inits, opset=17)


def if_model(then_op="ReduceMax", **attrs):
    """x[n, 9] → Reshape to [n, 3, 3] → If (sum(x) > 0) with `then_op` in the then branch (UNSUPPORTED's
    [n, 3, 1] summed to [n] after it) and Mul → ReduceSum over axes 1, 2 in the else branch; r[n]."""
    attrs = attrs or ({"axes": [1, 2], "keepdims": 0} if then_op == "ReduceMax" else {})
    then_nodes = [helper.make_node(then_op, ["m"], ["t"], name="then_op", **attrs)]
    if then_op == UNSUPPORTED:
        then_nodes = [helper.make_node(then_op, ["m"], ["p"], name="then_op", **attrs),
                      helper.make_node("ReduceSum", ["p", "axes12"], ["t"], name="then_sum", keepdims=0)]
    then_g = helper.make_graph(then_nodes, "then_g", [], [tensor("t", TensorProto.FLOAT, ["n"])])
    else_g = helper.make_graph([helper.make_node("Mul", ["m", "m"], ["e0"], name="else_mul"),
                           helper.make_node("ReduceSum", ["e0", "axes12"], ["e"], name="else_sum", keepdims=0)],
                          "else_g", [], [tensor("e", TensorProto.FLOAT, ["n"])])
    nodes = [
        helper.make_node("Reshape", ["x", "shape"], ["m"], name="as_matrix"),
        helper.make_node("ReduceSum", ["x"], ["s"], name="total", keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["cond"], name="positive"),
        helper.make_node("If", ["cond"], ["r"], name="branch", then_branch=then_g, else_branch=else_g),
    ]
    return make_model(nodes, [tensor("x", TensorProto.FLOAT, ["n", 9])], [tensor("r", TensorProto.FLOAT, ["n"])],
                      [helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0]), helper.make_tensor("shape", TensorProto.INT64, [3], [-1, 3, 3]),
                       helper.make_tensor("axes12", TensorProto.INT64, [2], [1, 2])], opset=17)


def max_unpool_indices(rng, shape_in, shape_out, repeats: bool = False) -> np.ndarray:
    """MaxUnpool's I for X of `shape_in` unpooled to `shape_out`: each (n, c) plane's indices
    distinct and inside its own plane of the flattened output (as MaxPool's Indices are); with
    `repeats`, every third element aims at the first one's output (the last of them must win)."""
    n_c, take, plane = shape_in[0] * shape_in[1], int(np.prod(shape_in[2:])), int(np.prod(shape_out[2:]))
    idx = np.stack([rng.choice(plane, take, replace=False) + k * plane for k in range(n_c)]).reshape(shape_in)
    if repeats:
        idx.reshape(-1)[1::3] = idx.reshape(-1)[0]
    return idx.astype(np.int64)


def nvrtc_available() -> bool:
    """Whether NVRTC (the nvidia-cuda-nvrtc wheel, through cuda-bindings) can compile kernels here:
    no GPU is needed."""
    import importlib.util

    if importlib.util.find_spec("cuda") is None or importlib.util.find_spec("cuda.bindings") is None:
        return False
    try:
        from hipep.runtime import kernel_cache

        kernel_cache.nvrtc_version()
        kernel_cache.cuda_include_dir()
        return True
    except Exception:  # noqa: BLE001 - any failure means: no NVRTC here
        return False


def needs_nvrtc(test):
    """Skips `test` where NVRTC is not installed."""
    import pytest

    return pytest.mark.skipif(not nvrtc_available(), reason="nvidia-cuda-nvrtc (cuda-bindings) is not installed")(test)


def window_end(p: int, capacity: int, window: int) -> int:
    """Rows a sliding-window KV cache of `capacity` rows holds after p tokens, for a window of
    `window` (GroupQueryAttention's sliding_window_cache: once full, the cache drops the rows the
    window has left in steps of capacity - window + 1; see contrib_attention._windowed_cache)."""
    gap = capacity - window + 1
    return p if p <= capacity else p - gap * ((p - capacity + gap - 1) // gap)


def run_bash_function(script, name: str, *args: str) -> str:
    """The standard output of shell function `name` of `script` (a tools/*.sh path) called with
    `args`: the function's body taken from the script, so a test runs it without the script's
    steps around it."""
    import re
    import subprocess
    from pathlib import Path

    body = re.search(rf"^{re.escape(name)}\(\) \{{.*?^\}}", Path(script).read_text(), re.S | re.M).group(0)
    out = subprocess.run(["bash", "-c", f'{body}\n{name} "$@"', "_", *map(str, args)],
                         capture_output=True, text=True, check=True)
    return out.stdout


def compiled_executor(model, name: str = "subgraph", **options):
    """The model compiled whole as one hipep plan (provider options as strings) and an Executor
    running it on the CPU device (its random schedule): (plan, executor)."""
    import hipep
    from hipep.compiler import compile_subgraph
    from hipep.graph import GraphView
    from hipep.runtime.cpu import CpuDevice
    from hipep.runtime.executor import Executor
    from hipep.weights import WeightStore

    graph = GraphView.from_onnx(model)
    opts = hipep.ProviderOptions.from_strings(options)
    plan = compile_subgraph(graph, name, list(graph.inputs), list(graph.outputs), opts, held=sorted(graph.constants))
    return plan, Executor(plan, CpuDevice("random", 3), weights=WeightStore.for_plan(plan, graph, {}).arrays)


def launch_ops(plan) -> list[str]:
    """The registry keys of a plan's launches, in order."""
    from hipep.plan import Launch, walk

    return [s.op for s in walk(plan.steps) if isinstance(s, Launch)]


def assert_outputs_match(got, want, rtol=1e-5, atol=1e-6):
    """Outputs equal in count, dtype and shape; floats within rtol/atol, everything else exact."""
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        if g.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
        else:
            np.testing.assert_array_equal(g, w)


def check_runs_against_cpu_ep(model, feeds_list, runs=3, whole=True, device="cuda"):
    """A hipep session on `device` (whole=True: disable_cpu_ep_fallback, every node hipep's) run
    `runs` times on each feed dict in turn (first run, bound replay, graph replay), each run against
    ORT's CPU EP; the session. whole=False: the CPU EP runs what hipep leaves."""
    import hipep

    data = model.SerializeToString()
    sess = hipep.InferenceSession(data, device=device, disable_cpu_ep_fallback=whole)
    ref = cpu_session(data)
    for feeds in feeds_list:
        want = ref.run(None, feeds)
        for _ in range(runs):
            assert_outputs_match(sess.run(None, feeds), want)
    return sess


def cpu_flags() -> set[str]:
    """The processor's feature flags (/proc/cpuinfo's first `flags` line; empty where there is none):
    which of ORT's MLAS kernels the CPU EP runs here, and so which of them hipep's references replay."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def mlas_int8_replayed_exactly() -> bool:
    """Whether ORT's CPU EP here runs MatMulNBits' int8 path (accuracy_level 4, the builder's `int4`
    CPU target) on the MLAS kernel hipep's CPU device replays operation by operation: AVX512-VNNI on
    x86-64 (hipep.ops.mlas, _mnb_int8_blk32). On other processors MLAS sums in another order, the two
    agree within f32 rounding, and a random-weight model's greedy tokens can part at a near-tie."""
    return {"avx512f", "avx512_vnni"} <= cpu_flags()


def mlas_u8s8_saturates() -> bool:
    """Whether ORT's CPU EP here multiplies int8 by uint8 on MLAS's x86 kernels without VNNI (AVX2,
    AVX512BW): their vpmaddubsw adds each pair of u8*s8 products into an int16 and saturates it
    (2 * 255 * 127 does not fit), so ConvInteger, QLinearConv and QLinearMatMul give other numbers than
    the integer sums the operators define. VNNI kernels (AVX512-VNNI, AVX-VNNI) and u8*u8 (widened to
    int16 before pmaddwd) are exact, as are other processors' kernels."""
    flags = cpu_flags()
    return "avx2" in flags and not {"avx512_vnni", "avx_vnni"} & flags


# Quantized operators whose integer sums MLAS's u8*s8 kernel computes: (value input, its zero point
# input) pairs, and the output's zero point input (None: an int32 output)
_INT8_GEMM_SLOTS = {
    "ConvInteger": ([(0, 2), (1, 3)], None),
    "MatMulInteger": ([(0, 2), (1, 3)], None),
    "QLinearConv": ([(0, 2), (3, 5)], 7),
    "QLinearMatMul": ([(0, 2), (3, 5)], 7),
}


def _as_unsigned(model, feeds):
    """`model` with every int8 tensor of its quantized nodes moved to uint8 by adding 128 to the value
    and to its zero point (an omitted zero point becomes 128): (v + 128) - (z + 128) = v - z, so the
    operators' results are the same, and an int8 output is the uint8 one less 128. ORT's CPU EP
    computes such a model with MLAS's exact u8*u8 kernels. (model, feeds, names of the outputs to
    shift back)"""
    import onnx
    from onnx import numpy_helper

    model = onnx.ModelProto.FromString(model.SerializeToString())
    g = model.graph
    int8, shifted = set(), []
    for node in g.node:
        pairs, out_zp = _INT8_GEMM_SLOTS.get(node.op_type, ([], None))
        names = list(node.input) + [""] * (8 - len(node.input))
        for value, zp in pairs:
            if value < len(node.input) and _elem(g, names[value], feeds) == TensorProto.INT8:
                int8.add(names[value])
                if names[zp]:
                    int8.add(names[zp])
                else:  # the default zero point 0 of int8 is 128 of uint8
                    names[zp] = f"{names[value]}_zero_point_128"
                    g.initializer.append(numpy_helper.from_array(np.array(128, np.uint8), names[zp]))
        if out_zp is not None and _elem(g, names[out_zp], feeds) == TensorProto.INT8:
            int8.add(names[out_zp])
            shifted.append(node.output[0])
        del node.input[:]
        node.input.extend(_trim(names))
    for v in g.input:
        if v.name in int8:
            v.type.tensor_type.elem_type = TensorProto.UINT8
    for v in g.output:
        if v.name in shifted and v.type.tensor_type.elem_type == TensorProto.INT8:
            v.type.tensor_type.elem_type = TensorProto.UINT8
    for i, init in enumerate(g.initializer):
        if init.name in int8:
            g.initializer[i].CopyFrom(numpy_helper.from_array(_shift(numpy_helper.to_array(init)), init.name))
    feeds = {k: _shift(v) if k in int8 else v for k, v in feeds.items()}
    return model, feeds, shifted


def _elem(graph, name, feeds):
    if name in feeds:
        return {np.dtype(np.int8): TensorProto.INT8}.get(np.asarray(feeds[name]).dtype)
    init = next((t for t in graph.initializer if t.name == name), None)
    return init.data_type if init is not None else None


def _trim(names):
    while names and not names[-1]:
        names.pop()
    return names


def _shift(a):
    """int8 → uint8 plus 128 (the sign bit flipped); uint8 → int8 minus 128."""
    a = np.asarray(a)
    return np.asarray(a.view(np.uint8) ^ np.uint8(0x80)).view(np.uint8 if a.dtype == np.int8 else np.int8)


def cpu_ep_outputs(model, feeds):
    """ORT's CPU EP's outputs of `model` on `feeds`, with a quantized node's exact integer sums where
    this processor's MLAS kernel saturates them (mlas_u8s8_saturates): then ORT runs the same
    arithmetic with every int8 moved to uint8 (_as_unsigned) and its int8 outputs are shifted back."""
    if mlas_u8s8_saturates() and any(n.op_type in _INT8_GEMM_SLOTS for n in model.graph.node):
        model, feeds, shifted = _as_unsigned(model, feeds)
        names = [o.name for o in model.graph.output]
        outs = cpu_session(model).run(None, feeds)
        return [_shift(o) if name in shifted else o for name, o in zip(names, outs)]
    return cpu_session(model).run(None, feeds)
