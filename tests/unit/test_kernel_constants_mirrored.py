"""Constants the GPU bindings (and references whose arithmetic the kernels repeat) mirror from the
kernels (a Python line `NAME = value  # ... HIPEP_X ...` or `... MNB_X ...`) equal the kernels'
`#define`s: a launch shaped by a stale copy (threads per block, splits, rows per block) would index
past what the kernel allocates or leave work undone, and a kernel would round otherwise than its
reference."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MIRROR = re.compile(r"^(_?[A-Z][A-Z0-9_]*) = (\d+)[ \t]+#[^\n]*?\b((?:HIPEP|MNB)_[A-Z0-9_]+)", re.M)
DEFINE = re.compile(r"^#define[ \t]+((?:HIPEP|MNB)_[A-Z0-9_]+)[ \t]+\(?(\d+)\)?[ \t]*(?://[^\n]*)?$", re.M)


def _defines() -> dict[str, int]:
    out = {}
    for path in sorted((ROOT / "kernels").glob("*.h*")):
        for name, value in DEFINE.findall(path.read_text()):
            out.setdefault(name, int(value))
    return out


def _mirrors() -> list[tuple[str, str, int, str]]:
    found = []
    for path in sorted([*(ROOT / "hipep" / "runtime").glob("*.py"), *(ROOT / "hipep" / "ops").glob("*.py")]):
        for name, value, define in MIRROR.findall(path.read_text()):
            found.append((path.name, name, int(value), define))
    return found


def test_the_scan_finds_the_mirrors():
    names = {(f, n) for f, n, _, _ in _mirrors()}
    assert ("gpu_attention.py", "DEC_THREADS") in names and ("gpu_attention.py", "DEC_DIRECT_PASSES") in names
    assert ("gpu_quant.py", "GEMV_WARPS") in names and len(names) >= 10
    assert ("contrib_attention.py", "ROPE_VECTOR_PAIRS") in names  # a reference the kernels repeat


@pytest.mark.parametrize("module,name,value,define", _mirrors(), ids=lambda x: str(x))
def test_mirrored_constant_equals_the_kernels_define(module, name, value, define):
    defines = _defines()
    assert define in defines, f"{module}: {name} names {define}, which no kernels/ file #defines"
    assert value == defines[define], f"{module}: {name} = {value}, but kernels/ #define {define} {defines[define]}"
