"""Memory on the NVIDIA device (hipep.runtime.cuda): an allocation (`CudaMemory`), the typed view
a kernel argument points at (`DeviceArray`), and a tensor ORT keeps in this GPU's memory, used in
place (`OrtDeviceArray`)."""
from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING

import ml_dtypes  # noqa: F401  (registers numpy's 'bfloat16' dtype name)
import numpy as np

from ..errors import HipepError
from .device import ShapedBuffer
from .cuda_driver import _check, _driver

if TYPE_CHECKING:
    from .cuda import CudaDevice

class CudaMemory:
    """One allocation: `ptr` is its device address (for host_visible memory the device mapping of
    the pinned host memory at `host_ptr`)."""
    __slots__ = ("ptr", "nbytes", "space", "host_ptr", "freed", "__weakref__")

    def __init__(self, ptr: int, nbytes: int, space: str, host_ptr: int = 0):
        self.ptr, self.nbytes, self.space, self.host_ptr, self.freed = int(ptr), int(nbytes), space, int(host_ptr), False

    @property
    def host_visible(self) -> bool:
        return self.space == "host_visible"

    def __repr__(self) -> str:
        return f"CudaMemory({self.space}, {self.nbytes} bytes at {self.ptr:#x})"


class DeviceArray(ShapedBuffer):
    """A typed, C-contiguous view of device-addressable memory: what a kernel argument points at.
    Holds the allocation it views, so the memory outlives the view."""
    # size and nbytes are fixed at construction (the shape never changes): a run reads them for
    # every tensor ORT hands over (the in-place checks), where ShapedBuffer's would multiply out
    # the shape each time.
    __slots__ = ("memory", "ptr", "shape", "dtype", "_host", "size", "nbytes")

    def __init__(self, memory: CudaMemory | None, ptr: int, shape, dtype):
        self.memory = memory
        self.ptr = int(ptr)
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        self._host = None
        n = 1
        for d in self.shape:
            n *= d
        self.size = n
        self.nbytes = n * self.dtype.itemsize

    @property
    def host_visible(self) -> bool:
        return self.memory is not None and self.memory.host_visible

    def reshape(self, *shape) -> "DeviceArray":
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        shape = [int(d) for d in shape]
        if shape.count(-1) == 1:
            known = 1
            for d in shape:
                if d != -1:
                    known *= d
            shape[shape.index(-1)] = self.size // known if known else 0
        n = 1
        for d in shape:
            n *= d
        if n != self.size:
            raise HipepError(f"cannot reshape a device array of shape {list(self.shape)} into {shape}")
        return DeviceArray(self.memory, self.ptr, shape, self.dtype)

    def host_view(self) -> np.ndarray:
        """The contents as a numpy array over the pinned host memory (host_visible memory only):
        what the host reads and writes, live."""
        if not self.host_visible:
            raise HipepError("device memory has no host view; copy it to the host first")
        if self._host is None:
            nbytes = self.nbytes
            addr = self.memory.host_ptr + (self.ptr - self.memory.ptr)
            if nbytes:
                buf = (ctypes.c_uint8 * nbytes).from_address(addr)
                self._host = np.frombuffer(buf, np.uint8).view(self.dtype).reshape(self.shape)
            else:
                self._host = np.empty(self.shape, self.dtype)
        return self._host

    def __repr__(self) -> str:
        where = "host_visible" if self.host_visible else "device"
        return f"DeviceArray({list(self.shape)}:{self.dtype}, {where} at {self.ptr:#x})"


class OrtDeviceArray(DeviceArray):
    """A tensor ORT keeps in this GPU's device memory (hipep's EP device offers it; IOBinding and
    device OrtValues put the caller's tensors there), used in place as a kernel argument. The
    host may read single elements of a 1-D view (a shape program reading an integer input's
    values: Reshape's shape as a graph input) or a small tensor whole (`tobytes`: a float or bool
    input a shape program pins, Resize's scales), counted among the run's host reads."""
    __slots__ = ("device",)

    def __init__(self, device: "CudaDevice", ptr: int, shape, dtype):
        super().__init__(None, ptr, shape, dtype)
        self.device = device

    def reshape(self, *shape) -> "OrtDeviceArray":
        view = super().reshape(*shape)
        return OrtDeviceArray(self.device, view.ptr, view.shape, view.dtype)

    def __array__(self, dtype=None, copy=None):
        # numpy would otherwise take this object for a 0-d array of dtype object. Whole device
        # tensors reach the host only through copies (CudaDevice.read, a plan's copies).
        raise HipepError(f"a tensor of shape {list(self.shape)} ({self.dtype}) is in GPU memory, which the host "
                         f"reads only by element, whole where small, or through the device's copies")

    def __getitem__(self, k):
        if self.ndim != 1 or not isinstance(k, (int, np.integer)):
            raise HipepError(f"a device tensor of shape {list(self.shape)} is read by the host one element of a "
                             f"1-D view at a time, not with [{k!r}]")
        n = self.size
        if not -n <= k < n:
            raise IndexError(f"index {k} is out of bounds for a device tensor of {n} elements")
        k = int(k) % n
        out = np.empty(1, self.dtype)
        self._read(out.ctypes.data, self.ptr + k * self.dtype.itemsize, self.dtype.itemsize)
        return out[0]

    def tobytes(self) -> bytes:
        """The whole tensor's bytes, in one copy (numpy's `tobytes` for what a shape program pins:
        small tensors only, hipep.runtime.shapes.MAX_READ_ELEMENTS)."""
        out = np.empty(self.nbytes, np.uint8)
        if self.nbytes:
            self._read(out.ctypes.data, self.ptr, self.nbytes)
        return out.tobytes()

    def _read(self, dst: int, src: int, nbytes: int) -> None:
        dev = self.device
        dev._current()
        # On the device's own stream, waited for (the legacy stream's implicit syncs are not
        # wanted beside other threads' captures). ORT's copies into its tensors are complete
        # (hipep's data transfer waits for them) and hipep's own runs end with a sync.
        d, aux = _driver(), dev._aux()
        _check(d.cuMemcpyDtoHAsync(dst, src, nbytes, aux), "cuMemcpyDtoHAsync")
        _check(d.cuStreamSynchronize(aux), "cuStreamSynchronize")
