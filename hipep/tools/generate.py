"""Greedy decoding through onnxruntime-genai, on hipep or on the CPU EP: how OGA loads hipep.

    og.register_execution_provider_library("HipExecutionProvider", hipep.get_library_path())
    config = og.Config(model_folder)
    config.clear_providers()
    config.append_provider("HipExecutionProvider")
    config.set_provider_option("HipExecutionProvider", "device", "cpu")

Where HipExecutionProvider runs on a GPU, the CPU reference device is HipCpuExecutionProvider
(hipep.provider_for("cpu") names the right one).
"""
from __future__ import annotations

import threading

import numpy as np

from ..options import EP_NAME

_registered = False
_lock = threading.Lock()


def register_with_genai() -> None:
    """Registers hipep's plugin library with onnxruntime-genai (idempotent: the README's own
    registration, or an application's, may have come first)."""
    global _registered
    import onnxruntime_genai as og

    from .. import get_library_path

    with _lock:
        if _registered:
            return
        try:
            og.register_execution_provider_library(EP_NAME, get_library_path())
        except RuntimeError as e:  # "EP library is already registered under HipExecutionProvider"
            if "already registered" not in str(e):
                raise
        _registered = True


def greedy(folder: str, prompts: list[list[int]], steps: int = 32, ep: str = "hipep",
           provider_options: dict | None = None, pad_token_id: int = 0) -> list[list[int]]:
    """Token ids greedily generated after each prompt (a batch; shorter prompts are left-padded
    with `pad_token_id`, which OGA masks out). `ep` is "hipep" or "cpu"."""
    import onnxruntime_genai as og

    from .. import provider_for

    config = og.Config(folder)
    config.clear_providers()
    if ep == "hipep":
        register_with_genai()
        options = provider_options or {"device": "cpu"}
        name = provider_for(str(options.get("device", "auto")))  # HipCpuExecutionProvider beside a GPU
        config.append_provider(name)
        for k, v in options.items():
            config.set_provider_option(name, k, str(v))
    elif ep != "cpu":
        raise ValueError(f"ep must be 'hipep' or 'cpu', got {ep!r}")
    model = og.Model(config)
    width = max(len(p) for p in prompts)
    batch = np.full((len(prompts), width), pad_token_id, dtype=np.int32)
    for row, p in zip(batch, prompts):
        row[width - len(p):] = p
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=width + steps, do_sample=False, batch_size=len(prompts))
    gen = og.Generator(model, params)
    gen.append_tokens(batch)
    out: list[list[int]] = [[] for _ in prompts]
    for _ in range(steps):
        if gen.is_done():
            break
        gen.generate_next_token()
        for i, t in enumerate(gen.get_next_tokens()):
            out[i].append(int(t))
    return out
