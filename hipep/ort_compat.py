"""Where the onnxruntime releases hipep supports (1.24 through the newest) differ, in one place.

Selecting a plugin EP by name. onnxruntime 1.25 and newer list a registered plugin EP in
`get_available_providers()` and accept it in `InferenceSession(..., providers=[name])`.
onnxruntime 1.24 does neither: its Python layer answers "Unknown Provider Type", and the only way
in is `SessionOptions.add_provider_for_devices` with the EP's devices from `get_ep_devices()`,
which every release since 1.23 has. `session_providers` hides the difference: it returns the
`providers` argument to pass where ORT selects the EP by name, and otherwise adds the EP's devices
to the session options and returns None.

Device memory from Python. onnxruntime 1.24's Python layer turns the device name "cuda" into an
OrtDevice with vendor id 0, which matches no plugin EP's memory (hipep's GPU memory carries
NVIDIA's vendor id), so `ortvalue_from_numpy(x, "cuda", 0)` refuses ("Can't allocate memory on
the CUDA device using this package") and `IOBinding.bind_output(name, "cuda", 0)` finds no
allocator. 1.25 gives OrtValues' "cuda" NVIDIA's vendor id, but not bind_output's; 1.32 both.
`gpu_ortvalue`, `empty_gpu_ortvalue` and `bind_output_to_gpu` name the vendor explicitly and work on
every release.

Fused node names. onnxruntime 1.24 names each node a plugin EP fuses "<EP>_<model hash>_<n>"
with n counted from 0 in every GetCapability call, and ORT asks once per graph (each If branch,
each Loop body, the main graph): fused nodes of two graphs of one model get the same name and
session creation fails ("Conflicting with a registered kernel"). 1.25 and newer count across
the session. `fused_names_restart_per_graph` says which kind of release is loaded; hipep's bridge
then fuses in one graph per session only (EpState.get_capability).

Provider options take the same road either way: ORT hands a plugin EP its provider options as the
session config entries `ep.<ep name lower-cased>.<key>`, so where the EP cannot be named they are
written there directly. That also lets one SessionOptions serve several sessions with different
options, which `add_provider_for_devices` alone would not (ORT refuses the same EP twice).
"""
from __future__ import annotations

import functools
import re
import sys

from .errors import HipepError

# hipep's GPU memory is CUDA device memory: ORT keys it by this PCI vendor id.
NVIDIA_VENDOR_ID = 0x10DE


# The first release whose fused node names count across a session's graphs.
FUSED_NAMES_COUNT_ACROSS_GRAPHS = (1, 25)


@functools.cache
def onnxruntime_version() -> tuple[int, int] | None:
    """The loaded onnxruntime's (major, minor); None where it cannot be told. Read from the
    Python module where it is imported, else from the installed distribution's metadata (the
    plugin may run inside a process that loaded ORT without its Python module, as
    onnxruntime-genai does; importing it there would load a second copy of ORT)."""
    module = sys.modules.get("onnxruntime")
    text = getattr(module, "__version__", None)
    if text is None:  # only here: importlib.metadata is ~3 MiB of modules a session would keep
        import importlib.metadata

        for dist in ("onnxruntime", "onnxruntime-gpu", "onnxruntime-directml", "onnxruntime-openvino"):
            try:
                text = importlib.metadata.version(dist)
                break
            except importlib.metadata.PackageNotFoundError:
                continue
    match = re.match(r"(\d+)\.(\d+)", text or "")
    return (int(match[1]), int(match[2])) if match else None


def fused_names_restart_per_graph() -> bool:
    """Whether the loaded onnxruntime gives fused nodes of different graphs of one model the same
    names (1.24; see the module's docstring). An unknown version counts as a newer one."""
    version = onnxruntime_version()
    return version is not None and version < FUSED_NAMES_COUNT_ACROSS_GRAPHS


def selectable_by_name(ep_name: str) -> bool:
    """Whether this onnxruntime accepts the registered plugin EP `ep_name` in `providers=[...]`."""
    import onnxruntime as ort

    return ep_name in ort.get_available_providers()


def session_providers(sess_options, ep_name: str, options: dict[str, str] | None = None) -> list | None:
    """The `providers` argument of an `onnxruntime.InferenceSession` that runs the registered
    plugin EP `ep_name` with provider `options`, given the `sess_options` it will be made with.

    Where onnxruntime selects plugin EPs by name: `[(ep_name, options)]` (or `[ep_name]`), and
    `sess_options` is left alone. Elsewhere (onnxruntime 1.24): the EP's devices are added to
    `sess_options` (once: a SessionOptions that already holds providers is taken to hold this
    EP's, see `check_session_runs`), the options become its session config entries, and the
    answer is None, which makes ORT use the session options' providers."""
    options = dict(options or {})
    from . import CPU_EP_NAME, register
    from .options import EP_NAME

    if ep_name in (EP_NAME, CPU_EP_NAME):
        register()  # idempotent: ORT knows hipep's EPs only once the library is registered
    if selectable_by_name(ep_name):
        return [(ep_name, options)] if options else [ep_name]
    import onnxruntime as ort

    if not sess_options.has_providers():
        devices = [d for d in ort.get_ep_devices() if d.ep_name == ep_name]
        if not devices:
            offered = sorted({d.ep_name for d in ort.get_ep_devices()})
            raise HipepError(f"onnxruntime {ort.__version__} offers no device for the execution provider "
                             f"'{ep_name}' (its EP devices are for: {', '.join(offered)}); register the plugin "
                             f"library first (hipep.register())")
        sess_options.add_provider_for_devices(devices, {})
    for key, value in options.items():
        sess_options.add_session_config_entry(f"ep.{ep_name.lower()}.{key}", str(value))
    return None


def check_session_runs(session, ep_name: str) -> None:
    """Raises when a session made through `session_providers` does not have `ep_name` among its
    providers: its SessionOptions held another EP's devices before (onnxruntime 1.24's road)."""
    if ep_name not in session.get_providers():
        raise HipepError(f"the session runs on {', '.join(session.get_providers())}, not {ep_name}: its "
                         f"SessionOptions already held other execution providers; pass a fresh "
                         f"onnxruntime.SessionOptions")


def gpu_ortvalue(array, device_id: int = 0):
    """An OrtValue in hipep's GPU memory (GPU `device_id`) holding a copy of the numpy `array`."""
    import onnxruntime as ort

    return ort.OrtValue.ortvalue_from_numpy(array, "cuda", device_id, NVIDIA_VENDOR_ID)


def empty_gpu_ortvalue(shape, element_type, device_id: int = 0):
    """An uninitialized OrtValue of `shape` and `element_type` (numpy type or ONNX type number) in
    hipep's GPU memory."""
    import onnxruntime as ort

    return ort.OrtValue.ortvalue_from_shape_and_type(list(shape), element_type, "cuda", device_id, NVIDIA_VENDOR_ID)


def bind_output_to_gpu(binding, name: str, device_id: int = 0) -> None:
    """Binds output `name` of an IOBinding to hipep's GPU memory; ORT allocates it at run time."""
    from onnxruntime.capi.onnxruntime_inference_collection import OrtDevice

    # IOBinding.bind_output takes no vendor id, and up to 1.25 its "cuda" device has vendor id 0
    # (1.25's OrtDevice.make already names NVIDIA, its bind_output does not use it); the binding
    # underneath takes a device, the same way from 1.24 to the newest
    device = OrtDevice.make("cuda", device_id, NVIDIA_VENDOR_ID)._get_c_device()
    binding._iobinding.bind_output(name, device)
