"""Compile time of the builder's 2-layer decoders: the time hipep spends in Compile (IR pipeline
and plan) during session creation, and the whole session creation, per model.

    python benchmarks/compile_time.py [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import time

import onnxruntime as ort

import hipep
from hipep.ort_compat import session_providers
from hipep.tools import model_zoo


def measure(path: str) -> dict:
    hipep.register()
    before = hipep.stats().get("compile_us", 0)
    start = time.perf_counter()
    so = ort.SessionOptions()
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    # the CPU reference device (on a GPU machine it has an EP name of its own)
    ort.InferenceSession(path, so, providers=session_providers(so, hipep.provider_for("cpu"), {"device": "cpu"}))
    session_s = time.perf_counter() - start
    return {"compile_s": (hipep.stats().get("compile_us", 0) - before) / 1e6, "session_s": session_s}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    args = ap.parse_args()
    rows = {}
    for arch in model_zoo.ARCHITECTURES:
        for precision in model_zoo.PRECISIONS:
            path = os.path.join(model_zoo.decoder(arch, precision), "model.onnx")
            first = measure(path)  # the process's first: imports, xDSL's first use
            r = rows[f"{arch}-{precision}"] = {**measure(path), "first_compile_s": first["compile_s"]}
            print(f"{arch}-{precision:<5} compile {r['compile_s']:.3f} s (first in this process "
                  f"{r['first_compile_s']:.3f} s)   session creation {r['session_s']:.3f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
