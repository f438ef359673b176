"""What the GPU benchmarks (kernel_bandwidth.py, decode.py) share: the check that a GPU and hipep's native
library are there (else one line saying what is missing), where bound inputs and outputs live
(OrtValues in device memory through ORT's allocator when hipep offers one, else host memory that
hipep stages through its own buffers), reading a bound value back, the copy bandwidths a result
is measured against, and the results file's name and header."""
from __future__ import annotations

import os
import re
import sys
import time

import numpy as np

ORT_ELEMENT = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(int64)": np.int64,
               "tensor(int32)": np.int32, "tensor(uint8)": np.uint8, "tensor(bool)": np.bool_}
# ONNX element type numbers of the float types a builder decoder's cache holds
ONNX_NUMPY = {1: np.float32, 10: np.float16}
ONNX_ITEMSIZE = {1: 4, 10: 2, 16: 2}


class Unavailable(Exception):
    """What the benchmark needs is missing; the message is one line saying what."""


def require_gpu(device_id: int):
    """hipep's CUDA device `device_id`, or Unavailable naming what is missing (no native library,
    no cuda-bindings, no driver, no such GPU)."""
    import hipep

    try:
        hipep.get_library_path()
    except ImportError as e:
        raise Unavailable(f"hipep's native library is not built ({e}): install hipep (pip install .) "
                          f"and run from outside the checkout (python -P)") from None
    try:
        from hipep.runtime.cuda import cuda_status, get_device
    except ImportError as e:
        raise Unavailable(f"this hipep has no CUDA device ({e})") from None
    ok, why = cuda_status(device_id)
    if not ok:
        raise Unavailable(f"no CUDA GPU: {why}")
    return get_device(device_id)


def gpu_info(device) -> dict:
    d = _driver()
    l2 = int(d.cuDeviceGetAttribute(d.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, device.dev)[1])
    v = device.driver_version
    return {"gpu": device.gpu_name, "arch": device.arch, "sms": device.sm_count, "l2_bytes": l2,
            "driver_cuda": f"{v // 1000}.{(v % 1000) // 10}", "nvrtc": ".".join(map(str, device.nvrtc_version)),
            # the launch-path settings in effect (docs/options.md): a run with one of them is another path
            "env": {k: v for k, v in sorted(os.environ.items())
                    if k.startswith(("HIPEP_CUDA", "HIPEP_MNB_", "HIPEP_GQA_", "HIPEP_CUBLASLT_"))
                    or k == "HIPEP_GEMM"}}


def device_slug(gpu_name: str) -> str:
    """'NVIDIA H200' → 'h200': the device part of a results file's name."""
    name = re.sub(r"^(nvidia|amd)\s+", "", gpu_name.strip(), flags=re.I)
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "gpu"


def header_lines(title: str, info: dict, command: str) -> list[str]:
    return [f"# {title}", "",
            f"- date {info['date']}, commit {info['commit']}",
            f"- GPU: {info['gpu']} ({info['arch']}, {info['sms']} SMs, L2 {info['l2_bytes'] / 2**20:.0f} MiB), "
            f"driver CUDA {info['driver_cuda']}, NVRTC {info['nvrtc']}",
            f"- host: {info['cpu']} ({info['cores']} cores, {info['memory']}, load {info['load']:.2f}), "
            f"onnxruntime {info['onnxruntime']}, numpy {info['numpy']}, Python {info['python']}",
            f"- command: `{command}`"] + (
               [f"- environment: {', '.join(f'`{k}={v}`' for k, v in info['env'].items())}"] if info.get("env") else [])


def first_line(e: BaseException) -> str:
    """An error in one line: its first line, and the next one where the first only introduces a
    list (hipep's FallbackError names a node per line)."""
    text = re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", str(e).strip())  # ORT's prefix says nothing
    lines = [line.strip() for line in (text or type(e).__name__).splitlines() if line.strip()]
    text = lines[0] + (" " + lines[1] if lines[0].endswith(":") and len(lines) > 1 else "")
    return text[:400]


# ---- where bound values live ----------------------------------------------------------------------

def _driver():
    """The driver hipep's cuda device uses: cuda-bindings' module, or the host stand-in where a
    benchmark installed it (hipep.tools.host_driver)."""
    from hipep.runtime.cuda_driver import _driver as hipep_driver

    return hipep_driver()


class Placement:
    """Where bound inputs and outputs live: `device` (OrtValues ORT allocates through hipep's
    allocator on device "cuda") or host memory, with the reason device memory was not used."""

    def __init__(self, device_id: int, want_device: bool = True):
        import onnxruntime as ort

        self.ort, self.device_id = ort, device_id
        self.on_device, self.why = False, "host memory asked for (--host-io)"
        if want_device:
            self.on_device, self.why = self._probe()

    @property
    def label(self) -> str:
        return "device OrtValues" if self.on_device else "host memory (hipep stages it)"

    def _probe(self) -> tuple[bool, str]:
        """Device memory counts as available when a value written through ORT reads back the same."""
        import hipep

        hipep.register()  # ORT allocates device memory through the EP devices of registered libraries
        probe = np.arange(16, dtype=np.float32)
        try:
            value = self.ort.OrtValue.ortvalue_from_numpy(probe, "cuda", self.device_id)
        except Exception as e:  # noqa: BLE001 - ORT says why in its own words
            return False, f"ORT cannot allocate on device 'cuda' ({first_line(e)})"
        if value.device_name().lower() == "cpu":
            return False, "ORT put a 'cuda' OrtValue in CPU memory"
        try:
            back = to_host(value)
        except Exception as e:  # noqa: BLE001
            return False, f"a device OrtValue cannot be read back ({first_line(e)})"
        if not np.array_equal(back, probe):
            return False, "a device OrtValue read back different values"
        return True, "device memory through ORT's allocator"

    def value(self, array: np.ndarray):
        """An OrtValue holding `array`: a device copy, or (host) one that wraps array's memory."""
        array = np.ascontiguousarray(array)
        if self.on_device:
            return self.ort.OrtValue.ortvalue_from_numpy(array, "cuda", self.device_id)
        return self.ort.OrtValue.ortvalue_from_numpy(array)

    def zeros(self, shape, onnx_type: int):
        """An OrtValue of zeros of ONNX element type `onnx_type` (bf16, 16, included, which numpy
        cannot hold): on the device allocated by ORT and cleared by the driver, else host memory."""
        if not self.on_device:
            host = np.zeros(shape, np.uint16 if onnx_type == 16 else ONNX_NUMPY[onnx_type])
            return self.ort.OrtValue.ortvalue_from_numpy_with_onnx_type(host, onnx_type)
        value = self.ort.OrtValue.ortvalue_from_shape_and_type(list(shape), onnx_type, "cuda", self.device_id)
        nbytes = int(np.prod(shape)) * ONNX_ITEMSIZE[onnx_type]
        if nbytes:
            _ok(_driver().cuMemsetD8Async(value.data_ptr(), 0, nbytes, 0), "cuMemsetD8Async")
            _ok(_driver().cuCtxSynchronize(), "cuCtxSynchronize")
        return value

    def empty(self, shape, dtype):
        if self.on_device:
            return self.ort.OrtValue.ortvalue_from_shape_and_type(list(shape), dtype, "cuda", self.device_id)
        return self.ort.OrtValue.ortvalue_from_numpy(np.zeros(shape, dtype))


def to_host(value) -> np.ndarray:
    """A bound value's contents as a new numpy array. ORT copies device tensors for EPs it knows;
    for hipep's memory the CUDA driver copies from the value's address (same process, same context)."""
    if value.device_name().lower() == "cpu":
        return value.numpy().copy()
    try:
        return np.array(value.numpy(), copy=True)
    except Exception:  # noqa: BLE001 - ORT cannot copy from this device: the driver can
        pass
    d = _driver()
    dtype = ORT_ELEMENT[value.data_type()]
    out = np.empty(value.shape(), dtype)
    _ok(d.cuCtxSynchronize(), "cuCtxSynchronize")
    if out.nbytes:
        _ok(d.cuMemcpyDtoH(out.ctypes.data, value.data_ptr(), out.nbytes), "cuMemcpyDtoH")
    return out


def last_row(value) -> np.ndarray:
    """The last row of a bound [..., n, width] value (a step's logits: the next token comes from
    the last position's), read back alone. With one row that is the whole value, read as
    `to_host` reads it; a prompt's step reads one row of its n (the builder's models give logits
    for every position: 8 to 16 MB for a 128-token prompt of a 32000-word vocabulary), as a
    generator that picks the next token reads only that row."""
    shape = tuple(value.shape())
    if len(shape) < 2 or shape[-2] <= 1:
        return to_host(value).reshape(-1)[-shape[-1]:] if shape else to_host(value)
    if value.device_name().lower() == "cpu":
        return value.numpy()[..., -1, :].reshape(-1)[-shape[-1]:].copy()
    d = _driver()
    out = np.empty(shape[-1], ORT_ELEMENT[value.data_type()])
    _ok(d.cuCtxSynchronize(), "cuCtxSynchronize")
    offset = (int(np.prod(shape)) - shape[-1]) * out.itemsize
    _ok(d.cuMemcpyDtoH(out.ctypes.data, value.data_ptr() + offset, out.nbytes), "cuMemcpyDtoH")
    return out


def _ok(result, what: str):
    d = _driver()
    err = result[0] if isinstance(result, tuple) else result
    if err != d.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"{what} failed: {err}")
    return result[1] if isinstance(result, tuple) and len(result) > 1 else None


# ---- copy bandwidth -------------------------------------------------------------------------------

def copy_bandwidth(device, nbytes: int = 1 << 30, reps: int = 20) -> dict:
    """Device-to-device cuMemcpyDtoDAsync of `nbytes`, timed with CUDA events: GB/s with the read
    and the write counted (2 · nbytes per copy), median of `reps` copies."""
    d = _driver()
    src, dst = device.alloc("device", nbytes), device.alloc("device", nbytes)
    stream = device.new_stream()
    start = _ok(d.cuEventCreate(d.CUevent_flags.CU_EVENT_DEFAULT), "cuEventCreate")
    end = _ok(d.cuEventCreate(d.CUevent_flags.CU_EVENT_DEFAULT), "cuEventCreate")
    try:
        times = []
        for i in range(reps + 2):
            _ok(d.cuEventRecord(start, stream.handle), "cuEventRecord")
            _ok(d.cuMemcpyDtoDAsync(dst.ptr, src.ptr, nbytes, stream.handle), "cuMemcpyDtoDAsync")
            _ok(d.cuEventRecord(end, stream.handle), "cuEventRecord")
            _ok(d.cuEventSynchronize(end), "cuEventSynchronize")
            ms = _ok(d.cuEventElapsedTime(start, end), "cuEventElapsedTime")
            if i >= 2:  # the first copies warm the TLBs
                times.append(ms / 1e3)
    finally:
        d.cuEventDestroy(start)
        d.cuEventDestroy(end)
        device.free(src)
        device.free(dst)
    s = float(np.median(times))
    return {"bytes": nbytes, "seconds": s, "gbps": 2 * nbytes / s / 1e9}


def host_copy_bandwidth(device, nbytes: int, reps: int = 10) -> dict:
    """Pageable host ↔ device copies of `nbytes` (what staging host memory costs, as numpy arrays
    are pageable): GB/s each way, median of `reps` synchronous copies timed on the host."""
    d = _driver()
    device._current()
    host = np.ones(nbytes, np.uint8)
    mem = device.alloc("device", nbytes)
    out = {}
    try:
        for name, copy in (("h2d", lambda: d.cuMemcpyHtoD(mem.ptr, host.ctypes.data, nbytes)),
                           ("d2h", lambda: d.cuMemcpyDtoH(host.ctypes.data, mem.ptr, nbytes))):
            times = []
            for i in range(reps + 1):
                t0 = time.perf_counter()
                _ok(copy(), name)
                if i:
                    times.append(time.perf_counter() - t0)
            out[name] = nbytes / float(np.median(times)) / 1e9
    finally:
        device.free(mem)
    return out


def bytes_text(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


def fail(script: str, message: str) -> int:
    print(f"{script}: {message}", file=sys.stderr)
    return 2
