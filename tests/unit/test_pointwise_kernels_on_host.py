"""Generated pointwise kernels run on the CPU: the HIP source hipep renders from an op's pointwise
expression (the GPU's program for that op) is compiled by g++ against the host stand-in for the
CUDA headers, and the launch the binding gives runs over host memory, compared with the op's
registry reference (the CPU device's). Covers the com.microsoft GELU family (f64 tanh, exp and erf
rounded to f32; f16 through the function body's constants) beside a few ai.onnx ops whose f32
forms replay MLAS (Sigmoid, Tanh, Gelu with approximate='tanh'), with broadcasting, NaN and
infinities; BatchNormalization, whose generated kernel reads its per-channel parameters along
axis 1; and BitShift on every integer type it takes, exactly (shift amounts past the width and
negative ones, the sign fill, broadcasting). Skipped without g++."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from hipep.ops.registry import OUTPUT_COUNT, REQUIRED, lookup
from hipep.runtime import gpu_kernels as gk
from hipep.runtime.kernel_cache import pointwise_source

from unit.host_kernels import HOST_CUDA, HostMemory, compile_source, launch

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")
MS = "com.microsoft"
SHAPE = (3, 5, 37)

CASES = [  # (domain, op, inputs as shapes (None: omitted), attributes)
    (MS, "FastGelu", [SHAPE], {}),
    (MS, "FastGelu", [SHAPE, SHAPE[-1:]], {}),
    (MS, "QuickGelu", [SHAPE], {}),
    (MS, "QuickGelu", [SHAPE], {"alpha": 1.3}),
    (MS, "BiasGelu", [SHAPE, SHAPE[-1:]], {}),
    ("", "Sigmoid", [SHAPE], {}),
    ("", "Tanh", [SHAPE], {}),
    ("", "Gelu", [SHAPE], {"approximate": "tanh"}),
    ("", "Gelu", [SHAPE], {}),
]


def _compile(tmp_path, source: str, name: str):
    path = tmp_path / f"{name}.hip"
    path.write_text(source)
    return compile_source(tmp_path, path, name, 32, ("-ffp-contract=off", "-include", str(HOST_CUDA / "rn_intrinsics.h")))


def _values(rng, shape, dtype):
    x = rng.uniform(-8, 8, shape).astype(dtype)
    if len(shape) == len(SHAPE):
        x.reshape(-1)[:6] = [np.nan, np.inf, -np.inf, 0.0, -30.0, 30.0]
    return x


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
@pytest.mark.parametrize("domain,op_type,shapes,attrs", CASES,
                         ids=[f"{c[1]}-{len(c[2])}in-{'-'.join(map(str, c[3].values())) or 'default'}" for c in CASES])
def test_a_generated_kernel_computes_what_the_reference_does(tmp_path, domain, op_type, shapes, attrs, dtype):
    op = lookup(domain, op_type)
    attrs = {**{k: v for k, v in op.attributes.items() if v is not REQUIRED}, **attrs, OUTPUT_COUNT: 1}
    rng = np.random.default_rng(len(op_type) + len(shapes))
    inputs = [_values(rng, s, dtype) for s in shapes]
    with np.errstate(all="ignore"):
        (want,) = op.reference(list(inputs), attrs)
    mem = HostMemory()
    out, got = mem.put(np.full(want.shape, 7, want.dtype))
    key = f"{domain}::{op_type}" if domain else f"::{op_type}"
    binding = gk.binding_for(key)
    assert binding is not None and binding.pointwise, f"{key} has no generated GPU kernel"
    ops = binding.bind([mem.put(x)[0] for x in inputs], [gk.Arg(out.ptr, out.shape, out.dtype)], attrs,
                       gk.Target(sm_count=2, warp_size=32, scratch=lambda n: 0))
    assert len(ops) == 1 and ops[0].source is not None
    ops[0].grid = (min(ops[0].grid[0], 2), *ops[0].grid[1:])  # the grid-stride loop covers the rest
    launch(_compile(tmp_path, pointwise_source(ops[0].source), ops[0].entry), ops[0])
    # the same values up to the math library's f64 tanh/exp/erf against the reference's (numpy's,
    # and hipep's own erf series, accurate to ~1e-13: where 1 + erf cancels in the negative tail,
    # that is a few 1e-7 of the tiny result)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                               rtol=1e-6 if dtype == np.float32 else 1e-3, atol=1e-30)


@pytest.mark.parametrize("shape", [(2, 3, 5, 4), (4, 6), (1, 8, 9)])
@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
def test_batch_normalization_kernel_equals_the_reference(tmp_path, shape, dtype):
    op = lookup("", "BatchNormalization")
    attrs = {**{k: v for k, v in op.attributes.items() if v is not REQUIRED}, "epsilon": 1e-3, OUTPUT_COUNT: 1}
    rng = np.random.default_rng(len(shape))
    c = shape[1]
    inputs = [rng.uniform(-3, 3, shape).astype(dtype), rng.uniform(0.5, 2, c).astype(dtype),
              rng.uniform(-1, 1, c).astype(dtype), rng.uniform(-1, 1, c).astype(dtype), rng.uniform(0.1, 2, c).astype(dtype)]
    (want,) = op.reference(list(inputs), attrs)
    mem = HostMemory()
    out, got = mem.put(np.full(want.shape, 7, want.dtype))
    ops = gk.binding_for("::BatchNormalization").bind([mem.put(x)[0] for x in inputs],
                                                       [gk.Arg(out.ptr, out.shape, out.dtype)], attrs,
                                                       gk.Target(sm_count=2, warp_size=32, scratch=lambda n: 0))
    (launch_op,) = ops
    launch_op.grid = (min(launch_op.grid[0], 2), *launch_op.grid[1:])
    launch(_compile(tmp_path, pointwise_source(launch_op.source), launch_op.entry), launch_op)
    np.testing.assert_array_equal(got, want)  # the same f32 operations in the same order


def _run_generated(tmp_path, op_type: str, inputs, attrs):
    """The op's generated kernel over `inputs` on the host: (its output, the reference's)."""
    op = lookup("", op_type)
    attrs = {**{k: v for k, v in op.attributes.items() if v is not REQUIRED}, **attrs, OUTPUT_COUNT: 1}
    (want,) = op.reference(list(inputs), attrs)
    mem = HostMemory()
    out, got = mem.put(np.full(want.shape, 7, want.dtype))
    ops = gk.binding_for(f"::{op_type}").bind([mem.put(x)[0] for x in inputs], [gk.Arg(out.ptr, out.shape, out.dtype)],
                                              attrs, gk.Target(sm_count=2, warp_size=32, scratch=lambda n: 0))
    assert len(ops) == 1 and ops[0].entry.startswith("hipep_pw_")
    ops[0].grid = (min(ops[0].grid[0], 2), *ops[0].grid[1:])
    launch(_compile(tmp_path, pointwise_source(ops[0].source), ops[0].entry), ops[0])
    return got, want


@pytest.mark.parametrize("dtype", [np.uint8, np.uint32, np.uint64, np.int8, np.int16, np.int32, np.int64])
@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
def test_bitshift_kernel_equals_the_reference(tmp_path, dtype, direction):
    rng = np.random.default_rng(5)
    bits = np.dtype(dtype).itemsize * 8
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max, (3, 2 * bits + 4), dtype=dtype, endpoint=True)
    x[0, :4] = [info.min, info.max, 0, -1 if info.min else 1]
    y = np.arange(2 * bits + 4, dtype=dtype)  # every shift, and past the width
    if info.min:
        y[-4:] = [-1, -bits, info.min, info.max]  # negative amounts: the sign fill, as past the width
    got, want = _run_generated(tmp_path, "BitShift", [x, y], {"direction": direction})
    np.testing.assert_array_equal(got, want)
    got, want = _run_generated(tmp_path, "BitShift", [x[:, :1], y.reshape(1, -1)], {"direction": direction})
    np.testing.assert_array_equal(got, want)
