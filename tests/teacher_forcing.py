"""Teacher-forced comparison of a builder decoder on hipep with ORT's CPU EP, shared by the CPU
reference device's tests (tests/models) and the GPU's (tests/gpu).

Both sessions are fed the CPU EP's greedy token at every step and each keeps its own KV cache, so
a step's error is what the candidate adds, not a divergence of tokens. The criterion: the logits'
relative L2 error stays within the precision's bound at every step, and the top-1 token is the CPU
EP's wherever the CPU EP's top-2 margin exceeds 10x the measured logit error (random-weight models
have near-ties that flip with no bug present; fp16 and int4 logits carry errors of their own)."""
from __future__ import annotations

import os

import numpy as np

from hipep.tools import model_zoo

# The model zoo's decoders with ops the GPU has no kernel for yet (left to other EPs, and said so
# with "no kernel for cuda"): the GPU tests leave them out, the CPU device's tests check the report.
GPU_MISSING_OPS: dict[str, set[str]] = {}

# relative L2 error of the logits allowed at each step, by the decoder's weight precision
# bf16 keeps 8 significant bits to fp16's 11, and its reference is the same model in f32 (ORT's
# CPU EP has no bf16 kernels): each op's rounding of its output to bf16 shows in full.
LOGIT_BOUNDS = {"fp32": 1e-3, "fp16": 1e-2, "int4": 1e-2, "int4-f16": 1e-2, "bf16": 4e-2, "int4-bf16": 4e-2}
MARGIN_FACTOR = 10


def logit_bound(precision: str) -> float:
    if precision not in LOGIT_BOUNDS:
        raise ValueError(f"no logit bound for precision {precision!r}; known: {', '.join(LOGIT_BOUNDS)}")
    return LOGIT_BOUNDS[precision]


def decoder_geometry(folder: str) -> tuple[str, int, int]:
    """(model.onnx's path, head size, sliding window or 0) of a model_zoo decoder folder."""
    decoder = model_zoo.genai_config(folder)["model"]["decoder"]
    sliding = decoder.get("sliding_window")
    window = sliding.get("window_size", 0) if isinstance(sliding, dict) else 0
    return os.path.join(folder, "model.onnx"), decoder["head_size"], window


def rel_l2(got, want) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30))


def run_step(session, feeds: dict) -> list:
    """session.run on `feeds`, where bf16 arrays (ml_dtypes), which ORT's numpy conversion refuses,
    go in as OrtValues and bf16 outputs come back as OrtValues (fed to the next step as they are);
    other outputs as numpy arrays."""
    import ml_dtypes
    import onnxruntime as ort

    names = [o.name for o in session.get_outputs()]
    if not any("bfloat16" in o.type for o in session.get_outputs()) and \
            not any(getattr(v, "dtype", None) == ml_dtypes.bfloat16 or isinstance(v, ort.OrtValue) for v in feeds.values()):
        return session.run(None, feeds)
    values = {k: ort.OrtValue.ortvalue_from_numpy_with_onnx_type(v.view(np.uint16), 16)
              if getattr(v, "dtype", None) == ml_dtypes.bfloat16 else
              v if isinstance(v, ort.OrtValue) else ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(v))
              for k, v in feeds.items()}
    out = session.run_with_ort_values(names, values)
    return [v if v.data_type() == "tensor(bfloat16)" else v.numpy() for v in out]


def greedy_on_session(session, folder: str, prompt: list[int], steps: int) -> list[int]:
    """`steps` tokens greedily decoded after `prompt` (batch 1) by an ORT session of the decoder in
    `folder`, each step's present fed back as the next step's past."""
    _, head_size, window = decoder_geometry(folder)
    inputs, outputs = session.get_inputs(), [o.name for o in session.get_outputs()]
    ids, past, prev, out = np.array([prompt], np.int64), 0, None, []
    for _ in range(steps):
        got = run_step(session, model_zoo.decoder_feeds(inputs, head_size, ids, past, prev, window))
        prev = dict(zip(outputs, got))
        past += ids.shape[1]
        out.append(int(np.argmax(prev["logits"][0, -1])))
        ids = np.array([[out[-1]]], np.int64)
    return out


def assert_follows_the_cpu_ep(folder: str, candidate, precision: str, steps: int = 32, prompt: int = 7,
                              seed: int = 11) -> list[float]:
    """Runs the decoder in `folder` on the CPU EP and on `candidate` (an ORT session of the same
    model) for a prefill of `prompt` random tokens and `steps` decode steps, asserts the criterion
    above, and returns the relative L2 error of the last position's logits at each step."""
    import onnxruntime as ort

    path, head_size, window = decoder_geometry(folder)
    label = os.path.basename(os.path.normpath(folder))
    bound = logit_bound(precision)
    # the same model, with GroupQueryAttention's fused Q/K norms unfolded where the CPU EP needs it
    cpu = ort.InferenceSession(os.path.join(model_zoo.cpu_ep_folder(folder), "model.onnx"),
                               providers=["CPUExecutionProvider"])
    inputs, outputs = cpu.get_inputs(), [o.name for o in cpu.get_outputs()]
    # the candidate's own input types (a bf16 model's caches are bf16; its CPU EP form's are f32)
    candidate_inputs = candidate.get_inputs()
    logits = outputs.index("logits")
    rng = np.random.default_rng(seed)
    ids = rng.integers(3, model_zoo.VOCAB, size=(1, prompt)).astype(np.int64)
    prev_cpu = prev_candidate = None
    past, compared, errors = 0, 0, []
    for step in range(steps + 1):
        want = cpu.run(None, model_zoo.decoder_feeds(inputs, head_size, ids, past, prev_cpu, window))
        got = run_step(candidate, model_zoo.decoder_feeds(candidate_inputs, head_size, ids, past, prev_candidate,
                                                          window))
        w, g = want[logits][0, -1].astype(np.float64), got[logits][0, -1].astype(np.float64)
        assert np.all(np.isfinite(g)), f"{label} step {step}: non-finite logits"
        err = rel_l2(g, w)
        errors.append(err)
        assert err <= bound, f"{label} step {step}: logits rel L2 {err:.3g} > {bound}"
        top2 = np.sort(w)[-2:]
        margin = top2[1] - top2[0]
        max_err = float(np.max(np.abs(g - w)))
        if margin > MARGIN_FACTOR * max_err:
            assert int(np.argmax(g)) == int(np.argmax(w)), (
                f"{label} step {step}: top-1 {int(np.argmax(g))} != CPU EP's {int(np.argmax(w))} "
                f"with margin {margin:.3g} > {MARGIN_FACTOR} x error {max_err:.3g}")
            compared += 1
        prev_cpu, prev_candidate = dict(zip(outputs, want)), dict(zip(outputs, got))
        past += ids.shape[1]
        ids = np.array([[int(np.argmax(w))]], np.int64)  # the CPU EP's greedy token, for both
    assert compared >= steps // 4, f"{label}: only {compared} of {steps + 1} steps had a clear top-1"
    return errors
