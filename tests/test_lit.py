"""Runs the lit suite (tests/lit: .mlir files through hipep-opt, checked with FileCheck)."""
from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
LIT_DIR = ROOT / "tests" / "lit"


def _lit_command() -> list[str] | None:
    beside = pathlib.Path(sys.executable).with_name("lit")
    if beside.exists():
        return [str(beside)]
    found = shutil.which("lit")
    if found:
        return [found]
    try:  # lit has no __main__; its entry point is lit.main.main
        import lit.main  # noqa: F401
    except ImportError:
        return None
    return [sys.executable, "-c", "import sys, lit.main; sys.exit(lit.main.main())"]


def test_lit_suite():
    cmd = _lit_command()
    if cmd is None:
        pytest.skip("lit is not installed (pip install lit filecheck)")
    if shutil.which("filecheck") is None and not pathlib.Path(sys.executable).with_name("filecheck").exists():
        pytest.skip("filecheck is not installed (pip install filecheck)")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    proc = subprocess.run(cmd + ["-v", str(LIT_DIR)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"lit failed (exit {proc.returncode}):\n{output}"
    assert "Passed" in output, output


def test_hipep_opt_help_lists_every_pass():
    import subprocess
    import sys

    from hipep.passes import PASSES

    out = subprocess.run([sys.executable, "-m", "hipep.tools.opt", "--help"], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "COLUMNS": "400"})
    assert out.returncode == 0, out.stderr
    for name in PASSES:
        assert name in out.stdout, name
