"""Process-wide counters (plain data), read through `hipep.stats()`."""
from __future__ import annotations

import threading
from collections import Counter

_lock = threading.Lock()
_counters: Counter = Counter()


def bump(name: str, by: int = 1) -> None:
    with _lock:
        _counters[name] += by


def bump_many(**amounts: int) -> None:
    with _lock:
        for name, by in amounts.items():
            if by:
                _counters[name] += by


def snapshot() -> dict[str, int]:
    with _lock:
        return dict(_counters)
