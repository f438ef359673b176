"""The GPU benchmarks' command lines where no GPU is: `--help` works, bad arguments are refused by
name, and a run says in one line what is missing (no traceback) and exits 2. On a GPU machine the
no-GPU case is skipped (the benchmarks would run)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from hipep.runtime.cuda import cuda_status

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "benchmarks")
SCRIPTS = ("kernel_bandwidth.py", "decode.py", "decode_profile.py", "decode_host.py")


def _run(script: str, *args: str) -> subprocess.CompletedProcess:
    # -P: the checkout's hipep/ (no native library) must not shadow the installed package
    return subprocess.run([sys.executable, "-P", os.path.join(BENCH, script), *args], capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("script", SCRIPTS)
def test_help(script):
    done = _run(script, "--help")
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout and "--out" in done.stdout and "--device-id" in done.stdout


@pytest.mark.parametrize("script,args,message", [
    ("kernel_bandwidth.py", ["--only", "gemv,conv"], "--only: unknown conv"),
    ("kernel_bandwidth.py", ["--prompt-rows", "64,x"], "--prompt-rows: comma-separated row counts"),
    ("kernel_bandwidth.py", ["--prompt-paths", "tc,blas"], "--prompt-paths: tc, other or both"),
    ("decode.py", ["--runs", "0"], "--runs must be at least 1"),
    ("decode.py", ["--new", "1"], "--new must be at least 2"),
    ("decode_host.py", ["--steps", "0"], "--steps must be at least 1"),
])
def test_bad_arguments_are_named(script, args, message):
    done = _run(script, *args)
    assert done.returncode == 2 and message in done.stderr, done.stderr


@pytest.mark.skipif(cuda_status(0)[0], reason="a GPU is here: the benchmark would run")
@pytest.mark.parametrize("script", SCRIPTS)
def test_without_a_gpu_one_line_says_why(script, tmp_path):
    done = _run(script, "--out", str(tmp_path))
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{script}: ") and "Traceback" not in done.stderr, done.stderr
    assert "GPU" in lines[0] or "native library" in lines[0]
    assert not list(tmp_path.iterdir())  # no results file from a run that measured nothing


def test_no_benchmark_shadows_an_installed_module():
    """The benchmarks put their own folder first on sys.path (they import gpu_harness and machine),
    so a benchmark named like an installed module would be imported in its place by whatever asks
    for that module: transformers (5.x) imports the `kernels` package when it is installed."""
    import importlib.util

    names = {f[:-3] for f in os.listdir(BENCH) if f.endswith(".py")}
    saved = sys.path[:]
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != BENCH]
    try:
        shadowed = sorted(n for n in names if n not in sys.modules and importlib.util.find_spec(n) is not None)
    finally:
        sys.path[:] = saved
    assert shadowed == [], f"benchmarks/ would shadow installed modules: {shadowed}"
