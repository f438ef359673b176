"""Running cases: `execute` runs one in this process; `Pool` runs many in long-lived worker
processes (address space capped, crashes and hangs caught, the case run again alone in a fresh
worker); `worker_main` is the worker side of that pipe."""
from __future__ import annotations

import os
import pickle
import selectors
import signal
import struct
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Callable, Iterable

from .cases import Case, Outcome
from .judge import Result, judge, known_finding, optimizer_explains


# ---- running one case (in a worker) ------------------------------------------------------------------

def execute(case: Case, stage: Callable[[str], None] = lambda s: None) -> Outcome:
    """Runs a case in this process: hipep's session and the CPU EP's, then judges."""
    import onnxruntime as ort

    import hipep

    if case.kind.startswith("probe:"):
        _probe(case.kind[6:])
    start = time.perf_counter()

    def options(optimize):
        so = ort.SessionOptions()
        so.log_severity_level = 3
        so.intra_op_num_threads = 1
        so.inter_op_num_threads = 1
        so.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize
                                       else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
        return so

    stage("hipep-create")
    hs = cs = None
    try:
        hs = hipep.InferenceSession(case.model, sess_options=options(case.optimize), device="cpu", **case.options)
        h_create = Result(True)
    except Exception as e:  # noqa: BLE001 - the judge decides what any error means
        h_create = Result.error(e)
    stage("cpu-create")
    try:
        cs = ort.InferenceSession(case.model, sess_options=options(False), providers=["CPUExecutionProvider"])
        c_create = Result(True)
    except Exception as e:  # noqa: BLE001
        c_create = Result.error(e)
    runs = []
    out_names = [o.name for o in hs.get_outputs()] if hs is not None else []
    if hs is not None:
        for i, feeds in enumerate(case.runs):
            stage(f"hipep-run {i}")
            try:
                h = Result(True, hs.run(None, feeds))
            except Exception as e:  # noqa: BLE001
                h = Result.error(e)
            c = None
            if cs is not None:
                stage(f"cpu-run {i}")
                try:
                    c = Result(True, cs.run(None, feeds))
                except Exception as e:  # noqa: BLE001
                    c = Result.error(e)
            runs.append((h, c))
    outcome = judge(case, h_create, c_create, runs, out_names)
    if outcome.category == "mismatch" and case.optimize:
        # a second opinion: the CPU EP on the graph ORT's optimizations make, as hipep's session had it
        stage("cpu-optimized")
        optimized = []
        try:
            co = ort.InferenceSession(case.model, sess_options=options(True), providers=["CPUExecutionProvider"])
            for feeds in case.runs:
                try:
                    optimized.append(Result(True, co.run(None, feeds)))
                except Exception as e:  # noqa: BLE001
                    optimized.append(Result.error(e))
        except Exception:  # noqa: BLE001 - no second opinion: the mismatch stands
            optimized = []
        outcome = optimizer_explains(case, outcome, runs, optimized, out_names)
    outcome.seconds = time.perf_counter() - start
    outcome.known = known_finding(outcome)
    return outcome


def _probe(what: str):
    """Misbehaviours the pool must survive (its own tests use them)."""
    if what == "abort":
        os.abort()
    if what == "exit":
        os._exit(3)
    if what == "hang":
        time.sleep(10 ** 6)


# ---- the worker pool -------------------------------------------------------------------------------

def _send(f, obj):
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    f.write(struct.pack("<Q", len(data)) + data)
    f.flush()


def _recv(f):
    head = f.read(8)
    if len(head) < 8:
        return None
    (n,) = struct.unpack("<Q", head)
    return pickle.loads(f.read(n))


def limit_memory(gib: float):
    """Caps this process's address space: the huge-dim cases must fail to allocate, not take the
    machine's memory."""
    import resource

    limit = int(gib * 2 ** 30)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def worker_main(memory_gib: float = 6.0) -> int:
    """The worker loop: cases in on stdin, ("stage", name) and ("done", Outcome) frames out on the
    original stdout; anything else printed goes to stderr."""
    import warnings

    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    limit_memory(memory_gib)
    warnings.simplefilter("ignore")
    import onnxruntime as ort

    import hipep

    ort.set_default_logger_severity(3)
    hipep.register()
    _send(out, ("ready", os.getpid()))
    stdin = sys.stdin.buffer
    while True:
        case = _recv(stdin)
        if case is None:
            return 0
        try:  # this case's stderr only: the parent reads it back after a crash
            os.ftruncate(2, 0)
            os.lseek(2, 0, os.SEEK_SET)
        except OSError:
            pass
        try:
            outcome = execute(case, lambda s: _send(out, ("stage", s)))
        except BaseException as e:  # noqa: BLE001 - a bug in the harness itself is a finding too
            outcome = Outcome("finding", "harness-error", "".join(traceback.format_exception(e))[-2000:])
        _send(out, ("done", outcome))


class _Worker:
    def __init__(self, index: int, env: dict, log_dir: Path):
        self.index = index
        self.log = open(log_dir / f"worker{index}.stderr", "w+b")
        # -P: a checkout's own hipep/ (no native library) must not shadow the installed package
        self.proc = subprocess.Popen([sys.executable, "-P", "-m", "hipep.tools.fuzz", "--worker"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log, env=env)
        os.set_blocking(self.proc.stdout.fileno(), False)
        self.buf = b""
        self.case: Case | None = None
        self.deadline = 0.0
        self.started = 0.0
        self.stage = ""
        self.ready = False
        self.done = 0

    def send(self, case: Case, timeout: float):
        self.case, self.stage = case, "sent"
        self.started = time.monotonic()
        self.deadline = self.started + timeout
        _send(self.proc.stdin, case)

    def frames(self) -> list:
        try:
            chunk = os.read(self.proc.stdout.fileno(), 1 << 20)
        except BlockingIOError:
            return []
        if not chunk:
            raise EOFError
        self.buf += chunk
        out = []
        while len(self.buf) >= 8:
            (n,) = struct.unpack("<Q", self.buf[:8])
            if len(self.buf) < 8 + n:
                break
            out.append(pickle.loads(self.buf[8:8 + n]))
            self.buf = self.buf[8 + n:]
        return out

    def stderr_tail(self, n: int = 4000) -> str:
        try:
            self.log.flush()
            self.log.seek(0, os.SEEK_END)
            size = self.log.tell()
            self.log.seek(max(0, size - n))
            return self.log.read().decode(errors="replace")
        except OSError:
            return ""

    def kill(self):
        if self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass
        self.log.close()

    def close(self):
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.kill()


class Pool:
    """Long-lived workers, one case each at a time. A worker that dies or passes the timeout is
    killed and replaced; its case becomes a finding ("crash" or "hang"; "oracle" when it died in
    the CPU EP's own steps) and is run again alone in a fresh worker to tell a problem of that
    case from one a previous case left behind. Workers are also replaced every `recycle` cases
    so that whatever a long run accumulates stays bounded."""

    def __init__(self, workers: int = 2, timeout: float = 30.0, recycle: int = 1000, memory_gib: float = 6.0):
        self.n, self.timeout, self.recycle, self.memory_gib = workers, timeout, recycle, memory_gib
        self.env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1",
                        PYTHONWARNINGS="ignore", HIPEP_FUZZ_MEMORY_GIB=str(memory_gib))
        root = str(Path(__file__).resolve().parents[2])
        self.env["PYTHONPATH"] = root + (os.pathsep + self.env["PYTHONPATH"] if self.env.get("PYTHONPATH") else "")
        self.logs = Path(tempfile.mkdtemp(prefix="hipep-fuzz-"))
        self.workers: list[_Worker] = []
        self.sel = selectors.DefaultSelector()
        self.restarts = 0  # workers replaced after a crash or a hang (not counting recycling)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        for w in self.workers:
            self.sel.unregister(w.proc.stdout)
            w.close()
        self.workers = []

    def _start(self, index: int) -> _Worker:
        w = _Worker(index, self.env, self.logs)
        self.sel.register(w.proc.stdout, selectors.EVENT_READ, w)
        return w

    def _replace(self, w: _Worker, lost: bool = True) -> _Worker:
        self.sel.unregister(w.proc.stdout)
        w.kill()
        self.restarts += int(lost)
        nw = self._start(w.index)
        self.workers[self.workers.index(w)] = nw
        return nw

    def run(self, cases: Iterable[Case], on_outcome: Callable[[Case, Outcome], None], isolate: bool = True):
        """Runs every case; calls on_outcome(case, outcome) as each finishes (in any order)."""
        pending = iter(cases)
        if not self.workers:
            self.workers = [self._start(i) for i in range(self.n)]
        busy = 0
        exhausted = False
        start_deadline = time.monotonic() + 300

        def feed(w):
            nonlocal busy, exhausted
            if exhausted:
                return
            case = next(pending, None)
            if case is None:
                exhausted = True
                return
            w.send(case, self.timeout)
            busy += 1

        while True:
            for w in list(self.workers):
                if w.ready and w.case is None and not exhausted:
                    if w.done >= self.recycle:
                        self._replace(w, lost=False)
                        continue
                    feed(w)
            if exhausted and busy == 0:
                return
            now = time.monotonic()
            deadlines = [w.deadline for w in self.workers if w.case is not None]
            wait = max(0.0, min(deadlines) - now) if deadlines else 1.0
            for key, _ in self.sel.select(timeout=min(wait, 1.0)):
                w = key.data
                try:
                    frames = w.frames()
                except EOFError:
                    frames = None
                if frames is None:
                    case, stage = w.case, w.stage
                    code = w.proc.wait()
                    tail = w.stderr_tail()
                    self._replace(w)
                    if case is None:
                        if time.monotonic() > start_deadline:
                            raise RuntimeError(f"fuzz worker exits at start (code {code}):\n{tail}")
                        continue
                    busy -= 1
                    why = f"signal {-code} ({signal.Signals(-code).name})" if code < 0 else f"exit code {code}"
                    outcome = self._lost(case, "crash", f"the worker died: {why}", stage, tail, isolate)
                    on_outcome(case, outcome)
                    continue
                for frame in frames:
                    if frame[0] == "ready":
                        w.ready = True
                    elif frame[0] == "stage":
                        w.stage = frame[1]
                    elif frame[0] == "done":
                        case, w.case = w.case, None
                        w.done += 1
                        busy -= 1
                        on_outcome(case, frame[1])
            now = time.monotonic()
            for w in list(self.workers):
                if w.case is not None and now > w.deadline:
                    case, stage, tail = w.case, w.stage, w.stderr_tail()
                    self._replace(w)
                    busy -= 1
                    on_outcome(case, self._lost(case, "hang", f"no answer within {self.timeout:g} s", stage, tail,
                                                isolate))

    def _lost(self, case: Case, category: str, detail: str, stage: str, tail: str, isolate: bool) -> Outcome:
        verdict = "oracle" if stage.startswith("cpu-") else "finding"
        out = Outcome(verdict, category if verdict == "finding" else f"cpu-ep-{category}", detail, stage,
                      stderr=tail)
        out.known = known_finding(out)
        if isolate:  # again, alone, in a fresh worker: is it this case or what came before it?
            again: list[Outcome] = []
            with Pool(1, self.timeout, memory_gib=self.memory_gib) as alone:
                alone.run([case], lambda c, o: again.append(o), isolate=False)
            out.reproduced_alone = bool(again) and again[0].category == out.category
        return out


    def run_case(self, case: Case, isolate: bool = False) -> Outcome:
        """One case on this pool's workers, waiting for its outcome."""
        got: list[Outcome] = []
        self.run([case], lambda c, o: got.append(o), isolate=isolate)
        return got[0]


def run_one(case: Case, timeout: float = 60.0) -> Outcome:
    """One case in a fresh worker (as the pool runs it, crash and hang included)."""
    with Pool(1, timeout) as pool:
        return pool.run_case(case)
