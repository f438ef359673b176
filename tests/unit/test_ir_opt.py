"""hipep-opt: xDSL's opt driver with hipep's dialect and passes."""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys

from hipep.passes import PASSES
from hipep.tools.opt import main

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_help_lists_the_passes():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-m", "hipep.tools.opt", "--help"], capture_output=True, text=True,
                         env=env, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split()).replace("- ", "-")  # argparse wraps long lines
    for name in PASSES:
        assert name in text


def test_main_runs_a_pipeline(tmp_path, capsys):
    src = tmp_path / "in.mlir"
    src.write_text("""
func.func @f(%a: tensor<2x3xf32>) -> tensor<*xf32> {
  %r = hip.relu "r"(%a) {since_version = 14 : i64, onnx = {}, positions = [0 : i64]} : (tensor<2x3xf32>) -> tensor<*xf32>
  func.return %r : tensor<*xf32>
}
""")
    assert main([str(src), "-p", "hip-infer-shapes,hip-lower-slices"]) == 0
    out = capsys.readouterr().out
    assert 'hip.relu "r"' in out and "-> tensor<2x3xf32>" in out
