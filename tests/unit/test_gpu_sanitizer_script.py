"""tools/gpu_sanitizer.sh's count of the tests a stopped pass had passed: pytest's progress dots,
including a last line that faulthandler's "Timeout (...)!" report continues without a newline."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from helpers import run_bash_function

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "gpu_sanitizer.sh"
pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")


def _passed_so_far(tmp_path, text: str) -> int:
    log = tmp_path / "pytest.log"
    log.write_text(text)
    return int(run_bash_function(SCRIPT, "passed_so_far", log).strip())


def test_dots_of_finished_lines_and_a_line_cut_by_a_timeout_report(tmp_path):
    text = ("........................................................................ [ 40%]\n"
            "..s.x.F.. [ 45%]\n"
            "...Timeout (0:02:30)!\n"
            "Thread 0x00007fa11a65c6c0 (most recent call first):\n"
            '  File "/tmp/x.py", line 3 in run\n')
    assert _passed_so_far(tmp_path, text) == 72 + 6 + 3


def test_no_progress_line_counts_nothing(tmp_path):
    assert _passed_so_far(tmp_path, "ERROR: file or directory not found: x.py\n\n") == 0
