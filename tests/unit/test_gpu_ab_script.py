"""tools/gpu_ab.sh, the A/B of one setting on a GPU machine: what it takes and how it spends the
time left (no GPU needed: the checks run before anything is installed, the deadline's arithmetic is
a function of its own)."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from helpers import run_bash_function

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "gpu_ab.sh"
pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")


@pytest.mark.parametrize("args,message", [
    ([], "expected a setting HIPEP_NAME=VALUE, got ''"),
    (["FOO=1"], "expected a setting HIPEP_NAME=VALUE, got 'FOO=1'"),
    (["HIPEP_MNB_GEMV_TC="], "got 'HIPEP_MNB_GEMV_TC='"),
    (["HIPEP_MNB_GEMV_TC=1", "--bogus"], "unknown argument '--bogus'"),
    (["HIPEP_NATIVE_REPLAY=0", "--no-kernels", "--bogus"], "unknown argument '--bogus'"),  # --no-kernels taken
])
def test_bad_arguments_stop_before_anything_runs(tmp_path, args, message):
    done = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, cwd=tmp_path,
                          env={"PATH": "/usr/bin:/bin", "OUT": str(tmp_path)})
    assert done.returncode == 2 and message in done.stderr
    assert list(tmp_path.iterdir()) == []  # nothing made, nothing installed


def test_a_setting_is_taken_as_given():
    assert run_bash_function(SCRIPT, "check_setting", "HIPEP_MNB_GEMV_TC=1").strip() == "HIPEP_MNB_GEMV_TC=1"


@pytest.mark.parametrize("limit,deadline,elapsed,want", [
    (100, 540, 0, "100"),    # time enough: the step's own limit
    (100, 540, 480, "60"),   # less left than the limit: what is left
    (100, 540, 515, ""),     # under 30 s left: skipped
    (100, 540, 600, ""),     # past the deadline: skipped
])
def test_each_step_gets_the_time_left_before_the_deadline(limit, deadline, elapsed, want):
    assert run_bash_function(SCRIPT, "time_for", limit, deadline, elapsed).strip() == want
