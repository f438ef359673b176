"""What a bound launch keeps (hipep.runtime.cuda_graphs): its parameter buffer outside the garbage
collector's view, and no dict of earlier bindings for a node bound once. A session keeps the launches of
every prompt length it has bound (up to 64), and Python's full collections walk every tracked object."""
from __future__ import annotations

import ctypes
import gc

import numpy as np

from hipep.runtime import cuda_graphs
from hipep.runtime.cuda_memory import DeviceArray
from hipep.runtime.gpu_binding_core import KernelOp


def _op(a: int, b: int) -> KernelOp:
    return KernelOp("hipep_test_entry", (4, 1, 1), (128, 1, 1),
                    [ctypes.c_uint64(a), ctypes.c_int32(b), ctypes.c_float(0.5)], module="copy")


def test_a_launch_packs_its_parameters_into_an_untracked_buffer():
    launch = cuda_graphs._Launch(object(), _op(0x1234_5678_9ABC, -7))
    assert not gc.is_tracked(launch.buffer)
    assert launch.param_bytes(0) == bytes(ctypes.c_uint64(0x1234_5678_9ABC))
    assert launch.param_bytes(1) == bytes(ctypes.c_int32(-7))
    assert launch.param_bytes(2) == bytes(ctypes.c_float(0.5))
    # the parameter array cuLaunchKernel reads: a pointer per parameter, each at its bytes
    pointers = (ctypes.c_uint64 * 3).from_address(launch.argv_addr)
    assert [pointers[k] for k in range(3)] == [launch.param_address(k) for k in range(3)]
    # what native replay writes at a parameter's address is what the launch then passes
    ctypes.c_uint64.from_address(launch.param_address(0)).value = 42
    assert launch.param_bytes(0) == bytes(ctypes.c_uint64(42))


class _Program:
    binding = None  # (reads no values)

    def __init__(self):
        self.binds = 0

    def bind(self, args, stream=None, first_run=False):
        self.binds += 1
        return [cuda_graphs._Launch(object(), _op(args[0].ptr, len(args[0].shape)))]


def _array(ptr: int) -> DeviceArray:
    return DeviceArray(None, ptr, (2, 3), np.dtype(np.float32))


def test_a_node_bound_once_keeps_no_dict_and_earlier_bindings_come_back():
    program = _Program()
    state = cuda_graphs._NodeState(program)
    first = state.prepare([_array(4096)])
    assert state.recent is None and program.binds == 1
    assert state.prepare([_array(4096)]) is first and program.binds == 1
    second = state.prepare([_array(8192)])  # another address: bound, the first set aside
    assert program.binds == 2 and second is not first and len(state.recent) == 1
    assert state.prepare([_array(4096)]) is first and program.binds == 2  # kept by signature
    for k in range(1, 6):  # at most _RECENT_BINDINGS bindings kept in all, the current one among them
        state.prepare([_array(4096 * (k + 2))])
    assert len(state.recent) == cuda_graphs._RECENT_BINDINGS - 1
    binds = program.binds
    state.prepare([_array(4096)])  # the oldest went: bound again
    assert program.binds == binds + 1
