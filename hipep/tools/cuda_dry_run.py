"""The cuda device's kernel bindings run without a GPU, on ORT models and their inputs.

    python -m hipep.tools.cuda_dry_run --fuzz 20000 [--seed 0]   random graphs (hipep.tools.fuzz)

A model is partitioned for the cuda device; each subgraph hipep would claim there is compiled and
run by `BindCheckDevice`: the CPU reference device computing every launch as usual, but first
asking the GPU kernel table for the launch's program exactly as the cuda device would (a node with
no GPU program and non-integer results is refused) and binding it to the launch's arguments, with
memory addresses, shapes, dtypes and host-visible contents as the cuda device would give them. A
binding that refuses or fails for arguments its claim check accepted, and a plan that would run
step by step without a Loop (which the cuda device does only for loops), are what this finds: the
failures GPU conformance runs otherwise find first. Numerics are not checked here (the kernels do
not run).

Subgraphs after the first take their inputs from ORT's CPU EP running the whole model with those
values added as outputs."""
from __future__ import annotations

import dataclasses

import numpy as np
import onnx
from onnx import helper

from hipep.compiler import compile_subgraph, hold_body_weights
from hipep.graph import GraphView
from hipep.partition import partition
from hipep.plan import HOST_VISIBLE, HostStep, Loop, walk
from hipep.runtime import gpu_kernels as table
from hipep.runtime.cpu import CpuDevice, CpuProgram
from hipep.runtime.executor import Executor, step_label
from hipep.weights import WeightStore


class NoInputs(Exception):
    """ORT's CPU EP could not compute a subgraph's inputs: nothing to run it on."""


_WORKSPACE = 1 << 41  # addresses the launches are bound to, never dereferenced
_SCRATCH = 1 << 40


class _BindingCheck:
    """A CPU program that binds the kernel's GPU program to each launch's arguments first."""

    def __init__(self, device: "BindCheckDevice", program: CpuProgram, binding, kernel):
        self.device, self.program, self.binding, self.kernel = device, program, binding, kernel
        self.label = program.label

    def run(self, args) -> None:
        if self.binding is not None:
            converted = [self.device.arg(a) for a in args]
            n = self.kernel.arity
            target = table.Target(scratch=lambda nbytes: _SCRATCH, workspace=lambda nbytes: _WORKSPACE,
                                  counters=lambda nbytes: _SCRATCH)
            self.binding.bind(converted[:n], converted[n:], self.kernel.constants, target)
        self.program.run(args)

    __call__ = run


class BindCheckDevice(CpuDevice):
    """The CPU device, binding every launch's GPU program as the cuda device would (see module doc).
    `inputs`: the run's input arrays and the held weights, which on the cuda device are in device
    memory; `host_steps`: the labels of the plan's host steps, which the cuda device runs on the
    host (their programs are not bound)."""

    def __init__(self, inputs, bind: bool = True, host_steps=()):
        super().__init__()
        self._bind = bind
        self._host_steps = set(host_steps)  # labels of the plan's host steps: the host runs those
        self._pools: dict[int, bool] = {}  # id of a pool → whether it is host-visible
        self._inputs = {id(a) for a in inputs}

    def hand_in(self, arrays) -> None:
        """Marks `arrays` as inputs in device memory too (a later run's); they are known by id, so
        the caller keeps them alive while the device runs."""
        self._inputs.update(id(a) for a in arrays)

    def alloc(self, space: str, nbytes: int):
        memory = super().alloc(space, nbytes)
        self._pools[id(memory)] = space == HOST_VISIBLE
        return memory

    def arg(self, a):
        """The table.Arg the cuda device would pass: a pool view (its contents readable where the
        pool is host-visible), an input in device memory, or a plan constant."""
        if a is None:
            return None
        root = a
        while id(root) not in self._inputs and isinstance(getattr(root, "base", None), np.ndarray):
            root = root.base
        address = a.ctypes.data if a.size else 4096
        if id(root) in self._pools:
            return table.Arg(address, a.shape, a.dtype, a if self._pools[id(root)] else None)
        if id(root) in self._inputs:
            return table.Arg(address, a.shape, a.dtype, None)
        return table.Arg(address, a.shape, a.dtype, a, constant=True)

    def compile(self, kernel):
        binding = table.program_binding(kernel)  # as the cuda device picks it
        bind = self._bind and kernel.label not in self._host_steps
        return _BindingCheck(self, CpuProgram(kernel), binding if bind else None, kernel)


def subgraphs(graph: GraphView) -> list[tuple[GraphView, list[str], list[str]]]:
    """The subgraphs the cuda device claims, each as (its graph, inputs, outputs) in the shape the
    bridge compiles them: large initializers it reads are inputs too."""
    report = partition(graph, device="cuda")
    by_index = {n.index: n for n in graph.nodes}
    consumers = {v: {n.index for n in ns} for v, ns in graph.consumers().items()}
    out = []
    for members in report.clusters:
        nodes = [by_index[i] for i in members]
        inside = set(members)
        produced = {o for n in nodes for o in n.outputs if o}
        inputs: list[str] = []
        for n in nodes:
            for v in n.inputs:
                if v and v not in produced and v not in graph.constants and v not in inputs:
                    inputs.append(v)
        outputs = [o for n in nodes for o in n.outputs
                   if o and (o in graph.outputs or consumers.get(o, set()) - inside)]
        sub = dataclasses.replace(graph, nodes=nodes, inputs=inputs, outputs=outputs)
        out.append((sub, inputs, outputs))
    return out


def intermediate_values(model: onnx.ModelProto, feeds: dict, names: list[str]) -> dict:
    """`names`' values when ORT's CPU EP runs `model` on `feeds` (graph inputs, initializers and
    outputs included)."""
    import onnxruntime as ort

    known = {**{i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}, **feeds}
    wanted = [n for n in names if n not in known]
    if wanted:
        m = onnx.ModelProto()
        m.CopyFrom(model)
        present = {o.name for o in m.graph.output}
        for n in wanted:
            if n not in present:
                m.graph.output.append(helper.make_empty_tensor_value_info(n))
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        so.log_severity_level = 3
        sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
        outs = sess.run(wanted, {k: v for k, v in feeds.items() if k in {i.name for i in sess.get_inputs()}})
        known.update(zip(wanted, outs))
    return known


def dry_run(model: onnx.ModelProto, feeds: dict, bind: bool = True) -> int:
    """Runs every subgraph the cuda device claims of `model` through BindCheckDevice on `feeds`;
    the number of subgraphs. Raises what a binding raised, AssertionError when a plan without a
    Loop would run step by step, NoInputs when ORT's CPU EP cannot compute the subgraphs' inputs.
    `bind=False` runs the same subgraphs without binding: what fails then is no binding's doing."""
    graph = GraphView.from_onnx(model)
    parts = subgraphs(graph)
    try:
        values = intermediate_values(model, feeds, [v for _, ins, _ in parts for v in ins])
    except Exception as e:  # noqa: BLE001 - whatever ORT raises
        raise NoInputs(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from e
    for k, (sub, inputs, outputs) in enumerate(parts):
        used = {v for n in sub.nodes for v in n.inputs if v}
        body, copied = hold_body_weights(sub)  # an If's branches' own weights: held with the subgraph's, as Compile does
        held = sorted({v for v in used if v in graph.constants} | body)
        plan = compile_subgraph(sub, f"subgraph {k + 1}", inputs, outputs, held=held)
        weights = WeightStore.for_plan(plan, sub, copied).arrays  # held initializers: device memory on a GPU
        arrays = [np.asarray(values[plan.values[v].name]) for v in plan.inputs]
        host_steps = [step_label(s) for s in walk(plan.steps) if isinstance(s, HostStep)]
        executor = Executor(plan, BindCheckDevice(arrays + list(weights.values()), bind, host_steps), weights=weights)
        executor.run(arrays)
        if executor.step_by_step and not any(isinstance(s, Loop) for s in walk(plan.steps)):
            raise AssertionError(f"subgraph {k + 1} ({', '.join(n.label for n in sub.nodes[:4])}, ...) runs step "
                                 f"by step, which the cuda device does not do: its claim should have been refused")
    return len(parts)


def fuzz_case(seed: int) -> tuple[str, str]:
    """(verdict, detail) for the fuzzer's random graph `seed` (hipep.tools.fuzz.gen_graph): "ok";
    "skip" where the cuda device claims nothing, ORT's CPU EP rejects the model or its feeds, or
    the subgraphs fail the same way unbound (the CPU device's own answer, judged by the fuzzer);
    "finding" where binding fails."""
    import warnings

    import onnxruntime as ort

    import hipep
    from hipep.tools.fuzz import SeededSource, gen_graph

    case = gen_graph(SeededSource(seed))
    model = onnx.load_from_string(case.model)
    try:
        if hipep.explain(model, device="cuda").claimed_count == 0:
            return "skip", "nothing claimed"
        so = ort.SessionOptions()
        so.log_severity_level = 4
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        ort.InferenceSession(case.model, so, providers=["CPUExecutionProvider"]).run(None, case.runs[0])
    except Exception as e:  # noqa: BLE001 - hipep or ORT rejects the case: the fuzzer's business
        return "skip", f"rejected: {type(e).__name__}"
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        try:
            dry_run(model, case.runs[0])
            return "ok", ""
        except NoInputs as e:
            return "skip", str(e)
        except Exception as bound:  # noqa: BLE001
            try:
                dry_run(model, case.runs[0], bind=False)
            except Exception as unbound:  # noqa: BLE001
                if type(unbound) is type(bound) and str(unbound) == str(bound):
                    return "skip", "fails unbound too"
            return "finding", f"{case.what}: {type(bound).__name__}: {bound}"


def main(argv: list[str] | None = None) -> int:
    import argparse
    import collections

    from hipep.tools.fuzz.workers import limit_memory

    p = argparse.ArgumentParser(prog="python -m hipep.tools.cuda_dry_run", description=__doc__.splitlines()[0])
    p.add_argument("--fuzz", type=int, required=True, metavar="N", help="random graphs to run")
    p.add_argument("--seed", type=int, default=0, help="the first graph's seed")
    p.add_argument("--memory-gib", type=float, default=6.0, help="address space limit (a huge tensor fails)")
    args = p.parse_args(argv)
    limit_memory(args.memory_gib)
    counts: collections.Counter = collections.Counter()
    for seed in range(args.seed, args.seed + args.fuzz):
        verdict, detail = fuzz_case(seed)
        counts[verdict] += 1
        if verdict == "finding":
            print(f"seed {seed}: {detail}", flush=True)
    print(", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    return 1 if counts["finding"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
