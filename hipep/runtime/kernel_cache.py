"""Kernel source to machine code: NVRTC compiles for one exact GPU architecture, and an on-disk
cache keeps the result, so a process compiles each kernel once per machine, not once per run.

Sources are kernels/*.hip (one module each, several entry points) and generated pointwise
kernels; every one includes kernels/hipep_device.h, which picks CUDA or HIP spellings. NVRTC is
given the device's architecture (`--gpu-architecture=sm_XY`: a CUBIN, loaded without a JIT
step), `-default-device`, the kernels folder and the CUDA runtime headers (cuda_fp16.h,
cuda_bf16.h, found through cuda.pathfinder) as include paths, and HIPEP_WARP_SIZE.

The cache (`~/.cache/hipep/kernels/`, or `HIPEP_KERNEL_CACHE`) is keyed by a hash of everything
that decides the bytes: the source, the header, the defines and options, NVRTC's version, the
architecture and hipep's version. Files are written to a temporary name and renamed into place,
so concurrent processes never read half a file. Nothing here needs a GPU: `--arch` compiles
anywhere NVRTC is installed (CI's compile check, `hipep precompile --arch sm_90`).
"""
from __future__ import annotations

import hashlib
import os
import tempfile
import threading
from functools import lru_cache
from pathlib import Path

from ..errors import HipepError

HEADER = "hipep_device.h"
CACHE_ENV = "HIPEP_KERNEL_CACHE"
KERNELS_ENV = "HIPEP_KERNELS_DIR"
_STD = "--std=c++17"


class KernelCompileError(HipepError):
    """NVRTC rejected a kernel source (the message carries its log)."""


_PACKAGE = Path(__file__).resolve().parent.parent


def kernels_dir() -> Path:
    """The folder holding hipep_device.h and the *.hip sources: `HIPEP_KERNELS_DIR`, else the
    copy installed inside the package, else the source tree's kernels/ beside the package."""
    env = os.environ.get(KERNELS_ENV)
    candidates = [Path(env)] if env else []
    candidates += [_PACKAGE / "kernels", _PACKAGE.parent / "kernels"]
    for c in candidates:
        if (c / HEADER).is_file():
            return c
    raise HipepError(f"hipep's kernel sources are missing (looked for {HEADER} in "
                     f"{', '.join(str(c) for c in candidates)}); set {KERNELS_ENV}")


def kernel_sources() -> dict[str, Path]:
    """Module name ('reduce', 'softmax', ...) → its .hip file."""
    return dict(_listing(*_folder_state())[0])


def _folder_state() -> tuple[str, int]:
    folder = kernels_dir()
    return str(folder), folder.stat().st_mtime_ns


@lru_cache(maxsize=8)
def _listing(folder: str, mtime_ns: int) -> tuple[dict[str, Path], tuple[Path, ...]]:
    """The folder's modules (name → .hip file) and headers (hipep_device.h first), listed once per
    state of the folder (its mtime changes when a file is added, removed or renamed; a file's own
    changes are read_source's): a session asks for every module's source and cache key, and each
    listing walked the folder."""
    path = Path(folder)
    sources = {p.stem: p for p in sorted(path.glob("*.hip"))}
    headers = (path / HEADER, *sorted(p for p in path.glob("*.h") if p.name != HEADER))
    return sources, headers


@lru_cache(maxsize=None)
def _read(path: str, mtime_ns: int) -> str:
    return Path(path).read_text()


def read_source(path: Path) -> str:
    return _read(str(path), path.stat().st_mtime_ns)


def header_text() -> str:
    """The text of every header in the kernels folder (hipep_device.h first), part of each
    module's cache key: a module may include any of them (matmul_nbits.h)."""
    headers = _listing(*_folder_state())[1]
    return _joined(tuple((str(p), p.stat().st_mtime_ns) for p in headers))


@lru_cache(maxsize=8)
def _joined(files: tuple[tuple[str, int], ...]) -> str:
    return "\0".join(_read(path, mtime) for path, mtime in files)


def cache_dir() -> Path:
    env = os.environ.get(CACHE_ENV)
    return Path(env) if env else Path.home() / ".cache" / "hipep" / "kernels"


def _nvrtc():
    try:
        from cuda.bindings import nvrtc
    except ImportError as e:
        raise HipepError(f"NVRTC is not available ({e}); install hipep's 'cuda13' extra "
                         f"(cuda-bindings and nvidia-cuda-nvrtc)") from None
    return nvrtc


@lru_cache(maxsize=1)
def nvrtc_version() -> tuple[int, int]:
    """NVRTC's (major, minor), asked once per process (part of every cache key)."""
    nvrtc = _nvrtc()
    try:
        err, major, minor = nvrtc.nvrtcVersion()
    except Exception as e:  # the library itself failed to load
        raise HipepError(f"NVRTC could not be loaded: {type(e).__name__}: {e}; install nvidia-cuda-nvrtc") from None
    _check(nvrtc, err, "nvrtcVersion")
    return int(major), int(minor)


@lru_cache(maxsize=1)
def cuda_include_dir() -> str:
    """The CUDA runtime headers NVRTC needs for cuda_fp16.h / cuda_bf16.h."""
    try:
        from cuda import pathfinder
    except ImportError:
        pathfinder = None
    found = None
    if pathfinder is not None:
        try:
            found = pathfinder.find_nvidia_header_directory("cudart")
        except Exception:  # noqa: BLE001 - reported below with the places tried
            found = None
    if not found:
        for guess in (os.environ.get("CUDA_HOME", ""), os.environ.get("CUDA_PATH", ""), "/usr/local/cuda"):
            if guess and (Path(guess) / "include" / "cuda_fp16.h").is_file():
                found = str(Path(guess) / "include")
                break
    if not found:
        raise HipepError("the CUDA runtime headers (cuda_fp16.h) were not found: install nvidia-cuda-runtime "
                         "(hipep's 'cuda13' extra) or set CUDA_HOME")
    return str(found)


def _hipep_version() -> str:
    from .. import __version__

    return __version__


# The options every compile takes besides the architecture, include folders and defines (part of
# the cache key). -no-source-include: NVRTC looks for a quoted #include first in the source's own
# directory, which for a program named without a folder is the process's working directory; a file
# there named like one of hipep's headers (attention.h, hipep_device.h) would be compiled in
# instead of hipep's. Only the -I folders are searched.
_FIXED_OPTIONS = ("-default-device", _STD, "-no-source-include")


def _options(arch: str, defines: dict) -> list[str]:
    opts = [f"--gpu-architecture={arch}", *_FIXED_OPTIONS, f"-I{kernels_dir()}", f"-I{cuda_include_dir()}"]
    opts += [f"-D{k}={v}" for k, v in sorted(defines.items())]
    return opts


def cache_key(source: str, arch: str, defines: dict) -> str:
    h = hashlib.sha256()
    for part in (source, header_text(), repr(sorted(defines.items())), repr(nvrtc_version()), arch,
                 _hipep_version(), *_FIXED_OPTIONS):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:40]


_LOCK = threading.Lock()
_MEMORY: dict[str, bytes] = {}  # cache key → CUBIN, for this process
_IN_FLIGHT: dict[str, threading.Event] = {}  # cache key → set when the thread producing it is done


def compile_cubin(source: str, name: str, arch: str, defines: dict | None = None,
                  use_cache: bool = True, folder: Path | None = None) -> tuple[bytes, bool]:
    """(CUBIN for `arch`, whether it came from a cache). `name` labels the source in errors. A
    source another thread is compiling (a background compile, compile_in_background) is waited
    for, not compiled twice. `folder`: the cache folder (default cache_dir())."""
    defines = dict(defines or {})
    key = cache_key(source, arch, defines)
    if not use_cache:
        return nvrtc_compile(source, name, arch, defines), False
    while True:
        with _LOCK:
            hit = _MEMORY.get(key)
            if hit is not None:
                return hit, True
            pending = _IN_FLIGHT.get(key)
            if pending is None:
                done = _IN_FLIGHT[key] = threading.Event()
                break
        pending.wait()  # then from memory, or (its compile failed) compiled here to raise its error
    try:
        path = (folder or cache_dir()) / f"{key}.cubin"
        try:
            data = path.read_bytes()
        except OSError:
            data = b""
        hit = bool(data)
        if not hit:
            data = nvrtc_compile(source, name, arch, defines)
            _write_atomic(path, data)
        with _LOCK:
            _MEMORY[key] = data
        return data, hit
    finally:
        with _LOCK:
            _IN_FLIGHT.pop(key, None)
        done.set()


def is_cached(source: str, arch: str, defines: dict | None = None) -> bool:
    """Whether the CUBIN of `source` is in this process's memory or in the cache folder."""
    key = cache_key(source, arch, dict(defines or {}))
    with _LOCK:
        if key in _MEMORY:
            return True
    return (cache_dir() / f"{key}.cubin").is_file()


def compile_in_background(sources: list[tuple[str, str]], arch: str, defines: dict | None = None,
                          workers: int | None = None) -> list[threading.Thread]:
    """Starts compiling (name, source) pairs into the cache on daemon threads, at most `workers`
    (default: the CPUs this process may run on) at once, and returns at once: NVRTC releases the GIL, so a module
    that takes most of a minute to compile costs the first run only its own time, not the sum of
    all modules' (compile_cubin, called when a kernel is bound, waits for the one it needs). A
    failed compile is left for that call to raise. Daemon threads: a process that exits before
    they finish does not wait for them (the cache's writes are atomic)."""
    todo = list(sources)
    if not todo:
        return []
    lock = threading.Lock()
    folder = cache_dir()  # where the caller's process keeps them, whatever the environment says later

    def work():
        while True:
            with lock:
                if not todo:
                    return
                name, source = todo.pop(0)
            try:
                compile_cubin(source, name, arch, defines, folder=folder)
            except Exception:  # noqa: BLE001 - raised again where the kernel is bound
                pass

    n = max(1, min(len(todo), workers or _usable_cpus()))
    threads = []
    for i in range(n):
        t = threading.Thread(target=work, name=f"hipep-nvrtc-{i}", daemon=True)
        try:
            t.start()
        except RuntimeError:  # no new threads (interpreter shutdown): the bindings compile what they need
            break
        threads.append(t)
    return threads


def _usable_cpus() -> int:
    """The CPUs this process may run on (a container's or taskset's limit, not the machine's)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # no affinity call on this platform
        return os.cpu_count() or 1


def _write_atomic(path: Path, data: bytes) -> None:
    """Writes `data` to `path` through a temporary file in the same folder and a rename; a cache
    that cannot be written is no error (the kernel is compiled again next time)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
    except OSError:
        pass


def nvrtc_compile(source: str, name: str, arch: str, defines: dict) -> bytes:
    """Compiles `source` with NVRTC to a CUBIN for `arch` (e.g. "sm_90"); raises
    KernelCompileError with NVRTC's log."""
    nvrtc = _nvrtc()
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), f"{name}.hip".encode(), 0, [], [])
    _check(nvrtc, err, "nvrtcCreateProgram")
    try:
        opts = [o.encode() for o in _options(arch, defines)]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            log = _log(nvrtc, prog)
            raise KernelCompileError(f"NVRTC could not compile kernel '{name}' for {arch}:\n{log.strip()}")
        err, size = nvrtc.nvrtcGetCUBINSize(prog)
        _check(nvrtc, err, "nvrtcGetCUBINSize")
        buf = b" " * size
        (err,) = nvrtc.nvrtcGetCUBIN(prog, buf)
        _check(nvrtc, err, "nvrtcGetCUBIN")
        return bytes(buf)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def _log(nvrtc, prog) -> str:
    err, size = nvrtc.nvrtcGetProgramLogSize(prog)
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS or size <= 1:
        return "(no log)"
    buf = b" " * size
    nvrtc.nvrtcGetProgramLog(prog, buf)
    return buf.rstrip(b"\0").decode(errors="replace")


def _check(nvrtc, err, what: str) -> None:
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        _, msg = nvrtc.nvrtcGetErrorString(err)
        raise HipepError(f"{what} failed: {msg.decode() if isinstance(msg, bytes) else msg}")


# The element types a module compiled for one type may name ("<module>@<type>").
TYPE_TAGS = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}
# Modules whose kernels the runtime compiles for one element type at a time: those whose whole
# compile takes most of a minute (every type's GQA decode and MatMulNBits GEMV/GEMM instantiated).
TYPED_MODULES = ("attention_decode", "attention_decode_fused", "matmul_nbits")


def typed_module(name: str, tag: str) -> str:
    """The module to load for kernels of element type `tag` (f32, f16, bf16; "" for none) from
    kernels/<name>.hip: one of TYPED_MODULES compiled for that type alone ("<name>@<tag>"), else
    the whole module."""
    return f"{name}@{tag}" if name in TYPED_MODULES and tag in TYPE_TAGS.values() else name


def module_source(name: str) -> str:
    """The full source NVRTC compiles for kernels/<name>.hip; for "<name>@<tag>" (f32, f16, bf16)
    that module's kernels of the one element type (HIPEP_ONLY_TYPE, kernels/hipep_device.h)."""
    base, _, tag = name.partition("@")
    path = kernel_sources().get(base)
    if path is None:
        raise HipepError(f"no kernel module kernels/{base}.hip")
    if not tag:
        return read_source(path)
    if tag not in TYPE_TAGS.values():
        raise HipepError(f"kernel module '{name}': no element type '{tag}' (one of {', '.join(TYPE_TAGS.values())})")
    return f"#define HIPEP_ONLY_TYPE 1\n#define HIPEP_TYPE_{tag} 1\n" + read_source(path)


def pointwise_source(rendered: str) -> str:
    """A rendered pointwise kernel (hipep.ops.pointwise_hip.render_hip_kernel) compiled through the
    portability header, which supplies the fp16/bf16 types."""
    return f'#include "{HEADER}"\n' + rendered
