"""Where benchmarks/overhead.py's host time goes: a cProfile of the medium decode step split into
kernel and host time; the runtime's steps timed one by one with wrappers instead of a profiler;
and three controls: the overhead with caches that a big model's kernels evicted, ORT's own cost of
a run with a decoder's inputs and outputs, and ORT's and the plugin's cost with hipep doing
nothing."""
from __future__ import annotations

import cProfile
import os
import pstats
import time

import numpy as np
import onnxruntime as ort

import hipep
from hipep.tools import model_zoo
from overhead_chains import CHAIN_SHAPE, add_chain
from overhead_decoders import MEDIUM, PREFILL, decoder_config, fixed_tokens
from overhead_sessions import CPU_EP, counters, fusion_available
from overhead_targets import TARGET_CHAIN

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def decode_step_feeds(sess, folder: str) -> dict:
    """The feeds of a decode step of the decoder in `folder` (past of PREFILL tokens), its past
    taken from a one-token prefill run on `sess`."""
    head = decoder_config(folder)["model"]["decoder"]["head_size"]
    inputs, outputs = sess.get_inputs(), [o.name for o in sess.get_outputs()]
    prompt, tokens = fixed_tokens(1)
    prev = dict(zip(outputs, sess.run(None, model_zoo.decoder_feeds(inputs, head, prompt, 0, None))))
    return model_zoo.decoder_feeds(inputs, head, tokens[0], PREFILL, prev)


def warm_and_flushed(step, runs: int, flush_mib: int) -> dict:
    """Median µs of `step()` (it returns the nanoseconds to count) over `runs` calls with the
    caches as the previous call left them ("warm_us"), and with `flush_mib` MiB streamed through
    them before each call ("flushed_us")."""
    big = np.ones(flush_mib * 2**20 // 4, np.float32)
    out = {"flush_mib": flush_mib, "runs": runs}
    for name, flush in (("warm", False), ("flushed", True)):
        ns = np.empty(runs, np.int64)
        for i in range(runs):
            if flush:
                big += 1.0
            ns[i] = step()
        out[name + "_us"] = np.median(ns) / 1e3
    return out


def profile_decode(folder: str, runs: int = 300, top: int = 25) -> dict:
    """cProfile over `runs` identical decode steps (past of PREFILL tokens) of one hipep session,
    split into kernel time (under the CPU device's program entry points, which kernel_us times)
    and host time (everything else under ORT's `run`). Lists the host's functions by own time."""
    path = os.path.join(folder, "model.onnx")
    hip = hipep.InferenceSession(path, device="cpu")
    feeds = decode_step_feeds(hip, folder)
    for _ in range(5):
        hip.run(None, feeds)
    clock = time.perf_counter_ns
    wall = np.empty(runs, np.int64)
    kernel = np.empty(runs, np.int64)
    for i in range(runs):
        k0 = counters()[1]
        t0 = clock()
        hip.run(None, feeds)
        wall[i] = clock() - t0
        kernel[i] = (counters()[1] - k0) * 1000
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(runs):
        hip.run(None, feeds)
    prof.disable()
    return {"runs": runs, "plain_ms": np.median(wall) / 1e6, "plain_kernel_ms": np.median(kernel) / 1e6,
            "plain_overhead_ms": np.median(wall - kernel) / 1e6, **host_profile(pstats.Stats(prof), runs, top)}


# The CPU device's program entry points: kernel_us is the time inside them. (Replays call a
# program's `run`, one of these; cpu.py's `__call__`s are the inline replay's, which is host code.)
KERNEL_ENTRIES = {("hipep/runtime/cpu.py", "_run_reference"), ("hipep/runtime/cpu.py", "_run_ufunc")}
ROOT_FUNCTION = ("onnxruntime/capi/onnxruntime_inference_collection.py", "run")


def host_profile(st: pstats.Stats, runs: int, top: int) -> dict:
    """Host time from a profile of `runs` session runs. A function is host code when a host function
    calls it other than through a kernel entry point; its host time is the own time of the calls made
    from host code (a numpy function that kernels call too counts only for the host's calls)."""
    stats = st.stats
    key = {k: (_short(k[0]), k[2]) for k in stats}
    roots = [k for k in stats if key[k] == ROOT_FUNCTION]
    entries = [k for k in stats if key[k] in KERNEL_ENTRIES]
    callees: dict = {}
    for f, (_cc, _nc, _tt, _ct, callers) in stats.items():
        for c in callers:
            callees.setdefault(c, []).append(f)
    host, todo = set(roots), list(roots)
    while todo:
        for g in callees.get(todo.pop(), ()):
            if g not in host and key[g] not in KERNEL_ENTRIES:
                host.add(g)
                todo.append(g)
    total_us = sum(stats[k][3] for k in roots) / runs * 1e6
    kernel_us = sum(stats[k][3] for k in entries) / runs * 1e6
    funcs, files = [], {}
    for f in host:
        callers = stats[f][4]
        edges = [v for c, v in callers.items() if c in host] if f not in roots else [stats[f][:4]]
        calls = sum(e[0] for e in edges)
        own = sum(e[2] for e in edges)
        if not calls:
            continue
        where, line = key[f][0], f[1]
        funcs.append({"function": key[f][1], "where": f"{where}:{line}" if line else where,
                      "calls_per_run": calls / runs,
                      "us_per_call": own / calls * 1e6, "own_us_per_run": own / runs * 1e6})
        files[where] = files.get(where, 0.0) + own / runs * 1e6
    funcs.sort(key=lambda r: -r["own_us_per_run"])
    return {"profiled_ms": total_us / 1e3, "profiled_kernel_ms": kernel_us / 1e3,
            "profiled_host_us": sum(r["own_us_per_run"] for r in funcs), "functions": funcs[:top],
            "files": sorted(files.items(), key=lambda kv: -kv[1])[:12]}


def _short(file: str) -> str:
    if file == "~":
        return "(built-in)"
    for marker in ("/site-packages/", ROOT + os.sep):
        if marker in file:
            return file.split(marker, 1)[1]
    return os.path.basename(file)


# Steps of a run timed one by one (module, class or None, function): wrapped for the measurement and
# restored after. Names that a runtime no longer has are skipped.
SPLIT_STEPS = tuple(("hipep.runtime.executor", "Executor", name) for name in (
    "_check_inputs", "_program", "_outputs", "_specialization")) + (
    ("hipep.runtime.cpu", "CpuDevice", "finish_outputs"), ("hipep.counters", None, "bump_many"),)


def _where(func) -> str:
    code = getattr(func, "__code__", None)
    return f"{_short(code.co_filename)}:{code.co_firstlineno}" if code else "?"


def host_split(run, runs: int) -> dict:
    """A run's host time, step by step, with timers instead of a profiler (a timed step costs about
    1 µs more: a Python wrapper and two clock reads; the profiler inflates every call): ORT and the
    plugin up to hipep's entry (the fused node's CompiledSubgraph.run), each executor step in
    SPLIT_STEPS, the replay loop less the kernels, the rest of the executor, and ORT after hipep
    returns. Medians over `runs` calls of `run`."""
    import importlib

    from hipep import bridge
    from hipep.runtime import cpu

    clock = time.perf_counter_ns
    times: dict[str, list[int]] = {}
    restore = []

    def timed(owner, name, label):
        orig = getattr(owner, name)

        def wrapper(*a, **k):
            t = clock()
            try:
                return orig(*a, **k)
            finally:
                times.setdefault(label, []).append(clock() - t)

        setattr(owner, name, wrapper)
        restore.append((owner, name, orig))

    where = {}
    for module, cls, name in SPLIT_STEPS:
        owner = importlib.import_module(module)
        owner = getattr(owner, cls, None) if cls else owner
        if owner is not None and callable(getattr(owner, name, None)):
            label = f"{cls}.{name}" if cls else f"{module.rsplit('.', 1)[1]}.{name}"
            where[label] = _where(getattr(owner, name))
            timed(owner, name, label)
    entry = bridge.CompiledSubgraph.run
    replay = cpu._InlineReplay.__call__  # the CPU device's inline replay, with or without bind_replay
    where["CompiledSubgraph.run"], where["CpuDevice.replay"] = _where(entry), _where(replay)

    def entry_timed(self, *a, **k):
        t = clock()
        times.setdefault("enter", []).append(t)
        try:
            return entry(self, *a, **k)
        finally:
            e = clock()
            times.setdefault("leave", []).append(e)
            times.setdefault("hipep", []).append(e - t)

    def replay_timed(self, stream, *ort_memory):
        t, k0 = clock(), stream.kernel_ns
        try:
            return replay(self, stream, *ort_memory)
        finally:
            times.setdefault("replay", []).append(clock() - t - (stream.kernel_ns - k0))
            times.setdefault("kernels", []).append(stream.kernel_ns - k0)
            times.setdefault("nodes", []).append(len(self.nodes))

    bridge.CompiledSubgraph.run, cpu._InlineReplay.__call__ = entry_timed, replay_timed
    restore += [(bridge.CompiledSubgraph, "run", entry), (cpu._InlineReplay, "__call__", replay)]
    try:
        for _ in range(5):
            run()
        times.clear()
        start, end = np.empty(runs, np.int64), np.empty(runs, np.int64)
        for i in range(runs):
            start[i] = clock()
            run()
            end[i] = clock()
    finally:
        for owner, name, orig in reversed(restore):
            setattr(owner, name, orig)
    if len(times.get("enter", ())) != runs:
        raise RuntimeError(f"expected one hipep subgraph run per session run, got {len(times.get('enter', ()))}")
    arr = {k: np.asarray(v, np.int64) for k, v in times.items()}
    steps = [label for label in where if label in arr and label not in ("CompiledSubgraph.run", "CpuDevice.replay")]
    rest = arr["hipep"] - arr["replay"] - arr["kernels"] - sum(arr[label] for label in steps)
    rows = [("ORT and the plugin, up to hipep", f"→ {where['CompiledSubgraph.run']}", arr["enter"] - start)]
    # a step this workload never takes (no in-place outputs: no _alias_state) is a row of None
    rows += [(label, where[label], arr.get(label)) for label in where
             if label not in ("CompiledSubgraph.run", "CpuDevice.replay")]
    nodes = int(arr["nodes"][0])  # launches and host steps
    rows += [("replay loop, less the kernels", where["CpuDevice.replay"], arr["replay"]),
             ("the rest of the run (Executor.run's own lines, the bridge)", where["CompiledSubgraph.run"], rest),
             ("ORT after hipep returns (outputs to numpy)", "", end - arr["leave"])]
    wall = end - start
    return {"runs": runs, "wall_us": np.median(wall) / 1e3, "kernel_us": np.median(arr["kernels"]) / 1e3,
            "overhead_us": np.median(wall - arr["kernels"]) / 1e3, "nodes": nodes,
            "rows": [(what, loc, None if v is None else float(np.median(v)) / 1e3) for what, loc, v in rows]}


def cold_cache_control(folder: str, runs: int, flush_mib: int = 48) -> dict:
    """The overhead of one decode step of a small decoder, with the caches as the previous run
    left them and after streaming `flush_mib` MiB through them (as the medium decoder's kernels
    do, reading its 48 MiB of weights): how much of a big model's overhead on the CPU device is
    the host's code running with caches its kernels evicted."""
    hip = hipep.InferenceSession(os.path.join(folder, "model.onnx"), device="cpu")
    feeds = decode_step_feeds(hip, folder)
    clock = time.perf_counter_ns

    def overhead() -> int:
        k0 = counters()[1]
        t0 = clock()
        hip.run(None, feeds)
        return clock() - t0 - (counters()[1] - k0) * 1000

    return warm_and_flushed(overhead, runs, flush_mib)


def ort_floor(folder: str, runs: int, flush_mib: int = 48) -> dict:
    """ORT's own cost of a plain `run` with a decoder's inputs and outputs: the CPU EP on a model of
    the same inputs and outputs that only concatenates one zero row to each past (the presents)
    and returns constant logits. With warm caches, and after `flush_mib` MiB streamed through them
    (as a decode step's kernels leave them)."""
    from onnx import TensorProto, helper, numpy_helper

    cfg = decoder_config(folder)["model"]["decoder"]
    real = ort.InferenceSession(os.path.join(folder, "model.onnx"), providers=CPU_EP)
    inputs, outputs = real.get_inputs(), real.get_outputs()
    kv, head = cfg["num_key_value_heads"], cfg["head_size"]
    logits_shape = [1, 1, int(outputs[[o.name for o in outputs].index("logits")].shape[-1])]
    inits = [numpy_helper.from_array(np.zeros((1, kv, 1, head), np.float32), "row"),
             numpy_helper.from_array(np.zeros(logits_shape, np.float32), "zeros")]
    nodes = [helper.make_node("Identity", ["zeros"], ["logits"]) if o.name == "logits" else
             helper.make_node("Concat", [o.name.replace("present.", "past_key_values."), "row"], [o.name], axis=2)
             for o in outputs]
    elem = {"tensor(int64)": TensorProto.INT64, "tensor(float)": TensorProto.FLOAT}
    graph = helper.make_graph(nodes, "io_only", [helper.make_tensor_value_info(i.name, elem[i.type], None)
                                                 for i in inputs],
                              [helper.make_tensor_value_info(o.name, TensorProto.FLOAT, None) for o in outputs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    sess = ort.InferenceSession(model.SerializeToString(), providers=CPU_EP)
    feeds = decode_step_feeds(real, folder)
    clock = time.perf_counter_ns

    def wall() -> int:
        t0 = clock()
        sess.run(None, feeds)
        return clock() - t0

    return warm_and_flushed(wall, runs, flush_mib)


def ort_side(folder: str, runs: int, flush_mib: int = 48) -> dict:
    """What ORT and the plugin cost per run with hipep doing nothing: a hipep session of the decoder
    whose fused node's run only obtains the decode step's outputs (allocate_outputs with the shapes a
    real run asked for) and returns. ORT's time up to the Compute call and after it, with warm caches
    and with `flush_mib` MiB streamed through them before the run and inside Compute (where a real
    run's kernels stream the weights)."""
    from hipep import bridge

    hip = hipep.InferenceSession(os.path.join(folder, "model.onnx"), device="cpu")
    feeds = decode_step_feeds(hip, folder)
    clock = time.perf_counter_ns
    big = np.ones(flush_mib * 2**20 // 4, np.float32)
    seen: dict = {"flush": False}
    real = bridge.CompiledSubgraph.run

    def record_shapes(self, ins, allocate_outputs=None):
        def allocate(shapes):
            seen["shapes"] = [tuple(x) for x in shapes]
            return allocate_outputs(shapes)
        return real(self, ins, allocate)

    def only_outputs(self, ins, allocate_outputs=None):
        seen["enter"] = clock()
        if seen["flush"]:
            np.add(big, 1.0, out=big)
        allocate_outputs(seen["shapes"])
        seen["leave"] = clock()

    out = {"flush_mib": flush_mib, "runs": runs}
    try:
        bridge.CompiledSubgraph.run = record_shapes
        hip.run(None, feeds)
        bridge.CompiledSubgraph.run = only_outputs
        for _ in range(20):
            hip.run(None, feeds)
        for name, flush in (("warm", False), ("flushed", True)):
            seen["flush"] = flush
            before, after = np.empty(runs, np.int64), np.empty(runs, np.int64)
            for i in range(runs):
                if flush:
                    np.add(big, 1.0, out=big)
                t0 = clock()
                hip.run(None, feeds)
                t1 = clock()
                before[i], after[i] = seen["enter"] - t0, t1 - seen["leave"]
            out[name] = (np.median(before) / 1e3, np.median(after) / 1e3, np.median(before + after) / 1e3)
    finally:
        bridge.CompiledSubgraph.run = real
    return out


def split_workloads(folder: str | None, runs: int) -> dict:
    """host_split on the Add x100 chain (fusion off) and, given its folder, the medium decode step."""
    out = {}
    model = add_chain(TARGET_CHAIN)
    options = {"fusion": "off"} if fusion_available() else {}
    hip = hipep.InferenceSession(model, device="cpu", **options)
    feeds = {"x": np.ones(CHAIN_SHAPE, np.float32)}
    out[f"Add x{TARGET_CHAIN}, fusion=off"] = host_split(lambda: hip.run(None, feeds), runs * 5)
    if folder is not None:
        dec = hipep.InferenceSession(os.path.join(folder, "model.onnx"), device="cpu")
        step = decode_step_feeds(dec, folder)
        out[f"{MEDIUM} decode step"] = host_split(lambda: dec.run(None, step), runs)
    return out
