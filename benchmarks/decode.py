"""Decode throughput of the ~1.1B int4 llama (hipep.tools.model_zoo size '1b') on hipep's CUDA
device, through ONNX Runtime with IOBinding and through onnxruntime-genai.

1. ORT with IOBinding: a prompt of 128 random tokens, then greedy decoding to 128 new tokens.
   Every past_key_values.i and its present.i are bound to one [1, kv, max_length, head] value (the
   builder's GroupQueryAttention models share past and present, as onnxruntime-genai runs them),
   held in hipep's device memory when ORT can allocate it there ("cuda" OrtValues), else in host
   memory that hipep stages (the results say which). Logits are bound to a value of the same kind
   and only the last position's row is read back; the argmax is taken on the host. tok/s over the
   decode steps only (the prompt's step excluded), median of 3 runs after two warm-up runs; per
   step, the host time (step − kernel_us) and the launches from hipep.stats(). The time to the
   first token twice: the prompt's step of those runs (its shapes seen before: a graph replay), and
   the prompt's step at lengths the session has not seen (the prompt less a token or a few).
2. onnxruntime-genai with hipep (device=cuda): the same prompt and length. For a plugin EP it does
   not know, onnxruntime-genai keeps inputs, logits and the KV cache in host memory, so hipep copies
   every cache buffer in and out on each step; that cost is estimated from the buffers' bytes and
   the pageable host↔device copy bandwidth measured in the same run.
3. ORT's CPU EP on the same model and prompt: the first 16 greedy tokens and the prompt's last
   logits row, against hipep's.

Writes benchmarks/results/<date>-decode-<gpu>.md and .png (the plot needs matplotlib). Building
the model (once, cached) needs the `models` extra and takes ~30 s on 16 cores.

    python benchmarks/decode.py [--quick] [--model DIR | --precision int4|int4-f16|int4-bf16] [--no-genai] [--host-io] [--out DIR]

`--precision int4-f16` measures the builder's CUDA-target int4 model instead (f16 activations and
KV cache), into <date>-decode-<gpu>-int4-f16.md; `int4-bf16` the same in bf16 (its CPU EP
reference runs the model in f32 with every bf16 result rounded, model_zoo.cpu_ep_folder).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # machine.py, gpu_harness.py
import gpu_harness as gh  # noqa: E402
from machine import machine_info  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmarks", "results")
PROMPT, NEW, RUNS, COMPARE = 128, 128, 3, 16
CACHE_TYPES = {"tensor(float)": 1, "tensor(float16)": 10, "tensor(bfloat16)": 16}  # ORT's type -> ONNX's number

# Batch 1, 128 new tokens after a 128-token prompt, same model shape, measured on the H200 machine
# (2026-12-01): the context these numbers are read in.
PEERS = (("HF transformers eager, fp16", 15.4), ("PyTorch, whole step in one CUDA graph (fp16 or int4)", 450),
         ("torch.compile + CUDA graph, fp16", 755), ("torch.compile + int4 tinygemm", 995),
         ("ORT CPU EP through onnxruntime-genai, 16 cores", 71))


def _counters() -> dict:
    import hipep

    s = hipep.stats()
    return {k: s.get(k, 0) for k in ("launches", "kernel_us", "host_reads", "specializations", "transfer_bytes",
                                     "direct_launches", "graph_launches", "graph_node_updates", "native_runs", "run_us",
                                     "sync_wait_us", "arena_moves")}


def greedy_token(row: np.ndarray) -> int:
    """np.argmax of a logits row. Over float16 numpy has no vectorized argmax (~0.1 ms for a
    32000-entry row, a sixth of the f16 model's host time per step) and its cast to float32 is not
    much faster, so a float16 row without NaN is ranked by its bits as int16: sign-magnitude turned
    into an order-preserving integer (-0 and +0 equal, as floats compare), ~15 µs."""
    if row.dtype != np.float16:
        return int(np.argmax(row))
    bits = row.view(np.int16)
    if ((bits & np.int16(0x7FFF)) > np.int16(0x7C00)).any():  # a NaN: numpy's own rule (the first NaN)
        return int(np.argmax(row))
    sign = bits >> 15  # 0, or -1 for negative values
    return int(np.argmax((bits ^ (sign & np.int16(0x7FFF))) + (sign & np.int16(1))))


class Decoder:
    """Greedy decoding of a builder decoder with one IOBinding: past and present share one
    max_length value per cache, logits go to a value per sequence length, both where `place`
    puts them; input ids and the mask are small host inputs bound per step."""

    def __init__(self, sess, head_size: int, max_len: int, place: gh.Placement):
        self.sess, self.place, self.max_len = sess, place, max_len
        self.binding = sess.io_binding()
        self.inputs = {i.name for i in sess.get_inputs()}
        logits = next(o for o in sess.get_outputs() if o.name == "logits")
        self.vocab = logits.shape[-1]
        self.logits_dtype = np.float16 if "float16" in logits.type else np.float32
        self.cache_bytes, self.caches = 0, {}
        for i in sess.get_inputs():
            if i.name.startswith("past_key_values."):
                onnx_type = CACHE_TYPES[i.type]
                shape = (1, i.shape[1], max_len, head_size)
                value = place.zeros(shape, onnx_type)
                self.caches[i.name] = value
                self.cache_bytes += int(np.prod(shape)) * gh.ONNX_ITEMSIZE[onnx_type]
                self.binding.bind_ortvalue_input(i.name, value)
                self.binding.bind_ortvalue_output(i.name.replace("past_key_values.", "present."), value)
        self.logits: dict[int, object] = {}

    def step(self, ids: np.ndarray, total: int) -> np.ndarray:
        """Runs `ids` (1 × n) with `total` tokens in the cache afterwards; the last logits row."""
        n = ids.shape[1]
        if total > self.max_len:
            raise ValueError(f"{total} tokens do not fit the {self.max_len}-token cache")
        b = self.binding
        b.bind_cpu_input("input_ids", ids)
        b.bind_cpu_input("attention_mask", np.ones((1, total), np.int64))
        if "position_ids" in self.inputs:
            b.bind_cpu_input("position_ids", np.arange(total - n, total, dtype=np.int64)[None])
        out = self.logits.get(n)
        if out is None:
            out = self.logits[n] = self.place.empty((1, n, self.vocab), self.logits_dtype)
        b.bind_ortvalue_output("logits", out)
        self.sess.run_with_iobinding(b)
        return gh.last_row(out)

    def generate(self, prompt: np.ndarray, new: int, timed: bool = False) -> dict:
        """Greedy tokens after `prompt`: the prompt's step gives the first, each decode step one
        more. With `timed`, per decode step its wall time and hipep.stats() deltas, and the
        prompt's step's (the time to the first token)."""
        clock = time.perf_counter_ns
        c0 = _counters() if timed else None
        t0 = clock()
        row = self.step(prompt[None], prompt.size)
        tokens, first_row = [greedy_token(row)], row
        prompt_ns = clock() - t0
        prompt_stats = {k: v - c0[k] for k, v in _counters().items()} if timed else None
        wall, stats = [], []
        for k in range(1, new):
            ids = np.array([[tokens[-1]]], np.int64)
            c0 = _counters() if timed else None
            t0 = clock()
            row = self.step(ids, prompt.size + k)
            tokens.append(greedy_token(row))
            t1 = clock()
            if timed:
                c1 = _counters()
                wall.append(t1 - t0)
                stats.append({k: c1[k] - c0[k] for k in c0})
        return {"tokens": tokens, "first_row": first_row, "wall_ns": np.asarray(wall, np.int64), "stats": stats,
                "prompt_ns": prompt_ns, "prompt_stats": prompt_stats}


def model_facts(folder: str) -> dict:
    import onnx
    from collections import Counter

    m = onnx.load(os.path.join(folder, "model.onnx"), load_external_data=False)
    ops = Counter(n.op_type for n in m.graph.node)
    data = os.path.join(folder, "model.onnx.data")
    with open(os.path.join(folder, "genai_config.json")) as f:
        cfg = json.load(f)
    dec = cfg["model"]["decoder"]
    # what a decode step must read: every MatMulNBits weight and scale (the embedding is one row)
    names = {i for n in m.graph.node if n.op_type == "MatMulNBits" for i in n.input[1:] if i}
    itemsize = {onnx.TensorProto.UINT8: 1, onnx.TensorProto.FLOAT16: 2, onnx.TensorProto.BFLOAT16: 2,
                onnx.TensorProto.FLOAT: 4}
    step_bytes = sum(int(np.prod(t.dims)) * itemsize.get(t.data_type, 4) for t in m.graph.initializer
                     if t.name in names)
    past = next(i for i in m.graph.input if i.name.startswith("past_key_values."))
    nbits = next((n for n in m.graph.node if n.op_type == "MatMulNBits"), None)
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in nbits.attribute} if nbits is not None else {}
    return {"ops": dict(ops.most_common()), "bytes": os.path.getsize(data) if os.path.exists(data) else 0,
            "weights_per_step": step_bytes, "layers": dec["num_hidden_layers"], "head_size": dec["head_size"],
            "hidden": dec["hidden_size"], "heads": dec["num_attention_heads"], "kv_heads": dec["num_key_value_heads"],
            "vocab": cfg["model"]["vocab_size"], "context": cfg["model"]["context_length"],
            "cache_itemsize": itemsize.get(past.type.tensor_type.elem_type, 4),
            # (the KV cache's type: a bf16 model's logits are f32)
            "activations": onnx.helper.tensor_dtype_to_np_dtype(past.type.tensor_type.elem_type).name,
            "quantization": (f"MatMulNBits {attrs['bits']}-bit, block {attrs['block_size']}, accuracy level "
                             f"{attrs.get('accuracy_level', 0)}") if attrs else "no MatMulNBits"}


def summarize(runs: list[dict]) -> dict:
    """tok/s per run over its decode steps; the median run's; per-step medians over all runs."""
    tok_s = [len(r["wall_ns"]) / (r["wall_ns"].sum() / 1e9) for r in runs]
    wall = np.concatenate([r["wall_ns"] for r in runs]) / 1e6
    stat = {k: np.array([s[k] for r in runs for s in r["stats"]], np.float64) for k in runs[0]["stats"][0]}
    kernel = stat["kernel_us"] / 1e3
    return {"tok_s": float(np.median(tok_s)), "runs_tok_s": tok_s, "ms": float(np.median(wall)),
            "kernel_ms": float(np.median(kernel)), "host_ms": float(np.median(wall - kernel)),
            # hipep's own host work: its runs' wall time less the waits for the device
            "runtime_host_ms": float(np.median(stat["run_us"] - stat["sync_wait_us"])) / 1e3,
            "launches": float(np.median(stat["launches"])), "host_reads": float(np.mean(stat["host_reads"])),
            "transfer_bytes": float(np.median(stat["transfer_bytes"])),
            "specializations": int(stat["specializations"].sum()),
            "issue": {k: float(np.median(stat[k])) for k in ("direct_launches", "graph_launches", "graph_node_updates")},
            "native_share": float(np.mean(stat["native_runs"] > 0)) if "native_runs" in stat else 0.0,
            # the prompt's step: the time to the first token, and its kernels' share
            "prompt_ms": float(np.median([r["prompt_ns"] for r in runs])) / 1e6 if "prompt_ns" in runs[0] else None,
            "prompt_kernel_ms": (float(np.median([r["prompt_stats"]["kernel_us"] for r in runs])) / 1e3
                                 if runs[0].get("prompt_stats") else None),
            "prompt_issue": ({k: float(np.median([r["prompt_stats"].get(k, 0) for r in runs]))
                              for k in ("launches", "direct_launches", "graph_launches", "graph_node_updates",
                                        "native_runs", "specializations", "transfer_bytes")}
                             | {"runtime_host_ms": float(np.median([r["prompt_stats"]["run_us"]
                                                                    - r["prompt_stats"]["sync_wait_us"]
                                                                    for r in runs])) / 1e3}
                             if runs[0].get("prompt_stats") else None),
            "series_ms": np.median(np.stack([r["wall_ns"] for r in runs]), axis=0) / 1e6,
            "series_kernel_ms": np.median(np.stack([[s["kernel_us"] for s in r["stats"]] for r in runs]), axis=0) / 1e3}


def run_hipep(path: str, facts: dict, prompt: np.ndarray, new: int, runs: int, place: gh.Placement,
              device_id: int, device: str = "cuda") -> dict:
    import hipep

    sess = hipep.InferenceSession(path, device=device, device_id=device_id)
    dec = Decoder(sess, facts["head_size"], prompt.size + new, place)
    # A new input shape is traced and run launch by launch the first time, captured into a CUDA
    # graph the second: two warm-up runs, so the timed prompt's steps replay their graph as the
    # decode steps do (the prompt's step of a length not seen before is measured apart, below).
    warm = dec.generate(prompt, new, timed=True)
    dec.generate(prompt, new)
    timed = [dec.generate(prompt, new, timed=True) for _ in range(runs)]
    out = summarize(timed)
    out["new_length"] = new_length_prompts(dec, prompt, runs)
    out.update(first_pass_tok_s=summarize([warm])["tok_s"], tokens=timed[0]["tokens"], first_row=timed[0]["first_row"],
               cache_bytes=dec.cache_bytes, same_tokens=all(r["tokens"] == timed[0]["tokens"] for r in timed + [warm]))
    return out


def timed_step(dec: Decoder, ids: np.ndarray, total: int) -> tuple[int, int, dict]:
    """One step of `ids` (1 × n) timed: (its greedy token, wall ns, hipep.stats() deltas)."""
    c0 = _counters()
    t0 = time.perf_counter_ns()
    token = greedy_token(dec.step(ids, total))
    wall = time.perf_counter_ns() - t0
    c1 = _counters()
    return token, wall, {k: c1[k] - c0[k] for k in c0}


def new_length_prompts(dec: Decoder, prompt: np.ndarray, count: int) -> dict | None:
    """The prompt's step at lengths the session has not seen (the prompt less 1, 2, ... tokens),
    once each: what a first request of that length waits for its first token (its shapes traced
    and bound, its launches issued one by one). Medians of the wall time and hipep.stats(); None
    for a one-token prompt."""
    count = min(count, prompt.size - 1)
    if count < 1:
        return None
    walls, stats = [], []
    for k in range(1, count + 1):
        _, wall, delta = timed_step(dec, prompt[None, : prompt.size - k], prompt.size - k)
        walls.append(wall)
        stats.append(delta)
    return {"ms": float(np.median(walls)) / 1e6, "lengths": [prompt.size - k for k in range(1, count + 1)],
            "kernel_ms": float(np.median([s["kernel_us"] for s in stats])) / 1e3,
            "runtime_host_ms": float(np.median([s["run_us"] - s["sync_wait_us"] for s in stats])) / 1e3,
            "specializations": float(np.median([s["specializations"] for s in stats])),
            "direct_launches": float(np.median([s["direct_launches"] for s in stats]))}


def run_cpu_reference(path: str, facts: dict, prompt: np.ndarray, count: int) -> dict:
    import onnxruntime as ort

    from hipep.tools import model_zoo

    # a bf16 model as the CPU EP can run it: f32 with every bf16 result rounded to bf16
    path = os.path.join(model_zoo.cpu_ep_folder(os.path.dirname(path)), os.path.basename(path))
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    dec = Decoder(sess, facts["head_size"], prompt.size + count, gh.Placement(0, want_device=False))
    return dec.generate(prompt, count)


def run_genai(folder: str, prompt: np.ndarray, new: int, runs: int, device_id: int, device: str = "cuda") -> dict:
    import onnxruntime_genai as og

    import hipep
    from hipep.tools.generate import register_with_genai

    register_with_genai()
    config = og.Config(folder)
    config.clear_providers()
    ep = hipep.provider_for(device)
    config.append_provider(ep)
    config.set_provider_option(ep, "device", device)
    if device_id:
        config.set_provider_option(ep, "device_id", str(device_id))
    config.set_provider_option(ep, "strict", "1")
    model = og.Model(config)
    clock = time.perf_counter_ns
    passes = []
    for _ in range(runs + 1):  # the first is the warm-up
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=prompt.size + new, do_sample=False)
        gen = og.Generator(model, params)
        gen.append_tokens(prompt[None].astype(np.int32))  # the prompt's step
        gen.generate_next_token()  # the first token, from the prompt's logits
        wall, stats = [], []
        for _ in range(1, new):  # each: one decode step, then the token from its logits
            c0 = _counters()
            t0 = clock()
            gen.generate_next_token()
            t1 = clock()
            c1 = _counters()
            wall.append(t1 - t0)
            stats.append({k: c1[k] - c0[k] for k in c0})
        tokens = [int(t) for t in gen.get_sequence(0)[prompt.size:]]
        passes.append({"tokens": tokens, "wall_ns": np.asarray(wall, np.int64), "stats": stats})
    out = summarize(passes[1:])
    out.update(first_pass_tok_s=summarize(passes[:1])["tok_s"], tokens=passes[1]["tokens"])
    return out


# ---- results --------------------------------------------------------------------------------------

def rel_l2(got, want) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.linalg.norm(got - want) / (np.linalg.norm(want) or 1.0))


def leading_equal(a: list[int], b: list[int], n: int) -> int:
    k = 0
    while k < min(n, len(a), len(b)) and a[k] == b[k]:
        k += 1
    return k


def render(info: dict, facts: dict, folder: str, place: gh.Placement, copy: dict, hip: dict, cpu: dict | None,
           genai: dict, staging: dict | None, args, command: str) -> str:
    L = gh.header_lines(f"Decode of {os.path.basename(folder.rstrip(os.sep))} on {info['gpu']}", info, command)
    ops = ", ".join(f"{n} {op}" for op, n in facts["ops"].items() if n >= facts["layers"])
    L += [f"- model: `{folder}` (hidden {facts['hidden']}, {facts['layers']} layers, "
          f"{facts['heads']}/{facts['kv_heads']} heads of {facts['head_size']}, vocab {facts['vocab']}; "
          f"{facts['activations']} activations, "
          f"{facts['quantization']}; {ops}); {gh.bytes_text(facts['bytes'])} of weights, "
          f"{gh.bytes_text(facts['weights_per_step'])} read per step (MatMulNBits weights and scales)",
          f"- prompt {args.prompt} random tokens, {args.new} new tokens, greedy; tok/s over the {args.new - 1} decode "
          f"steps (the prompt's step gives the first token), median of {args.runs} runs after two warm-up runs",
          f"- device-to-device copy in this run: {copy['gbps']:.0f} GB/s (read and write counted)", ""]
    L += ["## Throughput", "",
          "| path | KV cache and logits | tok/s | runs | ms/step | kernel ms/step | host ms/step | "
          "launches/step | host reads/step | copied host↔device/step | specializations (timed steps) | "
          "warm-up run tok/s |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|"]

    def line(name, where, r):
        if "error" in r:
            return f"| {name} | {where} | failed: {r['error'].replace('|', '/')} | | | | | | | | | |"
        return (f"| {name} | {where} | **{r['tok_s']:.1f}** | {', '.join(f'{t:.1f}' for t in r['runs_tok_s'])} | "
                f"{r['ms']:.3f} | {r['kernel_ms']:.3f} | {r['host_ms']:.3f} | {r['launches']:.0f} | "
                f"{r['host_reads']:.1f} | {gh.bytes_text(r['transfer_bytes'])} | {r['specializations']} | "
                f"{r['first_pass_tok_s']:.1f} |")

    L.append(line("ORT + IOBinding, hipep", place.label, hip))
    L.append(line("onnxruntime-genai, hipep", "host memory (genai's own buffers)", genai))
    L += ["", "kernel ms/step: hipep.stats()['kernel_us'] (CUDA events around each run's replay); host ms/step: "
              "the step's wall time (bind, run, read back the logits row, argmax) minus it; copied: "
              "hipep.stats()['transfer_bytes'] (ORT's host memory staged in and out, values read back)."]
    for name, r in (("ORT + IOBinding", hip), ("onnxruntime-genai", genai)):
        if "error" not in r:
            i = r["issue"]
            L += ["", f"{name}, per step (median): CUDA graph launches {i['graph_launches']:.0f}, kernel nodes "
                      f"updated inside their graph {i['graph_node_updates']:.0f}, launches issued one by one "
                      f"{i['direct_launches']:.0f} (hipep.stats()'s graph_launches, graph_node_updates, "
                      f"direct_launches); steps Compute replayed in native code without Python "
                      f"{100 * r['native_share']:.0f} % (native_runs).",
                  "", f"{name}, host time per step (median): {r['runtime_host_ms']:.3f} ms in hipep's runtime "
                      f"(hipep.stats()'s run_us less sync_wait_us: checks, binding, graph launches and node "
                      f"updates, the plan's host steps), the rest of the {r['host_ms']:.3f} ms outside it (ORT's "
                      f"run and the host inputs' copies, the logits row read back, the argmax)."]
    if "error" not in hip and hip.get("prompt_ms") is not None:
        kernels = (f", {hip['prompt_kernel_ms']:.2f} ms of it kernels"
                   if hip.get("prompt_kernel_ms") is not None else "")
        L += ["", "ORT + IOBinding, the prompt's step (time to the first token, median, its length seen twice "
                  f"before): {hip['prompt_ms']:.2f} ms for {args.prompt} tokens{kernels}: "
                  f"{args.prompt / hip['prompt_ms'] * 1e3:.0f} prompt tokens/s (binding, run, the last position's "
                  f"logits row read back, argmax)."]
        n = hip.get("new_length")
        if n:
            lengths = ", ".join(map(str, n["lengths"]))
            L += ["", f"ORT + IOBinding, the prompt's step at a length not seen before ({lengths} "
                      f"tokens, once each, median): {n['ms']:.2f} ms, {n['runtime_host_ms']:.2f} ms of it in hipep's "
                      f"runtime (tracing the new shapes, binding, {n['direct_launches']:.0f} launches issued one by "
                      f"one), the GPU busy or waiting for them for {n['kernel_ms']:.2f} ms (kernel_us); its second "
                      f"run captures a CUDA graph, later ones replay it as above."]
        p = hip.get("prompt_issue")
        if p:
            L += ["", f"The prompt's step (median): {p['runtime_host_ms']:.3f} ms in hipep's runtime, "
                      f"{p['launches']:.0f} launches: CUDA graph launches {p['graph_launches']:.0f}, kernel nodes "
                      f"updated {p['graph_node_updates']:.0f}, launches issued one by one "
                      f"{p['direct_launches']:.0f}; native runs {p['native_runs']:.0f}, specializations "
                      f"{p['specializations']:.0f}, copied host↔device {gh.bytes_text(p['transfer_bytes'])}."]
    if "error" not in hip and hip["kernel_ms"] > 0:
        L += ["", f"Weights read per step / kernel time: {facts['weights_per_step'] / hip['kernel_ms'] / 1e6:.0f} GB/s "
                  f"({facts['weights_per_step'] / hip['kernel_ms'] / 1e6 / copy['gbps']:.0%} of the copy bandwidth); "
                  f"per step wall time: {facts['weights_per_step'] / hip['ms'] / 1e6:.0f} GB/s."]
    if staging:
        L += ["", "## onnxruntime-genai: the cost of host-resident caches", "",
              f"Its past/present buffers: {staging['tensors']} of {gh.bytes_text(staging['tensor_bytes'])} "
              f"({gh.bytes_text(staging['bytes'])}), each copied to the device before and back after every step. "
              f"Pageable copies of that size measured here: host→device {staging['h2d']:.1f} GB/s, device→host "
              f"{staging['d2h']:.1f} GB/s, so about **{staging['estimate_ms']:.2f} ms per step** "
              f"(+ the logits row)."]
        if "error" not in genai:
            moved = genai["transfer_bytes"]
            L.append(f"hipep counted {gh.bytes_text(moved)} copied per step: at those bandwidths (half each way) "
                     f"{moved / 2 * (1 / staging['h2d'] + 1 / staging['d2h']) / 1e6:.2f} ms.")
        if "error" not in hip and "error" not in genai:
            L.append(f"Observed: genai {genai['ms']:.3f} ms/step against {hip['ms']:.3f} with IOBinding "
                     f"({genai['ms'] - hip['ms']:+.3f} ms).")
    L += ["", f"## Greedy tokens against ORT's CPU EP (first {args.compare})", ""]
    if cpu is None or "error" in hip:
        why = "hipep did not run" if "error" in hip else (cpu or {}).get("error", "no reference")
        L.append(f"not compared: {why}")
    elif "error" in cpu:
        L.append(f"not compared: ORT's CPU EP failed: {cpu['error']}")
    else:
        n = leading_equal(hip["tokens"], cpu["tokens"], args.compare)
        verdict = "equal" if n >= args.compare else f"**first {n} equal**"
        L += [f"- ORT + IOBinding on hipep: {verdict} ({hip['tokens'][:args.compare]})",
              f"- ORT's CPU EP: {cpu['tokens'][:args.compare]}",
              f"- the prompt's last logits row, hipep against the CPU EP: relative L2 "
              f"{rel_l2(hip['first_row'], cpu['first_row']):.2e}",
              f"- the tokens were the same in every hipep run: {'yes' if hip['same_tokens'] else '**no**'}"]
        if "error" not in genai:
            g = leading_equal(genai["tokens"], cpu["tokens"], args.compare)
            L.append(f"- onnxruntime-genai on hipep: {'equal' if g >= args.compare else f'**first {g} equal**'}")
    L += ["", "## Peers (same model shape, batch 1, 128 new tokens after 128, measured on the H200 machine)", "",
          "| system | tok/s |", "|---|---|"] + [f"| {name} | {t:g} |" for name, t in PEERS]
    return "\n".join(L) + "\n"


def plot(path: str, hip: dict, genai: dict) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install '.[bench]'): no plot", file=sys.stderr)
        return False
    series = [(name, r) for name, r in (("ORT + IOBinding", hip), ("onnxruntime-genai", genai)) if "series_ms" in r]
    if not series:
        return False
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for i, (name, r) in enumerate(series):
        x = np.arange(1, len(r["series_ms"]) + 1)
        ax.plot(x, r["series_ms"], "-", color=f"C{i}", label=f"{name}: step ({r['tok_s']:.0f} tok/s)")
        ax.plot(x, r["series_kernel_ms"], ":", color=f"C{i}", label=f"{name}: kernel_us")
    ax.set(xlabel="decode step", ylabel="ms (median over runs)", yscale="log",
           title="hipep on the GPU: time per decode step")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def build_model(precision: str = "int4") -> tuple[str | None, str]:
    """model_zoo's llama '1b' folder of `precision` (built once, then cached), or None and why not."""
    import importlib.util

    from hipep.tools import model_zoo

    needed = ("torch", "transformers", "onnxruntime_genai", "onnx_ir")
    missing = [m for m in needed if importlib.util.find_spec(m) is None]
    if missing:
        return None, f"{', '.join(missing)} not installed (the 'models' extra; on the GPU machine wheelhouse/)"
    print(f"building or loading the ~1.1B {precision} model (model_zoo size '1b') ...", flush=True)
    try:
        return model_zoo.decoder("llama", precision, size="1b"), ""
    except Exception as e:  # noqa: BLE001 - the builder's own last line says most
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]
        return None, lines[0] + (f" ... {lines[-1]}" if len(lines) > 1 else "")


def gpu_and_model(script: str, device_id: int, model: str | None, precision: str):
    """What a decode benchmark runs on: (device, model folder, model.onnx path), the folder given
    or model_zoo's ~1.1B llama of `precision` (built once); else the exit status after saying why
    not (gpu_harness.fail)."""
    try:
        device = gh.require_gpu(device_id)
    except gh.Unavailable as e:
        return gh.fail(script, str(e))
    folder = model
    if folder is None:
        folder, why = build_model(precision)
        if folder is None:
            return gh.fail(script, f"could not build the ~1.1B model: {why}")
    path = os.path.join(folder, "model.onnx")
    if not os.path.isfile(path):
        return gh.fail(script, f"no model.onnx in {folder}")
    return device, folder, path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="prompt 16, 16 new tokens, one run: a smoke test")
    ap.add_argument("--model", help="a builder model folder (default: model_zoo's llama '1b' of --precision, built once)")
    ap.add_argument("--precision", choices=("int4", "int4-f16", "int4-bf16"), default="int4",
                    help="int4: the builder's CPU target (f32 activations, MatMulNBits at accuracy level 4); "
                         "int4-f16: its CUDA target (f16 activations and KV cache, level 0), what a GPU user builds; "
                         "int4-bf16: the same in bf16")
    ap.add_argument("--prompt", type=int, default=PROMPT, help=f"prompt tokens (default {PROMPT})")
    ap.add_argument("--new", type=int, default=NEW, help=f"new tokens (default {NEW})")
    ap.add_argument("--runs", type=int, default=RUNS, help=f"timed runs (default {RUNS})")
    ap.add_argument("--compare", type=int, default=COMPARE,
                    help=f"greedy tokens compared with the CPU EP (default {COMPARE})")
    ap.add_argument("--no-genai", action="store_true", help="skip onnxruntime-genai")
    ap.add_argument("--host-io", action="store_true", help="bind host memory even if device OrtValues work")
    ap.add_argument("--device-id", type=int, default=0)
    ap.add_argument("--out", default=RESULTS, help="folder for <date>-decode-<gpu>.md and .png")
    args = ap.parse_args(argv)
    if args.quick:
        args.prompt, args.new, args.runs, args.compare = 16, 16, 1, min(args.compare, 16)
    for name in ("prompt", "new", "runs", "compare"):
        if getattr(args, name) < (2 if name == "new" else 1):
            ap.error(f"--{name} must be at least {2 if name == 'new' else 1}")
    found = gpu_and_model("decode.py", args.device_id, args.model, args.precision)
    if isinstance(found, int):
        return found
    device, folder, path = found
    facts = model_facts(folder)
    if args.prompt + args.new > facts["context"]:
        ap.error(f"--prompt + --new must fit the model's {facts['context']}-token context")
    info = {**machine_info(), **gh.gpu_info(device)}
    print(f"{info['date']} {info['commit']} {info['gpu']}; model {folder}", flush=True)
    copy = gh.copy_bandwidth(device)
    place = gh.Placement(args.device_id, want_device=not args.host_io)
    print(f"device-to-device copy {copy['gbps']:.0f} GB/s; KV cache and logits: {place.label} ({place.why})",
          flush=True)
    prompt = np.random.default_rng(0).integers(3, facts["vocab"], args.prompt).astype(np.int64)

    command = "python benchmarks/decode.py" + (" " + " ".join(argv if argv is not None else sys.argv[1:])).rstrip()
    os.makedirs(args.out, exist_ok=True)
    suffix = "" if args.precision == "int4" or args.model else f"-{args.precision}"
    stem = os.path.join(args.out, f"{info['date']}-decode-{gh.device_slug(info['gpu'])}{suffix}")
    pending = {"error": "not reached (the run stopped before)"}
    hip, cpu, genai, staging = pending, pending, pending, None

    def write() -> None:  # after every stage: a run stopped early keeps what it measured
        with open(stem + ".md", "w") as f:
            f.write(render(info, facts, folder, place, copy, hip, cpu, genai, staging, args, command))

    try:
        hip = run_hipep(path, facts, prompt, args.new, args.runs, place, args.device_id)
        print(f"ORT + IOBinding on hipep: {hip['tok_s']:.1f} tok/s, {hip['ms']:.3f} ms/step "
              f"(kernel {hip['kernel_ms']:.3f}, host {hip['host_ms']:.3f} of which hipep's runtime "
              f"{hip['runtime_host_ms']:.3f}), {hip['launches']:.0f} launches/step; the prompt's step "
              f"{hip['prompt_ms']:.2f} ms (kernel {hip['prompt_kernel_ms']:.2f})"
              + (f", at a length not seen before {hip['new_length']['ms']:.2f} ms" if hip.get("new_length") else ""),
              flush=True)
    except Exception as e:  # noqa: BLE001 - a missing kernel or a failed step is the result
        hip = {"error": gh.first_line(e)}
        print(f"ORT + IOBinding on hipep FAILED: {hip['error']}", flush=True)
    write()

    try:
        cpu = run_cpu_reference(path, facts, prompt, args.compare)
    except Exception as e:  # noqa: BLE001
        cpu = {"error": gh.first_line(e)}
    if "error" not in hip and "error" not in cpu:
        print(f"greedy tokens equal to the CPU EP's: {leading_equal(hip['tokens'], cpu['tokens'], args.compare)} "
              f"of the first {args.compare}", flush=True)
    write()

    if args.no_genai:
        genai = {"error": "skipped (--no-genai)"}
    else:
        tensors = 2 * facts["layers"]
        tensor_bytes = facts["kv_heads"] * (args.prompt + args.new) * facts["head_size"] * facts["cache_itemsize"]
        bw = gh.host_copy_bandwidth(device, tensor_bytes)
        staging = {"tensors": tensors, "tensor_bytes": tensor_bytes, "bytes": tensors * tensor_bytes, **bw,
                   "estimate_ms": tensors * tensor_bytes * (1 / bw["h2d"] + 1 / bw["d2h"]) / 1e6}
        try:
            genai = run_genai(folder, prompt, args.new, args.runs, args.device_id)
            print(f"onnxruntime-genai on hipep: {genai['tok_s']:.1f} tok/s, {genai['ms']:.3f} ms/step", flush=True)
        except ImportError as e:
            genai = {"error": f"onnxruntime-genai is not installed ({e})"}
        except Exception as e:  # noqa: BLE001
            genai = {"error": gh.first_line(e)}
        if "error" in genai:
            print(f"onnxruntime-genai on hipep FAILED: {genai['error']}", flush=True)
    write()
    if plot(stem + ".png", hip, genai):
        with open(stem + ".md", "a") as f:
            f.write(f"\n![time per decode step]({os.path.basename(stem)}.png)\n")
    print(f"\nwrote {stem}.md")
    return 1 if "error" in hip else 0


if __name__ == "__main__":
    sys.exit(main())
