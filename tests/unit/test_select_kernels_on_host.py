"""NonZero and Compress's GPU launches (kernels/nonzero.hip, hipep/runtime/gpu_select.py; Compress
then gathers through kernels/gather.hip) run on the host stand-in (g++ over the unchanged kernel
sources, a block's threads as host threads) against the registry's references, which follow ONNX
Runtime's CPU EP: inputs of several chunks of the one block's scan, every element type the
registry allows, NaN and -0, a scalar, nothing selected, and Compress's condition shorter and
longer than its axis. Skipped without g++."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from unit.host_kernels import compile_module, run_on_host

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    out = tmp_path_factory.mktemp("host_select")
    return {"warp": 32, "nonzero": compile_module(out, "nonzero", 32), "gather": compile_module(out, "gather", 32)}


def _values(rng, shape, dtype):
    if dtype == np.bool_:
        return np.asarray(rng.random(shape) < 0.3)
    x = rng.integers(-2, 3, shape).astype(dtype) if np.dtype(dtype).kind in "iu" else \
        (rng.integers(-2, 3, shape) * rng.random(shape)).astype(dtype)
    if np.dtype(dtype).kind == "f" and x.size > 2:
        x.reshape(-1)[0], x.reshape(-1)[1] = np.nan, -0.0  # NaN is nonzero, -0 is not
    return x


@pytest.mark.parametrize("shape", [(), (7,), (3000,), (4, 5, 6), (2, 1, 3, 1, 2)], ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.uint8, np.int32, np.int64, np.bool_],
                         ids=lambda d: np.dtype(d).name)
def test_nonzero_on_host(libs, shape, dtype):
    x = _values(np.random.default_rng(len(shape)), shape, dtype)
    got, want, ops = run_on_host(libs, "::NonZero", [x], {})
    assert want[0].shape[1] == 0 or [o.entry for o in ops] == [f"hipep_nonzero_{_name(dtype)}"]
    np.testing.assert_array_equal(got[0], want[0])


def test_nonzero_of_zeros_launches_nothing(libs):
    got, want, ops = run_on_host(libs, "::NonZero", [np.zeros((3, 4), np.float32)], {})
    assert ops == [] and want[0].shape == (2, 0) and got[0].shape == (2, 0)


@pytest.mark.parametrize("shape,axis,cond_len", [((5, 3), 0, 5), ((5, 3), 1, 2), ((2, 3, 4), -1, 6),
                                                 ((4, 6), None, 30), ((4, 6), None, 10), ((3000,), 0, 3000)],
                         ids=["axis0", "short", "long", "flat", "flat-short", "chunks"])
@pytest.mark.parametrize("dtype", [np.float16, np.int64, np.bool_], ids=lambda d: np.dtype(d).name)
def test_compress_on_host(libs, shape, axis, cond_len, dtype):
    rng = np.random.default_rng(cond_len)
    x = _values(rng, shape, dtype)
    cond = rng.random(cond_len) < 0.5
    attrs = {} if axis is None else {"axis": axis}
    got, want, ops = run_on_host(libs, "::Compress", [x, cond], attrs, workspace=True)
    if want[0].size:
        assert [o.entry for o in ops][0] == "hipep_nonzero_bool" and ops[-1].module == "gather"
    np.testing.assert_array_equal(got[0], want[0])


def test_compress_selecting_nothing_launches_nothing(libs):
    got, want, ops = run_on_host(libs, "::Compress", [np.ones((3, 2), np.float32), np.zeros(3, bool)], {"axis": 0},
                                 workspace=True)
    assert ops == [] and want[0].shape == (0, 2)


def _name(dtype) -> str:
    return {"float32": "f32", "float16": "f16", "uint8": "u8", "int32": "i32", "int64": "i64",
            "bool": "bool"}[np.dtype(dtype).name]
