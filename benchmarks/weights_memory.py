"""Peak and steady-state host memory for a model with ~100 MiB of weights, hipep vs the CPU EP.

hipep holds its own copy of the weights: Compile copies each constant initializer the fused
subgraph reads into numpy arrays (hipep.weights) and GetCapability sets
drop_constant_initializers, so ORT frees its copy once the session is set up and Compute no
longer receives them. At steady state there is one copy, as with the CPU EP; during session
creation ORT's and hipep's copies briefly coexist.

Each measurement runs in a fresh process that builds nothing itself; the model is written by a
process of its own. Peak is the child's VmHWM (its own high-water mark: ru_maxrss would also count
the memory of the process that spawned it, which Linux carries across exec). For hipep the Python
modules its compiler needs are imported first, so "modules" and "session" separate that fixed cost
from what the session itself holds.

Usage: python benchmarks/weights_memory.py [--mib 100] [--external] [--json out.json]
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
path, ep, width = sys.argv[1], sys.argv[2], int(sys.argv[3])
base = status("VmRSS")
if ep == "hipep":
    import hipep, hipep.bridge, hipep.compiler, hipep.frontend, hipep.passes, hipep.ops.inference
modules = status("VmRSS")
if ep == "hipep":
    sess = hipep.InferenceSession(path, device="cpu")
else:
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
created = status("VmRSS")
x = np.ones((4, width), np.float32)
for _ in range(3):
    y = sess.run(None, {"x": x})[0]
steady = status("VmRSS")
print(json.dumps({"ep": ep, "rss_before_mb": round(base, 1), "rss_modules_mb": round(modules, 1),
                  "rss_after_create_mb": round(created, 1), "rss_steady_mb": round(steady, 1),
                  "peak_rss_mb": round(status("VmHWM"), 1), "checksum": float(y.sum())}))
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=float, default=100.0, help="size of the weight matrix (default 100 MiB)")
    ap.add_argument("--external", action="store_true", help="store the weights as ONNX external data")
    ap.add_argument("--json")
    args = ap.parse_args()
    width = width_for(args.mib)
    weights_mb = width * width * 4 / 2**20
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "weights.onnx")
        subprocess.run([sys.executable, "-c", BUILD, path, str(width), "1" if args.external else "0"], check=True)
        rows = []
        for ep in ["cpu_ep", "hipep"]:
            out = subprocess.run([sys.executable, "-c", CHILD, path, ep, str(width)], capture_output=True, text=True)
            if out.returncode != 0:
                sys.exit(f"{ep} failed:\n{out.stderr}")
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"weights: {weights_mb:.1f} MiB{' (external data)' if args.external else ''}")
    for r in rows:
        print(f"{r['ep']:<7} modules {r['rss_modules_mb']:7.1f}  after create {r['rss_after_create_mb']:7.1f}  "
              f"steady {r['rss_steady_mb']:7.1f}  peak {r['peak_rss_mb']:7.1f} MiB")
    cpu, hip = rows
    print(f"hipep / cpu_ep: steady {hip['rss_steady_mb'] / cpu['rss_steady_mb']:.3f}, "
          f"peak {hip['peak_rss_mb'] / cpu['peak_rss_mb']:.3f}; session alone (steady - modules): "
          f"cpu_ep {cpu['rss_steady_mb'] - cpu['rss_modules_mb']:.1f}, "
          f"hipep {hip['rss_steady_mb'] - hip['rss_modules_mb']:.1f} MiB")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"weights_mb": weights_mb, "external": args.external, "results": rows}, f, indent=2)


if __name__ == "__main__":
    main()
