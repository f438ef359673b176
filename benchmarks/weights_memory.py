"""Peak and steady-state host memory for a model with ~100 MiB of weights, hipep vs the CPU EP.

hipep holds its own copy of the weights: Compile copies each constant initializer the fused
subgraph reads into numpy arrays (hipep.weights) and GetCapability sets
drop_constant_initializers, so ORT frees its copy once the session is set up and Compute no
longer receives them. At steady state there is one copy, as with the CPU EP; during session
creation ORT's and hipep's copies briefly coexist.

Each measurement runs in a fresh process that builds nothing itself; the model is written by a
process of its own. Peak is the child's VmHWM (its own high-water mark: ru_maxrss would also count
the memory of the process that spawned it, which Linux carries across exec). For hipep the Python
modules the session needs are imported first, so "modules" and "session" separate that fixed cost
from what the session itself holds. hipep is measured twice, with the provider option
`plan_cache` on a fresh folder: "hipep" compiles the model (and stores its plan), "hipep stored"
is the next process, which loads that plan and never imports the compiler (xDSL, the hip dialect,
the passes).

Usage: python benchmarks/weights_memory.py [--mib 100] [--external] [--json out.json] [--out report.md]
Without --mib/--external it measures 100 MiB, 100 MiB as external data and 400 MiB; --out writes
the report (date, commit, machine, the numbers, the targets) as Markdown.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

CHILD = r"""
import json, sys
import numpy as np, onnxruntime as ort
def status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
path, ep, width, plans = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
base = status("VmRSS")
if ep == "hipep":  # what compiling needs
    import hipep, hipep.bridge, hipep.compiler, hipep.frontend, hipep.passes, hipep.ops.inference
elif ep == "hipep_stored":  # what a session that loads stored plans needs
    import hipep, hipep.bridge, hipep.ops.inference
modules = status("VmRSS")
if ep.startswith("hipep"):
    sess = hipep.InferenceSession(path, device="cpu", plan_cache=plans)
    if (hipep.stats().get("plans_loaded", 0) > 0) != (ep == "hipep_stored"):
        sys.exit(f"{ep}: expected the plan to be {'loaded' if ep == 'hipep_stored' else 'compiled'}: {hipep.stats()} "
                 f"(a stored plan is not found when hipep's source changed since it was stored)")
else:
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
created = status("VmRSS")
x = np.ones((4, width), np.float32)
for _ in range(3):
    y = sess.run(None, {"x": x})[0]
steady = status("VmRSS")
print(json.dumps({"ep": ep, "rss_before_mb": round(base, 1), "rss_modules_mb": round(modules, 1),
                  "rss_after_create_mb": round(created, 1), "rss_steady_mb": round(steady, 1),
                  "peak_rss_mb": round(status("VmHWM"), 1), "checksum": float(y.sum()),
                  "compiler_imported": "xdsl" in sys.modules}))
"""

BUILD = r"""
import sys
import numpy as np
from onnx import TensorProto, helper, numpy_helper, save
path, width, external = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
w = np.random.default_rng(0).standard_normal((width, width)).astype(np.float32) * 0.01
g = helper.make_graph(
    [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"), helper.make_node("Relu", ["h"], ["y"], name="act")],
    "weights", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", width])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", width])], [numpy_helper.from_array(w, "w")])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
if external:
    save(m, path, save_as_external_data=True, all_tensors_to_one_file=True, location="weights.bin",
         size_threshold=1024)
else:
    save(m, path)
"""


def width_for(mib: float) -> int:
    """The side of a square f32 matrix of about `mib` MiB (a multiple of 64)."""
    return max(64, int((mib * 2**20 / 4) ** 0.5) // 64 * 64)


EPS = ("cpu_ep", "hipep", "hipep_stored")
LABELS = {"cpu_ep": "cpu_ep", "hipep": "hipep", "hipep_stored": "hipep stored"}


def measure(mib: float, external: bool) -> dict:
    """One model: the CPU EP, hipep compiling it, and hipep loading the plan it stored."""
    width = width_for(mib)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "weights.onnx")
        plans = os.path.join(d, "plans")
        subprocess.run([sys.executable, "-c", BUILD, path, str(width), "1" if external else "0"], check=True)
        # Every measured process finds its modules' bytecode, as an installed package has it: a
        # module compiled from source on import leaves the compiler's memory in the heap (up to
        # ~2 MiB for hipep's modules when its __pycache__ is stale and bytecode writing is off). A first
        # run fills a bytecode cache of this run's own; its plan goes to a folder of its own.
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = os.path.join(d, "bytecode")
        rows = []
        for ep, folder in (("hipep", os.path.join(d, "warm-up")),) + tuple((ep, plans) for ep in EPS):
            out = subprocess.run([sys.executable, "-c", CHILD, path, ep, str(width), folder],
                                 capture_output=True, text=True, env=env)
            if out.returncode != 0:
                sys.exit(f"{ep} failed:\n{out.stderr}")
            if folder == plans:
                rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return {"weights_mb": width * width * 4 / 2**20, "external": external, "results": rows}


def report(m: dict) -> list[str]:
    """The text lines of one model's measurements."""
    lines = [f"weights: {m['weights_mb']:.1f} MiB{' (external data)' if m['external'] else ''}"]
    rows = {r["ep"]: r for r in m["results"]}
    for ep in EPS:
        r = rows[ep]
        lines.append(f"{LABELS[ep]:<12} modules {r['rss_modules_mb']:7.1f}  after create {r['rss_after_create_mb']:7.1f}  "
                     f"steady {r['rss_steady_mb']:7.1f}  peak {r['peak_rss_mb']:7.1f} MiB"
                     f"{'  (compiler imported)' if r['compiler_imported'] else ''}")
    cpu = rows["cpu_ep"]
    for ep in EPS[1:]:
        r = rows[ep]
        lines.append(f"{LABELS[ep]} / cpu_ep: steady {r['rss_steady_mb'] / cpu['rss_steady_mb']:.3f}, "
                     f"peak {r['peak_rss_mb'] / cpu['peak_rss_mb']:.3f}; session alone (steady - modules): "
                     f"{r['rss_steady_mb'] - r['rss_modules_mb']:.1f} MiB against the CPU EP's "
                     f"{cpu['rss_steady_mb'] - cpu['rss_modules_mb']:.1f}")
    return lines


def markdown(info: dict, command: str, measured: list[dict]) -> str:
    L = ["# Host memory with large weights: hipep (CPU device) vs ORT's CPU EP", "",
         f"- date: {info['date']}", f"- commit: {info['commit']}",
         f"- machine: {info['cpu']}, {info['cores']} cores, {info['memory']}, no GPU (hipep's CPU reference device); "
         f"onnxruntime {info['onnxruntime']}, numpy {info['numpy']}, Python {info['python']}",
         f"- command: `{command}`",
         "- model: MatMul(x[n,W], w[W,W] f32) → Relu; 3 runs with n = 4; each row a fresh process; peak = the "
         "process's own VmHWM; \"hipep\" compiles (plan_cache on a fresh folder, so it stores the plan), "
         "\"hipep stored\" is the next process, which loads it", "", "```"]
    for i, m in enumerate(measured):
        L += ([""] if i else []) + report(m)
    L += ["```", "", "| target (100 MiB of weights) | hipep (compiles) | hipep stored | |", "|---|---|---|---|"]
    first = {r["ep"]: r for r in measured[0]["results"]}
    cpu = first["cpu_ep"]
    for what, key, limit in (("steady RSS within 10 % of CPU EP", "rss_steady_mb", 1.10),
                             ("peak during session creation ≤ 1.3× CPU EP", "peak_rss_mb", 1.30)):
        ratios = [first[ep][key] / cpu[key] for ep in EPS[1:]]
        L.append(f"| {what} | {ratios[0]:.3f}× ({'met' if ratios[0] <= limit else 'not met'}) | "
                 f"{ratios[1]:.3f}× ({'met' if ratios[1] <= limit else 'not met'}) | ≤ {limit:.2f}× |")
    return "\n".join(L) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=float, help="size of the weight matrix in MiB (default: 100, 100 external, 400)")
    ap.add_argument("--external", action="store_true", help="store the weights as ONNX external data")
    ap.add_argument("--json")
    ap.add_argument("--out", help="write the report as Markdown to this file")
    args = ap.parse_args()
    if args.mib is None and not args.external:
        configs = [(100.0, False), (100.0, True), (400.0, False)]
    else:
        configs = [(args.mib or 100.0, args.external)]
    measured = []
    for mib, external in configs:
        measured.append(measure(mib, external))
        print("\n".join(report(measured[-1])) + "\n", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(measured, f, indent=2)
    if args.out:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from machine import machine_info

        command = "python benchmarks/weights_memory.py" + (f" --mib {args.mib:g}" if args.mib else "") + (
            " --external" if args.external else "")
        with open(args.out, "w") as f:
            f.write(markdown(machine_info(), command, measured))


if __name__ == "__main__":
    main()
