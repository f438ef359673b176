"""ONNX's backend API (`onnx.backend.base.Backend` / `BackendRep`) over a stock ONNX Runtime
session with hipep registered. This module is itself a backend, as `onnxruntime.backend` is:

    import hipep.backend as backend
    rep = backend.prepare(model, "CPU")          # an onnxruntime.InferenceSession inside
    outputs = rep.run([x, y])                    # a list, in graph-output order
    rep.claim.kind                               # "all" | "some" | "none": what hipep really got

    from onnx.backend.test import BackendTest
    globals().update(BackendTest(backend, __name__).test_cases)   # ONNX's own conformance cases

What `prepare` builds: `onnxruntime.InferenceSession(model, providers=[("HipExecutionProvider",
{"device": ...})])` after `hipep.register()` (on onnxruntime 1.24, which cannot select a plugin EP
by name, the EP's devices in the session options instead: `hipep.ort_compat`), with

* `session.disable_cpu_ep_fallback=1` when `hipep.explain` says hipep claims every node (so a
  session that would still leave a node to the CPU EP fails instead of passing on ORT's kernels);
  CPU fallback allowed otherwise, so a partly claimed model still runs, split with the CPU EP;
* `session.record_ep_graph_assignment_info=1`: after creation the session says which nodes each EP
  got, and that (not explain's static answer) is the `SessionClaim` recorded on the rep;
* ORT's Python-level retry on the CPU EP alone turned off (`enable_fallback=0`): a session hipep
  fails to compile is an error, never a silent CPU session;
* graph optimizations off (`ORT_DISABLE_ALL`) unless `graph_optimization_level=` says otherwise:
  then hipep is asked about the model's own nodes, exactly what `hipep.explain` reports, and
  constant folding or fusions cannot hide an op from it. Pass `ORT_ENABLE_ALL` to see what a
  default session hands hipep.

`is_compatible(model)` is True when hipep claims at least one node (main graph or a nested body)
according to `hipep.explain`; ONNX's test runner skips a model-directory case it returns False for
(node cases it does not ask: their runner calls `prepare` directly).

IR versions: ONNX Runtime 1.31 reads models up to IR version 13 and ai.onnx opset 26 (ONNX 1.23
writes IR 14 / opset 28). A model whose IR version is above what the installed ORT reads is given
ir_version max(10, the lowest IR its opset imports need), when that is one ORT reads: the IR
version only gates what the file format may contain, and a model whose opsets IR 10 covers
uses nothing newer in practice. A model whose opsets themselves are too new is left as it is
and ORT refuses it. ORT's limits are probed once per process (`ort_limits`), not hard-coded.
"""
from __future__ import annotations

import collections
import contextlib
import functools
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep, Device, DeviceType

from . import CPU_EP_NAME, provider_for
from .options import EP_NAME
from .ort_compat import check_session_runs, session_providers

HIPEP_EPS = (EP_NAME, CPU_EP_NAME)

__all__ = ["HipepBackend", "HipepRep", "SessionClaim", "prepare", "run_model", "run_node",
           "supports_device", "is_compatible", "ort_limits", "loadable_model", "as_feed", "recording",
           "recent_claims"]

FALLBACK_KEY = "session.disable_cpu_ep_fallback"
RECORD_KEY = "session.record_ep_graph_assignment_info"
# The lowest IR version a too-new model is taken down to: every onnxruntime hipep supports
# (>= 1.24) reads it, it is what hipep's own tests write, and it knows int4/uint4 (IR 10).
FLOOR_IR_VERSION = 10
_ONNX_DEVICES = {DeviceType.CPU: "cpu", DeviceType.CUDA: "cuda"}


@dataclass
class SessionClaim:
    """What hipep got in one session, from ORT's graph assignment info (what really counts), and
    what `hipep.explain` predicted for the model before the session was made."""

    kind: str  # "all" | "some" | "none"
    hipep_nodes: int  # nodes ORT assigned to hipep (inside its fused subgraphs)
    total_nodes: int  # nodes ORT assigned to any EP
    subgraphs: int  # fused subgraphs hipep compiled
    by_ep: dict[str, list[str]] = field(default_factory=dict)  # EP -> node names (op type if unnamed)
    explained: str = ""  # explain's verdict: "all" | "some" | "none" | "error: ..."
    fallback_disabled: bool = False

    @staticmethod
    def from_session(session, explained: str = "", fallback_disabled: bool = False) -> "SessionClaim":
        by_ep: dict[str, list[str]] = {}
        subgraphs = 0
        for sub in session.get_provider_graph_assignment_info():
            names = by_ep.setdefault(sub.ep_name, [])
            names += [n.name or n.op_type for n in sub.get_nodes()]
            subgraphs += sub.ep_name in HIPEP_EPS
        hipep_nodes = sum(len(by_ep.get(name, [])) for name in HIPEP_EPS)
        total = sum(len(v) for v in by_ep.values())
        kind = "none" if hipep_nodes == 0 else "all" if hipep_nodes == total else "some"
        return SessionClaim(kind, hipep_nodes, total, subgraphs, by_ep, explained, fallback_disabled)

    def summary(self) -> str:
        return (f"hipep runs {self.hipep_nodes} of {self.total_nodes} nodes in {self.subgraphs} "
                f"subgraph(s) ({self.kind})")


class HipepRep(BackendRep):
    """A prepared model: the session, what hipep claimed in it, and how long preparing took."""

    def __init__(self, session, claim: SessionClaim, model_name: str = "", timings: dict | None = None,
                 ir_version: tuple[int, int] | None = None):
        self.session = session
        self.claim = claim
        self.model_name = model_name
        self.timings = dict(timings or {})  # explain_s, session_s (creation, hipep's compile included)
        self.ir_version = ir_version  # (model's, given to ORT) when the IR version was lowered
        self._input_names = [i.name for i in session.get_inputs()]

    def run(self, inputs: Any, **kwargs: Any) -> list:
        """Runs the session; `inputs` is a list (graph-input order, initializers excluded), a dict
        by input name, or one array for a one-input model. Returns every graph output, in order."""
        if kwargs:
            raise TypeError(f"HipepRep.run takes no options, got {', '.join(sorted(kwargs))}")
        if isinstance(inputs, dict):
            feeds = {k: as_feed(v) for k, v in inputs.items()}
        elif isinstance(inputs, (np.ndarray, np.generic)):
            feeds = {self._input_names[0]: as_feed(inputs)} if self._input_names else {}
        else:
            inputs = list(inputs)
            if len(inputs) > len(self._input_names):
                raise ValueError(f"model '{self.model_name}' takes {len(self._input_names)} input(s) "
                                 f"({', '.join(self._input_names)}), got {len(inputs)}")
            feeds = {k: as_feed(v) for k, v in zip(self._input_names, inputs)}
        t0 = time.perf_counter()
        outputs = list(self.session.run(None, feeds))
        self.timings["run_s"] = self.timings.get("run_s", 0.0) + time.perf_counter() - t0
        return outputs


def as_feed(value):
    """A value as ORT's Python binding takes it: a numpy scalar (np.float32(1.5), which ONNX's
    test cases use for 0-d inputs and ORT refuses) becomes a 0-d array; sequences element-wise."""
    if isinstance(value, np.generic):
        return np.asarray(value)
    if isinstance(value, list):
        return [as_feed(v) for v in value]
    return value


# Reps prepared inside `recording()` blocks of this thread (innermost last).
_recorders = threading.local()


@contextlib.contextmanager
def recording() -> Iterator[list[HipepRep]]:
    """Collects every rep `prepare` makes on this thread inside the block (test harnesses use it
    to learn what hipep claimed for a case they only see through ONNX's runner)."""
    stack = getattr(_recorders, "stack", None)
    if stack is None:
        stack = _recorders.stack = []
    reps: list[HipepRep] = []
    stack.append(reps)
    try:
        yield reps
    finally:
        stack.remove(reps)


# (graph name, SessionClaim) of the models this process prepared most recently, newest last.
_recent_claims: "collections.deque[tuple[str, SessionClaim]]" = collections.deque(maxlen=256)


def recent_claims() -> list[tuple[str, SessionClaim]]:
    """What hipep claimed in each recently prepared model (graph name, claim), newest last."""
    return list(_recent_claims)


def _record(rep: HipepRep) -> None:
    _recent_claims.append((rep.model_name, rep.claim))
    for reps in getattr(_recorders, "stack", ()):
        reps.append(rep)


@functools.lru_cache(maxsize=None)
def ort_limits() -> tuple[int, int]:
    """(highest IR version, highest ai.onnx opset) the installed onnxruntime loads, probed once
    with a one-node model on the CPU EP."""
    import onnxruntime as ort
    from onnx import helper

    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "probe",
                              [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])])

    def loads(ir: int, opset: int) -> bool:
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=ir)
        so = ort.SessionOptions()
        so.log_severity_level = 4
        try:
            ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
            return True
        except Exception:  # noqa: BLE001 - a refusal is the answer
            return False

    max_ir = next((ir for ir in range(onnx.IR_VERSION, FLOOR_IR_VERSION - 1, -1) if loads(ir, 21)),
                  FLOOR_IR_VERSION)
    max_opset = next((v for v in range(onnx.defs.onnx_opset_version(), 20, -1) if loads(max_ir, v)), 21)
    return max_ir, max_opset


def loadable_model(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model`, or a copy with its IR version lowered when it is above what ORT reads and its
    opset imports allow one ORT reads (see the module doc). Never mutates `model`."""
    max_ir, _ = ort_limits()
    if model.ir_version <= max_ir:
        return model
    try:
        needed = onnx.helper.find_min_ir_version_for(list(model.opset_import), ignore_unknown=True)
    except Exception:  # noqa: BLE001 - an opset onnx does not know: leave the model to ORT
        return model
    target = max(FLOOR_IR_VERSION, needed)
    if target > max_ir:
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    copy.ir_version = target
    return copy


def _as_model(model) -> onnx.ModelProto:
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (bytes, bytearray, memoryview)):
        return onnx.load_model_from_string(bytes(model))
    return onnx.load(model)


def _explain_kind(model: onnx.ModelProto, device: str = "cpu") -> str:
    """explain's verdict on `model` for hipep's `device` (an option value: cpu, cuda, auto): "all" |
    "some" | "none", or "error: <why>"."""
    from .bridge import resolve_device
    from .explain import explain
    from .options import ProviderOptions

    try:
        report = explain(model, device=resolve_device(ProviderOptions(device=device)))
    except Exception as e:  # noqa: BLE001 - the session decides then
        return f"error: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"

    if report.claimed_total == 0:
        return "none"
    return "all" if report.all_claimed else "some"


def _hipep_device(device: str) -> str:
    kind = Device(device).type
    if kind not in _ONNX_DEVICES:
        raise ValueError(f"unknown device '{device}'")
    return _ONNX_DEVICES[kind]


def _optimization_level(value):
    import onnxruntime as ort

    if value is None:
        return ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    if isinstance(value, str):
        return getattr(ort.GraphOptimizationLevel, value)
    if isinstance(value, int):
        return ort.GraphOptimizationLevel(value)
    return value


class HipepBackend(Backend):
    # Keyword arguments `prepare` reads; anything else must be a SessionOptions attribute (as in
    # onnxruntime.backend). rtol/atol are ONNX's test runner's own and are ignored here.
    _IGNORED = frozenset({"rtol", "atol"})

    @classmethod
    def is_compatible(cls, model, device: str = "CPU", **kwargs: Any) -> bool:
        """True when hipep claims at least one node of `model` (per hipep.explain); also True when
        explain cannot read the model, leaving the verdict to a session."""
        if not cls.supports_device(device):
            return False
        return _explain_kind(loadable_model(_as_model(model)), _hipep_device(device)) != "none"

    @classmethod
    def prepare(cls, model, device: str = "CPU", provider_options: dict | None = None,
                graph_optimization_level=None, allow_fallback: bool | None = None,
                session_options=None, **kwargs: Any) -> HipepRep:
        """A HipepRep over a new onnxruntime.InferenceSession on HipExecutionProvider.

        provider_options: hipep's (docs/options.md); `device` defaults to the one `device` names.
        allow_fallback: None (default) disables CPU fallback exactly when explain says hipep claims
        every node; True/False force it. session_options: an ort.SessionOptions to start from (its
        graph optimization level is kept unless graph_optimization_level is given; hipep's config
        entries are added to it). Other keywords set SessionOptions attributes of the same name.
        """
        import onnxruntime as ort

        from . import register

        register()
        original = _as_model(model)
        proto = loadable_model(original)
        lowered = None if proto is original else (original.ir_version, proto.ir_version)
        so = session_options if session_options is not None else ort.SessionOptions()
        for key, value in kwargs.items():
            if key in cls._IGNORED:
                continue
            if not hasattr(so, key):
                raise TypeError(f"prepare() got an unknown keyword '{key}' (not an ort.SessionOptions attribute)")
            setattr(so, key, value)
        if graph_optimization_level is not None or session_options is None:
            so.graph_optimization_level = _optimization_level(graph_optimization_level)
        so.add_session_config_entry(RECORD_KEY, "1")

        options = {"device": _hipep_device(device)}
        options.update({k: str(v) for k, v in (provider_options or {}).items()})
        t0 = time.perf_counter()
        explained = _explain_kind(proto, options["device"])
        t1 = time.perf_counter()
        fallback_disabled = (explained == "all") if allow_fallback is None else not allow_fallback
        if fallback_disabled:
            so.add_session_config_entry(FALLBACK_KEY, "1")
        ep_name = provider_for(options["device"])  # the CPU reference device beside a GPU has its own name
        try:
            session = ort.InferenceSession(proto.SerializeToString(), sess_options=so,
                                           providers=session_providers(so, ep_name, options), enable_fallback=0)
        except Exception as e:
            explained_error = _explained_failure(e, fallback_disabled)
            if explained_error is e:
                raise
            raise explained_error from e
        check_session_runs(session, ep_name)
        t2 = time.perf_counter()
        claim = SessionClaim.from_session(session, explained, fallback_disabled)
        rep = HipepRep(session, claim, proto.graph.name, {"explain_s": t1 - t0, "session_s": t2 - t1},
                       lowered)
        _record(rep)
        return rep

    @classmethod
    def run_model(cls, model, inputs: Any, device: str = "CPU", **kwargs: Any) -> list:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node: onnx.NodeProto, inputs: Any, device: str = "CPU", outputs_info=None,
                 opset_version: int | None = None, **kwargs: Any) -> list:
        """Runs one node on `inputs` (arrays, in the node's input order; "" inputs are skipped).
        outputs_info: optional (elem_type, shape) per output; types are inferred otherwise."""
        from onnx import helper

        arrays = list(inputs.values()) if isinstance(inputs, dict) else list(inputs)
        present = [name for name in node.input if name]
        graph_inputs = [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.asarray(a).dtype),
                                                      np.asarray(a).shape)
                        for name, a in zip(present, arrays)]
        outs = [name for name in node.output if name]
        if outputs_info:
            graph_outputs = [helper.make_tensor_value_info(name, elem, shape)
                             for name, (elem, shape) in zip(outs, outputs_info)]
        else:
            graph_outputs = [helper.make_empty_tensor_value_info(name) for name in outs]
        graph = helper.make_graph([node], f"run_node_{node.op_type}", graph_inputs, graph_outputs)
        if opset_version is None:
            opset_version = min(ort_limits()[1], onnx.defs.onnx_opset_version())
        opsets = [helper.make_opsetid(node.domain or "", opset_version)]
        model = helper.make_model(graph, opset_imports=opsets)
        model.ir_version = min(model.ir_version, ort_limits()[0])
        return cls.prepare(model, device, **kwargs).run([np.asarray(a) for a in arrays])

    @classmethod
    def supports_device(cls, device: str) -> bool:
        """CPU: hipep's CPU reference device. A GPU kind once hipep's backend for it is available."""
        from .bridge import resolve_device
        from .options import ProviderOptions

        try:
            resolve_device(ProviderOptions(device=_hipep_device(device)))
        except Exception:  # noqa: BLE001 - unknown or unavailable: not supported
            return False
        return True


def _explained_failure(error: Exception, fallback_disabled: bool) -> Exception:
    """Session creation failed: with fallback disabled, name the nodes hipep left (explain had
    said it claims them all, so the session disagreed); otherwise ORT's own error."""
    from . import FallbackError
    from .bridge import last_report

    report = last_report()
    if fallback_disabled and report is not None and report.rejections and "fallback" in str(error).lower():
        lines = "\n".join("  " + line for line in report.rejection_lines())
        return FallbackError(f"{EP_NAME} left {len(report.rejections)} node(s) to another EP although explain "
                             f"claimed them all, and CPU fallback is disabled:\n{lines}\n(onnxruntime said: {error})")
    return error


prepare = HipepBackend.prepare
run_model = HipepBackend.run_model
run_node = HipepBackend.run_node
supports_device = HipepBackend.supports_device
is_compatible = HipepBackend.is_compatible
