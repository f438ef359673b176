"""Device-side fault reports: how a kernel tells the host that a run's input was bad.

A kernel cannot raise. Where ONNX Runtime rejects a value only the kernel sees (a Gather index
out of range, a rotary position past the cos/sin cache, a GroupQueryAttention seqlens_k that does
not fit the KV cache, a TensorScatter write index whose rows do not fit the cache, an Attention
nonpad_kv_seqlen past its keys, a CumSum axis past the input's rank), the kernel
writes what it found into its stream's fault record and carries on without touching memory outside
its buffers (it writes zeros there, or clamps, or skips). The host reads the record whenever it
synchronizes with the stream and raises a HipepError naming the node, the input, the
bad value and the valid range, then clears the record, so the session stays usable.

The record (`FaultRecord`, kernels/hipep_device.h's `hipep_fault_record`) lives in host-mapped
pinned memory, one per stream for the stream's life: kernels write it through its device address,
the host reads it in place, without a copy, and its address never changes, so launches bound once
and CUDA graphs captured once report into it on every replay. The first fault wins (an atomicCAS
on `code`); later ones, until the host clears it, are dropped. A launch learns where to report
from its kernel parameter `FaultSite`: the record's address and the launch's site, a small integer
the device maps back to the node's label and what the kernel checks (`FaultSites`). Nothing of
this costs the host anything per launch: the parameter is part of the launch's bound arguments,
and the host reads one word of pinned memory per synchronization.

Plain Python (ctypes): bindings and the unit tests use it without a GPU.
"""
from __future__ import annotations

import ctypes
import threading
from typing import Callable

from ..errors import RuntimeShapeError

# Fault codes (kernels/hipep_device.h's HIPEP_FAULT_*).
FAULT_NONE = 0
FAULT_INDEX = 1  # an index outside [-bound, bound - 1]
FAULT_POSITION = 2  # a rotary position outside [0, bound - 1] (bound: the cos/sin cache's rows)
FAULT_SEQLEN = 3  # a seqlens_k value outside [0, bound - 1] (bound: the KV cache rows it may fill)
FAULT_SEQLEN_SHORT = 4  # a seqlens_k value below bound - 1 (bound: the step's new tokens)
FAULT_WRITE_INDEX = 5  # a write index outside [0, bound] (bound -1: any index >= 0 is valid)
FAULT_KV_LENGTH = 6  # a count of valid keys (nonpad_kv_seqlen) outside [0, bound] (bound: the keys)
FAULT_AXIS = 7  # an axis outside [-bound, bound - 1] (bound: the input's rank)
FAULT_SEQUENCE_LENGTH = 8  # a sequence length outside [0, bound] (bound: the time axis' extent)
FAULT_FLAT_INDEX = 9  # an index outside [0, bound - 1] (bound: the elements of the flattened output)


class FaultRecord(ctypes.Structure):
    """kernels/hipep_device.h's hipep_fault_record."""
    _fields_ = [("code", ctypes.c_uint32), ("site", ctypes.c_int32), ("value", ctypes.c_int64),
                ("bound", ctypes.c_int64)]


class FaultSite(ctypes.Structure):
    """kernels/hipep_device.h's hipep_fault_site, a kernel parameter: the stream's record (0: the
    launch does not report) and the launch's site."""
    _fields_ = [("record", ctypes.c_uint64), ("site", ctypes.c_int32)]


FAULT_RECORD_BYTES = ctypes.sizeof(FaultRecord)
NO_FAULT_SITE = FaultSite(0, 0)


class InputFault(RuntimeShapeError):
    """A kernel found a bad value in a run's input (the stream's fault record)."""


class IndexFault(InputFault):
    """A kernel found an index out of range in a run's input."""


class RangeFault(InputFault):
    """A kernel found a position, a sequence length or an axis out of range in a run's input."""


class FaultSites:
    """The device's table of report sites: (launch label, what the kernel checks) <-> a small
    integer a kernel writes into the record. One entry per distinct pair for the device's life
    (a launch is bound again and again with the same site)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._ids: dict[tuple[str, str], int] = {}
        self._entries: list[tuple[str, str]] = []

    def site(self, label: str, what: str) -> int:
        key = (label, what)
        with self._lock:
            found = self._ids.get(key)
            if found is None:
                found = self._ids[key] = len(self._entries)
                self._entries.append(key)
            return found

    def describe(self, site: int) -> tuple[str, str]:
        with self._lock:
            if 0 <= site < len(self._entries):
                return self._entries[site]
        return "a launch", "an input"


def fault_param(target, what: str) -> FaultSite:
    """The FaultSite parameter for a launch bound for `target` (a gpu_kernels.Target) whose kernel
    reports bad values of `what` (e.g. "input 1 (indices) into data axis 0"); one that reports
    nowhere where the target has no fault record (a binding called outside a stream)."""
    fault: Callable[[str], FaultSite] | None = getattr(target, "fault", None)
    return NO_FAULT_SITE if fault is None else fault(what)


def fault_error(record: FaultRecord, sites: FaultSites) -> InputFault | None:
    """The error a filled record reports (None for an empty one): the node, what the kernel checks,
    the bad value and the range it had to be in (the wording of the CPU device's checks)."""
    code = int(record.code)
    if code == FAULT_NONE:
        return None
    label, what = sites.describe(int(record.site))
    value, bound = int(record.value), int(record.bound)
    if code == FAULT_INDEX:
        if bound <= 0:
            return IndexFault(f"{label}: {what}: index {value} is out of data bounds: the axis is empty, so no "
                              f"index is valid")
        return IndexFault(f"{label}: {what}: index {value} is out of data bounds: it must be within the "
                          f"inclusive range [{-bound}, {bound - 1}]")
    if code == FAULT_POSITION:
        return RangeFault(f"{label}: {what}: position {value} is out of range for cos_cache of {bound} rows: it "
                          f"must be within [0, {bound - 1}]")
    if code == FAULT_SEQLEN:
        why = ("a length is never negative" if value < 0
               else f"seqlens_k + 1 = {value + 1} keys do not fit the KV cache of {bound} rows")
        return RangeFault(f"{label}: {what}: seqlens_k {value} is out of range [0, {bound}): {why}")
    if code == FAULT_SEQLEN_SHORT:
        return RangeFault(f"{label}: {what}: seqlens_k {value} is too small for sequence_length {bound}: it must be "
                          f"at least {bound - 1}")
    if code == FAULT_WRITE_INDEX:
        if value < 0:
            return IndexFault(f"{label}: {what}: write index {value} is negative")
        return IndexFault(f"{label}: {what}: write index {value} is out of range [0, {bound}]: write index + "
                          f"sequence_length must not exceed max_sequence_length")
    if code == FAULT_AXIS:
        return RangeFault(f"{label}: {what}: axis {value} is out of range for a rank-{bound} input (expected "
                          f"{-bound} <= axis < {bound})")
    if code == FAULT_KV_LENGTH:
        return RangeFault(f"{label}: {what}: {value} valid keys is out of range [0, {bound}]: a batch entry has "
                          f"at most the {bound} keys of K and V")
    if code == FAULT_SEQUENCE_LENGTH:
        return RangeFault(f"{label}: {what}: sequence length {value} is out of range [0, {bound}] (the time axis' "
                          f"extent)")
    if code == FAULT_FLAT_INDEX:
        return IndexFault(f"{label}: {what}: index {value} is out of range [0, {bound}) (the output's {bound} "
                          f"elements, flattened)")
    return InputFault(f"{label}: {what}: the kernel reported fault code {code} (value {value}, bound {bound})")


def take_fault(record_address: int, sites: FaultSites) -> InputFault | None:
    """Reads the record at host address `record_address` once the stream's work is done: the
    error it holds, the record cleared for the next run; None (one word read) when it is empty."""
    if not record_address:
        return None
    record = FaultRecord.from_address(record_address)
    if record.code == FAULT_NONE:
        return None
    error = fault_error(record, sites)
    ctypes.memset(record_address, 0, FAULT_RECORD_BYTES)
    return error
