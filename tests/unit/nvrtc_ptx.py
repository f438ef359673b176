"""NVRTC's output for the kernel tests that read it: the PTX of a kernels/*.hip module or of a
rendered launch's source, split into its entry points and their parameters' bytes, and ptxas'
report (registers, spills) of a compile for sm_90. Skipped by the callers where
nvidia-cuda-nvrtc is not installed."""
from __future__ import annotations

import re

ARCH = "sm_90"
DEFINES = {"HIPEP_WARP_SIZE": 32}


def ptx(name: str, arch: str, source: str | None = None) -> str:
    """NVRTC's PTX of kernels/<name>.hip (or of a rendered `source`) for a virtual architecture
    (compute_XY)."""
    from hipep.runtime import kernel_cache

    nvrtc = kernel_cache._nvrtc()
    text = source if source is not None else kernel_cache.module_source(name)
    err, prog = nvrtc.nvrtcCreateProgram(text.encode(), f"{name}.hip".encode(), 0, [], [])
    assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS
    try:
        opts = [o.encode() for o in kernel_cache._options(arch, DEFINES)]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS, kernel_cache._log(nvrtc, prog)
        err, size = nvrtc.nvrtcGetPTXSize(prog)
        buf = b" " * size
        nvrtc.nvrtcGetPTX(prog, buf)
        return buf.rstrip(b"\0").decode()
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def entry_bodies(ptx: str) -> dict[str, str]:
    parts = ptx.split(".entry ")[1:]
    return {p.split("(", 1)[0].strip(): p for p in parts}


def spill_reports(log: str) -> dict[str, str]:
    """Entry name -> the bytes of spill stores ptxas reports for it (its "Compiling entry function"
    line, then its spill line)."""
    reports, entry = {}, None
    for line in log.splitlines():
        m = re.search(r"Compiling entry function '(\w+)'", line)
        entry = m.group(1) if m else entry
        m = re.search(r"(\d+) bytes spill stores", line)
        if m and entry:
            reports[entry] = m.group(1)
    return reports


# source -> its log. On the H200 machine NVRTC gave an empty log for the second compile of a source in the
# same process (two parametrized shapes rendering the same fused kernel), so each source is compiled once.
PTXAS_LOGS: dict[str, str] = {}


def ptxas_log(source: str, name: str) -> str:
    """NVRTC's log of compiling `source` for sm_90 with ptxas' report (once per source: the same
    source has the same report, and two parametrized shapes may render the same kernel)."""
    if source in PTXAS_LOGS:
        return PTXAS_LOGS[source]
    from hipep.runtime import kernel_cache

    nvrtc = kernel_cache._nvrtc()
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), f"{name}.hip".encode(), 0, [], [])
    try:
        opts = [o.encode() for o in kernel_cache._options(ARCH, DEFINES)] + [b"--ptxas-options=-v"]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        log = kernel_cache._log(nvrtc, prog)
        assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS, log
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    PTXAS_LOGS[source] = log
    return log


def param_bytes(ptx: str) -> dict[str, list[int]]:
    """Each entry's parameters as NVRTC laid them out: bytes per parameter, in order."""
    out = {}
    for m in re.finditer(r"\.entry (\w+)\((.*?)\)", ptx, re.S):
        sizes = []
        for p in re.finditer(r"\.param\s+(?:\.align\s+\d+\s+)?\.[a-z]+(\d+)\s+\w+?(?:\[(\d+)\])?\s*(?:,|$)",
                             m.group(2), re.M):
            sizes.append(int(p.group(2)) if p.group(2) else int(p.group(1)) // 8)
        out[m.group(1)] = sizes
    return out
