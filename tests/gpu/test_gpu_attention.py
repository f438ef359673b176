"""GroupQueryAttention, RotaryEmbedding and MRotaryEmbedding on the CUDA device
(kernels/attention_*.hip, kernels/rotary.hip), end to end: single-node models through
hipep.InferenceSession(device="cuda"), every output compared with ONNX Runtime's CPU EP.
Tolerances: f32 relative 1e-5, absolute 2e-5 (the kernels sum scores and values in another order
than MLAS; the rotated keys in present are exact), f16 relative 1e-2, absolute 2e-3. Runs repeat,
so the bound launches and the CUDA graphs are replayed too.

Cases: prompts (S = 1..40, and fp16 ones of 70..300 tokens on both prefill kernels) and decode steps
(S = 1 with past 0..300, and 4095), packed and separate QKV, rotary on/off, interleaved and partial
rotary, position_ids, GQA ratios 1/2/4 (and 8), head sizes
64/80/128, softcap, local window, smooth softmax, head sink, attention_bias, batch 2 with different
seqlens_k, the shared KV buffer (past and present bound to one host buffer of larger capacity through
IOBinding) over consecutive steps, and gemma2's sliding-window cache."""
from __future__ import annotations

import zlib

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import hipep
from hipep.runtime.cuda import cuda_status
from helpers import cpu_session, make_model, tensor, window_end

pytestmark = pytest.mark.gpu
_ok, _why = cuda_status(0)
if not _ok:
    pytest.skip(f"no CUDA device: {_why}", allow_module_level=True)

F32, F16 = np.float32, np.float16
MS = ("com.microsoft", 1)
GQA_INPUTS = ("query", "key", "value", "past_key", "past_value", "seqlens_k", "total_sequence_length",
              "cos_cache", "sin_cache", "position_ids", "attention_bias", "head_sink")


def tol(dtype):
    return dict(rtol=1e-5, atol=2e-5) if dtype == F32 else dict(rtol=1e-2, atol=2e-3)


def elem(dtype):
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def single_node(op, feeds, n_out, domain="com.microsoft", opset=21, **attrs):
    """A one-node model whose inputs are the non-None `feeds` (in order) and outputs y0..y{n-1}."""
    names = [name if a is not None else "" for name, a in feeds]
    while names and not names[-1]:
        names.pop()
    node = helper.make_node(op, names, [f"y{i}" for i in range(n_out)], domain=domain or None, name="node", **attrs)
    inputs = [tensor(name, elem(a.dtype), list(a.shape)) for name, a in feeds if a is not None]
    outputs = [tensor(f"y{i}", elem(next(a for _, a in feeds if a is not None).dtype), None) for i in range(n_out)]
    extra = [(domain, 1)] if domain else []
    return make_model([node], inputs, outputs, opset=opset, extra_opsets=extra)


def check(model, feeds, dtype, runs=3):
    sess = hipep.InferenceSession(model, device="cuda")
    want = cpu_session(model).run(None, feeds)
    for _ in range(runs):
        got = sess.run(None, feeds)
        assert len(got) == len(want)
        for k, (g, w) in enumerate(zip(got, want)):
            assert g.dtype == w.dtype and g.shape == w.shape, f"output {k}"
            np.testing.assert_allclose(g.astype(F32), w.astype(F32), err_msg=f"output {k}", **tol(dtype))
    return sess


def U(rng, *shape, dtype=F32, scale=1.0):
    return (rng.uniform(-1, 1, shape) * scale).astype(dtype)


def gqa_feeds(rng, batch=1, seq=4, past=0, capacity=None, lens=None, total=None, heads=4, kv_heads=2, head=64,
              packed=False, rotary=None, dtype=F32, position_ids=False, attention_bias=False, head_sink=False,
              no_past=False):
    """(name, array) pairs in GroupQueryAttention's input order. past: the valid past length;
    capacity: past's sequence extent (default: past, a growing cache); lens: per-row total length
    (seqlens_k + 1, default past + seq)."""
    total = total if total is not None else past + seq
    capacity = capacity if capacity is not None else past
    lens = lens if lens is not None else [total] * batch
    if packed:
        q, k, v = U(rng, batch, seq, (heads + 2 * kv_heads) * head, dtype=dtype), None, None
    else:
        q = U(rng, batch, seq, heads * head, dtype=dtype)
        k, v = U(rng, batch, seq, kv_heads * head, dtype=dtype), U(rng, batch, seq, kv_heads * head, dtype=dtype)
    pk = None if no_past else U(rng, batch, kv_heads, capacity, head, dtype=dtype)
    pv = None if no_past else U(rng, batch, kv_heads, capacity, head, dtype=dtype)
    cos = sin = None
    if rotary is not None:
        angles = rng.uniform(0, 6, (max(512, total + 8), rotary // 2))
        cos, sin = np.cos(angles).astype(dtype), np.sin(angles).astype(dtype)
    ins = [q, k, v, pk, pv, np.array([n - 1 for n in lens], np.int32), np.array(total, np.int32), cos, sin,
           rng.integers(0, 500, (batch, seq)).astype(np.int64) if position_ids else None,
           U(rng, batch, heads, seq, total, dtype=dtype) if attention_bias else None,
           U(rng, heads, dtype=dtype) if head_sink else None]
    return list(zip(GQA_INPUTS, ins))


def run_gqa(name, feeds_spec, **attrs):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    spec = dict(feeds_spec)
    dtype = spec.get("dtype", F32)
    attrs = dict(num_heads=spec.get("heads", 4), kv_num_heads=spec.get("kv_heads", 2), **attrs)
    if spec.get("rotary"):
        attrs["do_rotary"] = 1
    feeds = gqa_feeds(rng, **spec)
    model = single_node("GroupQueryAttention", feeds, 3, **attrs)
    return check(model, {n: a for n, a in feeds if a is not None}, dtype)


# ---- prompts --------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("seq", [1, 7, 40])
@pytest.mark.parametrize("packed,rotary", [(False, None), (True, 64), (False, 32)])
def test_prompt(dtype, seq, packed, rotary):
    run_gqa(f"prompt{seq}{packed}{rotary}", dict(seq=seq, packed=packed, rotary=rotary, dtype=dtype))


@pytest.mark.parametrize("heads,kv_heads", [(4, 4), (4, 2), (8, 2), (8, 1)])
@pytest.mark.parametrize("head", [64, 80, 128])
def test_prompt_head_layouts(heads, kv_heads, head):
    run_gqa(f"layout{heads}{kv_heads}{head}", dict(seq=19, heads=heads, kv_heads=kv_heads, head=head, rotary=head))


@pytest.mark.parametrize("dtype", [F32, F16])
def test_prompt_head_size_256_and_16(dtype):
    run_gqa("h256", dict(seq=21, head=256, rotary=64, dtype=dtype))
    run_gqa("h16", dict(seq=21, head=16, rotary=16, dtype=dtype))


@pytest.mark.parametrize("tensor_cores", ["1", "0"])
@pytest.mark.parametrize("spec,attrs", [
    (dict(seq=200, head=64, rotary=64), {}),
    (dict(batch=2, seq=300, lens=[300, 170], head=128, rotary=128, heads=8, kv_heads=2), {}),
    (dict(seq=130, head=80, heads=4, kv_heads=1), dict(local_window_size=48, softcap=3.0)),
    (dict(seq=70, past=90, head=64, rotary=64, attention_bias=True, head_sink=True), {}),
], ids=["h64", "h128-padded", "h80-window-softcap", "subsequent-bias-sink"])
def test_long_fp16_prompts(spec, attrs, tensor_cores, monkeypatch):
    """fp16 prompts past one block of query rows and one tile of keys: on tensor cores
    (kernels/attention_prefill_tc.hip, the default on a device with mma.sync) and on the f32 kernel
    (HIPEP_GQA_PREFILL_TC=0), both against the CPU EP."""
    monkeypatch.setenv("HIPEP_GQA_PREFILL_TC", tensor_cores)
    run_gqa(f"long{spec['seq']}{spec['head']}", dict(spec, dtype=F16), **attrs)


def test_prompt_without_past():
    run_gqa("nopast", dict(seq=9, no_past=True, rotary=64))


@pytest.mark.parametrize("dtype", [F32, F16])
def test_prompt_batch_with_padding(dtype):
    """A first prompt of batch 2 whose second row is shorter (seqlens_k differ): rows past a row's
    length see every valid key, as ORT computes them."""
    run_gqa("padded", dict(batch=2, seq=13, lens=[13, 6], rotary=64, dtype=dtype))


def test_subsequent_prompt():
    run_gqa("subsequent", dict(seq=5, past=11, rotary=64))


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("seq", [2, 8, 9])
def test_few_tokens_after_a_long_past(dtype, seq):
    """Up to 8 new tokens take the split-KV kernel (rows = token x head), 9 the tiled one."""
    run_gqa(f"few{seq}", dict(seq=seq, past=300, rotary=64, heads=8, kv_heads=2, dtype=dtype), local_window_size=200)
    run_gqa(f"few-sink{seq}", dict(seq=seq, past=150, dtype=dtype, head_sink=True, attention_bias=True))


# ---- decode ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("past", [0, 1, 37, 130, 300])
@pytest.mark.parametrize("packed", [False, True])
def test_decode(dtype, past, packed):
    run_gqa(f"decode{past}{packed}", dict(seq=1, past=past, packed=packed, rotary=64, dtype=dtype))


@pytest.mark.parametrize("heads,kv_heads", [(4, 4), (8, 4), (8, 2), (16, 2)])
@pytest.mark.parametrize("head", [64, 80, 128])
def test_decode_head_layouts(heads, kv_heads, head):
    run_gqa(f"dlayout{heads}{kv_heads}{head}", dict(batch=2, seq=1, past=200, lens=[201, 77], heads=heads,
                                                   kv_heads=kv_heads, head=head))


@pytest.mark.parametrize("share", ["heads share a block", "a block per head"])
@pytest.mark.parametrize("heads,kv_heads,head,dtype", [(32, 8, 64, F16), (32, 4, 64, F16), (32, 4, 64, F32),
                                                    (8, 8, 128, F16), (4, 2, 256, F32), (6, 2, 80, F16)])
def test_decode_long_context(heads, kv_heads, head, dtype, share, monkeypatch):
    """Decode at a 4k context: every decode variant (1, 2, 4 and 8 query rows per block, f16's 8 keys
    per lane in flight), the splits' partials merged, a second row whose length leaves most splits empty.
    A batch this small takes a block per query head on a large GPU (gpu_attention.DEC_SHARE_BELOW);
    the shared variants run by lowering that threshold, as a large batch would."""
    from hipep.runtime import gpu_attention

    if share == "heads share a block":
        monkeypatch.setattr(gpu_attention, "DEC_SHARE_BELOW", 0.0)
    run_gqa(f"long{heads}{kv_heads}{head}", dict(batch=2, seq=1, past=4095, lens=[4096, 333], heads=heads,
                                                kv_heads=kv_heads, head=head, packed=True, rotary=head,
                                                dtype=dtype))


@pytest.mark.parametrize("dtype", [F32, F16])
def test_decode_batch_with_different_lengths(dtype):
    run_gqa("ragged", dict(batch=2, seq=1, past=300, lens=[301, 45], rotary=64, dtype=dtype))


def test_decode_growing_past_the_capacity():
    run_gqa("growing", dict(batch=2, seq=1, total=161, capacity=160, lens=[161, 90], rotary=64))


def test_concurrent_decode_runs_keep_their_partials():
    """Runs in flight on several threads (each on its own stream) use their own split-KV workspace:
    every thread's results match the CPU EP's for its own feeds."""
    import threading

    rng = np.random.default_rng(31)
    spec = dict(batch=1, seq=1, past=600, rotary=64, heads=8, kv_heads=2)
    feeds = [gqa_feeds(rng, **spec) for _ in range(4)]
    model = single_node("GroupQueryAttention", feeds[0], 3, num_heads=8, kv_num_heads=2, do_rotary=1)
    named = [{n: a for n, a in f if a is not None} for f in feeds]
    cpu = cpu_session(model)
    want = [cpu.run(None, f) for f in named]
    sess = hipep.InferenceSession(model, device="cuda")
    errors = []

    def worker(k):
        try:
            for _ in range(12):
                got = sess.run(None, named[k])
                for g, w in zip(got, want[k]):
                    np.testing.assert_allclose(g, w, **tol(F32))
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors[0]


# ---- options --------------------------------------------------------------------------------------

@pytest.mark.parametrize("seq,past,lens", [(12, 0, None), (1, 150, [151, 60])])
@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("option", ["softcap", "window", "window_softcap", "smooth", "sink", "bias", "interleaved",
                                    "partial", "position_ids", "scale"])
def test_options(option, dtype, seq, past, lens):
    spec = dict(batch=1 if lens is None else 2, seq=seq, past=past, lens=lens, dtype=dtype, rotary=64)
    attrs = {}
    if option == "softcap":
        attrs["softcap"] = 2.5
    elif option == "window":
        attrs["local_window_size"] = 5 if seq > 1 else 40
    elif option == "window_softcap":
        attrs.update(local_window_size=5 if seq > 1 else 40, softcap=3.0)
    elif option == "smooth":
        attrs["smooth_softmax"] = 1
    elif option == "sink":
        spec["head_sink"] = True
    elif option == "bias":
        spec["attention_bias"] = True
    elif option == "interleaved":
        attrs["rotary_interleaved"] = 1
    elif option == "partial":
        spec["rotary"] = 32
        attrs["rotary_interleaved"] = 1
    elif option == "position_ids":
        spec["position_ids"] = True
    elif option == "scale":
        attrs["scale"] = 0.3
    run_gqa(f"opt{option}{seq}", spec, **attrs)


def test_local_window_padded_prompt():
    run_gqa("window-padded", dict(batch=2, seq=9, lens=[4, 9]), local_window_size=2)


# ---- the shared KV buffer over consecutive steps ---------------------------------------------------

@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("window", [-1, 6])
def test_shared_kv_buffer_steps(dtype, window):
    """onnxruntime-genai's layout: past_key/present_key (and the values) are one buffer of capacity
    48 bound through IOBinding on host memory; a prompt of 5 (batch 2, the second row 3 long), then
    decode steps. Both sessions update their own buffer in place; outputs and the valid cache rows
    must agree every step, and decode steps keep one specialization."""
    _shared_kv_steps(dtype, window, cap=48, lens=[5, 3], seq=5, steps=8)


@pytest.mark.parametrize("dtype", [F32, F16])
def test_shared_kv_buffer_long_decode_steps(dtype):
    """Decode steps deep into the shared buffer: rows of ~1400 and ~900 keys of a 1600-row buffer
    filled with earlier keys, more than one block takes (the fused decode launch's split path), so
    each step's last split block merges and must leave its arrival counter zero for the next."""
    _shared_kv_steps(dtype, -1, cap=1600, lens=[1400, 900], seq=1, steps=3)


@pytest.mark.parametrize("dtype", [F32, F16])
def test_fused_decode_that_starts_early_waits_for_the_kernel_ahead(dtype):
    """On sm_90+ the fused one-token decode launches to overlap the kernel ahead of it (here the
    Add that makes the step's QKV) and requests its first pass of past cache rows before it waits:
    decode steps over the shared buffer, short (one pass, no split) and long (the split path),
    give the same bits with the overlap as without it, and the CPU EP's values."""
    from hipep.runtime.cuda import get_device

    dev = get_device(0)
    if dev.capability < (9, 0):
        pytest.skip(f"{dev.arch}: no programmatic dependent launch before sm_90")
    assert dev.overlap_launches
    for cap, lens in ((300, [200, 130]), (1600, [1400, 900])):
        results = {}
        try:
            for overlap in (True, False):
                dev.overlap_launches = overlap
                results[overlap] = _shared_kv_steps(dtype, -1, cap=cap, lens=lens, seq=1, steps=6, producer=True)
        finally:
            dev.overlap_launches = True
        for step, (on, off) in enumerate(zip(results[True], results[False])):
            for k, (a, b) in enumerate(zip(on, off)):
                np.testing.assert_array_equal(a, b, err_msg=f"{cap} rows, step {step}, output {k}")


def _shared_kv_steps(dtype, window, cap, lens, seq, steps, producer=False):
    """Steps of a GroupQueryAttention whose past and present share one buffer, against the CPU EP
    (with `producer`, the QKV input goes through an Add first: a kernel ahead of the attention's);
    hipep's outputs and caches per step."""
    rng = np.random.default_rng(21 + window + cap)
    batch, heads, kv_heads, head = 2, 8, 2, 64
    attrs = dict(num_heads=heads, kv_num_heads=kv_heads, do_rotary=1, local_window_size=window)
    angles = rng.uniform(0, 6, (max(64, cap + steps), head // 2))
    cos, sin = np.cos(angles).astype(dtype), np.sin(angles).astype(dtype)
    vi = helper.make_tensor_value_info
    f = elem(dtype)
    width = (heads + 2 * kv_heads) * head
    nodes = [helper.make_node("GroupQueryAttention", ["qkv", "", "", "past_key", "past_value", "seqlens_k", "total",
                                                      "cos", "sin"], ["out", "present_key", "present_value"],
                              domain="com.microsoft", name="gqa", **attrs)]
    weights = [numpy_helper.from_array(cos, "cos"), numpy_helper.from_array(sin, "sin")]
    qkv_input = "qkv"
    if producer:
        qkv_input = "x"
        nodes.insert(0, helper.make_node("Add", ["x", "shift"], ["qkv"], name="shift_qkv"))
        weights.append(numpy_helper.from_array(U(rng, width, dtype=dtype, scale=0.25), "shift"))
    kv_shape = ["batch", kv_heads, "capacity", head]
    graph = helper.make_graph(
        nodes, "shared",
        [vi(qkv_input, f, ["batch", "seq", width]), vi("past_key", f, kv_shape),
         vi("past_value", f, kv_shape), vi("seqlens_k", TP.INT32, ["batch"]), vi("total", TP.INT32, [])],
        [vi("out", f, ["batch", "seq", heads * head]), vi("present_key", f, kv_shape), vi("present_value", f, kv_shape)],
        weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(*MS)],
                              ir_version=10)
    mine = hipep.InferenceSession(model, device="cuda")
    theirs = cpu_session(model)
    earlier = [U(rng, batch, kv_heads, cap, head, dtype=dtype) if seq == 1 else np.zeros((batch, kv_heads, cap, head),
                                                                                          dtype) for _ in range(2)]
    buffers = {who: [a.copy() for a in earlier] for who in ("mine", "theirs")}
    lens = np.array(lens)
    specializations, steps_out = [], []
    for step in range(steps):
        qkv = U(rng, batch, seq, width, dtype=dtype)
        total = np.array(int(lens.max()), np.int32)
        outs = {}
        for who, sess in (("mine", mine), ("theirs", theirs)):
            pk, pv = buffers[who]
            out = np.zeros((batch, seq, heads * head), dtype)
            io = sess.io_binding()
            io.bind_cpu_input(qkv_input, qkv)
            io.bind_cpu_input("seqlens_k", (lens - 1).astype(np.int32))
            io.bind_cpu_input("total", total)
            kv = [ort.OrtValue.ortvalue_from_numpy(a) for a in (pk, pv)]
            io.bind_ortvalue_input("past_key", kv[0])
            io.bind_ortvalue_input("past_value", kv[1])
            io.bind_ortvalue_output("present_key", kv[0])
            io.bind_ortvalue_output("present_value", kv[1])
            io.bind_ortvalue_output("out", ort.OrtValue.ortvalue_from_numpy(out))
            sess.run_with_iobinding(io)
            outs[who] = out
        t = tol(dtype)
        np.testing.assert_allclose(outs["mine"].astype(F32), outs["theirs"].astype(F32), err_msg=f"step {step}", **t)
        for b in range(batch):
            for k in range(2):
                np.testing.assert_allclose(buffers["mine"][k][b, :, :lens[b]].astype(F32),
                                           buffers["theirs"][k][b, :, :lens[b]].astype(F32),
                                           err_msg=f"step {step} row {b} cache {k}", **t)
        specializations.append(hipep.stats().get("specializations", 0))
        steps_out.append([outs["mine"]] + [c.copy() for c in buffers["mine"]])
        lens = lens + 1
        seq = 1
    assert specializations[-1] == specializations[min(2, steps - 1)], \
        "decode steps after the first should add no specialization"
    return steps_out


# ---- gemma2's sliding-window cache --------------------------------------------------------------------

@pytest.mark.parametrize("dtype,window,capacity,prompt,extra", [
    (F32, 4, 6, 3, {}),
    (F32, 4, 6, 9, dict(softcap=50.0)),  # a prompt longer than the cache: staged, the tail written back
    (F32, 3, 3, 5, dict(do_rotary=1)),  # capacity == window: every full step shifts the cache
    (F16, 8, 12, 4, dict(do_rotary=1, softcap=5.0)),
    (F32, 2, 6, 4, dict(smooth_softmax=1)),
])
def test_sliding_window_cache(dtype, window, capacity, prompt, extra):
    """sliding_window_cache=1 (onnxruntime-genai's gemma2 layers): a prompt, then decode steps
    feeding each side its own present back as past, absolute lengths running past the capacity;
    present compared on the rows ORT writes."""
    rng = np.random.default_rng(15 + window)
    attrs = dict(num_heads=4, kv_num_heads=2, local_window_size=window, sliding_window_cache=1, **extra)
    batch, seq, total, head = 2, prompt, prompt, 64
    past = U(rng, batch, 2, capacity, head, dtype=dtype), U(rng, batch, 2, capacity, head, dtype=dtype)
    mine = theirs = past
    sess = None
    for step in range(10):
        feeds = dict(gqa_feeds(rng, batch=batch, seq=seq, total=total, capacity=capacity, lens=[total] * batch,
                               head=head, rotary=head if extra.get("do_rotary") else None, dtype=dtype))
        model = single_node("GroupQueryAttention", list(feeds.items()), 3, **attrs)
        if sess is None or seq == 1 and step == 1:
            sess = hipep.InferenceSession(model, device="cuda")
        named = {k: v for k, v in feeds.items() if v is not None}
        got = sess.run(None, {**named, "past_key": mine[0], "past_value": mine[1]})
        want = cpu_session(model).run(None, {**named, "past_key": theirs[0], "past_value": theirs[1]})
        np.testing.assert_allclose(got[0].astype(F32), want[0].astype(F32), err_msg=f"step {step}", **tol(dtype))
        rows = window_end(total, capacity, window)
        for k in (1, 2):
            np.testing.assert_allclose(got[k][:, :, :rows].astype(F32), want[k][:, :, :rows].astype(F32),
                                       err_msg=f"step {step} present {k}", **tol(dtype))
        mine, theirs = (got[1], got[2]), (want[1], want[2])
        seq, total = 1, total + 1


# ---- Qwen3's per-head Q/K RMS norm fused into GroupQueryAttention ---------------------------------------

@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("spec", [dict(seq=5), dict(seq=1, past=9, rotary=16),
                                  dict(batch=2, seq=1, past=40, lens=[41, 17]),
                                  dict(seq=1, past=300, head=64, rotary=64)], ids=["prompt", "decode", "ragged", "long"])
def test_gqa_qk_norm_follows_the_unfused_graph(spec, dtype):
    """q_norm_weight / k_norm_weight against ORT's CPU EP on the graph the fusion folds (per-head
    SimplifiedLayerNormalization of Q and K, then GroupQueryAttention): it has no kernel for the fused
    inputs."""
    from unit.test_ops_attention import _gqa_qk_norm_models, gqa_inputs, ort_gqa_inputs

    if ort_gqa_inputs() < 16:
        pytest.skip("this onnxruntime's GroupQueryAttention has no q_norm_weight input")
    rng = np.random.default_rng(31)
    attrs = dict(num_heads=4, kv_num_heads=2)
    if spec.get("rotary"):
        attrs["do_rotary"] = 1
    ins = gqa_inputs(rng, dtype=dtype, **spec)
    fused, unfused, feeds = _gqa_qk_norm_models(ins, attrs, spec.get("head", 16), 1e-6, False)
    want = cpu_session(unfused).run(None, feeds)
    sess = hipep.InferenceSession(fused, device="cuda", strict="1")
    for _ in range(3):
        for k, (g, w) in enumerate(zip(sess.run(None, feeds), want)):
            assert g.dtype == w.dtype and g.shape == w.shape, f"output {k}"
            np.testing.assert_allclose(g.astype(F32), w.astype(F32), err_msg=f"output {k}", **tol(dtype))


# ---- RotaryEmbedding --------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("form", ["3d", "3d-offset", "3d-partial", "4d", "4d-partial"])
def test_ms_rotary_embedding(form, interleaved, dtype):
    rng = np.random.default_rng(7)
    ids = rng.integers(0, 48, (2, 5)).astype(np.int64)
    attrs = dict(interleaved=interleaved)
    width = 8 if "partial" in form else 32
    angles = rng.uniform(0, 6, (48, width))
    cos, sin = np.cos(angles).astype(dtype), np.sin(angles).astype(dtype)
    if form == "3d":
        x, pos = U(rng, 2, 5, 4 * 64, dtype=dtype), ids
    elif form == "3d-offset":
        x, pos = U(rng, 2, 5, 4 * 64, dtype=dtype), np.array([3], np.int64)
    elif form == "3d-partial":
        x, pos = U(rng, 2, 5, 4 * 64, dtype=dtype), ids
        attrs.update(num_heads=4, rotary_embedding_dim=16)
    elif form == "4d":
        x, pos = U(rng, 2, 4, 5, 64, dtype=dtype), ids
    else:
        x, pos = U(rng, 2, 4, 5, 64, dtype=dtype), ids
        attrs.update(num_heads=4, rotary_embedding_dim=16)
    feeds = [("x", x), ("position_ids", pos), ("cos_cache", cos), ("sin_cache", sin)]
    model = single_node("RotaryEmbedding", feeds, 1, **attrs)
    check(model, dict(feeds), dtype)


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("form", ["chunked", "interleaved", "4d-text", "partial-interleaved-scale"])
def test_mrotary_embedding(form, dtype):
    """The Qwen vision-language models' multimodal rotary (three position streams per token)."""
    rng = np.random.default_rng(12)
    b, s, n, h = 2, 7, 4, 64
    attrs = dict(mrope_section=[16, 8, 8], mrope_layout=1 if "interleaved" in form else 0)
    half = h // 2
    if form == "partial-interleaved-scale":
        half = 12
        attrs.update(num_heads=n, rotary_embedding_dim=24, mrope_section=[4, 4, 4], interleaved=1, scale=0.37)
    elif form == "interleaved":
        attrs.update(num_heads=n, mrope_section=[12, 10, 10])
    elif not form.startswith("4d"):
        attrs["num_heads"] = n
    angles = rng.uniform(0, 6, (48, half))
    pos = rng.integers(0, 48, (3, b, s)).astype(np.int64)
    if "text" in form:
        pos[1:] = pos[0]
    x = U(rng, b, n, s, h, dtype=dtype) if form.startswith("4d") else U(rng, b, s, n * h, dtype=dtype)
    feeds = [("x", x), ("position_ids", pos), ("cos_cache", np.cos(angles).astype(dtype)),
             ("sin_cache", np.sin(angles).astype(dtype))]
    model = single_node("MRotaryEmbedding", feeds, 1, **attrs)
    try:
        cpu_session(model)
    except Exception as e:  # noqa: BLE001 - an onnxruntime without MRotaryEmbedding
        pytest.skip(f"ORT's CPU EP cannot run MRotaryEmbedding: {e}")
    check(model, dict(feeds), dtype)


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("form", ["3d-ids", "4d-ids", "3d-no-ids", "4d-partial"])
def test_onnx_rotary_embedding_23(form, dtype):
    rng = np.random.default_rng(8)
    b, s, n, h = 2, 6, 4, 64
    attrs = dict(interleaved=1 if "4d" in form else 0)
    x = U(rng, b, s, n * h, dtype=dtype) if form.startswith("3d") else U(rng, b, n, s, h, dtype=dtype)
    if form.startswith("3d"):
        attrs["num_heads"] = n
    width = 16 if "partial" in form else h // 2
    if "partial" in form:
        attrs["rotary_embedding_dim"] = 2 * width
    if "no-ids" in form:
        angles = rng.uniform(0, 6, (b, s, width))
        feeds = [("x", x), ("cos_cache", np.cos(angles).astype(dtype)), ("sin_cache", np.sin(angles).astype(dtype))]
    else:
        angles = rng.uniform(0, 6, (32, width))
        feeds = [("x", x), ("cos_cache", np.cos(angles).astype(dtype)), ("sin_cache", np.sin(angles).astype(dtype)),
                 ("position_ids", rng.integers(0, 32, (b, s)).astype(np.int64))]
    model = single_node("RotaryEmbedding", feeds, 1, domain="", opset=23, **attrs)
    try:
        cpu_session(model)
    except Exception as e:  # noqa: BLE001 - an onnxruntime without the opset-23 kernel
        pytest.skip(f"ORT's CPU EP cannot run RotaryEmbedding-23: {e}")
    check(model, dict(feeds), dtype)
