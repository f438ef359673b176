"""Workload 1 of benchmarks/overhead.py: chains of Add nodes on a tiny fp32 tensor, where every
kernel is next to free, so a run's time is the runtime's per-node cost. hipep (fusion off and on)
and the CPU EP are measured interleaved, in blocks of runs."""
from __future__ import annotations

import time

import numpy as np
import onnxruntime as ort

import hipep
from overhead_sessions import CPU_EP, counters, fusion_available

CHAIN_LENGTHS = (1, 10, 100, 1000)
CHAIN_SHAPE = (1, 16)
BLOCK = 50  # runs per interleaved block of the Add chains


def add_chain(n: int) -> bytes:
    """x + c_0 + c_1 + ... + c_{n-1}: a plain chain of n Add nodes, each with its own small constant."""
    from onnx import TensorProto, helper, numpy_helper

    nodes, inits, prev = [], [], "x"
    for i in range(n):
        out = "y" if i == n - 1 else f"t{i}"
        inits.append(numpy_helper.from_array(np.full(CHAIN_SHAPE, 1e-3 * (i % 7 + 1), np.float32), f"c{i}"))
        nodes.append(helper.make_node("Add", [prev, f"c{i}"], [out], name=f"add{i}"))
        prev = out
    graph = helper.make_graph(nodes, f"add_chain_{n}",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, CHAIN_SHAPE)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, CHAIN_SHAPE)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10).SerializeToString()


class _Chain:
    """One chain on hipep (with one fusion setting) and on the CPU EP; `measure` adds samples."""

    def __init__(self, n: int, fusion: str, warmup: int = 50):
        self.n, self.fusion = n, fusion
        model = add_chain(n)
        options = {"fusion": fusion} if fusion_available() else {}
        self.hip = hipep.InferenceSession(model, device="cpu", **options)
        self.cpu = ort.InferenceSession(model, providers=CPU_EP)
        self.feeds = {"x": np.random.default_rng(n).standard_normal(CHAIN_SHAPE).astype(np.float32)}
        self.equal = bool(np.array_equal(self.hip.run(None, self.feeds)[0], self.cpu.run(None, self.feeds)[0]))
        for _ in range(warmup):
            self.hip.run(None, self.feeds)
            self.cpu.run(None, self.feeds)
        self.wall: list[int] = []
        self.kernel: list[int] = []
        self.cpu_wall: list[int] = []
        self.launches = 0

    def measure(self, runs: int) -> None:
        """`runs` runs of each, alternating in blocks of BLOCK."""
        hip, cpu, feeds, clock = self.hip, self.cpu, self.feeds, time.perf_counter_ns
        launches0 = counters()[0]
        done = 0
        while done < runs:
            block = min(BLOCK, runs - done)
            for _ in range(block):
                k0 = counters()[1]
                t0 = clock()
                hip.run(None, feeds)
                t1 = clock()
                self.wall.append(t1 - t0)
                self.kernel.append((counters()[1] - k0) * 1000)
            for _ in range(block):
                t0 = clock()
                cpu.run(None, feeds)
                t1 = clock()
                self.cpu_wall.append(t1 - t0)
            done += block
        self.launches += counters()[0] - launches0

    def row(self) -> dict:
        wall, kernel, cpu_wall = (np.asarray(v, np.int64) for v in (self.wall, self.kernel, self.cpu_wall))
        hip_us, cpu_us = np.median(wall) / 1e3, np.median(cpu_wall) / 1e3
        return {"ops": self.n, "fusion": self.fusion, "runs": len(wall), "hipep_us": hip_us, "cpu_us": cpu_us,
                "per_op_us": (hip_us - cpu_us) / self.n, "launches": self.launches / len(wall),
                "kernel_us": np.median(kernel) / 1e3, "overhead_us": np.median(wall - kernel) / 1e3,
                "equal": self.equal}


def measure_chain(n: int, fusion: str, runs: int) -> dict:
    """Per-run medians of one chain on hipep (with that fusion setting) and on the CPU EP."""
    if fusion == "on" and not fusion_available():
        return {"ops": n, "fusion": fusion, "runs": runs, "na": True}
    chain = _Chain(n, fusion)
    chain.measure(runs)
    return chain.row()


def chain_rows(lengths=CHAIN_LENGTHS, runs_short: int = 2000, runs_long: int = 300, rounds: int = 4,
               verbose: bool = True) -> list[dict]:
    """Every chain and fusion setting, measured in `rounds` rounds over all of them, each round a
    share of the runs: a burst of other work on the machine then falls on a share of every row's
    samples, not on all of one row's."""
    chains, rows = [], {}
    for n in lengths:
        for fusion in ("off", "on"):
            if fusion == "on" and not fusion_available():
                rows[(n, fusion)] = {"ops": n, "fusion": fusion, "runs": 0, "na": True}
            else:
                chains.append((_Chain(n, fusion), runs_short if n < 1000 else runs_long))
    for r in range(rounds):
        for chain, runs in chains:
            chain.measure(runs // rounds + (1 if r < runs % rounds else 0))
    for chain, _runs in chains:
        rows[(chain.n, chain.fusion)] = chain.row()
    out = [rows[(n, fusion)] for n in lengths for fusion in ("off", "on")]
    if verbose:
        for r in out:
            print(_chain_line(r), flush=True)
    return out


def _chain_line(r: dict) -> str:
    if r.get("na"):
        return f"Add x{r['ops']:<5} fusion={r['fusion']:<3} n/a (no fusion option)"
    return (f"Add x{r['ops']:<5} fusion={r['fusion']:<3} hipep {r['hipep_us']:9.1f} us  CPU EP {r['cpu_us']:8.1f} us  "
            f"(diff)/op {r['per_op_us']:6.2f} us  launches {r['launches']:6.0f}  kernel {r['kernel_us']:8.1f} us  "
            f"overhead {r['overhead_us']:8.1f} us")
