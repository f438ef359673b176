"""What benchmarks/overhead.py's measurements share about the sessions they run: ORT's CPU EP, the
reference every hipep time is compared with; hipep's counters, read around a run; and whether this
hipep has the `fusion` provider option."""
from __future__ import annotations

import dataclasses

import hipep
from hipep.options import ProviderOptions

CPU_EP = ["CPUExecutionProvider"]


def counters() -> tuple[int, int, int, int]:
    """hipep.stats()'s launches, kernel_us, specializations and host_reads so far in this process:
    a run's share is the difference of two reads around it."""
    s = hipep.stats()
    return s.get("launches", 0), s.get("kernel_us", 0), s.get("specializations", 0), s.get("host_reads", 0)


def fusion_available() -> bool:
    return "fusion" in {f.name for f in dataclasses.fields(ProviderOptions)}
