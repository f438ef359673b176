"""Static SASS instruction counts of hipep's kernels, by kind: what a kernel costs the SMs to issue,
read on a machine without a GPU.

The decode GEMVs at single-op sizes are bound by the instructions their warps issue, not by HBM
(ncu at 4096x4096, benchmarks/results/2026-12-04-gemv-study-cols-h200.md): their straight-line
bodies (one round of loads, unrolled) run nearly every instruction once, so the static count of an
entry point follows its dynamic count per warp. This compiles modules with NVRTC for sm_90 (as
hipep does at run time), disassembles the CUBIN with nvdisasm and counts each entry point's
instructions.

nvdisasm is not one of hipep's dependencies: `pip install nvidia-cuda-nvdisasm` (or a CUDA toolkit
on PATH). The cuda13 extra supplies NVRTC.

    python benchmarks/sass_counts.py matmul_nbits_row --match _h2_ --out results.md
    python benchmarks/sass_counts.py benchmarks/gemv_study.hip --match h2_mma
"""
from __future__ import annotations

import argparse
import collections
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # machine.py

from machine import machine_info  # noqa: E402

# What an opcode (its first dotted part; HADD2.F32 and F2FP are conversions) is spent on.
KINDS = {
    "half arithmetic": {"HFMA2", "HADD2", "HMUL2", "HMNMX2", "HSET2"},
    "tensor core": {"HMMA", "IMMA"},
    "conversions": {"HADD2.F32", "F2FP", "I2FP", "F2I", "F2F", "I2F"},
    "float arithmetic": {"FADD", "FFMA", "FMUL", "FMNMX", "FSETP", "MUFU"},
    "integer dot products": {"IDP"},
    "bit operations": {"LOP3", "SHF", "PRMT", "BFE", "BFI", "PLOP3"},
    "memory": {"LDG", "LDS", "STS", "STG", "LD", "ST", "LDSM", "SHFL", "RED", "ATOM", "ATOMS", "LDGSTS"},
    "constants": {"LDC", "ULDC"},
}
_LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
_ENTRY = re.compile(r"^\s*\.text\.(\w+):")


def find_nvdisasm() -> str | None:
    found = shutil.which("nvdisasm")
    if found:
        return found
    for base in sys.path:
        for path in glob.glob(os.path.join(base, "nvidia", "*", "bin", "nvdisasm")):
            if os.access(path, os.X_OK):
                return path
    return None


def opcode(instruction: str) -> str:
    """The opcode without predicate and modifiers, but HADD2.F32 (a conversion) kept whole."""
    text = instruction.split(None, 1)[1] if instruction.startswith("@") else instruction
    op = text.split()[0]
    return "HADD2.F32" if op.startswith("HADD2.F32") else op.split(".")[0]


def kind(op: str) -> str:
    return next((k for k, ops in KINDS.items() if op in ops), "integer, address and control")


def disassemble(cubin: bytes, nvdisasm: str) -> dict[str, list[str]]:
    """Entry point → its instructions, in order."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        text = subprocess.run([nvdisasm, "-c", f.name], capture_output=True, text=True, check=True).stdout
    out: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        m = _ENTRY.match(line)
        if m:
            current = out.setdefault(m.group(1), [])
            continue
        m = _LINE.search(line)
        if m and current is not None:
            current.append(m.group(2))
    return out


def compile_module(module: str, defines: dict) -> bytes:
    from hipep.runtime import kernel_cache

    if module.endswith(".hip"):
        with open(module) as f:
            source = f.read()
        name = os.path.basename(module)[:-4]
    else:
        source, name = kernel_cache.module_source(module), module
    return kernel_cache.nvrtc_compile(source, name, "sm_90", {"HIPEP_WARP_SIZE": 32, **defines})


def count(instructions: list[str]) -> dict:
    ops = collections.Counter(opcode(i) for i in instructions if opcode(i) != "NOP")
    kinds = collections.Counter()
    for op, n in ops.items():
        kinds[kind(op)] += n
    return {"total": sum(ops.values()), "kinds": kinds, "ops": ops}


def render(info: dict, rows: list[tuple[str, str, dict]], command: str) -> str:
    kinds = list(KINDS) + ["integer, address and control"]
    lines = [f"# Static SASS instruction counts (sm_90, NVRTC), {info['date']}", "",
             f"- date {info['date']}, commit {info['commit']}; {info['cpu']} (no GPU needed)",
             f"- command: `{command}`",
             "- NOPs left out; one entry point's whole body, every path (a fallback path the launch never takes counts too)",
             "", "| module | entry point | instructions | " + " | ".join(kinds) + " |",
             "|---|---|---:|" + "---:|" * len(kinds)]
    for module, entry, c in rows:
        lines.append(f"| {module} | {entry} | {c['total']} | " + " | ".join(str(c["kinds"].get(k, 0)) for k in kinds) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("modules", nargs="+", help="kernel modules (kernels/<name>.hip by name) or .hip paths")
    ap.add_argument("--match", default="", help="a regular expression the entry points' names must contain")
    ap.add_argument("--define", action="append", default=[], help="NAME=VALUE for the compile")
    ap.add_argument("--ops", action="store_true", help="print every entry point's opcode counts too")
    ap.add_argument("--out", help="write a markdown table here")
    args = ap.parse_args(argv)
    nvdisasm = find_nvdisasm()
    if nvdisasm is None:
        print("sass_counts: nvdisasm not found (pip install nvidia-cuda-nvdisasm, or a CUDA toolkit on PATH)",
              file=sys.stderr)
        return 2
    defines = dict(d.split("=", 1) for d in args.define)
    pattern = re.compile(args.match)
    rows = []
    for module in args.modules:
        for entry, instructions in sorted(disassemble(compile_module(module, defines), nvdisasm).items()):
            if pattern.search(entry):
                c = count(instructions)
                rows.append((os.path.basename(module), entry, c))
                print(f"{entry:60s} {c['total']:6d}  " + "  ".join(f"{k}: {n}" for k, n in c["kinds"].most_common()))
                if args.ops:
                    print("    " + " ".join(f"{op} {n}" for op, n in c["ops"].most_common()))
    if args.out:
        with open(args.out, "w") as f:
            f.write(render(machine_info(), rows, "python benchmarks/sass_counts.py " + " ".join(argv or sys.argv[1:])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
