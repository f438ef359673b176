"""The CUDA driver for the NVIDIA device (hipep.runtime.cuda): cuda-bindings' driver module, loaded
on first use, the error every failed driver call raises (`CudaError`, through `_check`), and
whether a usable GPU is there (`cuda_status`)."""
from __future__ import annotations

import threading

from ..errors import HipepError

_DRIVER = None
_INIT_LOCK = threading.Lock()


def _driver():
    global _DRIVER
    if _DRIVER is None:
        from cuda.bindings import driver

        _DRIVER = driver
    return _DRIVER


class CudaError(HipepError):
    """A CUDA driver call failed."""


def _error_text(err) -> str:
    d = _driver()
    try:
        _, name = d.cuGetErrorName(err)
        _, text = d.cuGetErrorString(err)
        name = name.decode() if isinstance(name, bytes) else str(name)
        text = text.decode() if isinstance(text, bytes) else str(text)
        return f"{name}: {text}"
    except Exception:  # noqa: BLE001 - the code alone still says something
        return str(err)


def _check(result, what: str):
    """Unpacks a cuda-bindings result tuple, raising CudaError unless it succeeded."""
    err = result[0]
    if err != _driver().CUresult.CUDA_SUCCESS:
        raise CudaError(f"{what} failed: {_error_text(err)}")
    if len(result) == 1:
        return None
    return result[1] if len(result) == 2 else result[1:]


_STICKY = ("CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_LAUNCH_FAILED", "CUDA_ERROR_ILLEGAL_INSTRUCTION",
           "CUDA_ERROR_MISALIGNED_ADDRESS", "CUDA_ERROR_HARDWARE_STACK_ERROR", "CUDA_ERROR_INVALID_PC",
           "CUDA_ERROR_ASSERT", "CUDA_ERROR_LAUNCH_TIMEOUT")


def cuda_status(device_id: int = 0) -> tuple[bool, str]:
    """(True, a description of the GPU) when cuda-bindings imports, a driver loads and device
    `device_id` exists; else (False, why not)."""
    try:
        d = _driver()
    except ImportError as e:
        return False, f"cuda-bindings is not installed ({e}); install hipep's 'cuda13' extra"
    except Exception as e:  # noqa: BLE001 - a broken install says so
        return False, f"cuda-bindings failed to import: {type(e).__name__}: {e}"
    try:
        (err,) = d.cuInit(0)
    except Exception as e:  # noqa: BLE001 - no driver library: cuda-pathfinder raises
        return False, f"no NVIDIA driver could be loaded ({type(e).__name__}: {e})"
    if err != d.CUresult.CUDA_SUCCESS:
        return False, f"cuInit failed: {_error_text(err)}"
    err, count = d.cuDeviceGetCount()
    if err != d.CUresult.CUDA_SUCCESS or count == 0:
        return False, "the NVIDIA driver reports no GPU"
    if not 0 <= device_id < count:
        return False, f"device_id {device_id} is out of range: the driver reports {count} GPU(s)"
    return True, f"{count} GPU(s)"


def cuda_available(device_id: int = 0) -> bool:
    return cuda_status(device_id)[0]
