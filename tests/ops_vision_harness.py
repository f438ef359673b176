"""The harness of tests/unit/test_ops_vision_*.py: vision, indexing, quantization and the newer shape
ops against ONNX Runtime's CPU EP.

Each case is a single-node model run by ORT and by the registry's reference (as in
test_ops_reference.py, whose coverage guard also counts these files' CASES). ORT's CPU EP has no
f16 kernel for most of these ops (and no kernels for some integer types): such cases name a `via`
type map, and ORT runs the model with those inputs cast (f16 -> f32, ...) and its outputs cast
back. That is exactly "f16 math in f32, rounded once", and exact for data movement.

The same cases check the shape rules (run-time contract and partial shapes) through
test_shape_rules.py's checks.
"""
from __future__ import annotations

import importlib.util
import pathlib

import numpy as np
import pytest

from hipep.ops import lookup
from hipep.ops.registry import REQUIRED

from helpers import cpu_ep_outputs

UNIT_TESTS = pathlib.Path(__file__).with_name("unit")


def load_unit_test_module(name: str):
    """A module of tests/unit loaded by its path (tests/unit is no package and not on the path)."""
    path = UNIT_TESTS / name
    spec = importlib.util.spec_from_file_location(f"_hipep_{path.stem}_for_vision", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


REF = load_unit_test_module("test_ops_reference.py")  # its harness: build, check_against
SR = load_unit_test_module("test_shape_rules.py")  # the shape rules' checks

# The files whose CASES are vision cases, in the order their case numbers run (see CaseTable)
CASE_FILES = ("test_ops_vision_conv_pool.py", "test_ops_vision_resize_blocks.py", "test_ops_vision_indexing.py",
              "test_ops_vision_quantize.py", "test_ops_vision_movement.py")

f32, f16, f64, i8, u8, i16, u16 = np.float32, np.float16, np.float64, np.int8, np.uint8, np.int16, np.uint16
i32, i64, u32, u64, b = np.int32, np.int64, np.uint32, np.uint64, np.bool_
F16 = {f16: f32}  # `via` maps: run ORT with these dtypes cast
CONV_TOL = (1e-4, 1e-5)  # long f32 dot products summed in another order than MLAS's
SEED = 20240611


def random_arrays(seed: int = SEED):
    """R(*shape, dtype=, lo=, hi=): random arrays from a generator of this file's own, so that a
    file's cases are the same whichever other files run in the process."""
    rng = np.random.default_rng(seed)

    def R(*shape, dtype=f32, lo=-2.0, hi=2.0):
        if np.dtype(dtype) == np.bool_:
            return rng.random(shape) < 0.5
        if np.dtype(dtype).kind in "iu":
            return rng.integers(int(lo), int(hi) + 1, size=shape).astype(dtype)
        return rng.uniform(lo, hi, size=shape).astype(dtype)

    return R


def A(values, dtype=np.int64):
    return np.array(values, dtype=dtype)


def _cast_inputs(inputs, via):
    if not via:
        return inputs
    return [None if a is None else (a.astype(via[a.dtype.type]) if a.dtype.type in via else a) for a in inputs]


def ort_expected(op, opset, inputs, attrs, n_out, via=None):
    """ORT's outputs for the node (through the `via` casts, cast back)."""
    feeds_in = _cast_inputs(inputs, via)
    feeds = {f"x{i}": a for i, a in enumerate(feeds_in) if a is not None}
    out = cpu_ep_outputs(REF.build(op, opset, feeds_in, attrs, n_out), feeds)
    if via:
        back = {np.dtype(v): k for k, v in via.items()}
        out = [o.astype(back[o.dtype]) if o.dtype in back else o for o in out]
    return out


def check(op, opset, inputs, attrs=None, n_out=1, since=None, tol=None, via=None):
    inputs = [None if a is None else np.asarray(a) for a in inputs]
    REF.check_against(op, opset, inputs, attrs, n_out, since, tol, ort_expected(op, opset, inputs, attrs, n_out, via))


# pytest.mark.parametrize's names for a CaseTable's params, and for rule_cases' params
CASE_FIELDS = "op,opset,inputs,attrs,n_out,since,tol,via"
RULE_FIELDS = "op_type,opset,inputs,attrs,n_out"


class CaseTable(list):
    """pytest params (op, opset, inputs, attrs, n_out, since, tol, via) of single-node cases.

    A case without an id is named op-opset-<number>, its number counting on from `first`: each file
    of CASE_FILES starts past the numbers of the file before it, so that such an id names one case
    among all of them (tests/ort_differences.py names cases by id)."""

    def __init__(self, first: int = 0):
        super().__init__()
        self.first = first

    def add(self, op, opset, inputs, attrs=None, n_out=1, since=None, id=None, tol=None, via=None):
        since = opset if since is None else since
        self.append(pytest.param(op, opset, inputs, attrs, n_out, since, tol, via,
                                 id=id or f"{op}-{opset}-{self.first + len(self)}"))


def rule_cases(cases):
    """The cases as (op_type, opset, inputs, attrs, n_out), for the shape rules' checks."""
    return [pytest.param(*p.values[:5], id=p.id) for p in cases]


def case_tests(cases):
    """The three tests a case file runs over its `cases`, for it to bind under these names:
    test_matches_ort (the reference against ORT's CPU EP), and the shape rules' run-time contract
    and partial shapes (as test_shape_rules.py checks them)."""

    @pytest.mark.parametrize(CASE_FIELDS, cases)
    def test_matches_ort(op, opset, inputs, attrs, n_out, since, tol, via):
        check(op, opset, inputs, attrs, n_out, since, tol, via)

    @pytest.mark.parametrize(RULE_FIELDS, rule_cases(cases))
    def test_rule_matches_reference(op_type, opset, inputs, attrs, n_out):
        SR.check_rule_matches_reference(op_type, opset, inputs, attrs, n_out)

    @pytest.mark.parametrize(RULE_FIELDS, rule_cases(cases))
    def test_partial_shapes_never_invent_extents(op_type, opset, inputs, attrs, n_out):
        SR.check_partial_never_invents(op_type, opset, inputs, attrs, n_out)

    return test_matches_ort, test_rule_matches_reference, test_partial_shapes_never_invent_extents


def vision_cases() -> list:
    """The CASES of every file of CASE_FILES."""
    return [p for name in CASE_FILES for p in load_unit_test_module(name).CASES]


def reference_of(op_type):
    """The op's reference kernel as f(inputs, **attrs), with the op's attribute defaults."""
    op = lookup("", op_type)
    return lambda inputs, **attrs: op.reference(
        inputs, {**{k: v for k, v in op.attributes.items() if v is not None and v is not REQUIRED}, **attrs})
