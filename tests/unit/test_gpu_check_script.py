"""tools/gpu_check.sh's sharded mode (HIPEP_GPU_SHARDS): how it deals the GPU test files into
groups that run at once -- every file in exactly one group, no more groups than asked, and the
groups' bytes balanced (the largest file first, each to the lightest group so far)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from helpers import run_bash_function

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "gpu_check.sh"
pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")


def _deal(n: int, files: list[Path]) -> list[list[str]]:
    return [line.split() for line in run_bash_function(SCRIPT, "deal_shards", n, *files).splitlines()]


@pytest.mark.parametrize("n", [1, 3, 6])
def test_the_gpu_test_files_dealt_into_balanced_groups(n):
    files = sorted(p for p in (ROOT / "tests" / "gpu").glob("test_*.py") if p.name != "test_gpu_device_memory.py")
    groups = _deal(n, files)
    assert len(groups) == min(n, len(files))
    dealt = [f for g in groups for f in g]
    assert sorted(dealt) == sorted(map(str, files))  # each file once
    weights = [sum(Path(f).stat().st_size for f in g) for g in groups]
    assert max(weights) - min(weights) <= max(p.stat().st_size for p in files)


def test_more_groups_than_files_leaves_none_empty(tmp_path):
    files = []
    for k, size in enumerate((300, 100, 200)):
        f = tmp_path / f"test_{k}.py"
        f.write_text("#" * size)
        files.append(f)
    groups = _deal(5, files)
    assert len(groups) == 3 and all(len(g) == 1 for g in groups)
    assert _deal(2, files) == [[str(files[0])], [str(files[2]), str(files[1])]]


def test_every_gpu_test_run_dumps_stacks_when_a_test_stalls():
    """A GPU test that stalls (one did once, in a seven-shard run on an H100, and passed every
    time it was run again) leaves the stacks of every thread in its log: each tests/gpu pytest
    invocation of the script sets pytest's faulthandler_timeout."""
    text = SCRIPT.read_text()
    runs = [line for line in text.splitlines() if "-m pytest" in line and "-m gpu" in line]
    assert len(runs) == 3  # unsharded, each shard, and the device-memory file after the shards
    for line in runs:
        following = text[text.index(line):].split("\n", 2)[1]
        assert 'faulthandler_timeout="$stall"' in line + following
    assert 'stall="${HIPEP_GPU_TEST_STALL_S:-240}"' in text
