"""What the native plugin calls: the Python half of ORT's plugin-EP ABI.

csrc/plugin.cc calls `create_ep` from OrtEpFactory::CreateEp, then `EpState.get_capability` and
`EpState.compile` from OrtEp; csrc/compute.cc calls `CompiledSubgraph.run` from
OrtNodeComputeInfo::Compute. Always with the GIL held; exceptions raised here become an
OrtStatus carrying their message. Log records go back to C++ as (severity, message) pairs with
ORT's severity numbers, and C++ writes them to the session's logger.

Compile receives the fused subgraph's constant initializers copied (`desc["weight_data"]`: ORT
passes them to no Compute call and frees its own copy); each CompiledSubgraph keeps those its
plan reads in a hipep.weights.WeightStore. Compute hands `run` the inputs as read-only arrays over
ORT's memory and `allocate_outputs(shapes: list[tuple[int, ...]]) -> list[np.ndarray]`, which
obtains ORT's outputs with those shapes and returns writable arrays over them (once per run,
valid during that call only); the executor calls it as soon as it knows the output shapes and
writes the results there. `run` returns the output arrays: those C++ finds outside ORT's
outputs (a plan that computed them elsewhere) it copies.

Device memory: when HipExecutionProvider offers a GPU's memory (csrc/device_memory.cc), ORT
keeps the EP's inputs and outputs there, and Compute hands a tensor in device memory over as a
tuple (address, shape, dtype) instead of an array, for inputs and from allocate_outputs alike;
`run` turns each into the device's own array at that address (`wrap_device_memory`), so kernels
read and write ORT's tensors with no copy. Tensors ORT keeps in host memory still come as arrays
(the device stages them).
"""
from __future__ import annotations

import collections
import logging
import os
from dataclasses import replace
import threading
import time

from . import counters, ort_compat
from .compiler import compile_subgraph, hold_body_weights
from .errors import HipepError, OptionError
from .graph import GraphView, elem_type_of
from .options import CONFIG_PREFIX, EP_NAME, ProviderOptions
from .ops.registry import check_node, lookup
from .partition import PartitionReport, partition
from .plan import walk
from .runtime.device import open_device
from .runtime.executor import Executor
from .weights import WeightStore

VERBOSE, INFO, WARNING, ERROR = 0, 1, 2, 3
FALLBACK_KEY = "session.disable_cpu_ep_fallback"

# The latest partition report made on each thread: hipep.InferenceSession reads it to explain a
# failed session creation (ORT's own refusal names no node).
_last_report = threading.local()


def last_report() -> PartitionReport | None:
    return getattr(_last_report, "report", None)


# The plans this process compiled most recently (newest last), for tests and debugging.
_recent_plans: "collections.deque" = collections.deque(maxlen=32)


def compiled_plans() -> list:
    return list(_recent_plans)


def resolve_device(options: ProviderOptions) -> str:
    """The device kind an option value selects: auto takes the NVIDIA GPU when cuda-bindings
    imports, a driver loads and the device exists (and logs why not otherwise), else cpu."""
    if options.device == "cpu":
        if options.device_id != 0:
            raise OptionError(f"option 'device_id' = {options.device_id} names no device: the cpu device has only "
                              f"id 0 (device_id picks a GPU with device=cuda)")
        return "cpu"
    if options.device in ("auto", "cuda"):
        from .runtime.cuda import cuda_status

        ok, why = cuda_status(options.device_id)
        if ok:
            return "cuda"
        if options.device == "cuda":
            raise OptionError(f"device 'cuda' is not available: {why}")
        logging.getLogger("hipep").info("hipep: device=auto runs on the cpu device: %s", why)
        return "cpu"
    raise OptionError(
        f"device '{options.device}' is not available: hipep's {options.device.upper()} backend is not "
        f"implemented yet; use device=cpu or device=auto")


def _is_control_flow(node: dict) -> bool:
    """Loop, If, Scan: ops whose bodies ORT runs as subgraphs (the registry's control-flow ops)."""
    op = lookup(node["domain"], node["op_type"])
    return op is not None and op.control_flow


def _ort_expands():
    """Which function nodes ORT will replace by their bodies (see hipep.partition): the answer of
    ORT's CPU kernel table where the host process is onnxruntime's Python module (it is then loaded
    already), else None: every such node, as ORT does for ops no EP has a kernel for. Another host
    (onnxruntime-genai, a C++ program) gets no second ORT loaded to ask."""
    import sys

    if "onnxruntime.capi.onnxruntime_pybind11_state" not in sys.modules:
        return None
    from .explain import ort_expands

    return ort_expands


def _graph_from_ort(desc: dict) -> GraphView:
    from .ops.inference import fill_ambiguous_shapes

    graph = GraphView.from_native(desc)
    fill_ambiguous_shapes(graph)  # ORT's API 23 reports unknown shapes as rank 0
    return graph


def check_options(options: ProviderOptions) -> str:
    """Validates what options alone cannot (device availability, pass names); the device kind."""
    if options.plan_cache:
        from .plan_cache import check_folder

        check_folder(options.plan_cache)
    if options.pass_options:
        from .passes import pipeline_with_overrides

        try:
            pipeline_with_overrides(options.pass_options)
        except ValueError as e:
            raise OptionError(f"option 'pass_options' = {options.pass_options!r} is invalid: {e}") from None
    return resolve_device(options)


CPU_EP_NAME = "HipCpuExecutionProvider"  # the CPU reference device in host memory (csrc/ort_api.h)


def _device_for_memory(options: ProviderOptions, ep_name: str, memory: str, gpu_ordinal: int) -> str:
    """The device kind of an EP whose EP device has `memory` ("gpu": a GPU's device memory,
    "emulated": host memory ORT is told is a GPU's (tests), "host")."""
    if ep_name == CPU_EP_NAME:
        if options.device not in ("auto", "cpu"):
            raise OptionError(f"{CPU_EP_NAME} is hipep's CPU reference device: option 'device' = "
                              f"'{options.device}' belongs to {EP_NAME}")
        return check_options(replace(options, device="cpu"))
    if memory == "host":
        return check_options(options)
    # ORT keeps this EP's tensors in the GPU's memory: only the GPU device can run them.
    if options.device == "cpu":
        raise OptionError(f"{EP_NAME} runs on the GPU on this machine (ORT gives it GPU memory), so option "
                          f"'device' = 'cpu' cannot apply; the CPU reference device is {CPU_EP_NAME} "
                          f"(hipep.InferenceSession(..., device='cpu') picks it)")
    if memory == "emulated":  # host memory in disguise: the CPU device computes (device=auto)
        return check_options(options)
    if options.device == "hip":
        raise OptionError("device 'hip' is not available: hipep's HIP backend is not implemented yet; "
                          "use device=cuda or device=auto")
    if options.device_id != gpu_ordinal:
        raise OptionError(f"option 'device_id' = {options.device_id} names another GPU than the EP device "
                          f"ORT selected (GPU {gpu_ordinal}); select that GPU's EP device instead")
    return check_options(replace(options, device="cuda"))


class EpState:
    def __init__(self, config: dict[str, str], ort_severity: int, ep_name: str = EP_NAME, memory: str = "host",
                 gpu_ordinal: int = 0):
        if ep_name != EP_NAME:  # provider options arrive under the EP's own name
            prefix = f"ep.{ep_name.lower()}."
            config = {**{k: v for k, v in config.items() if not k.startswith(CONFIG_PREFIX)},
                      **{CONFIG_PREFIX + k[len(prefix):]: v for k, v in config.items() if k.startswith(prefix)}}
        self.ep_name = ep_name
        self.memory = memory
        self.options = ProviderOptions.from_session_config(config)
        self.device_kind = _device_for_memory(self.options, ep_name, memory, gpu_ordinal)
        self.device = open_device(self.device_kind, self.options.device_id,
                                  cpu_schedule=self.options.cpu_schedule, seed=self.options.seed)
        self.fallback_disabled = config.get(FALLBACK_KEY, "0").strip() == "1"
        # Graph key (name, enclosing node) -> why the 'strict' option fails the session.
        self._strict_failures: dict[tuple, str] = {}
        # Graph key -> the function nodes its last GetCapability call left for ORT to expand.
        self._unexpanded: dict[tuple, str] = {}
        self.ort_severity = ort_severity
        self.fused_graph: tuple | None = None  # the one graph hipep fuses in, where ORT needs that
        counters.bump("eps_created")

    @property
    def strict_failure(self) -> str | None:
        return "\n".join(self._strict_failures.values()) or None

    def _records(self, pairs):
        floor = self.options.log_severity
        return [(sev, msg) for sev, msg in pairs if sev >= floor]

    def get_capability(self, desc: dict):
        graph = _graph_from_ort(desc)
        parent = desc.get("parent")
        if parent is not None and not _is_control_flow(parent["node"]):
            # The body of a function op (SequenceMap, ...) that ORT will inline into other nodes:
            # a fused node inside it would end up in a graph that does not import hipep's domain.
            counters.bump("capability_calls")
            return [], self._records([(VERBOSE, f"{EP_NAME}: not claiming inside the body of "
                                                f"{parent['node']['op_type']} (ORT expands that op)")])
        if parent is not None and self._enclosing_node_claimable(parent):
            # ORT asks about a Loop/If body before the node itself: leave the body whole, so the
            # enclosing node can be claimed with it and compiled as one.
            counters.bump("capability_calls")
            return [], self._records([(VERBOSE, f"{EP_NAME}: leaving the body graph '{graph.name}' to its "
                                                f"enclosing {parent['node']['op_type']} node, which hipep claims")])
        report = partition(graph, device=self.device_kind, expands=_ort_expands(), fused_domain=self.ep_name)
        _last_report.report = report
        # ORT asks again about a graph once it has replaced function nodes no EP took by their
        # bodies, so the strict verdict on a graph is its last GetCapability call's.
        key = (graph.name, parent["node"]["name"] if parent is not None else None)
        self._strict_failures.pop(key, None)
        self._unexpanded.pop(key, None)
        records = []
        lines = "\n".join("  " + line for line in report.rejection_lines())
        left = [e for e in report.expansions if not e.direct]  # the ones hipep does not claim whole
        expanded = "\n".join("  " + e.line() for e in left)
        if report.rejections and self.options.strict:
            # One message saying what happens. ORT only logs a failing GetCapability and goes on:
            # the session fails in Compile or, when hipep claimed nothing, at its first run.
            self._strict_failures[key] = (
                f"strict: {EP_NAME} cannot run {len(report.rejections)} node(s) of graph "
                f"'{graph.name}' and the 'strict' option forbids leaving them to another EP, "
                f"so the session fails:\n{lines}")
            records.append((ERROR, self._strict_failures[key]))
        elif report.rejections:
            consequence = ("session creation will fail: session.disable_cpu_ep_fallback=1"
                           if self.fallback_disabled else "they fall back to another EP (usually the CPU EP)")
            records.append((WARNING, f"{EP_NAME} did not claim {len(report.rejections)} node(s) of graph "
                                     f"'{graph.name}'; {consequence}:\n{lines}"))
        if left:
            if self.options.strict:  # checked at the first run, once ORT has partitioned to the end
                self._unexpanded[key] = (
                    f"strict: {len(left)} function node(s) of graph '{graph.name}' ran on "
                    f"another EP (one with a kernel for the op) instead of being replaced by their "
                    f"bodies, which {EP_NAME} claims, and the 'strict' option forbids that:\n{expanded}")
            records.append((INFO, f"{EP_NAME} leaves {len(left)} function node(s) of graph "
                                  f"'{graph.name}' for ORT to replace by their bodies:\n{expanded}"))
        records.append((INFO, f"{EP_NAME}: {report.summary()}"))
        counters.bump("capability_calls")
        if report.clusters and not self._may_fuse_in(graph, parent):
            why = (f"{EP_NAME} leaves the nodes it claimed in graph '{graph.name}' to another EP: onnxruntime "
                   f"{'.'.join(map(str, ort_compat.onnxruntime_version()))} names the nodes an EP fuses per graph "
                   f"from 0, so they would take the names of those fused in graph '{self.fused_graph[0]}' "
                   f"(onnxruntime >= 1.25 does not)")
            if self.options.strict:
                self._strict_failures[key] = "\n".join(
                    filter(None, [self._strict_failures.get(key), f"strict: {why}, and the 'strict' option forbids that"]))
            records.append((ERROR if self.options.strict else WARNING, why))
            return [], self._records(records)
        return report.clusters, self._records(records)

    def _may_fuse_in(self, graph: GraphView, parent: dict | None) -> bool:
        """True but where onnxruntime 1.24 would give this graph's fused nodes the names of another
        graph's (hipep.ort_compat): there hipep fuses in the first graph it claims nodes of only."""
        if not ort_compat.fused_names_restart_per_graph():
            return True
        graph_key = (graph.name, parent["node"]["name"] if parent is not None else None)
        self.fused_graph = self.fused_graph or graph_key
        return graph_key == self.fused_graph

    @staticmethod
    def _enclosing_node_claimable(parent: dict) -> bool:
        view = GraphView.from_native({"name": "", "nodes": [parent["node"]], "inputs": [], "outputs": [],
                                      "types": parent["types"], "constants": {}, "weights": [], "opsets": {}})
        return check_node(view.nodes[0], view) is None

    @property
    def run_failure(self) -> str | None:
        """Why a run fails under 'strict': the nodes left to other EPs, and function nodes left for
        ORT to expand that it ran whole on another EP instead (their graph's last GetCapability
        call still had them: had ORT expanded them, it would have asked about the graph again)."""
        return "\n".join(filter(None, [self.strict_failure, *self._unexpanded.values()])) or None

    def on_run_start(self) -> None:
        if self.run_failure:
            raise HipepError(self.run_failure)

    def compile(self, desc: dict, fused_name: str, inputs: list[str], outputs: list[str]):
        if self.strict_failure:
            raise HipepError(self.strict_failure)
        start = time.perf_counter()
        copied = _take_weight_data(desc)  # large initializers, copied by Compile (Loop/If bodies' too)
        graph = _graph_from_ort(desc)
        # Every constant initializer that is no fused-node input is hipep's to hold: ORT passes
        # none of them to Compute. A Loop/If body's own weights are held with the graph's: the
        # body reads them as values of the enclosing function.
        body, body_data = hold_body_weights(graph)
        for name, data in body_data.items():
            copied.setdefault(name, data)
        given = set(inputs)
        held = sorted(n for n in set(graph.constants) | graph.weights | body if n not in given)
        plan = self._stored_or_compiled(desc, graph, fused_name, inputs, outputs, held)
        weights = WeightStore.for_plan(plan, graph, copied)
        del copied  # the copies the plan does not read go now
        counters.bump("compile_us", int((time.perf_counter() - start) * 1e6))
        _recent_plans.append(plan)
        executor = Executor(plan, self.device, weights=weights.arrays)
        counters.bump("compiled_subgraphs")
        n_steps = sum(1 for _ in walk(plan.steps))
        records = [(VERBOSE, f"{EP_NAME}: compiled {fused_name}: {n_steps} steps, "
                             f"{len(inputs)} inputs, {len(outputs)} outputs, {len(weights)} weights "
                             f"({weights.nbytes / 2**20:.1f} MiB) on device {self.device.name}")]
        elem_types = [elem_type_of(plan.values[v].dtype) for v in plan.outputs]
        # HIPEP_NATIVE_REPLAY=0 turns it off for every session (A/B runs of scripts that set no option)
        native = self.options.native_replay == "on" and os.environ.get("HIPEP_NATIVE_REPLAY", "1") != "0"
        compiled = CompiledSubgraph(executor, weights, self.device, native_replay=native)
        return compiled, elem_types, self._records(records)


    def _stored_or_compiled(self, desc: dict, graph: GraphView, fused_name: str, inputs: list[str],
                            outputs: list[str], held: list[str]):
        """The plan from the plan_cache folder when it holds this subgraph's, else compiled (and
        stored there). dump_ir asks for the compiler's IR, so it always compiles."""
        folder = self.options.plan_cache
        if not folder or self.options.dump_ir:
            return compile_subgraph(graph, fused_name, inputs, outputs, self.options, held=held)
        from . import plan_cache

        key = plan_cache.plan_key(desc, inputs, outputs, self.device_kind, self.options)
        plan = plan_cache.load(folder, key, fused_name)
        if plan is not None:
            counters.bump("plans_loaded")
            return plan
        plan = compile_subgraph(graph, fused_name, inputs, outputs, self.options, held=held)
        plan_cache.store(folder, key, plan)
        return plan


class CompiledSubgraph:
    """One fused node's executable and the weights it owns. `run` is re-entrant: ORT may call it
    from several threads."""

    def __init__(self, executor: Executor, weights: WeightStore | None = None, device=None,
                 native_replay: bool = False):
        self.executor = executor
        self.weights = weights if weights is not None else WeightStore({})
        self.device = device if device is not None else executor.device
        # The last (descriptor, wrapper) per input and output position: with IOBinding ORT hands
        # over the same tensors run after run (a decoder's KV cache), C++ then the same descriptor
        # object, and the same wrapper lets the replay see that nothing moved without comparing
        # anything. (Lists whose items runs on other threads may replace.)
        plan = executor.plan
        self._wrapped: dict[str, list] = {"input": [None] * len(plan.inputs), "output": [None] * len(plan.outputs)}
        # Compute's native replay (csrc/native_replay.cc): the plugin sets `native_slot` after
        # Compile; the recorder fills it once runs of one layout repeat on a GPU.
        self.native_slot = None
        self._recorder = None
        if native_replay and getattr(self.device, "name", "") == "cuda" and not executor.step_by_step:
            from .runtime.native_recorder import Recorder

            self._recorder = Recorder(self)

    def run(self, inputs, allocate_outputs=None):
        """The outputs of one run. `allocate_outputs`, when given (Compute gives it), obtains
        ORT's output buffers; the executor calls it once it knows the shapes and writes there.
        Tensors in device memory arrive as (address, shape, dtype) tuples (see the module doc)."""
        counters.bump("runs")
        if tuple in map(type, inputs):  # (a scan in C: most runs have no device tensor)
            inputs = self._device_tensors(inputs, "input")
        if allocate_outputs is None:
            return self.executor.run(inputs)
        ort_allocate = allocate_outputs

        def allocate_outputs(shapes):
            arrays = ort_allocate(shapes)
            if tuple in map(type, arrays):
                arrays = self._device_tensors(arrays, "output")
            return arrays
        self.executor.run(inputs, allocate_outputs=allocate_outputs)
        if self._recorder is not None:
            self._record()
        # Given allocate_outputs, the executor obtains ORT's outputs through it and writes them
        # there (or raises): None tells Compute that nothing is left to check or copy.
        return None

    def _record(self) -> None:
        """Lets the recorder learn from the run; a fault of its own disables it (the run itself
        succeeded and stays so)."""
        try:
            self._recorder.after_run()
        except Exception as e:  # noqa: BLE001
            recorder, self._recorder = self._recorder, None
            recorder.drop()
            logging.getLogger("hipep").warning("hipep: %s: native replay is off for this subgraph: %s: %s",
                                               self.executor.plan.name, type(e).__name__, e)

    def _device_tensors(self, items, role: str) -> list:
        """`items` with each device tensor's descriptor replaced by the device's array at it: the
        last one made for that position where C++ handed over the same descriptor object (compute.cc's
        DeviceTensorCache), without a call per tensor."""
        last = self._wrapped[role]
        if len(items) != len(last):  # the executor names the mismatch
            return [self._device_tensor(a, role, pos) if type(a) is tuple else a for pos, a in enumerate(items)]
        return [a if type(a) is not tuple else
                (w[1] if (w := last[pos]) is not None and w[0] is a else self._device_tensor(a, role, pos))
                for pos, a in enumerate(items)]

    def _device_tensor(self, desc: tuple, role: str, pos: int):
        slots = self._wrapped[role]
        last = slots[pos] if pos < len(slots) else None  # (one read: runs on other threads may replace it)
        if last is not None and (last[0] is desc or last[0] == desc):
            return last[1]
        ptr, shape, dtype = desc
        wrap = getattr(self.device, "wrap_device_memory", None)
        if wrap is None:
            raise HipepError(f"{role} {pos} is in GPU memory, but this subgraph runs on the {self.device.name} "
                             f"device, which cannot address it")
        array = wrap(ptr, shape, dtype)
        if pos < len(slots):
            slots[pos] = (desc, array)
        return array


def create_ep(config: dict[str, str], ort_severity: int, ep_name: str = EP_NAME, memory: str = "host",
              gpu_ordinal: int = 0) -> EpState:
    """`ep_name`: HipExecutionProvider or HipCpuExecutionProvider; `memory`: where ORT keeps the
    EP's tensors ("gpu", "host", or "emulated": host memory ORT is told is a GPU's, for tests);
    `gpu_ordinal`: the GPU of the EP device ORT selected."""
    return EpState(dict(config), ort_severity, ep_name, memory, gpu_ordinal)


def _take_weight_data(desc: dict) -> dict:
    """The large initializers' data Compile copied, the graph's and its nodes' Loop/If bodies'
    (nested), taken out of the description."""
    data = dict(desc.pop("weight_data", {}))
    for node in desc.get("nodes", ()):
        for body in (node.get("subgraphs") or {}).values():
            for name, array in _take_weight_data(body).items():
                data.setdefault(name, array)
    return data
