"""What every benchmark result records about where it ran: date, commit, machine, versions."""
from __future__ import annotations

import datetime
import os
import platform
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def machine_info() -> dict:
    import numpy as np
    import onnxruntime as ort

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    mem = ""
    try:
        with open("/proc/meminfo") as f:
            mem = f"{int(f.readline().split()[1]) / 2**20:.0f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    # A copy of the tree on an offline GPU machine names its commit in HIPEP_COMMIT: such a copy may
    # carry a .git of an older commit (its tracked files changed since), so the name given wins.
    commit = os.environ.get("HIPEP_COMMIT")
    if not commit:
        commit = git("rev-parse", "--short", "HEAD") or "unknown"
        if git("status", "--porcelain", "--untracked-files=no"):
            commit += "+dirty"
    return {"date": datetime.date.today().isoformat(), "commit": commit, "cpu": cpu, "cores": os.cpu_count(),
            "memory": mem, "onnxruntime": ort.__version__, "numpy": np.__version__,
            "python": platform.python_version(),
            "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS", "default"),
            # the machine may be shared: a load well above zero at the start says the numbers are noisier
            "load": os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")}
