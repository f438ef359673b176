"""Accuracy of the ~1.1B int4 llama's prompt step (hipep.tools.model_zoo size '1b') on hipep
against ORT's CPU EP, with the intermediate tensors of every layer, and how far the CPU EP itself
moves under rounding-sized perturbations.

The prompt is benchmarks/decode.py's: 128 random tokens from numpy's default_rng(0), one prefill
step on an empty KV cache. Printed (and with --json written):

1. the relative L2 error of the prompt's last logits row, hipep (--device cpu|cuda) against the
   CPU EP, and whether the top-1 token agrees;
2. with --layers: a copy of the model (beside a hard link to its weights file) that also outputs
   every MatMulNBits, GroupQueryAttention, (Skip)SimplifiedLayerNormalization and Mul result, run
   on both; the relative L2 error of each such tensor over all 128 rows, layer by layer, and the
   first one past --threshold. Rounding alone also jumps where a MatMulNBits at accuracy_level 4
   requantizes its input (one flipped int8 code moves a value by amax / 127): a wrong rule shows
   as an error well above the --sensitivity columns at the same tensor;
3. with --sensitivity (CPU EP only, fast): the same traced model with every MatMulNBits output
   moved by one ulp per column, down, up or not at random (less than any other summation order
   of its dot products moves it) -- the logits' and each layer's relative L2 change, for three
   seeds and for the perturbation of the first MatMulNBits only; the CPU EP with 1 thread against
   2; accuracy_level 0 (f32 activations) against 4 (int8); and the one-ulp noise at accuracy_level
   0. A device whose errors track this profile differs by rounding that the model amplifies, not
   by a rule.

    python benchmarks/accuracy_1b.py [--device cpu|cuda] [--model DIR] [--prompt N] [--layers]
                                     [--sensitivity] [--no-hipep] [--accuracy-level L]
                                     [--kv-capacity N] [--json FILE]

On hipep's CPU reference device the prompt step takes ~11 min on 2 cores (~22 with --layers);
on the GPU seconds. Building the model once needs the `models` extra (~1 min on 2 cores).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time

import numpy as np

PROMPT = 128
TRACED_OPS = ("SimplifiedLayerNormalization", "SkipSimplifiedLayerNormalization", "MatMulNBits",
              "GroupQueryAttention", "Mul")
THRESHOLD = 1e-6
_LAYER = re.compile(r"^/model/layers\.(\d+)/")


def rel_l2(got, want) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30))


# ---- the model and its prompt ----------------------------------------------------------------------

def model_folder(folder: str | None) -> str:
    if folder is not None:
        if not os.path.isfile(os.path.join(folder, "model.onnx")):
            raise SystemExit(f"accuracy_1b.py: no model.onnx in {folder}")
        return folder
    from hipep.tools import model_zoo

    print("building or loading the ~1.1B int4 model (model_zoo size '1b') ...", flush=True)
    return model_zoo.decoder("llama", "int4", size="1b")


def prompt_ids(vocab: int, length: int) -> np.ndarray:
    """benchmarks/decode.py's prompt: [1, length] int64."""
    return np.random.default_rng(0).integers(3, vocab, length).astype(np.int64)[None]


def prompt_feeds(sess, head_size: int, ids: np.ndarray, kv_capacity: int) -> dict:
    """A prefill on an empty cache; with kv_capacity, past buffers of that many zero positions
    (the shape decode.py binds, there shared with present)."""
    from hipep.tools import model_zoo

    feeds = model_zoo.decoder_feeds(sess.get_inputs(), head_size, ids, 0, None)
    if kv_capacity:
        for name, value in feeds.items():
            if name.startswith("past_key_values."):
                feeds[name] = np.zeros(value.shape[:2] + (kv_capacity,) + value.shape[3:], value.dtype)
    return feeds


# ---- copies of the model ---------------------------------------------------------------------------

class Copies:
    """Edited copies of model.onnx. ORT reads external data only from the model's own folder (it
    resolves symbolic links), so each copy is saved in a temporary folder beside hard links to
    the original's data files, or, where those cannot be made (another file system), in the
    model's folder under a hidden name that close() removes."""

    def __init__(self, folder: str, accuracy_level: int | None = None):
        import onnx

        self.folder = folder
        self.proto = onnx.load(os.path.join(folder, "model.onnx"), load_external_data=False)
        if accuracy_level is not None:
            with_accuracy_level(self.proto, accuracy_level)
        self.edited = accuracy_level is not None
        self.data_files = sorted({e.value for t in self.proto.graph.initializer for e in t.external_data
                                  if e.key == "location"})
        for name in self.data_files:
            if os.path.dirname(name) or not os.path.isfile(os.path.join(folder, name)):
                raise ValueError(f"external data '{name}' is not a file beside model.onnx in {folder}")
        self.work = tempfile.mkdtemp(prefix="accuracy_1b-")
        self.linked = True
        try:
            for name in self.data_files:
                os.link(os.path.join(folder, name), os.path.join(self.work, name))
        except OSError:
            self.linked = False
        self.saved: list[str] = []

    def base(self) -> str:
        """The model to compare: the original, or a copy at the accuracy level asked for."""
        return self.save(self.fresh()) if self.edited else os.path.join(self.folder, "model.onnx")

    def fresh(self):
        import onnx

        copy = onnx.ModelProto()
        copy.CopyFrom(self.proto)
        return copy

    def save(self, model) -> str:
        import onnx

        n = len(self.saved)
        path = (os.path.join(self.work, f"model-{n}.onnx") if self.linked
                else os.path.join(self.folder, f".accuracy_1b-{os.getpid()}-{n}.onnx"))
        onnx.save(model, path)
        self.saved.append(path)
        return path

    def close(self) -> None:
        import shutil

        for path in self.saved:
            if os.path.exists(path):
                os.remove(path)
        shutil.rmtree(self.work, ignore_errors=True)


def traced_tensors(model) -> list[tuple[str, str]]:
    """(tensor, label) for each traced op's outputs in graph order; label: the node's name
    without the model prefix, with ':i' for output i > 0."""
    graph_outputs = {o.name for o in model.graph.output}
    traced = []
    for node in model.graph.node:
        if node.op_type not in TRACED_OPS:
            continue
        for i, name in enumerate(node.output):
            if name and name not in graph_outputs:
                traced.append((name, node.name.removeprefix("/model/") + (f":{i}" if i else "")))
    return traced


def with_outputs(model, names: list[str]):
    from onnx import TensorProto, helper

    for name in names:
        model.graph.output.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
    return model


def with_ulp_noise(model, seed: int, first_only: bool = False):
    """Every MatMulNBits output (or only the first's) moved by one ulp per column, down, up or
    not at random: times 1 - 2^-24 (x - x 2^-24 rounds to the next float below x), divided by
    it (x + x 2^-24 + ... rounds to the next above), or left alone. A product with 1 + 2^-23
    would move values with a mantissa past 1.5 by two ulps."""
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(seed)
    below_one = np.nextafter(np.float32(1), np.float32(0))  # 1 - 2^-24
    nodes, done = [], False
    for node in model.graph.node:
        nodes.append(node)
        if node.op_type != "MatMulNBits" or done:
            continue
        width = next(a.i for a in node.attribute if a.name == "N")
        direction = rng.integers(-1, 2, size=width)
        out = node.output[0]
        node.output[0] = f"{out}/before_noise"
        model.graph.initializer.extend([
            numpy_helper.from_array(np.where(direction < 0, below_one, np.float32(1)), f"{out}/noise_down"),
            numpy_helper.from_array(np.where(direction > 0, below_one, np.float32(1)), f"{out}/noise_up")])
        nodes.append(helper.make_node("Mul", [node.output[0], f"{out}/noise_down"], [f"{out}/noise_down_done"],
                                      name=f"{node.name}/noise"))
        nodes.append(helper.make_node("Div", [f"{out}/noise_down_done", f"{out}/noise_up"], [out],
                                      name=f"{node.name}/noise_up"))
        done = first_only
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return model


def with_accuracy_level(model, level: int):
    for node in model.graph.node:
        if node.op_type == "MatMulNBits":
            for a in node.attribute:
                if a.name == "accuracy_level":
                    a.i = level
    return model


# ---- sessions --------------------------------------------------------------------------------------

def cpu_ep_session(path: str, threads: int = 0):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def hipep_session(path: str, device: str):
    import hipep

    return hipep.InferenceSession(path, device=device)


def run_prompt(sess, head_size: int, ids: np.ndarray, kv_capacity: int) -> tuple[dict, float]:
    names = [o.name for o in sess.get_outputs()]
    feeds = prompt_feeds(sess, head_size, ids, kv_capacity)
    t0 = time.perf_counter()
    values = sess.run(None, feeds)
    return dict(zip(names, values)), time.perf_counter() - t0


# ---- comparisons -----------------------------------------------------------------------------------

def layer_errors(traced: list[tuple[str, str]], got: dict, want: dict) -> list[dict]:
    """Per traced tensor: its layer (-1 before the first), label, relative L2 over all rows and
    over the last row."""
    rows = []
    for name, label in traced:
        m = _LAYER.match("/model/" + label)
        g, w = got[name], want[name]
        rows.append({"tensor": name, "label": label, "layer": int(m.group(1)) if m else -1,
                     "rel_l2": rel_l2(g, w), "last_row_rel_l2": rel_l2(g.reshape(-1, g.shape[-1])[-1],
                                                                         w.reshape(-1, w.shape[-1])[-1])})
    return rows


def first_past(rows: list[dict], threshold: float) -> dict | None:
    return next((r for r in rows if r["rel_l2"] > threshold), None)


def print_layers(title: str, columns: dict[str, list[dict]]) -> None:
    """One line per traced tensor: its label and, per column, the relative L2 over all rows."""
    print(f"\n{title}")
    names = list(columns)
    print(f"{'tensor':58s}" + "".join(f"{n:>16s}" for n in names))
    first = columns[names[0]]
    for i, row in enumerate(first):
        print(f"{row['label'][:58]:58s}" + "".join(f"{columns[n][i]['rel_l2']:16.3e}" for n in names))


def logits_summary(got: dict, want: dict) -> dict:
    g, w = got["logits"][0, -1], want["logits"][0, -1]
    return {"rel_l2": rel_l2(g, w), "max_abs": float(np.max(np.abs(g.astype(np.float64) - w))),
            "top1": int(np.argmax(g)), "top1_cpu_ep": int(np.argmax(w))}


# ---- main ------------------------------------------------------------------------------------------

def sensitivity(copies: Copies, traced, head: int, ids, capacity: int, clean: dict, int8: bool) -> dict:
    """How far the CPU EP's own prompt step moves under rounding-sized changes (see the module
    docstring). `clean`: the traced copy's CPU EP outputs; `int8`: the model may quantize A
    (accuracy_level 4), so the same is measured at accuracy_level 0 for comparison."""
    out = {"noise": [], "first_matmul_noise": None}
    names = [n for n, _ in traced]
    for seed in (1, 2, 3):
        path = copies.save(with_outputs(with_ulp_noise(copies.fresh(), seed), names))
        noisy, _ = run_prompt(cpu_ep_session(path), head, ids, capacity)
        out["noise"].append({"seed": seed, "logits": logits_summary(noisy, clean),
                             "layers": layer_errors(traced, noisy, clean)})
        print(f"CPU EP, one-ulp noise on every MatMulNBits output (seed {seed}): logits rel L2 "
              f"{out['noise'][-1]['logits']['rel_l2']:.3e}", flush=True)
    path = copies.save(with_outputs(with_ulp_noise(copies.fresh(), 1, first_only=True), names))
    noisy, _ = run_prompt(cpu_ep_session(path), head, ids, capacity)
    out["first_matmul_noise"] = {"logits": logits_summary(noisy, clean), "layers": layer_errors(traced, noisy, clean)}
    injected = out["first_matmul_noise"]["layers"][next(i for i, (n, lab) in enumerate(traced)
                                                         if "MatMul" in lab)]["rel_l2"]
    out["first_matmul_noise"]["injected_rel_l2"] = injected
    print(f"CPU EP, one-ulp noise on the first MatMulNBits only (rel L2 {injected:.2e} there): logits rel L2 "
          f"{out['first_matmul_noise']['logits']['rel_l2']:.3e}", flush=True)
    plain = copies.base()
    one, _ = run_prompt(cpu_ep_session(plain, 1), head, ids, capacity)
    two, _ = run_prompt(cpu_ep_session(plain, 2), head, ids, capacity)
    out["threads_1_vs_2"] = logits_summary(one, two)
    print(f"CPU EP, 1 thread against 2: logits rel L2 {out['threads_1_vs_2']['rel_l2']:.3e}", flush=True)
    if int8:
        level0, _ = run_prompt(cpu_ep_session(copies.save(with_accuracy_level(copies.fresh(), 0))), head, ids,
                               capacity)
        out["level0_vs_model"] = logits_summary(level0, two)
        print(f"CPU EP, accuracy_level 0 against the model's: logits rel L2 "
              f"{out['level0_vs_model']['rel_l2']:.3e}", flush=True)
        # the same one-ulp noise without the int8 quantization of A, which turns it into flipped codes
        path = copies.save(with_ulp_noise(with_accuracy_level(copies.fresh(), 0), 1))
        noisy0, _ = run_prompt(cpu_ep_session(path), head, ids, capacity)
        out["level0_noise"] = logits_summary(noisy0, level0)
        print(f"CPU EP at accuracy_level 0, one-ulp noise on every MatMulNBits output (seed 1): logits rel L2 "
              f"{out['level0_noise']['rel_l2']:.3e}", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="hipep's device (default cpu)")
    ap.add_argument("--model", help="a builder model folder (default: model_zoo's llama int4 '1b', built once)")
    ap.add_argument("--prompt", type=int, default=PROMPT, help=f"prompt tokens (default {PROMPT})")
    ap.add_argument("--kv-capacity", type=int, default=0,
                    help="past buffers of this many positions (default: empty, as a fresh prefill)")
    ap.add_argument("--layers", action="store_true", help="compare every layer's intermediate tensors")
    ap.add_argument("--sensitivity", action="store_true", help="measure the CPU EP under one-ulp perturbations")
    ap.add_argument("--no-hipep", action="store_true", help="run the CPU EP only (with --sensitivity)")
    ap.add_argument("--accuracy-level", type=int, choices=(0, 1, 2, 3, 4),
                    help="run a copy with every MatMulNBits at this accuracy_level (0: f32 activations)")
    ap.add_argument("--threshold", type=float, default=THRESHOLD,
                    help=f"relative L2 that marks the first diverging tensor (default {THRESHOLD:g})")
    ap.add_argument("--json", help="write every number to this file")
    args = ap.parse_args(argv)
    if args.prompt < 1:
        ap.error("--prompt must be at least 1")
    if args.kv_capacity and args.kv_capacity < args.prompt:
        ap.error(f"--kv-capacity {args.kv_capacity} is smaller than the prompt ({args.prompt})")
    from hipep.tools import model_zoo

    folder = model_folder(args.model)
    config = model_zoo.genai_config(folder)["model"]
    head, ids = config["decoder"]["head_size"], prompt_ids(config["vocab_size"], args.prompt)
    copies = Copies(folder, args.accuracy_level)
    try:
        return compare(args, copies, head, ids)
    finally:
        copies.close()


def compare(args, copies: Copies, head: int, ids: np.ndarray) -> int:
    path = copies.base()
    report: dict = {"model": copies.folder, "device": args.device, "prompt": args.prompt,
                    "kv_capacity": args.kv_capacity, "accuracy_level": args.accuracy_level}
    want, secs = run_prompt(cpu_ep_session(path), head, ids, args.kv_capacity)
    print(f"CPU EP prompt step: {secs:.1f} s", flush=True)
    if not args.no_hipep:
        got, secs = run_prompt(hipep_session(path, args.device), head, ids, args.kv_capacity)
        report["logits"] = logits_summary(got, want)
        lg = report["logits"]
        print(f"hipep ({args.device}) prompt step: {secs:.1f} s; last logits row rel L2 {lg['rel_l2']:.3e} "
              f"(max abs {lg['max_abs']:.3e}), top-1 {lg['top1']} (CPU EP {lg['top1_cpu_ep']})", flush=True)
        del got
    traced = traced_tensors(copies.proto) if (args.layers or args.sensitivity) else []
    clean = None
    columns: dict[str, list[dict]] = {}
    if traced:
        traced_path = copies.save(with_outputs(copies.fresh(), [n for n, _ in traced]))
        clean, _ = run_prompt(cpu_ep_session(traced_path), head, ids, args.kv_capacity)
    if args.layers and not args.no_hipep:
        got, secs = run_prompt(hipep_session(traced_path, args.device), head, ids, args.kv_capacity)
        rows = layer_errors(traced, got, clean)
        report["layers"] = rows
        report["layers_logits"] = logits_summary(got, clean)
        first = first_past(rows, args.threshold)
        report["first_past_threshold"] = first and first["label"]
        columns[f"hipep {args.device}"] = rows
        print(f"traced copy on hipep: {secs:.1f} s; logits rel L2 {report['layers_logits']['rel_l2']:.3e}; first "
              f"tensor past {args.threshold:g}: {first['label'] if first else 'none'}", flush=True)
        del got
    if args.sensitivity:
        report["sensitivity"] = sensitivity(copies, traced, head, ids, args.kv_capacity, clean,
                                           args.accuracy_level != 0)
        for run in report["sensitivity"]["noise"]:
            columns[f"ulp noise s{run['seed']}"] = run["layers"]
        columns["ulp noise, 1st"] = report["sensitivity"]["first_matmul_noise"]["layers"]
    if columns:
        print_layers("relative L2 against the CPU EP, all rows, per traced tensor:", columns)
    if args.sensitivity and "logits" in report:
        spread = [r["logits"]["rel_l2"] for r in report["sensitivity"]["noise"]]
        report["noise_spread"] = [min(spread), max(spread)]
        print(f"\nhipep's last logits row: rel L2 {report['logits']['rel_l2']:.3e}; the CPU EP's own under "
              f"one-ulp noise: {min(spread):.3e} .. {max(spread):.3e}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
