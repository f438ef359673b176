"""How the CUDA device replays a segment of launches whose arguments change from run to run (a
growing attention mask in decoding): captured on its second run, then each changed launch updates
its kernel node in the executable graph, and only a change of the segment's structure captures it
again. The driver here is a stand-in that records what the device asks of it and executes a
graph's kernel nodes as they were captured or updated, so the test sees what a GPU would run
(tests/gpu/test_cuda_kernels.py runs the same path on the real driver)."""
from __future__ import annotations

import ctypes
import threading
from types import SimpleNamespace

import pytest

from hipep.runtime import cuda, cuda_driver, cuda_graphs
from hipep.runtime.device import Graph, GraphNode
from hipep.runtime.gpu_binding_core import KernelOp

SUCCESS = "success"


class _Params:
    """CUDA_KERNEL_NODE_PARAMS: the fields the device sets."""


class FakeDriver:
    """The driver calls a segment's replay makes. A captured graph is a list of kernel nodes
    (dicts); an executable graph copies them, and cuGraphLaunch appends what each node would run:
    (function, grid, first parameter's value)."""

    CUresult = SimpleNamespace(CUDA_SUCCESS=SUCCESS)
    CUstreamCaptureMode = SimpleNamespace(CU_STREAM_CAPTURE_MODE_THREAD_LOCAL=0)
    CUDA_KERNEL_NODE_PARAMS = _Params

    def __init__(self):
        self.ran: list[list] = []  # per stream operation: what ran
        self.capturing: list | None = None
        self.calls: dict[str, int] = {}
        self.refuse_update = False
        self.refuse_capture = 0  # launches refused while capturing, from now on

    def _count(self, name):
        self.calls[name] = self.calls.get(name, 0) + 1

    @staticmethod
    def _work(func, grid, argv_addr):
        first = ctypes.cast(argv_addr, ctypes.POINTER(ctypes.c_void_p))[0]
        return (func, tuple(grid), ctypes.c_int64.from_address(first).value)

    def cuLaunchKernel(self, func, gx, gy, gz, bx, by, bz, smem, stream, argv_addr, extra):
        self._count("cuLaunchKernel")
        work = self._work(func, (gx, gy, gz), argv_addr)
        if self.capturing is not None and self.refuse_capture:
            self.refuse_capture -= 1
            return ("not capturable",)
        if self.capturing is not None:
            self.capturing.append({"work": work})
        else:
            self.ran.append([work])
        return (SUCCESS,)

    def cuStreamBeginCapture(self, stream, mode):
        self._count("capture")
        self.capturing = []
        return (SUCCESS,)

    def cuStreamGetCaptureInfo(self, stream):
        return (SUCCESS, 1, 7, None, [self.capturing[-1]], 1)

    def cuStreamEndCapture(self, stream):
        graph, self.capturing = self.capturing, None
        return (SUCCESS, graph)

    def cuGraphInstantiate(self, graph, flags):
        self._count("instantiate")
        return (SUCCESS, {"nodes": graph, "work": {id(n): n["work"] for n in graph}})

    def cuGraphExecKernelNodeSetParams(self, exec_, node, p):
        self._count("update")
        if self.refuse_update:
            return ("refused",)
        exec_["work"][id(node)] = self._work(p.func, (p.gridDimX, p.gridDimY, p.gridDimZ), p.kernelParams)
        return (SUCCESS,)

    def cuGraphLaunch(self, exec_, stream):
        self._count("graph launch")
        self.ran.append([exec_["work"][id(n)] for n in exec_["nodes"]])
        return (SUCCESS,)

    def cuGetErrorString(self, err):
        return (SUCCESS, str(err).encode())

    def cuEventRecord(self, event, stream):
        return (SUCCESS,)

    def cuCtxSetCurrent(self, ctx):
        return (SUCCESS,)

    def cuGraphExecDestroy(self, exec_):
        return (SUCCESS,)

    def cuGraphDestroy(self, graph):
        return (SUCCESS,)


class FakeStream:
    handle = 0
    failed = False

    def __init__(self, driver=None):
        self.counts = [0, 0, 0]
        self.errors = []
        self.driver, self._timing, self.syncs = driver, [], 0

    def timing_events(self):
        return "start", "end"

    def run_host(self, label, work):
        self.driver.ran.append([("host", label)])
        return work()

    def sync(self):
        self.syncs += 1

    def issued(self, label):
        pass

    def record_failure(self, error):
        self.errors.append(error)


class Program:
    """A node's program: one launch of kernel `func` whose first parameter is the node's
    argument value; `launches` of them where a node binds to several."""
    binding = None

    def __init__(self, func: str, launches: int = 1, first_run_func: str = ""):
        self.func, self.launches, self.first_run_func = func, launches, first_run_func

    def bind(self, args, stream=None, first_run=False):
        value = int(args[0][0])
        func = self.func
        if first_run and self.first_run_func:  # another kernel for a first run, provisionally
            func = self.first_run_func
        return [cuda_graphs._Launch(func, KernelOp(f"k_{func}", (value % 3 + 1,), (32,), [ctypes.c_int64(value)],
                                                   provisional=func != self.func))
                for _ in range(self.launches)]


@pytest.fixture
def driver(monkeypatch):
    fake = FakeDriver()
    monkeypatch.setattr(cuda, "_driver", lambda: fake)
    monkeypatch.setattr(cuda_graphs, "_driver", lambda: fake)
    monkeypatch.setattr(cuda_driver, "_driver", lambda: fake)
    return fake


def _device(update: bool = True):
    dev = object.__new__(cuda.CudaDevice)
    dev.use_graphs, dev.sync_launches, dev.update_graphs, dev.overlap_launches = True, False, update, False
    dev._capture_lock = threading.RLock()
    dev._tls, dev.ctx = threading.local(), object()
    return dev


def _segment(*programs):
    import numpy as np

    graph = Graph([GraphNode("launch", p, [np.array([i], np.int64)], label=f"node {i}")
                   for i, p in enumerate(programs)])
    state = cuda_graphs._GraphState(graph)
    (kind, seg), = state.plan
    return graph, state, seg


_KEEP: list = []


def _run(dev, stream, graph, state, seg, values):
    """One replay of the segment with node i's argument set to values[i] (changed ones are dirty)."""
    import numpy as np

    dirty = set()
    for i, v in enumerate(values):
        if int(graph.nodes[i].args[0][0]) != v:
            graph.nodes[i].args[0] = np.array([v], np.int64)
            _KEEP.append(graph.nodes[i].args[0])  # a host argument's signature is its id(): no reuse
            dirty.add(i)
    dev._run_segment(stream, graph, state, seg, dirty)


def test_a_growing_argument_updates_its_node_and_the_graph_runs_the_new_values(driver):
    dev, stream = _device(), FakeStream()
    graph, state, seg = _segment(Program("reduce"), Program("gemv"), Program("norm"))
    for step in range(6):  # the first node's argument grows every run, like a mask's length
        _run(dev, stream, graph, state, seg, [10 + step, 5, 7])
        ran = [w for batch in driver.ran[-(3 if step == 0 else 1):] for w in batch]
        assert ran == [("reduce", ((10 + step) % 3 + 1, 1, 1), 10 + step), ("gemv", (3, 1, 1), 5),
                       ("norm", (2, 1, 1), 7)], step
    # run 1 launch by launch; run 2 captured; runs 3-6 the graph with one node updated each
    assert stream.counts == [3, 5, 4]
    assert driver.calls["capture"] == 1 and driver.calls["update"] == 4
    assert seg.captures == 1 and not seg.direct


def test_a_first_runs_provisional_binding_is_bound_again_and_captured_on_the_second_run(driver):
    """A binding for a segment's first run may take another path, marked provisional (MatMulNBits'
    tensor-core GEMM where cuBLASLt would plan and load kernels): the first run issues it, the second
    run binds that node again (and only that one) as every later run would and captures the result,
    and the third replays the graph binding nothing."""
    dev, stream = _device(), FakeStream()
    gemm, norm = Program("blas", first_run_func="tc"), Program("norm", first_run_func="")
    graph, state, seg = _segment(norm, gemm)
    binds = []
    for p in (norm, gemm):
        original = p.bind
        p.bind = lambda args, stream=None, first_run=False, original=original, p=p: (
            binds.append((p.func, first_run)) or original(args, stream, first_run))
    for step in range(3):
        start = len(driver.ran)
        _run(dev, stream, graph, state, seg, [4, 5])
        ran = [w for batch in driver.ran[start:] for w in batch]
        assert [w[0] for w in ran] == ["norm", "tc" if step == 0 else "blas"], step
    assert binds == [("norm", True), ("blas", True), ("blas", False)]
    assert stream.counts == [2, 2, 0] and driver.calls["capture"] == 1 and seg.provisional == []


def test_a_failed_capture_runs_launch_by_launch_and_the_next_run_captures(driver):
    """A capture the driver fails (a library kernel loaded the first time it runs, on drivers before
    CUDA 12.3) leaves that run's launches to go one by one; the next run captures again."""
    dev, stream = _device(), FakeStream()
    graph, state, seg = _segment(Program("reduce"), Program("gemv"))
    _run(dev, stream, graph, state, seg, [10, 5])
    driver.refuse_capture = 1
    _run(dev, stream, graph, state, seg, [10, 5])
    assert driver.ran[-2:] == [[("reduce", (2, 1, 1), 10)], [("gemv", (3, 1, 1), 5)]] and seg.exec is None
    _run(dev, stream, graph, state, seg, [10, 5])
    assert driver.ran[-1] == [("reduce", (2, 1, 1), 10), ("gemv", (3, 1, 1), 5)]
    assert driver.calls["capture"] == 2 and not seg.direct and stream.counts == [4, 1, 0]


def test_without_updates_a_segment_that_changes_every_run_is_never_captured(driver):
    dev, stream = _device(update=False), FakeStream()
    graph, state, seg = _segment(Program("reduce"), Program("gemv"))
    for step in range(4):
        _run(dev, stream, graph, state, seg, [10 + step, 5])
    assert stream.counts == [8, 0, 0] and "capture" not in driver.calls


def test_a_change_of_structure_captures_again_and_a_refused_update_does_too(driver):
    dev, stream = _device(), FakeStream()
    multi = Program("split")
    graph, state, seg = _segment(Program("reduce"), multi)
    _run(dev, stream, graph, state, seg, [10, 5])
    _run(dev, stream, graph, state, seg, [11, 5])
    assert driver.calls["capture"] == 1
    multi.launches = 2  # the node now binds to two launches: no update can express that
    _run(dev, stream, graph, state, seg, [12, 6])
    assert driver.ran[-3:] == [[("reduce", (1, 1, 1), 12)], [("split", (1, 1, 1), 6)], [("split", (1, 1, 1), 6)]]
    _run(dev, stream, graph, state, seg, [12, 6])  # the same again: stable, captured again
    assert driver.calls["capture"] == 2 and driver.ran[-1] == [("reduce", (1, 1, 1), 12), ("split", (1, 1, 1), 6),
                                                                ("split", (1, 1, 1), 6)]
    driver.refuse_update = True  # the driver refuses: that run goes launch by launch
    _run(dev, stream, graph, state, seg, [13, 6])
    assert driver.ran[-3:] == [[("reduce", (2, 1, 1), 13)], [("split", (1, 1, 1), 6)], [("split", (1, 1, 1), 6)]]
    assert seg.exec is None  # the half-updated executable is gone
    driver.refuse_update = False
    _run(dev, stream, graph, state, seg, [13, 6])
    assert driver.calls["capture"] == 3 and driver.ran[-1][0] == ("reduce", (2, 1, 1), 13)


def test_an_argument_alternating_between_two_tensors_is_bound_once_for_each(driver):
    """ORT copies an IOBinding host input into device memory when it is bound, while the previous
    copy is still held: a decode step's input_ids alternate between two addresses. The launch
    keeps its recent bindings by signature, so it is bound once per address, and each run's graph
    still runs the launch for that run's tensor."""
    import numpy as np

    dev, stream = _device(), FakeStream()
    gather, gemv = Program("gather"), Program("gemv")
    graph, state, seg = _segment(gather, gemv)
    binds = []
    for p in (gather, gemv):
        original = p.bind
        p.bind = lambda args, stream=None, first_run=False, original=original, p=p: (binds.append(p.func)
                                                                                      or original(args, stream))
    pair = np.array([10], np.int64), np.array([11], np.int64)
    for step in range(8):
        x = pair[step % 2]
        start = len(driver.ran)
        graph.nodes[0].args[0] = x
        dev._run_segment(stream, graph, state, seg, {0} if step else set())
        ran = [w for batch in driver.ran[start:] for w in batch]
        assert ran == [("gather", (int(x[0]) % 3 + 1, 1, 1), int(x[0])), ("gemv", (2, 1, 1), 1)], step
    assert binds == ["gather", "gemv", "gather"]
    # run 1 launch by launch, run 2 captured, runs 3-8 the graph with the gather's node updated
    assert driver.calls["capture"] == 1 and driver.calls["update"] == 6


class HostStep:
    """A plan host step's program: run_host is what CudaDevice.replay calls for it."""
    binding = None

    def __init__(self):
        self.calls = 0

    def run_host(self, args, stream):
        self.calls += 1


def test_replay_walks_segments_host_work_and_syncs_in_plan_order(driver):
    """A plan graph [launch, launch, host, launch, launch, sync] replayed three times, the first
    launch's argument growing every run (a patch, as ORT's mask): each run runs the first segment,
    then the host step, then the second segment, then syncs; from the second run on both segments
    are graph launches, the first with its changed node updated in place."""
    import numpy as np

    dev, stream = _device(), FakeStream(driver)
    host = HostStep()
    nodes = [GraphNode("launch", Program("reduce"), [np.array([10], np.int64)], label="reduce"),
             GraphNode("launch", Program("gather"), [np.array([4], np.int64)], label="gather"),
             GraphNode("host", host, [], label="shape"),
             GraphNode("launch", Program("gemv"), [np.array([5], np.int64)], label="gemv"),
             GraphNode("launch", Program("norm"), [np.array([7], np.int64)], label="norm"),
             GraphNode("sync", label="sync (end)")]
    graph = Graph(nodes)
    for step in range(3):
        start = len(driver.ran)
        mask = np.array([20 + step], np.int64)
        _KEEP.append(mask)
        dev.replay(stream, graph, [(nodes[0], 0, mask)])
        ran = [w for batch in driver.ran[start:] for w in batch]
        assert ran == [("reduce", ((20 + step) % 3 + 1, 1, 1), 20 + step), ("gather", (2, 1, 1), 4),
                       ("host", "shape"), ("gemv", (3, 1, 1), 5), ("norm", (2, 1, 1), 7)], step
        assert stream.syncs == step + 1 and host.calls == step + 1
    # run 1: 4 launches one by one; run 2: both segments captured; run 3: one node updated
    assert stream.counts == [4, 4, 1]
    assert stream._timing == [("start", "end")] * 3
    assert dev.issue_counts(stream) == (4, 4, 1) and stream.counts == [0, 0, 0]


def test_a_captured_segment_binds_and_updates_only_the_launches_that_changed(driver, monkeypatch):
    """Once captured, a run that touches one launch of a long segment binds that launch alone and
    updates its node: no walk over the segment's other launches (the whole-segment path is not
    taken), and the graph runs the new value."""
    dev, stream = _device(), FakeStream()
    programs = [Program(f"k{i}") for i in range(40)]
    graph, state, seg = _segment(*programs)
    values = [5] * 40
    for step in range(2):  # launch by launch, then captured
        values[7] = 10 + step
        _run(dev, stream, graph, state, seg, values)
    binds = []
    for p in programs:
        original = p.bind
        p.bind = lambda args, stream=None, first_run=False, original=original, p=p: (binds.append(p.func)
                                                                                      or original(args, stream))

    def whole_segment(*args):
        raise AssertionError("the whole segment was walked")

    monkeypatch.setattr(dev, "_update_graph", whole_segment)
    for step in range(3):
        values[7] = 20 + step
        _run(dev, stream, graph, state, seg, values)
        assert driver.ran[-1][7] == ("k7", ((20 + step) % 3 + 1, 1, 1), 20 + step) and len(driver.ran[-1]) == 40
    assert binds == ["k7"] * 3 and stream.counts == [40, 4, 3]


def test_a_streams_targets_are_made_once_and_do_not_keep_it_alive():
    """CudaDevice.stream_target keeps one Target per launch label on the stream (a decode step's
    launches bound again every run ask for it each time); the target reaches the stream weakly, so
    a stream no run holds any more is freed, with its memory, as soon as it is dropped."""
    import gc
    import weakref

    from hipep.runtime.gpu_binding_core import Target
    from hipep.runtime.gpu_faults import FaultSites

    class Stream:
        def __init__(self):
            self.fault_record = SimpleNamespace(ptr=0x1000)
            self.targets, self.counters, self.workspace = {}, {}, []

    dev = _device()
    dev.target, dev.fault_sites = Target(sm_count=8), FaultSites()
    dev._workspace = lambda stream, nbytes: id(stream)
    stream = Stream()
    first = dev.stream_target(stream, "node a")
    assert dev.stream_target(stream, "node a") is first and dev.stream_target(stream, "node b") is not first
    assert first.workspace(64) == id(stream) and first.fault("input 1").record == 0x1000
    gc.disable()  # freed by reference counting alone, not by a cycle collection
    try:
        gone = weakref.ref(stream)
        del stream
        assert gone() is None
    finally:
        gc.enable()


class _Shape(ctypes.Structure):
    _fields_ = [("rows", ctypes.c_int32), ("cols", ctypes.c_int32), ("eps", ctypes.c_float)]  # 12 bytes


def test_a_launch_keeps_its_parameters_in_one_buffer():
    """A bound launch's parameter array (what cuLaunchKernel reads at argv_addr) points at each
    parameter's bytes, each 8-byte aligned in the launch's one buffer; param_bytes reads them as
    they are now (native replay writes moving addresses at param_address), and the key compares
    launches by their bytes."""
    params = [ctypes.c_uint64(0x1122334455667788), ctypes.c_int32(-5), _Shape(3, 7, 0.5), ctypes.c_uint8(9)]
    launch = cuda_graphs._Launch("f", KernelOp("k", (4, 2), (128,), params))
    assert launch.grid == (4, 2, 1) and launch.block == (128, 1, 1)
    assert launch.sizes == (8, 4, 12, 1)
    pointers = (ctypes.c_uint64 * 4).from_address(launch.argv_addr)
    for i, v in enumerate(params):
        assert pointers[i] == launch.param_address(i) and launch.param_address(i) % 8 == 0
        assert launch.param_bytes(i) == bytes(v) == ctypes.string_at(pointers[i], ctypes.sizeof(v))
    ctypes.c_uint64.from_address(launch.param_address(0)).value = 42  # as native replay moves an address
    assert launch.param_bytes(0) == bytes(ctypes.c_uint64(42))
    again = cuda_graphs._Launch("f", KernelOp("k", (4, 2), (128,), params))
    other = cuda_graphs._Launch("f", KernelOp("k", (4, 2), (128,), params[:2] + [_Shape(3, 8, 0.5), params[3]]))
    assert again.key == launch.key and other.key != launch.key
    none = cuda_graphs._Launch("f", KernelOp("k", (1,), (32,), []))
    assert none.sizes == () and none.argv_addr != 0
