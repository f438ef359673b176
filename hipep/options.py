"""Provider options: typed, validated and documented in one place (docs/options.md mirrors it).

ORT hands them to the EP as session config entries `ep.hipexecutionprovider.<key>`.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, fields

from .errors import OptionError

EP_NAME = "HipExecutionProvider"
CONFIG_PREFIX = f"ep.{EP_NAME.lower()}."


def env_flag(name: str, default: bool) -> bool:
    """An on/off environment setting (docs/options.md): unset gives `default`; 0, false, no, off
    and the empty string are off."""
    v = os.environ.get(name)
    return default if v is None else v.strip().lower() not in ("0", "false", "no", "off", "")

DEVICES = ("auto", "cpu", "cuda", "hip")
CPU_SCHEDULES = ("inline", "deferred", "random")
LOG_LEVELS = {"verbose": 0, "info": 1, "warning": 2, "error": 3, "fatal": 4}
FUSION = ("on", "off")


# How each option's string value is read: a tuple of allowed words, or a type.
_CHOICES = {"device": DEVICES, "log_level": tuple(LOG_LEVELS), "cpu_schedule": CPU_SCHEDULES, "fusion": FUSION,
            "native_replay": ("on", "off")}
_BOOL_WORDS = {"0": False, "false": False, "1": True, "true": True}


def _parse(key: str, raw):
    """One option's value from its string, or OptionError naming the key, the value and what is
    accepted. The type comes from the ProviderOptions field."""
    text = str(raw).strip()
    kind = {f.name: f.type for f in fields(ProviderOptions)}[key]
    if key in _CHOICES:
        if text.lower() not in _CHOICES[key]:
            raise OptionError(f"option '{key}' = {raw!r} is invalid; expected one of {', '.join(_CHOICES[key])}")
        return text.lower()
    if kind in ("int", int):
        if not text.isdigit():
            raise OptionError(f"option '{key}' = {raw!r} is invalid; expected an integer >= 0")
        return int(text)
    if kind in ("bool", bool):
        if text.lower() not in _BOOL_WORDS:
            raise OptionError(f"option '{key}' = {raw!r} is invalid; expected 0, 1, true or false")
        return _BOOL_WORDS[text.lower()]
    return str(raw)


@dataclass(frozen=True)
class ProviderOptions:
    device: str = "auto"
    """auto | cpu | cuda | hip. auto takes a GPU runtime that loads, else the CPU reference device."""
    device_id: int = 0
    """Which GPU (device=cuda); the CPU device has only id 0, any other id is an error."""
    log_level: str = "info"
    """Lowest severity hipep itself emits (verbose | info | warning | error | fatal); the session's
    own log severity still filters what is shown."""

    cpu_schedule: str = "inline"
    """CPU device only: when queued device work runs. inline: at once; deferred: only at syncs;
    random: a seeded scheduler interleaves queued device work with host steps (each run of a
    session draws a new schedule from (seed, run index))."""
    seed: int = 0
    """Seed of the random CPU schedule."""
    dump_ir: str = ""
    """A folder: the IR after each pass and the launch plan of every compiled subgraph go there."""
    strict: bool = False
    """Fail session creation when any node is left unclaimed, naming each one and the reason: the
    same guarantee as session.disable_cpu_ep_fallback=1, for hosts that cannot set session config
    entries (onnxruntime-genai's genai_config.json has no place for them)."""
    fusion: str = "on"
    """on | off. on: chains of pointwise ops (elementwise math, comparisons, Where, Cast) compile to
    one fused kernel each (pass hip-fuse-pointwise); off: every such node is a launch of its own.
    Results are bit-identical either way."""
    native_replay: str = "on"
    """on | off. GPU only: once runs of one layout repeat (a decode loop), Compute replays their
    CUDA graphs in native code without calling Python (hipep.runtime.native_replay); off: every
    run goes through Python."""
    plan_cache: str = ""
    """A folder of compiled plans (hipep.plan_cache): Compile loads a subgraph's plan from there
    when an earlier session stored it, without importing the compiler, and stores what it
    compiles. Keyed by the subgraph, the compiler's options and hipep's source."""
    pass_options: str = ""
    """For compiler development and tests: pass options that override the pipeline's, in
    hipep-opt's syntax, comma separated: `hip-assign-memory-spaces{host_rule=false}`."""

    @property
    def log_severity(self) -> int:
        return LOG_LEVELS[self.log_level]

    @staticmethod
    def from_strings(values: dict[str, str]) -> "ProviderOptions":
        known = {f.name for f in fields(ProviderOptions)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise OptionError(
                f"unknown {EP_NAME} option(s) {', '.join(repr(k) for k in unknown)}; "
                f"valid options: {', '.join(sorted(known))} (see docs/options.md)")
        return ProviderOptions(**{key: _parse(key, raw) for key, raw in values.items()})

    @staticmethod
    def from_session_config(config: dict[str, str]) -> "ProviderOptions":
        """From all of a session's config entries: takes those under `ep.hipexecutionprovider.`."""
        return ProviderOptions.from_strings(
            {k[len(CONFIG_PREFIX):]: v for k, v in config.items() if k.startswith(CONFIG_PREFIX)})
