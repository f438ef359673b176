"""hipep: an ONNX Runtime plugin execution provider for HIP GPUs, with a numpy CPU reference device.

    import hipep, onnxruntime as ort
    hipep.register()
    sess = ort.InferenceSession("model.onnx", providers=["HipExecutionProvider"])
    # or, with CPU fallback disabled and hipep's reasons in the error:
    sess = hipep.InferenceSession("model.onnx")
"""
from __future__ import annotations

import os
import threading

from . import ort_compat  # noqa: F401  (hipep.ort_compat: selecting hipep on every onnxruntime release)
from .errors import HipepError, ModelError, OptionError, RuntimeShapeError  # noqa: F401
from .explain import explain  # noqa: F401
from .options import EP_NAME, ProviderOptions

__version__ = "0.1.0"
__all__ = ["register", "get_library_path", "get_ep_name", "explain", "InferenceSession", "stats", "memory_stats",
           "provider_for", "CPU_EP_NAME",
           "HipepError", "ModelError", "OptionError", "RuntimeShapeError", "FallbackError"]


class FallbackError(HipepError, RuntimeError):
    """Session creation failed because nodes were left for a CPU fallback that is disabled."""


_register_lock = threading.Lock()
_registered = False


# The CPU reference device in host memory, for machines where HipExecutionProvider runs on a GPU
# (its EP devices carry GPU memory there, and ORT requires one EP's devices to agree on memory).
CPU_EP_NAME = "HipCpuExecutionProvider"


def get_ep_name() -> str:
    return EP_NAME


def gpu_memory_offered() -> bool:
    """Whether HipExecutionProvider's EP devices carry GPU memory in this process (a GPU runtime
    loaded when ORT loaded the plugin): then it runs on the GPU and device=cpu is CPU_EP_NAME."""
    register()
    from . import _native

    return _native.gpu_memory()["runtime"] is not None


def provider_for(device: str = "auto") -> str:
    """The EP name that runs `device` (a `device` option value) in this process:
    HipCpuExecutionProvider for "cpu" where HipExecutionProvider runs on a GPU, else
    HipExecutionProvider. For onnxruntime-genai's append_provider and ORT's providers list."""
    return CPU_EP_NAME if device == "cpu" and gpu_memory_offered() else EP_NAME


def get_library_path() -> str:
    """Path of hipep's native library (the pybind11 module that is also the ORT plugin)."""
    from . import _native

    return os.path.abspath(_native.__file__)


def register() -> str:
    """Registers hipep's plugin library with onnxruntime (idempotent); returns the EP name."""
    global _registered
    import onnxruntime as ort

    with _register_lock:
        if not _registered:
            try:
                ort.register_execution_provider_library(EP_NAME, get_library_path())
            except Exception as e:  # registered earlier in this process by other code
                if "already" not in str(e).lower():
                    raise
            _registered = True
    return EP_NAME


def stats() -> dict[str, int]:
    """Process-wide counters: eps_created, capability_calls, compiled_subgraphs, compile_us (time
    spent compiling, microseconds), plans_loaded (compiled subgraphs whose plan came from the
    plan_cache folder instead of the compiler), runs; and per run: launches (kernel launches issued),
    specializations (new layout signatures laid out and captured), specialization_hits (runs
    that replayed one), host_reads (values the host read back to size or steer a run) and
    kernel_us (time inside device programs; run time minus it is the runtime's overhead), run_us
    (wall time of hipep's runs, from a run's inputs to its outputs, syncs included) and
    sync_wait_us (of that, time the host waited for the device; run_us minus it is hipep's own
    host work). On a GPU, how the launches reached the driver: direct_launches (issued one by one), graph_launches
    (CUDA graphs replayed, each holding many launches) and graph_node_updates (captured launches
    whose arguments changed, updated inside their graph), and native_runs (runs Compute replayed
    in native code without calling Python: hipep.runtime.native_replay; counted in runs too).
    arena_moves: a run context's memory arena allocated anew because a layout needed more than it
    held (it grows at least 1.5 times; each move makes the runs after it capture their graphs
    again; a context's first arenas are not counted).
    With GPU memory (HipExecutionProvider on a GPU): transfer_bytes and transfers, the bytes and
    tensors copied through hipep's data transfer (feeds and fetches in host memory, IOBinding,
    OrtValue.numpy()). Counters that never moved are absent: read them with `.get(name, 0)`."""
    from . import counters

    out = counters.snapshot()
    native = _native_memory_stats()
    for name in ("transfer_bytes", "transfers"):
        if native.get(name):
            out[name] = native[name]
    return out


def _native_memory_stats() -> dict[str, int]:
    try:
        from . import _native
    except ImportError:  # the runtime without the plugin library
        return {}
    return _native.memory_stats()


def memory_stats() -> dict[str, int]:
    """hipep's GPU memory as ORT uses it (process-wide): device_in_use (bytes ORT holds from
    hipep's allocators), device_cached (freed blocks kept for reuse), device_reserved (bytes held
    from the driver), host_in_use (pinned), allocators (live ones), transfer_bytes, transfers."""
    return _native_memory_stats()


def _session_class():
    import onnxruntime as ort

    class Session(ort.InferenceSession):
        """ORT's Python wrapper retries a failed session creation on the CPU EP alone (printing
        "EP Error"). A hipep session that cannot be made is an error instead, never a CPU session."""

        def _create_inference_session(self, *args, **kwargs):
            self._enable_fallback = False
            return super()._create_inference_session(*args, **kwargs)

    return Session


def InferenceSession(model, sess_options=None, disable_cpu_ep_fallback: bool = True, **options):
    """An onnxruntime.InferenceSession on HipExecutionProvider.

    `options` are provider options (see docs/options.md). CPU fallback is disabled unless
    `disable_cpu_ep_fallback=False`; then a model hipep cannot run whole raises FallbackError
    naming each unclaimed node and the reason.
    """
    import onnxruntime as ort

    register()
    so = sess_options if sess_options is not None else ort.SessionOptions()
    if disable_cpu_ep_fallback:
        so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    if isinstance(model, os.PathLike):
        model = os.fspath(model)
    elif not isinstance(model, (str, bytes)):
        model = model.SerializeToString()
    provider_options = {k: str(v) for k, v in options.items()}
    from .bridge import check_options

    # device=cpu where HipExecutionProvider runs on a GPU: the CPU reference device's own EP name
    ep_name = provider_for(provider_options.get("device", "auto"))
    check_options(ProviderOptions.from_strings(provider_options))  # bad options fail here, plainly
    # The options go in as the session config entries ORT would make of them: as provider options,
    # ORT's Python layer would also read `device_id` to pick an EP device and fail on any id but
    # the one device hipep offers it, before hipep could say which ids exist.
    for key, value in provider_options.items():
        so.add_session_config_entry(f"ep.{ep_name.lower()}.{key}", value)
    from .ort_compat import check_session_runs, session_providers

    try:
        session = _session_class()(model, sess_options=so, providers=session_providers(so, ep_name))
    except Exception as e:
        from .bridge import last_report

        report = last_report()
        if disable_cpu_ep_fallback and report is not None and report.rejections and "fallback" in str(e).lower():
            lines = "\n".join("  " + line for line in report.rejection_lines())
            raise FallbackError(f"{ep_name} cannot run {len(report.rejections)} node(s) and CPU fallback is "
                                f"disabled:\n{lines}\n(onnxruntime said: {e})") from e
        if disable_cpu_ep_fallback and "fallback" in str(e).lower():
            # ORT only logs a failing GetCapability (such as external data it cannot read in full)
            # and then reports the fallback: say what is wrong with the model's external data.
            from .explain import check_external_data

            check_external_data(model, failure=e)
        raise
    check_session_runs(session, ep_name)
    return session
