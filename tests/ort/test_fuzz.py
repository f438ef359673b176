"""The differential fuzzer (hipep.tools.fuzz): hipep's CPU device against ORT's CPU EP.

A bounded profile of seeded cases runs through the worker pool as CI's fuzz run; hypothesis
drives the same generator (and shrinks what it finds); the pool must survive workers that
crash or hang; the judge must tell clear errors from unclear ones.
"""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from hipep.tools import fuzz
from hipep.tools.fuzz import Case, Check, Result

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def test_bounded_profile(tmp_path):
    s = fuzz.campaign(150, workers=2, seed=0, out=tmp_path, timeout=60)
    assert s["cases"] == 150
    assert s["findings"] == 0, fuzz.format_summary(s)
    # the generator keeps making graphs both sides run and compare, not only rejections
    assert s["outcomes"].get("pass/match", 0) >= 60, s["outcomes"]
    assert s["worker_restarts"] == 0


@pytest.fixture(scope="module")
def pool():
    with fuzz.Pool(1, timeout=60) as p:
        yield p


@settings(max_examples=25, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(case=fuzz.cases())
def test_hypothesis_cases(pool, case, tmp_path_factory):
    outcome = pool.run_case(case)
    if outcome.verdict != "pass" and not outcome.known:
        folder = fuzz.save_case(case, outcome, tmp_path_factory.mktemp("finding"))
        pytest.fail(f"{case.what}\n{outcome.category}: {outcome.detail}\nreproducer: {folder}")


def _probe(what):
    return Case(None, f"probe:{what}", what, b"", [])


def test_pool_survives_crashes_and_hangs():
    cases = [fuzz.gen_case(1), _probe("abort"), fuzz.gen_case(2), _probe("hang"), _probe("exit"), fuzz.gen_case(3)]
    got = {}
    with fuzz.Pool(1, timeout=3) as pool:
        pool.run(cases, lambda c, o: got.setdefault(id(c), o))
        assert pool.restarts == 3
    outcomes = [got[id(c)] for c in cases]
    abort, hang, exit_ = outcomes[1], outcomes[3], outcomes[4]
    assert [abort.category, hang.category, exit_.category] == ["crash", "hang", "crash"]
    assert "SIGABRT" in abort.detail and "exit code 3" in exit_.detail
    # each one again alone in a fresh worker: the case itself, not what ran before it
    assert abort.reproduced_alone and hang.reproduced_alone and exit_.reproduced_alone
    # and the cases after them ran on the replacement workers
    assert [o.verdict for o in (outcomes[0], outcomes[2], outcomes[5])] == ["pass"] * 3


def test_findings_are_saved_and_replay(tmp_path):
    case = fuzz.gen_case(7)
    folder = fuzz.save_case(case, fuzz.Outcome("finding", "mismatch", "example"), tmp_path / "f")
    again = fuzz.load_case(folder)
    assert again.model == case.model and again.seed == 7 and again.checks == case.checks
    assert [sorted(r) for r in again.runs] == [sorted(r) for r in case.runs]
    for a, b in zip(again.runs, case.runs):
        for k in a:
            np.testing.assert_array_equal(a[k], b[k])
    out = subprocess.run([sys.executable, "-P", "-m", "hipep.tools.fuzz", "--replay", str(folder)], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.startswith("seed 7: ")


def test_cases_are_deterministic():
    for seed in (0, 11, 4242):
        a, b = fuzz.gen_case(seed), fuzz.gen_case(seed)
        assert a.model == b.model and a.what == b.what and a.kind == b.kind
        assert all(x.keys() == y.keys() and all(np.array_equal(x[k], y[k], equal_nan=True) for k in x)
                   for x, y in zip(a.runs, b.runs))


# ---- the judge ---------------------------------------------------------------------------------

STATUS = ("[ONNXRuntimeError] : 1 : FAIL : Non-zero status code returned while running HipExecutionProvider_1_0 "
          "node. Name:'x' Status Message: hipep: running HipExecutionProvider_1_0 failed: ")


@pytest.mark.parametrize("message, clear", [
    ("RuntimeShapeError: node 'proj' (MatMul): MatMul: inner dimensions disagree", True),
    ("IndexError: index 12 is out of bounds for axis 0 with size 12\n\nAt:\n  <string>(14): signature\n", False),
    ("RuntimeError: Failed to allocate memory\n\nAt:\n  executor.py(176): _outputs\n", False),
    ("ModelError: g: compiling failed: AttributeError: 'CastOp' object has no attribute 'result'", False),
    ("output 0 has 3 elements, ORT's buffer 4", True),  # the bridge's own words
])
def test_error_clarity(message, clear):
    origin, got, why = fuzz.error_clarity(Result(False, None, "Fail", STATUS + message))
    assert origin == "hipep" and got is clear, why


def test_judge_verdicts():
    case = Case(0, "graph", "", b"", [{}], {"y": Check("exact")})
    ok = Result(True)
    out = lambda *a: Result(True, [np.array(a, np.float32)])  # noqa: E731
    ort_error = Result(False, None, "InvalidArgument", "[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : Got invalid dimensions")
    hipep_error = Result(False, None, "Fail", STATUS + "RuntimeShapeError: Gather: index 9 is out of range")
    assert fuzz.judge(case, ok, ok, [(out(1, np.nan), out(1, np.nan))], ["y"]).category == "match"
    assert fuzz.judge(case, ok, ok, [(out(1, 2), out(1, 3))], ["y"]).category == "mismatch"
    assert fuzz.judge(case, ok, ok, [(out(1, np.nan), out(1, 0))], ["y"]).category == "mismatch"
    assert fuzz.judge(case, ok, ok, [(ort_error, ort_error)], ["y"]).category == "both-reject-run"
    assert fuzz.judge(case, ok, ok, [(hipep_error, out(1))], ["y"]).category == "hipep-rejects-run"
    assert fuzz.judge(case, ok, ok, [(out(1), hipep_error)], ["y"]).category == "accepts-invalid"
    assert fuzz.judge(case, ok, ok, [(ort_error, out(1))], ["y"]).category == "ort-rejects-hipep-run"
    fallback = Result(False, None, "hipep.FallbackError", "HipExecutionProvider cannot run 1 node(s)")
    assert fuzz.judge(case, fallback, ok, [], []).category == "hipep-leaves-nodes"
    loose = Case(0, "graph", "", b"", [{}], {"y": Check("close", 1e-5, 1e-6, nan="skip")})
    assert fuzz.judge(loose, ok, ok, [(out(1, np.nan), out(1.000001, 4))], ["y"]).category == "match"


def test_a_mismatch_that_orts_optimizations_explain_passes():
    """A case run with ORT's graph optimizations on hipep's side: where ORT's CPU EP with the same
    optimizations answers as hipep, the optimized graph is what differs, not hipep."""
    out = lambda *a: Result(True, [np.array(a, np.float32)])  # noqa: E731
    ok = Result(True)
    for optimize, optimized, category in ((True, out(1, 2), "ort-optimizer-differs"), (True, out(1, 3), "mismatch"),
                                          (False, out(1, 2), "mismatch")):
        case = Case(0, "graph", "", b"", [{}], {"y": Check("exact")}, optimize=optimize)
        runs = [(out(1, 2), out(1, 3))]
        verdict = fuzz.optimizer_explains(case, fuzz.judge(case, ok, ok, runs, ["y"]), runs, [optimized], ["y"])
        assert verdict.category == category, (optimize, verdict)
