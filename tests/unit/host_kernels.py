"""Running kernels/*.hip on the CPU for tests: g++ compiles a kernel module against the host
stand-in for the CUDA headers (tests/unit/host_cuda: every GPU thread of a block a host thread,
__syncthreads and warp shuffles as barriers), and a binding's launches run block by block over
host memory."""
from __future__ import annotations

import ctypes
import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest

from hipep.ops.registry import OUTPUT_COUNT, REQUIRED, SINCE_VERSION, lookup
from hipep.runtime import gpu_kernels as gk

HOST_CUDA = Path(__file__).parent / "host_cuda"
KERNELS = Path(__file__).parent.parent.parent / "kernels"
# Float arithmetic as on the GPU: the round-to-nearest intrinsics, no contraction into fmas.
EXACT_FLAGS = ("-ffp-contract=off", "-include", str(HOST_CUDA / "rn_intrinsics.h"))


def compile_module(out: Path, module: str, warp: int, extra_flags=()) -> ctypes.CDLL:
    """kernels/<module>.hip built for the host with HIPEP_WARP_SIZE=`warp` (skips the test where
    g++ lacks _Float16)."""
    return compile_source(out, KERNELS / f"{module}.hip", f"{module}_w{warp}", warp, extra_flags)


def compile_source(out: Path, source: Path, name: str, warp: int, extra_flags=()) -> ctypes.CDLL:
    """A kernel source file (kernels/*.hip, or a generated one) built for the host as `name`.so."""
    so = out / f"{name}.so"
    cmd = ["g++", "-std=c++17", "-O1", *extra_flags, "-fPIC", "-shared", f"-I{HOST_CUDA}", f"-I{KERNELS}",
           f"-DHIPEP_WARP_SIZE={warp}", "-x", "c++", str(source), "-x", "none",
           str(HOST_CUDA / "host_runtime.cc"), "-o", str(so), "-lpthread"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0 and "_Float16" in r.stderr:
        pytest.skip("this g++ has no _Float16")
    assert r.returncode == 0, r.stderr[-3000:]
    return ctypes.CDLL(str(so))


def launch(lib: ctypes.CDLL, op: gk.KernelOp) -> None:
    """Runs one launch: the blocks in turn, each block's threads as host threads."""
    fn = getattr(lib, op.entry)
    fn.restype = None
    gx, gy, gz = op.grid
    bx, by, bz = op.block
    for z in range(gz):
        for y in range(gy):
            for x in range(gx):
                lib.hipep_host_begin_block(bx, by, bz, gx, gy, gz)

                def thread(tx, ty, tz, x=x, y=y, z=z):
                    lib.hipep_host_set_thread(tx, ty, tz, x, y, z)
                    fn(*op.params)

                threads = [threading.Thread(target=thread, args=(tx, ty, tz))
                           for tz in range(bz) for ty in range(by) for tx in range(bx)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()


class HostMemory:
    """Arrays in host memory, 64-byte aligned plus an offset (to misalign on purpose)."""

    def __init__(self):
        self.keep = []

    def put(self, a: np.ndarray, offset: int = 0) -> tuple[gk.Arg, np.ndarray]:
        a = np.ascontiguousarray(a)
        raw = np.zeros(a.nbytes + 128 + offset, np.uint8)
        start = (-raw.ctypes.data) % 64 + offset
        view = raw[start:start + a.nbytes].view(a.dtype).reshape(a.shape)
        view[...] = a
        self.keep.append(raw)
        return gk.Arg(view.ctypes.data, a.shape, a.dtype, a, True), view


def run_on_host(libs: dict, op_key: str, inputs, attrs, n_out=1, offsets=None, sm_count=132, workspace=False,
                drop=(), alias=None, tensor_cores=False):
    """Binds the registry op `op_key` ("domain::Op") for `inputs` (its defaults, OUTPUT_COUNT and,
    unless `attrs` names one, the newest SINCE_VERSION filled in) and runs the launches on the host
    with `libs` (module name -> compiled library, "warp" -> warp size; generated expression kernels are compiled into
    libs["dir"] with EXACT_FLAGS and kept in libs["generated"]), copies as memmove; (output views, the registry
    reference's outputs, the ops). `offsets` misalign inputs; `workspace` gives the launches a
    stream workspace; outputs whose index is in `drop` get no buffer (None: the graph leaves them
    out); `alias` maps an output index to the input whose buffer it is (ORT's in-place pairs: the
    shared KV cache), whose view is then the output's; `tensor_cores`: the target has mma.sync
    (Target.tensor_cores; the stand-in emulates it)."""
    domain, op_type = op_key.split("::")
    op = lookup(domain, op_type)
    attrs = {**{k: v for k, v in op.attributes.items() if v is not REQUIRED}, **attrs, OUTPUT_COUNT: n_out,
             SINCE_VERSION: attrs.get(SINCE_VERSION, max(op.since_versions))}
    want = op.reference(list(inputs), attrs)[:n_out]
    mem = HostMemory()
    offsets = offsets or {}
    placed = [None if x is None else mem.put(x, offsets.get(k, 0)) for k, x in enumerate(inputs)]
    ins = [None if p is None else p[0] for p in placed]
    alias = alias or {}
    outs, views = [], []
    for k, w in enumerate(want):
        if k in alias:
            arg, view = placed[alias[k]]
            outs.append(gk.Arg(arg.ptr, arg.shape, arg.dtype))
            views.append(view)
            continue
        if k in drop:
            outs.append(None)
            views.append(None)
            continue
        a, v = mem.put(np.full(w.shape, np.nan if w.dtype.kind in "fc" else 7, w.dtype))
        outs.append(gk.Arg(a.ptr, a.shape, a.dtype))
        views.append(v)
    target = gk.Target(sm_count=sm_count, warp_size=libs["warp"], scratch=lambda n: 0,
                       workspace=(lambda n: mem.put(np.zeros(n, np.uint8))[0].ptr) if workspace else None,
                       counters=lambda n: mem.put(np.zeros(n, np.uint8))[0].ptr, tensor_cores=tensor_cores)
    ops = gk.binding_for(op_key).bind(ins, outs, attrs, target)
    for o in ops:
        if isinstance(o, gk.CopyOp):
            ctypes.memmove(o.dst, o.src, o.nbytes)
        elif o.module is None:
            launch(generated_lib(libs, o), o)
        else:
            launch(libs[o.module], o)
    return views, want, ops


def generated_lib(libs: dict, op: gk.KernelOp) -> ctypes.CDLL:
    """The host build of a generated expression kernel; its grid is cut to two blocks (the kernel's
    grid-stride loop covers the rest) to keep the host threads few."""
    from hipep.runtime.kernel_cache import pointwise_source

    op.grid = (min(op.grid[0], 2), 1, 1)
    built = libs.setdefault("generated", {})
    lib = built.get(op.entry)
    if lib is None:
        path = Path(libs["dir"]) / f"{op.entry}.hip"
        path.write_text(pointwise_source(op.source))
        lib = built[op.entry] = compile_source(Path(libs["dir"]), path, op.entry, libs["warp"], EXACT_FLAGS)
    return lib
