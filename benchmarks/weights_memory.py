"""Peak and steady-state host memory for a model with ~100 MB of weights, hipep vs the CPU EP.

hipep keeps no copy of the weights: they stay ORT's initializers and reach Compute as fused-node
inputs (drop_constant_initializers = false), wrapped without copying. Each measurement runs in
a fresh process. Usage: python benchmarks/weights_memory.py [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

CHILD = r"""
import json, os, resource, sys
import numpy as np, onnxruntime as ort
def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
path, ep = sys.argv[1], sys.argv[2]
base = rss_mb()
if ep == "hipep":
    import hipep
    sess = hipep.InferenceSession(path, device="cpu")
else:
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
created = rss_mb()
x = np.ones((4, 5120), np.float32)
for _ in range(3):
    y = sess.run(None, {"x": x})[0]
steady = rss_mb()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"ep": ep, "rss_before_mb": round(base, 1), "rss_after_create_mb": round(created, 1),
                  "rss_steady_mb": round(steady, 1), "peak_rss_mb": round(peak, 1), "checksum": float(y.sum())}))
"""


def build_model(path: str) -> float:
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    w = np.random.default_rng(0).standard_normal((5120, 5120)).astype(np.float32) * 0.01  # 100 MiB
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"), helper.make_node("Relu", ["h"], ["y"], name="act")],
        "weights100", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 5120])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 5120])], [numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    with open(path, "wb") as f:
        f.write(m.SerializeToString())
    return w.nbytes / 2**20


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "weights100.onnx")
        weights_mb = build_model(path)
        rows = []
        for ep in ["cpu_ep", "hipep"]:
            out = subprocess.run([sys.executable, "-c", CHILD, path, ep], capture_output=True, text=True, check=True)
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"weights: {weights_mb:.1f} MiB")
    for r in rows:
        print(f"{r['ep']:<7} after create {r['rss_after_create_mb']:8.1f} MiB  steady {r['rss_steady_mb']:8.1f} MiB  "
              f"peak {r['peak_rss_mb']:8.1f} MiB")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"weights_mb": weights_mb, "results": rows}, f, indent=2)


if __name__ == "__main__":
    main()
