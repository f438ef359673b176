"""Many threads on shared sessions, session teardown beside running sessions, ORT's own thread
pools around hipep's Compute, and whether destroyed sessions release what hipep built for them.

Each run is compared with the CPU EP's result for the same feeds, computed beforehand on one
thread, and with hipep's own single-threaded result bit for bit (the CPU device is
deterministic: a concurrent run that reads another run's arena gives different bits even where
it stays within tolerance). HIPEP_STRESS_RUNS sets the runs per thread and session (default
small enough for CI on 2 cores; `HIPEP_STRESS_RUNS=1000 pytest tests/ort/test_threads_and_leaks.py`
is the long version). A watchdog dumps every thread's stack and ends the process if a test
hangs, so a deadlock fails CI instead of stalling it.
"""
from __future__ import annotations

import faulthandler
import gc
import os
import sys
import threading
import weakref

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import hipep
import hipep.bridge
from hipep.demo import build_attention_block

from helpers import assignment, cpu_ep, cpu_session, make_model, providers_for, session, tensor

CPU_EP = cpu_ep()  # hipep's CPU reference device (HipCpuExecutionProvider beside a GPU)

RUNS = int(os.environ.get("HIPEP_STRESS_RUNS", "30"))
THREADS = 8
# generous: 8 threads x 2 sessions x 1000 runs of the attention block take ~40 s on 2 cores
WATCHDOG_S = 120 + RUNS * 0.5


@pytest.fixture(autouse=True)
def watchdog():
    """Ends the process with every thread's stack on stderr when a test outlives WATCHDOG_S."""
    faulthandler.dump_traceback_later(WATCHDOG_S, exit=True, file=sys.stderr)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


@pytest.fixture
def compiled_refs(monkeypatch):
    """Weak references to every CompiledSubgraph and its Executor compiled while the test runs."""
    refs: list[weakref.ref] = []
    original = hipep.bridge.EpState.compile

    def compile_and_record(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        refs.append(weakref.ref(result[0]))
        refs.append(weakref.ref(result[0].executor))
        return result

    monkeypatch.setattr(hipep.bridge.EpState, "compile", compile_and_record)
    return refs


class Case:
    """One set of feeds, the CPU EP's outputs and hipep's single-threaded outputs for them."""

    def __init__(self, feeds: dict, want: list, exact: list):
        self.feeds, self.want, self.exact = feeds, want, exact

    def check(self, got, rtol: float, atol: float) -> str | None:
        for j, (g, w, e) in enumerate(zip(got, self.want, self.exact)):
            if g.shape != w.shape or g.dtype != w.dtype:
                return f"output {j}: {g.shape}:{g.dtype}, expected {w.shape}:{w.dtype}"
            if not np.array_equal(g, e):
                return f"output {j} differs from the single-threaded run (max {np.max(np.abs(g - e)):.3g})"
            if not np.allclose(g, w, rtol=rtol, atol=atol):
                return f"output {j} differs from the CPU EP (max {np.max(np.abs(g - w)):.3g})"
        return None


def make_cases(model_bytes, hip_sess, feeds_list) -> list[Case]:
    cpu = cpu_session(model_bytes)
    return [Case(f, cpu.run(None, f), hip_sess.run(None, f)) for f in feeds_list]


def start_workers(sessions, cases: list[Case], runs: int, threads: int = THREADS, rtol=1e-5, atol=1e-6,
                  stop: threading.Event | None = None):
    """`threads` threads, each running every session `runs` times (or, given `stop`, until it is
    set), thread t starting at case t so that concurrent runs take different cases (different
    shapes). Returns the threads, the failures list they fill and their run counts."""
    failures: list[str] = []
    done = [0] * threads
    barrier = threading.Barrier(threads)

    def worker(t):
        try:
            barrier.wait()
            k = 0
            while (k < runs) if stop is None else not stop.is_set():
                for s, sess in enumerate(sessions):
                    i = (t + k + s) % len(cases)
                    why = cases[i].check(sess.run(None, cases[i].feeds), rtol, atol)
                    if why:
                        failures.append(f"thread {t} session {s} run {k} case {i}: {why}")
                    done[t] += 1
                k += 1
        except Exception as e:  # noqa: BLE001  (reported as a failure of the test)
            failures.append(f"thread {t}: {type(e).__name__}: {e}")

    pool = [threading.Thread(target=worker, args=(t,), daemon=True) for t in range(threads)]
    for th in pool:
        th.start()
    return pool, failures, done


def hammer(sessions, cases: list[Case], runs: int, threads: int = THREADS, rtol=1e-5, atol=1e-6):
    """start_workers, joined: the failures and the number of runs made."""
    pool, failures, done = start_workers(sessions, cases, runs, threads, rtol, atol)
    join_all(pool)
    return failures, sum(done)


def join_all(pool, timeout: float = WATCHDOG_S):
    for th in pool:
        th.join(timeout=timeout)
    assert not any(th.is_alive() for th in pool), "a worker thread hung"


def _counts():
    s = hipep.stats()
    return s.get("runs", 0), s.get("specializations", 0), s.get("specialization_hits", 0)


# ---- the attention block, two shapes alternating -------------------------------------------------

def attention_cases(model_bytes, hip_sess) -> list[Case]:
    rng = np.random.default_rng(5)
    shapes = [(2, 5), (3, 8)] * 3  # alternating: neighbouring threads run different signatures
    feeds = [{"x": rng.standard_normal((b, s, 32)).astype(np.float32)} for b, s in shapes]
    return make_cases(model_bytes, hip_sess, feeds)


def test_eight_threads_two_sessions_two_shapes():
    model = build_attention_block(seed=3).SerializeToString()
    sessions = [session(model), session(model, disable_fallback=True)]
    for sess in sessions:
        assert list(assignment(sess)) == [CPU_EP], "the whole block should run on hipep"
    cases = attention_cases(model, sessions[0])
    r0, s0, h0 = _counts()
    # Against the CPU EP within f32 GEMM error: its MLAS sgemm sums in an order that depends on the
    # CPU's kernels (AVX2, AVX-512), so outputs left small by cancellation differ by a few 1e-6;
    # every run must still equal hipep's single-threaded result exactly.
    failures, made = hammer(sessions, cases, RUNS, atol=1e-5)
    r1, s1, h1 = _counts()
    assert not failures, failures[:10]
    assert made == THREADS * 2 * RUNS
    # one fused node per session: every run is counted once, as a new signature or a replay, with
    # no count lost between the per-run tallies of concurrent runs
    assert r1 - r0 == made
    assert (s1 - s0) + (h1 - h0) == made
    assert s1 - s0 <= 2 * 2 * THREADS  # at most each signature raced by every thread, per session


# ---- a builder decoder, decode steps of different lengths ----------------------------------------

def _decoder_folder():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("onnxruntime_genai")
    from hipep.tools import model_zoo

    return model_zoo.decoder("llama", "fp32")


def decoder_steps(folder: str, steps: int = 6) -> list[dict]:
    """Feeds of a prefill and `steps` decode steps, each step's past the CPU EP's present of the
    step before: every step is independent of hipep's own results, so threads may take them in
    any order, and each past length is its own layout signature."""
    from hipep.tools import model_zoo

    head = model_zoo.genai_config(folder)["model"]["decoder"]["head_size"]
    return model_zoo.decoder_steps(os.path.join(folder, "model.onnx"), head, prompt=5, decode=steps, seed=11)


def test_eight_threads_two_sessions_on_a_decoder():
    folder = _decoder_folder()
    path = os.path.join(folder, "model.onnx")
    sessions = [hipep.InferenceSession(path, device="cpu") for _ in range(2)]
    steps = decoder_steps(folder)
    cases = make_cases(path, sessions[0], steps)
    r0 = _counts()[0]
    failures, made = hammer(sessions, cases, RUNS, rtol=1e-4, atol=1e-4)
    assert not failures, failures[:10]
    assert made == THREADS * 2 * RUNS
    assert _counts()[0] - r0 >= made  # at least one fused subgraph per run


# ---- session teardown beside running sessions ----------------------------------------------------

def test_sessions_torn_down_while_another_session_of_the_model_runs(compiled_refs):
    model = build_attention_block(seed=4).SerializeToString()
    keep = session(model)
    kept = len(compiled_refs)  # the running session's own
    cases = attention_cases(model, keep)
    stop = threading.Event()
    pool, failures, done = start_workers([keep], cases, 0, threads=4, stop=stop)
    cycles = max(10, RUNS // 2)
    try:
        for c in range(cycles):
            short = session(model)
            case = cases[c % len(cases)]
            why = case.check(short.run(None, case.feeds), 1e-5, 1e-6)
            assert why is None, f"cycle {c}: {why}"
            del short
            gc.collect()
            alive = [r() for r in compiled_refs[kept:] if r() is not None]
            assert not alive, f"cycle {c}: a destroyed session still holds {alive}"
            if failures:
                break
    finally:
        stop.set()
        join_all(pool)
    assert not failures, failures[:10]
    assert sum(done) >= 4, "the running session made no runs while others were torn down"


def test_a_destroyed_session_is_freed_without_the_cycle_collector(compiled_refs):
    """No reference cycle (through ORT's callbacks, the bridge's module-level lists or the run
    contexts' tallies) keeps a compiled subgraph alive: dropping the session frees it at once."""
    model = build_attention_block(seed=6).SerializeToString()
    x = np.random.default_rng(0).standard_normal((2, 3, 32)).astype(np.float32)
    gc.collect()
    gc.disable()
    try:
        sess = session(model)
        for _ in range(3):
            sess.run(None, {"x": x})
        assert compiled_refs and all(r() is not None for r in compiled_refs)
        del sess
        alive = [r() for r in compiled_refs if r() is not None]
    finally:
        gc.enable()
    assert not alive, f"still alive after the session was dropped: {alive}"


# ---- ORT's thread pools around hipep's Compute ---------------------------------------------------

def branches_model(width: int = 256) -> bytes:
    """hipep's Tanh → Mul → Add (a3); the CPU EP's Cast to double → Gemm in double → Cast back
    on a3, then hipep's Add of both (y1): a second fused node, since the path through the CPU
    nodes splits the two. Beside them, from x, a second double Gemm on the CPU EP (y2). hipep
    claims no float64 Gemm or Cast, so the CPU EP runs those, its Gemm on the intra-op pool;
    with the parallel executor the second branch runs while hipep's first fused node does."""
    rng = np.random.default_rng(2)
    f, d = TensorProto.FLOAT, TensorProto.DOUBLE
    node = helper.make_node
    nodes = [
        node("Tanh", ["x"], ["a1"], name="a_tanh"),
        node("Mul", ["a1", "scale"], ["a2"], name="a_mul"),
        node("Add", ["a2", "x"], ["a3"], name="a_add"),
        node("Cast", ["a3"], ["ad"], name="b_to_double", to=d),
        node("Gemm", ["ad", "w"], ["bd"], name="b_gemm"),
        node("Cast", ["bd"], ["bf"], name="b_to_float", to=f),
        node("Add", ["a3", "bf"], ["y1"], name="join"),
        node("Cast", ["x"], ["xd"], name="c_to_double", to=d),
        node("Gemm", ["xd", "w"], ["cd"], name="c_gemm"),
        node("Cast", ["cd"], ["y2"], name="c_to_float", to=f),
    ]
    inits = [numpy_helper.from_array(np.full((width,), 0.5, np.float32), "scale"),
             numpy_helper.from_array(rng.standard_normal((width, width)) * 0.05, "w")]
    return make_model(nodes, [tensor("x", f, ["n", width])],
                      [tensor("y1", f, ["n", width]), tensor("y2", f, ["n", width])], inits).SerializeToString()


@pytest.mark.parametrize("intra, parallel", [(1, False), (4, False), (1, True), (4, True)],
                         ids=["intra1-sequential", "intra4-sequential", "intra1-parallel2", "intra4-parallel2"])
def test_no_deadlock_between_ort_thread_pools_and_the_gil(intra, parallel, monkeypatch):
    model = branches_model()
    so = ort.SessionOptions()
    so.intra_op_num_threads = intra
    if parallel:
        so.execution_mode = ort.ExecutionMode.ORT_PARALLEL
        so.inter_op_num_threads = 2
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    sess = ort.InferenceSession(model, sess_options=so, providers=providers_for(so, [CPU_EP]))
    placed = assignment(sess)
    assert len(placed.get(CPU_EP, [])) == 2 and "CPUExecutionProvider" in placed, placed

    # where Compute runs: ORT's inter-op pool threads are not Python's (no Thread object of ours)
    ours = set()
    foreign = []
    original = hipep.bridge.CompiledSubgraph.run

    def run_and_note(self, *args, **kwargs):
        if threading.get_ident() not in ours:
            foreign.append(threading.get_ident())
        return original(self, *args, **kwargs)

    monkeypatch.setattr(hipep.bridge.CompiledSubgraph, "run", run_and_note)
    rng = np.random.default_rng(8)
    feeds = [{"x": rng.standard_normal((n, 256)).astype(np.float32)} for n in (64, 48, 64, 32)]
    cases = make_cases(model, sess, feeds)
    threads = 4
    barrier = threading.Barrier(threads + 1)
    failures: list[str] = []

    def worker(t):
        ours.add(threading.get_ident())
        barrier.wait()
        try:
            for k in range(RUNS):
                i = (t + k) % len(cases)
                why = cases[i].check(sess.run(None, cases[i].feeds), 1e-5, 1e-5)
                if why:
                    failures.append(f"thread {t} run {k}: {why}")
        except Exception as e:  # noqa: BLE001
            failures.append(f"thread {t}: {type(e).__name__}: {e}")

    pool = [threading.Thread(target=worker, args=(t,), daemon=True) for t in range(threads)]
    for th in pool:
        th.start()
    foreign.clear()  # make_cases ran on this thread before it was noted
    barrier.wait()
    join_all(pool)
    assert not failures, failures[:10]
    if parallel:
        # ORT ran hipep's nodes on its own pool threads, which took the GIL from outside Python
        assert foreign, "no Compute ran on an ORT pool thread: the parallel executor was not exercised"


# ---- per-signature state stays bounded -----------------------------------------------------------

def test_layout_signatures_remembered_per_shape_program_are_bounded(compiled_refs, monkeypatch):
    """Specializations are an LRU; the set of layout signatures whose guards were checked lived
    beside it without a bound, one entry per signature ever seen (a server fed every sequence
    length). Past the bound a signature's guards are checked again, with the same results."""
    import hipep.runtime.executor as executor_module

    monkeypatch.setattr(executor_module, "LAYOUTS_REMEMBERED", 8)
    w = numpy_helper.from_array(np.random.default_rng(1).standard_normal((8, 8)).astype(np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["t"], name="mm"),
             helper.make_node("Softmax", ["t"], ["y"], name="sm", axis=-1)]
    model = make_model(nodes, [tensor("x", TensorProto.FLOAT, ["n", 8])], [tensor("y", TensorProto.FLOAT, ["n", 8])],
                       [w]).SerializeToString()
    sess, cpu = session(model), cpu_session(model)
    executor = compiled_refs[-1]()
    rng = np.random.default_rng(3)
    for rep in range(2):
        for n in range(1, 41):  # 40 layout signatures (t is [n, 8] in the arena), one shape program
            x = rng.standard_normal((n, 8)).astype(np.float32)
            np.testing.assert_allclose(sess.run(None, {"x": x})[0], cpu.run(None, {"x": x})[0], rtol=1e-5, atol=1e-6)
    programs = [p for family in executor._programs.values() for p in family]
    assert len(programs) == 1, "a signature past the bound was traced again"
    assert 0 < len(programs[0].layouts) <= 8
    assert len(executor._specs) <= executor.cache_size
