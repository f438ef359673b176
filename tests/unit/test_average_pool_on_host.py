"""AveragePool's GPU program (kernels/pool.hip's average_pool, bound in hipep.runtime.gpu_pool) run
on the CPU: g++ compiles the unchanged kernel against the host stand-in for the CUDA headers
(tests/unit/host_cuda) and the binding's launch runs block by block over host memory. Compared bit
for bit with ONNX Runtime's CPU EP, f32 and f16 (which ORT runs as its f32 kernel on the widened
input, rounded once), and with the registry's reference within rounding: windows reaching into the
padding that count only the inputs they hold (explicit pads, auto_pad SAME_UPPER / SAME_LOWER,
dilations, ceil_mode), windows that count the padding (a ceil_mode window running past it counts
only the taps before its end), 1 to 3 spatial axes, at opset 22 (ORT's own loops: window order)
and opset 11 (MLAS: its vector kernels' column order, its global kernel's four lanes).

ORT's sessions compare without its layout optimizations (ORT_ENABLE_EXTENDED): at its default
level it rewrites an f32 2-D AveragePool of opsets 7 to 18 whose channel count is a multiple of its
NCHWc block (8 with AVX2, 16 with AVX-512) into its NCHWc kernel, which adds in window order; the
kernel follows the node's own kernel, MLAS's.

ONNX Runtime's releases count the padding differently before 1.32, whose division hipep follows:
1.24 divides opset 19's windows by the wrong axes' pads (fixed by 1.28), and up to 1.28 its MLAS
opsets (7 to 18) divide a ceil_mode window counting the padding by the kernel's size (1.30 counts
the taps before the padding's end); there the comparison is with the reference only. Skipped
without g++."""
from __future__ import annotations

import platform
import shutil

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper

from hipep.ops.registry import OUTPUT_COUNT, SINCE_VERSION
from hipep.runtime import gpu_kernels as gk
from hipep.runtime import gpu_pool

from helpers import ORT_VERSION, make_model, tensor
from unit.host_kernels import HostMemory, compile_module, run_on_host

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")

ELEM = {np.float32: TP.FLOAT, np.float16: TP.FLOAT16}
SHORT = {np.float32: "f32", np.float16: "f16"}


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    out = tmp_path_factory.mktemp("average_pool")
    return {"warp": 32, "dir": out, "generated": {}, "pool": compile_module(out, "pool", 32)}


def ort_divides_as_hipep(opset: int, attrs) -> bool:
    """Whether this onnxruntime's CPU EP counts an AveragePool window's divisor as 1.32 does (the
    releases measured: 1.24, 1.28, 1.30, 1.32; those between are taken as the older behaviour)."""
    if not int(attrs.get("count_include_pad", 0)):
        return True
    if opset >= 19:
        return ORT_VERSION >= (1, 28)
    return not int(attrs.get("ceil_mode", 0)) or ORT_VERSION >= (1, 30)


# MLAS's global kernel ends by adding its four lanes in x86's order (SSE), which the kernel follows;
# ARM's pairs them otherwise.
X86 = platform.machine().lower() in ("x86_64", "amd64")


def onnx_runtime(x: np.ndarray, attrs, opset: int) -> np.ndarray:
    """ORT's CPU EP's Y, its layout optimizations off (no NCHWc rewrite)."""
    import onnxruntime as ort

    model = make_model([helper.make_node("AveragePool", ["x"], ["y"], **attrs)],
                       [tensor("x", ELEM[x.dtype.type], list(x.shape))], [tensor("y", ELEM[x.dtype.type], None)],
                       opset=opset)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def assert_bits_equal(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    bits = f"u{got.itemsize}"
    np.testing.assert_array_equal(got.view(bits), want.view(bits))


def close(got: np.ndarray, want: np.ndarray, scale: float) -> None:
    """Within a few roundings of T for sums of inputs up to `scale` in magnitude (the reference adds
    in numpy's order)."""
    eps = float(np.finfo(got.dtype).eps)
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=4 * eps, atol=4 * eps * scale)


def pool_input(rng, shape, dtype) -> np.ndarray:
    """Magnitudes mixed over five decades: sums whose rounding shows the order of the additions."""
    return (rng.uniform(-4, 4, shape) * rng.choice([1e-2, 1.0, 1e2], shape)).astype(dtype)


def check(libs, x: np.ndarray, attrs, opset: int, sm_count: int = 1):
    """The kernel's Y: bit for bit ONNX Runtime's (where it divides as 1.32), within rounding the
    reference's; (Y, the launches)."""
    (got,), (want,), ops = run_on_host(libs, "::AveragePool", [x], {**attrs, SINCE_VERSION: opset},
                                       sm_count=sm_count)
    assert [o.entry for o in ops] == [f"hipep_average_pool_{SHORT[x.dtype.type]}"]
    close(got, want, float(np.abs(x).max(initial=1.0)))
    if ort_divides_as_hipep(opset, attrs) and (X86 or ops[0].params[2].order != gpu_pool.POOL_MLAS_GLOBAL):
        assert_bits_equal(got, onnx_runtime(x, attrs, opset))
    return got, ops


AVERAGE_POOLS = [  # (X, attributes); dilations only from opset 19
    ((2, 3, 7, 7), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
    ((1, 2, 9, 8), {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 0, 2, 1]}),
    ((1, 2, 9, 8), {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 0, 2, 1], "dilations": [2, 1]}),
    ((1, 3, 10, 10), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    ((1, 2, 6, 7), {"kernel_shape": [2, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1}),
    ((2, 2, 11), {"kernel_shape": [4], "auto_pad": "SAME_UPPER", "strides": [3]}),
    ((2, 2, 11), {"kernel_shape": [4], "auto_pad": "SAME_LOWER", "strides": [3]}),
    ((1, 2, 7, 6), {"kernel_shape": [3, 2], "auto_pad": "SAME_LOWER", "strides": [2, 1]}),
    ((1, 2, 5, 6, 6), {"kernel_shape": [2, 3, 3], "pads": [1, 1, 1, 0, 1, 1]}),
    ((1, 1, 6, 7, 9), {"kernel_shape": [2, 3, 3], "strides": [2, 2, 3], "pads": [1, 0, 1, 1, 2, 0],
                       "ceil_mode": 1}),
    ((1, 1, 7, 8, 8), {"kernel_shape": [3, 2, 3], "strides": [3, 2, 2], "dilations": [2, 2, 1], "ceil_mode": 1}),
    ((2, 3, 5, 7), {"kernel_shape": [5, 7]}),  # the whole plane: MLAS's global kernel before opset 19
    ((1, 2, 8, 12), {"kernel_shape": [3, 3], "strides": [1, 3], "pads": [1, 1, 1, 1]}),  # MLAS's generic one
    ((1, 16, 9, 9), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),  # channels of NCHWc blocks
]


@pytest.mark.parametrize("opset", [11, 22])
@pytest.mark.parametrize("count_include_pad", [0, 1])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("shape,attrs", AVERAGE_POOLS, ids=[f"avg-{i}" for i in range(len(AVERAGE_POOLS))])
def test_average_pool_equals_onnx_runtime(libs, dtype, count_include_pad, opset, shape, attrs):
    if "dilations" in attrs and opset < 19:
        pytest.skip("AveragePool takes dilations from opset 19")
    x = pool_input(np.random.default_rng(20), shape, dtype)
    check(libs, x, {**attrs, "count_include_pad": count_include_pad}, opset)


def test_ceil_mode_windows_past_the_padding_count_the_taps_before_its_end(libs):
    """count_include_pad=1 with ceil_mode: the last window of each axis runs past the padding and
    divides by its taps inside X and the padding; over ones the quotient shows the divisor."""
    attrs = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 0, 0, 0], "ceil_mode": 1, "count_include_pad": 1}
    got, _ = check(libs, np.ones((1, 1, 7, 6), np.float32), attrs, 22)
    # rows (7, one padded before): windows [-1, 2), [1, 4), [3, 6), [5, 8), of 3, 3, 3 and 2 taps
    # before the end (7), holding 2, 3, 3 and 2 inputs; columns (6): [0, 3), [2, 5), [4, 7)
    taps_h, inputs_h = np.array([3, 3, 3, 2]), np.array([2, 3, 3, 2])
    taps_w = inputs_w = np.array([3, 3, 2])
    want = np.outer(inputs_h, inputs_w).astype(np.float32) / np.outer(taps_h, taps_w).astype(np.float32)
    assert_bits_equal(got[0, 0], want)


def test_the_conformance_case_of_dilated_windows_counting_the_padding(libs):
    """ONNX's test_averagepool_3d_dilations_large_count_include_pad_is_1_ceil_mode_is_True: the
    cuda device claims it whole, and the kernel gives ORT's result."""
    import hipep

    attrs = {"kernel_shape": [5, 5, 5], "strides": [3, 3, 3], "dilations": [2, 2, 2], "ceil_mode": 1,
             "count_include_pad": 1}
    model = make_model([helper.make_node("AveragePool", ["x"], ["y"], **attrs)],
                       [tensor("x", TP.FLOAT, [1, 1, 32, 32, 32])], [tensor("y", TP.FLOAT, None)], opset=22)
    report = hipep.explain(model, device="cuda")
    assert report.all_claimed, report.rejection_lines()
    x = np.random.default_rng(21).standard_normal((1, 1, 32, 32, 32)).astype(np.float32)
    got, _ = check(libs, x, attrs, 22, sm_count=4)
    assert got.shape == (1, 1, 9, 9, 9)  # the last window's taps 24, 26, ..., 32: one past X


@pytest.mark.parametrize("shape,attrs,order", [
    ((1, 2, 9, 8), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, gpu_pool.POOL_MLAS_ROWS_2D),
    ((1, 2, 5, 6, 7), {"kernel_shape": [2, 3, 3], "strides": [1, 2, 2], "pads": [1, 1, 1, 0, 1, 1]},
     gpu_pool.POOL_MLAS_ROWS_3D),
    ((2, 2, 9, 13), {"kernel_shape": [9, 13]}, gpu_pool.POOL_MLAS_GLOBAL),
])
def test_mlas_orders_are_what_onnx_runtime_adds_in(libs, shape, attrs, order):
    """Opset 11 runs MLAS: the kernel follows its order, and window order would differ from ORT's
    result (the comparison shows the order)."""
    if order == gpu_pool.POOL_MLAS_GLOBAL and not X86:
        pytest.skip("MLAS's global kernel adds its lanes in another order off x86")
    x = pool_input(np.random.default_rng(22), shape, np.float32)
    got, ops = check(libs, x, attrs, 11)
    assert ops[0].params[2].order == order
    (window_order,), _, ops = run_on_host(libs, "::AveragePool", [x], {**attrs, SINCE_VERSION: 22}, sm_count=1)
    assert ops[0].params[2].order == gpu_pool.POOL_WINDOW_ORDER
    assert not np.array_equal(window_order.view(np.uint32), got.view(np.uint32))


def _random_geometry(rng):
    n = int(rng.integers(1, 4))
    kernel = [int(k) for k in rng.integers(1, 5, n)]
    opset = int(rng.choice([10, 11, 19, 22]))
    attrs = {"kernel_shape": kernel, "strides": [int(s) for s in rng.integers(1, 4, n)],
             "count_include_pad": int(rng.integers(0, 2)), "ceil_mode": int(rng.integers(0, 2))}
    dilations = [1] * n
    auto_pad = str(rng.choice(["NOTSET", "NOTSET", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"]))
    if auto_pad == "NOTSET":
        attrs["pads"] = [int(rng.integers(0, k)) for k in kernel * 2]  # ORT: pads shorter than the kernel
        if opset >= 19:
            dilations = [int(d) for d in rng.integers(1, 3, n)]
            attrs["dilations"] = dilations
    else:
        attrs["auto_pad"] = auto_pad
    lengths = [int(rng.integers(max(3, (k - 1) * d + 1), 12)) for k, d in zip(kernel, dilations)]
    if rng.random() < 0.15:  # the window is the whole plane
        attrs = {"kernel_shape": lengths, "count_include_pad": attrs["count_include_pad"],
                 "ceil_mode": attrs["ceil_mode"]}
        return (int(rng.integers(1, 3)), int(rng.integers(1, 3)), *lengths), attrs, opset
    if auto_pad.startswith("SAME") and any(k < s for k, s in zip(kernel, attrs["strides"])):
        # a kernel shorter than its stride: ORT sizes SAME's padding negative, hipep as none
        attrs["strides"] = [min(s, k) for k, s in zip(kernel, attrs["strides"])]
    return (int(rng.integers(1, 3)), int(rng.integers(1, 3)), *lengths), attrs, opset


def test_random_geometries_equal_onnx_runtime(libs):
    """Windows of random kernels, strides, padding (explicit and auto_pad), dilations, ceil_mode and
    count_include_pad over 1 to 3 axes, f32 and f16, at MLAS's opsets and ORT's own."""
    rng = np.random.default_rng(23)
    orders = set()
    for _ in range(60):
        shape, attrs, opset = _random_geometry(rng)
        x = pool_input(rng, shape, rng.choice([np.float32, np.float16]))
        _, ops = check(libs, x, attrs, opset)
        orders.add(ops[0].params[2].order)
    assert orders == {gpu_pool.POOL_WINDOW_ORDER, gpu_pool.POOL_MLAS_ROWS_2D, gpu_pool.POOL_MLAS_ROWS_3D,
                      gpu_pool.POOL_MLAS_GLOBAL}


def test_every_average_pool_form_is_claimed():
    def reason(attrs, dtype="float32", shape=(1, 1, 6, 6)):
        return gk.kernel_reason("::AveragePool", {"auto_pad": "NOTSET", "ceil_mode": 0, "count_include_pad": 0,
                                                  **attrs}, [dtype], [shape])

    padded = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}
    for dtype in ("float32", "float16"):
        assert reason(padded, dtype) is None
        assert reason({"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER", "strides": [2, 2]}, dtype) is None
        assert reason({"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1,
                       "count_include_pad": 1}, dtype) is None
        dilated = {"kernel_shape": [2, 2, 2], "dilations": [2, 1, 2], "ceil_mode": 1}
        assert reason(dilated, dtype, (1, 1, 6, 6, 6)) is None
    assert "element type int8" in reason(padded, "int8")
    assert "element type float64" in reason(padded, "float64")
    assert "4 spatial axes" in reason({"kernel_shape": [2] * 4}, "float32", (1, 1, 4, 4, 4, 4))


def test_orders_follow_onnx_runtimes_kernels():
    from hipep.ops.vision import _Window

    def order(shape, attrs, opset):
        win = _Window("AveragePool", shape, attrs["kernel_shape"], attrs, int(attrs.get("ceil_mode", 0)))
        return gpu_pool._average_pool_order(win, {**attrs, SINCE_VERSION: opset})

    three = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}
    assert order((9, 9), three, 22) == gpu_pool.POOL_WINDOW_ORDER
    assert order((9, 9), three, 19) == gpu_pool.POOL_WINDOW_ORDER
    assert order((9, 9), three, 11) == gpu_pool.POOL_MLAS_ROWS_2D
    assert order((9, 9), three, 7) == gpu_pool.POOL_MLAS_ROWS_2D
    assert order((4, 9, 9), {"kernel_shape": [2, 3, 3]}, 11) == gpu_pool.POOL_MLAS_ROWS_3D
    assert order((9,), {"kernel_shape": [3]}, 11) == gpu_pool.POOL_WINDOW_ORDER  # MLAS's 1-D kernel
    assert order((9,), {"kernel_shape": [9]}, 11) == gpu_pool.POOL_MLAS_GLOBAL
    assert order((9, 9), {"kernel_shape": [9, 9]}, 11) == gpu_pool.POOL_MLAS_GLOBAL
    assert order((9, 9), {**three, "strides": [1, 3]}, 11) == gpu_pool.POOL_WINDOW_ORDER  # a stride past 2
    assert order((40, 40), {"kernel_shape": [33, 3]}, 11) == gpu_pool.POOL_WINDOW_ORDER  # a kernel past 32
    assert order((9, 2046), three, 11) == gpu_pool.POOL_WINDOW_ORDER  # rows past MLAS's buffer
    assert order((9, 2043), three, 11) == gpu_pool.POOL_MLAS_ROWS_2D
    # count_include_pad with ceil_mode: ORT's own loops at every opset
    assert order((9, 9), {**three, "ceil_mode": 1, "count_include_pad": 1}, 11) == gpu_pool.POOL_WINDOW_ORDER
    assert order((9, 9), {**three, "ceil_mode": 1}, 11) == gpu_pool.POOL_MLAS_ROWS_2D


def test_empty_outputs_launch_nothing():
    mem = HostMemory()
    x = mem.put(np.zeros((0, 2, 6, 6), np.float32))[0]
    y = gk.Arg(mem.put(np.zeros((0, 2, 3, 3), np.float32))[0].ptr, (0, 2, 3, 3), np.dtype(np.float32))
    attrs = {"kernel_shape": [2, 2], "strides": [2, 2], OUTPUT_COUNT: 1, SINCE_VERSION: 22}
    assert gk.binding_for("::AveragePool").bind([x], [y], attrs, gk.Target(sm_count=1, warp_size=32)) == []
