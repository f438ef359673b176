"""The executor runs hand-written v2 plans on the CPU device over real memory.

The plans use a few test ops (domain "hipep.test", registered for this module only) whose shape
rules are known, so the tests do not depend on which registry ops have a rule yet. They show that
the schedules only differ when a plan is wrong: a missing Sync or a host/device slot sharing gives
wrong results under `deferred` (always) and `random` (for some seeds), never under `inline`.
"""
from __future__ import annotations

import threading

import numpy as np
import pytest

import hipep
from hipep.errors import HipepError, RuntimeShapeError
from hipep.graph import TensorType, elem_type_of
from hipep.ops import registry
from hipep.ops.registry import ALL, OpDef
from hipep.plan import DEVICE, HOST_VISIBLE, HostStep, If, Launch, Loop, Sync, ValueSpec
from hipep.runtime.cpu import CpuDevice
from hipep.runtime.cuda_driver import CudaError
from hipep.runtime.executor import Executor
from hipep.runtime.memory import Pool

from plan_builder import Builder

D = "hipep.test"
SCHEDULES = ("inline", "deferred", "random")


# ---- test ops ----------------------------------------------------------------------------------

def _t(shape, dtype):
    return TensorType(elem_type_of(np.dtype(dtype)), tuple(shape))


def _same(types, values, attrs, n):
    return [types[0]]


def _broadcast(types, values, attrs, n):
    return [_t(np.broadcast_shapes(types[0].shape, types[1].shape), np.float32)]


def _check_positive(inputs, attrs):
    x = inputs[0]
    if np.any(x <= 0):
        raise RuntimeShapeError(f"CheckPositive: {int(np.sum(x <= 0))} element(s) are not positive")
    return [x.copy()]


def _repeat(inputs, attrs):
    return [np.tile(inputs[0], int(inputs[1]))]


def _repeat_rule(types, values, attrs, n):
    return [_t((types[0].shape[0] * int(values[1]),), np.float32)]


TEST_OPS = [
    OpDef("Add", (1,), ("T", "T"), ("T",), {"T": ALL}, lambda i, a: [np.add(i[0], i[1])], domain=D,
          shape_rule=_broadcast),
    OpDef("Mul", (1,), ("T", "T"), ("T",), {"T": ALL}, lambda i, a: [np.multiply(i[0], i[1])], domain=D,
          shape_rule=_broadcast),
    OpDef("Sum", (1,), ("T",), ("T",), {"T": ALL}, lambda i, a: [np.array(np.sum(i[0]), np.float32)], domain=D,
          shape_rule=lambda t, v, a, n: [_t((), np.float32)]),
    OpDef("Copy", (1,), ("T",), ("T",), {"T": ALL}, lambda i, a: [np.array(i[0])], domain=D, shape_rule=_same),
    OpDef("Twice", (1,), ("T",), ("T",), {"T": ALL}, lambda i, a: [np.concatenate([i[0], i[0]])], domain=D,
          shape_rule=lambda t, v, a, n: [_t((2 * t[0].shape[0],) + t[0].shape[1:], np.float32)]),
    OpDef("ToFloat", (1,), ("T",), ("T",), {"T": ALL}, lambda i, a: [i[0].astype(np.float32)], domain=D,
          shape_rule=lambda t, v, a, n: [_t(t[0].shape, np.float32)]),
    OpDef("Less", (1,), ("T", "T"), ("T",), {"T": ALL}, lambda i, a: [np.less(i[0], i[1])], domain=D,
          shape_rule=lambda t, v, a, n: [_t(np.broadcast_shapes(t[0].shape, t[1].shape), np.bool_)]),
    OpDef("Positive", (1,), ("T",), ("T",), {"T": ALL}, lambda i, a: [np.array(np.all(i[0] > 0))], domain=D,
          shape_rule=lambda t, v, a, n: [_t((), np.bool_)]),
    OpDef("Len", (1,), ("T",), ("T",), {"T": ALL}, lambda i, a: [np.array(i[0].shape[0], np.int64)], domain=D,
          shape_rule=lambda t, v, a, n: [_t((), np.int64)]),
    OpDef("RepeatBy", (1,), ("T", "T"), ("T",), {"T": ALL}, _repeat, domain=D, shape_rule=_repeat_rule,
          host_inputs=(1,)),
    OpDef("CheckPositive", (1,), ("T",), ("T",), {"T": ALL}, _check_positive, domain=D, shape_rule=_same),
    OpDef("NoRule", (1,), ("T",), ("T",), {"T": ALL}, lambda i, a: [np.concatenate([i[0], i[0] + 1])], domain=D),
    OpDef("WrongRule", (1,), ("T",), ("T",), {"T": ALL}, lambda i, a: [np.concatenate([i[0], i[0]])], domain=D,
          shape_rule=_same),
]


@pytest.fixture(autouse=True, scope="module")
def test_ops():
    registry.lookup("", "Add")  # load the real families first
    for op in TEST_OPS:
        registry._REGISTRY[op.key] = op
    yield
    for op in TEST_OPS:
        registry._REGISTRY.pop(op.key, None)


# ---- plan building -----------------------------------------------------------------------------

def launch(op, ins, outs, node=None):
    return Launch(f"{D}::{op}", node or f"{op.lower()}_{outs[0]}", {}, tuple(ins), tuple(outs))


def host(op, ins, outs, node=None):
    return HostStep(f"{D}::{op}", node or f"{op.lower()}_{outs[0]}", {}, tuple(ins), tuple(outs))


def executor(plan, schedule="inline", seed=0):
    return Executor(plan, CpuDevice(schedule, seed))


def warmed(plan, schedule, seed, inputs):
    """An executor that has run once on `inputs` with other values: its slots are big enough,
    so the next run of that size has no growth point (growth syncs, which would hide a hazard)
    and stale memory holds the warm-up run's values."""
    ex = executor(plan, schedule, seed)
    ex.run([np.full_like(a, 3) for a in inputs])
    return ex


def scale_plan(with_sync=True):
    """y = x * (2*sum(x) + 1): a device reduction the host reads in a host step."""
    b = Builder()
    x = b.input()
    one = b.const(np.array(1.0, np.float32), "one")
    a = b.buf()
    s = b.buf(space=HOST_VISIBLE)
    t = b.buf(space=HOST_VISIBLE)
    y = b.buf()
    steps = [launch("Add", [x, x], [a]), launch("Sum", [a], [s])]
    if with_sync:
        steps.append(Sync("the host reads s"))
    steps += [host("Add", [s, one], [t]), launch("Mul", [x, t], [y]), Sync("outputs")]
    return b.plan(steps, [y])


def scale_expected(x):
    return x * (2 * np.sum(x, dtype=np.float32) + 1)


def rng_x(rng, n=5):
    return (rng.standard_normal(n) + 0.25).astype(np.float32)


# ---- (a) correct plans are correct under every schedule ----------------------------------------

@pytest.mark.parametrize("schedule", SCHEDULES)
def test_correct_plan_under_every_schedule(rng, schedule):
    ex = executor(scale_plan(), schedule, seed=7)
    for n in (5, 1, 17, 5):
        x = rng_x(rng, n)
        (y,) = ex.run([x])
        np.testing.assert_allclose(y, scale_expected(x), rtol=1e-5)


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_host_input_read_after_sync(rng, schedule):
    b = Builder()
    x = b.input()
    k, a, y = b.buf("int64", HOST_VISIBLE), b.buf(), b.buf()
    plan = b.plan([launch("Len", [x], [k]), launch("Add", [x, x], [a]), Sync("the host reads k"),
                   launch("RepeatBy", [a, k], [y]), Sync("outputs")], [y])
    ex = executor(plan, schedule, seed=3)
    for n in (2, 4, 3):
        x_ = rng_x(rng, n)
        np.testing.assert_allclose(ex.run([x_])[0], np.tile(2 * x_, n))


def test_outputs_are_fresh_copies(rng):
    ex = executor(scale_plan())
    x = rng_x(rng)
    (y1,) = ex.run([x])
    keep = y1.copy()
    ex.run([x * 3])
    np.testing.assert_array_equal(y1, keep)  # the second run reused the pool, not y1
    assert y1.flags.writeable and y1.flags.c_contiguous


def test_inputs_are_read_only_and_never_written(rng):
    ex = executor(scale_plan(), "deferred")
    x = rng_x(rng)
    before = x.copy()
    ex.run([x])
    np.testing.assert_array_equal(x, before)


def test_random_schedule_depends_on_seed_and_run_index_only(rng):
    """Under random, whether the missing sync shows is a function of (seed, run index)."""
    plan = scale_plan(with_sync=False)
    x = rng_x(rng)

    def outcomes(seed):
        ex = executor(plan, "random", seed)
        return [bool(np.allclose(ex.run([x])[0], scale_expected(x), rtol=1e-5)) for _ in range(12)]

    assert outcomes(5) == outcomes(5)


# ---- (b) a missing Sync shows -------------------------------------------------------------------

def test_missing_sync_is_wrong_deferred_right_inline(rng):
    plan = scale_plan(with_sync=False)
    x = rng_x(rng)
    assert np.allclose(warmed(plan, "inline", 0, [x]).run([x])[0], scale_expected(x), rtol=1e-5)
    ex = warmed(plan, "deferred", 0, [x])
    for _ in range(3):
        x = rng_x(rng)
        got = ex.run([x])[0]
        assert not np.allclose(got, scale_expected(x), rtol=1e-5)  # the host read last run's sum
    # on a first run every slot grows, and growth syncs: that hides the hazard, the later runs show it
    # with the sync the deferred schedule is right
    ex = warmed(scale_plan(), "deferred", 0, [x])
    for _ in range(3):
        x = rng_x(rng)
        np.testing.assert_allclose(ex.run([x])[0], scale_expected(x), rtol=1e-5)


def test_missing_sync_is_wrong_for_some_random_seeds(rng):
    x = rng_x(rng)
    right = [bool(np.allclose(warmed(scale_plan(with_sync=False), "random", seed, [x]).run([x])[0],
                              scale_expected(x), rtol=1e-5)) for seed in range(40)]
    assert not all(right) and any(right), right
    # the correct plan is right for every one of those seeds
    for seed in range(40):
        ex = warmed(scale_plan(), "random", seed, [x])
        np.testing.assert_allclose(ex.run([x])[0], scale_expected(x), rtol=1e-5)


def test_missing_final_sync_returns_what_memory_holds(rng):
    b = Builder()
    x = b.input()
    y = b.buf()
    plan = b.plan([launch("Add", [x, x], [y])], [y])  # no final Sync
    x1 = rng_x(rng)
    np.testing.assert_allclose(executor(plan, "inline").run([x1])[0], 2 * x1)
    ex = executor(plan, "deferred")
    assert np.isnan(ex.run([x1])[0]).all()  # nothing ran yet: fresh (poisoned) memory
    assert ex.pool_sets()[0].stream.pending == 1
    want = 2 * x1
    x1[:] = 0  # ORT's input memory is gone after Compute: the queued Add must not read it
    # The next run's first growth point syncs, so the first run's Add finally runs in the memory
    # the second run uses (on a GPU too: the next-run hazard the final Sync prevents).
    y = ex.run([rng_x(rng, 100)])[0]
    np.testing.assert_array_equal(y[:5], want)
    assert np.isnan(y[5:]).all() and ex.pool_sets()[0].stream.pending == 1


# ---- (c) a host-written buffer sharing a slot with a device buffer ------------------------------

def shared_slot_plan(host_space):
    """a = x+x; b = a*x (a's last use); h = copy(c) by the host; y = b + h.
    With host_space=DEVICE, h shares a's slot: a's storage looks free once b is issued, but the
    queued Add and Mul have not necessarily run."""
    b = Builder()
    x = b.input()
    c = b.const(np.array([10, 20, 30, 40], np.float32), "c")
    a = b.buf(slot=0)
    bb = b.buf(slot=1)
    h = b.buf(space=host_space, slot=0)
    y = b.buf(slot=2)
    b.slots[DEVICE] = 3
    steps = [launch("Add", [x, x], [a]), launch("Mul", [a, x], [bb]), host("Copy", [c], [h]),
             launch("Add", [bb, h], [y]), Sync("outputs")]
    return b.plan(steps, [y])


def test_host_buffer_sharing_a_device_slot_goes_wrong_deferred(rng):
    x = rng_x(rng, 4)
    want = 2 * x * x + np.array([10, 20, 30, 40], np.float32)
    bad = shared_slot_plan(DEVICE)
    assert bad.values[4].slot == bad.values[2].slot and bad.values[4].space == bad.values[2].space
    np.testing.assert_allclose(warmed(bad, "inline", 0, [x]).run([x])[0], want, rtol=1e-6)
    got = warmed(bad, "deferred", 0, [x]).run([x])[0]
    np.testing.assert_allclose(got, 2 * x * x + 2 * x, rtol=1e-6)  # y read a's bytes, not h's
    # the host-buffer rule (h in host-visible memory) makes it right under every schedule
    good = shared_slot_plan(HOST_VISIBLE)
    for schedule in SCHEDULES:
        for seed in range(10):
            np.testing.assert_allclose(warmed(good, schedule, seed, [x]).run([x])[0], want, rtol=1e-6)
    wrong = sum(not np.allclose(warmed(bad, "random", seed, [x]).run([x])[0], want) for seed in range(40))
    assert 0 < wrong < 40


# ---- (d) slot growth keeps live contents --------------------------------------------------------

def growth_plan():
    """a = x+x; b = twice(x) (grows a slot while a is live); c = twice(a); y = b + c."""
    b = Builder()
    x = b.input()
    a, bb, c, y = b.buf(), b.buf(), b.buf(), b.buf()
    steps = [launch("Add", [x, x], [a]), launch("Twice", [x], [bb]), launch("Twice", [a], [c]),
             launch("Add", [bb, c], [y]), Sync("outputs")]
    return b.plan(steps, [y])


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_arena_is_the_maximum_over_signatures_and_addresses_repeat(rng, schedule):
    ex = executor(growth_plan(), schedule, seed=1)
    for n in (2, 3, 1000, 7, 5000, 4):
        x = rng_x(rng, n)
        (y,) = ex.run([x])
        np.testing.assert_allclose(y, 3 * np.concatenate([x, x]), rtol=1e-6)
    (context,) = ex.idle_contexts()
    assert context.sizes[DEVICE] == max(s.arena_bytes[DEVICE] for s in ex.specializations())
    count, address = len(ex.specializations()), context.arenas[DEVICE].ctypes.data
    (y,) = ex.run([x])  # a signature seen before: its layout, at the same addresses
    np.testing.assert_allclose(y, 3 * np.concatenate([x, x]), rtol=1e-6)
    assert len(ex.specializations()) == count and context.arenas[DEVICE].ctypes.data == address


def test_arena_grows_geometrically_so_rising_lengths_rarely_move_it(rng):
    """Inputs growing by one element a run: the arena moves (and every captured graph of the
    context with it) a logarithmic number of times, and never holds less than a run needs."""
    ex = executor(growth_plan())
    ex.run([rng_x(rng, 64)])
    (context,) = ex.idle_contexts()
    first, moves, counted = context.generation, 0, hipep.stats().get("arena_moves", 0)
    for n in range(65, 640):
        address = context.arenas[DEVICE].ctypes.data
        x = rng_x(rng, n)
        (y,) = ex.run([x])
        np.testing.assert_allclose(y, 3 * np.concatenate([x, x]), rtol=1e-6)
        moves += context.arenas[DEVICE].ctypes.data != address
        assert context.sizes[DEVICE] >= max(s.arena_bytes[DEVICE] for s in ex.specializations())
    assert context.generation - first == moves == hipep.stats().get("arena_moves", 0) - counted
    assert 3 <= moves <= 7, moves  # log_1.5(10) is 5.7; growing to each need exactly moved it 575 times


@pytest.mark.parametrize("refusal", [MemoryError, CudaError])  # the CPU device's, the driver's out of memory
def test_arena_takes_the_exact_need_where_the_larger_size_fails(rng, refusal):
    ex = executor(growth_plan())
    ex.run([rng_x(rng, 1000)])
    (context,) = ex.idle_contexts()
    old = context.sizes[DEVICE]
    alloc, asked = context.device.alloc, []

    def alloc_limited(space, nbytes, *args, **kwargs):
        asked.append(nbytes)
        if nbytes > old * 1.2:
            raise refusal(f"{nbytes} bytes: more than this test's device has")
        return alloc(space, nbytes, *args, **kwargs)

    context.device.alloc = alloc_limited
    x = rng_x(rng, 1100)  # needs about 1.1 times the old size; growing would take 1.5 times
    (y,) = ex.run([x])
    np.testing.assert_allclose(y, 3 * np.concatenate([x, x]), rtol=1e-6)
    assert len(asked) == 2 and asked[0] >= 1.5 * old > asked[1] == context.sizes[DEVICE]
    with pytest.raises(HipepError, match="could not allocate .* bytes of device memory"):
        ex.run([rng_x(rng, 2000)])
    (y,) = ex.run([x])  # the session goes on with what fits
    np.testing.assert_allclose(y, 3 * np.concatenate([x, x]), rtol=1e-6)


def test_pool_grow_keeps_every_slot():
    device = CpuDevice()
    pool = Pool(device, DEVICE, 3)
    pool.grow({0: 8, 1: 16, 2: 4})
    for slot, value in ((0, 1.5), (1, 2.5), (2, 3.5)):
        pool.view(slot, np.float32, (1,))[...] = value
    pool.grow({1: 4096})
    assert pool.capacity[1] >= 4096
    ranges = sorted((pool.offset[s], pool.offset[s] + pool.capacity[s]) for s in range(3))
    assert all(end <= start for (_, end), (start, _) in zip(ranges, ranges[1:]))  # no overlap
    assert [float(pool.view(s, np.float32, (1,))[0]) for s in range(3)] == [1.5, 2.5, 3.5]
    pool.compact()  # packed again, contents kept
    assert pool.used <= 2 * sum(pool.capacity) + 256
    assert [float(pool.view(s, np.float32, (1,))[0]) for s in range(3)] == [1.5, 2.5, 3.5]


def test_views_alias_their_source(rng):
    b = Builder()
    x = b.input()
    a = b.buf()
    b.values[len(b.values)] = ValueSpec("buffer", "float32", "v", view_of=a)
    v = len(b.values) - 1
    y = b.buf()
    # a = x + x; v (a view of a's bytes, as 2x2) is written by Copy(x as 2x2) — which overwrites a
    x2 = b.input()
    plan = b.plan([launch("Add", [x, x], [a]), launch("Copy", [x2], [v]), launch("Add", [a, a], [y]),
                   Sync("outputs")], [y, v])
    for schedule in SCHEDULES:
        x_, x2_ = rng_x(rng, 4), rng_x(rng, 4).reshape(2, 2)
        y_, v_ = executor(plan, schedule, 2).run([x_, x2_])
        np.testing.assert_allclose(v_, x2_)
        np.testing.assert_allclose(y_, 2 * x2_.reshape(-1))


# ---- (e) concurrent runs -------------------------------------------------------------------------

@pytest.mark.parametrize("schedule", ["inline", "random"])
def test_four_threads_on_one_executor(rng, schedule):
    ex = executor(scale_plan(), schedule, seed=9)
    inputs = [rng_x(rng, 1 + (i * 7) % 40) for i in range(32)]
    failures: list[str] = []
    barrier = threading.Barrier(4)

    def worker(t):
        barrier.wait()
        for rep in range(5):
            for i in range(t, len(inputs), 4):
                (y,) = ex.run([inputs[i]])
                if y.shape != inputs[i].shape or not np.allclose(y, scale_expected(inputs[i]), rtol=1e-5):
                    failures.append(f"thread {t} input {i} rep {rep}")

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    assert not failures, failures
    assert ex.runs == 4 * 5 * 8
    assert 1 <= len(ex.idle_contexts()) <= 4


# ---- (f) Loop and If ------------------------------------------------------------------------------

def loop_plan(with_body_sync=True):
    """Loop(M, true, acc=x, a=x, b=x*2): body i, cond, acc, a, b →
    cond = float(i) < 2.5; acc += float(i); (a, b) swap; scan sum(acc)."""
    b = Builder()
    x, m = b.input(), b.input("int64", "m")
    true, limit = b.const(np.array(True)), b.const(np.array(2.5, np.float32))
    two = b.const(np.array(2.0, np.float32))
    x2 = b.buf()
    i_arg, c_arg = b.buf("int64", HOST_VISIBLE), b.buf("bool", HOST_VISIBLE)
    acc_arg, a_arg, b_arg = b.buf(), b.buf(), b.buf()
    fi, acc_out, s_out = b.buf(), b.buf(), b.buf()
    c_out = b.buf("bool", HOST_VISIBLE)
    acc_final, a_final, b_final, scan = b.buf(), b.buf(), b.buf(), b.buf()
    body = [launch("ToFloat", [i_arg], [fi]), launch("Add", [acc_arg, fi], [acc_out]),
            launch("Sum", [acc_out], [s_out]), launch("Less", [fi, limit], [c_out])]
    if with_body_sync:
        body.append(Sync("the host reads the loop condition"))
    loop = Loop("the_loop", m, true, (x, x, x2), tuple(body), (i_arg, c_arg, acc_arg, a_arg, b_arg),
                (c_out, acc_out, b_arg, a_arg, s_out), (acc_final, a_final, b_final, scan))
    steps = [launch("Mul", [x, two], [x2]), loop, Sync("outputs")]
    return b.plan(steps, [acc_final, a_final, b_final, scan])


def loop_expected(x, m):
    iters = min(m, 4)  # the condition turns false after i = 3
    acc, a, bb, scan = x.copy(), x.copy(), 2 * x, []
    for i in range(iters):
        acc = acc + np.float32(i)
        scan.append(np.sum(acc, dtype=np.float32))
        a, bb = bb, a
    return acc, a, bb, np.array(scan, np.float32).reshape(iters)


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_loop_plan(rng, schedule):
    ex = executor(loop_plan(), schedule, seed=4)
    for n, m in ((3, 10), (5, 2), (1, 3), (4, 0)):
        x = rng_x(rng, n)
        got = ex.run([x, np.array(m, np.int64)])
        for g, w in zip(got, loop_expected(x, m)):
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-5)


def test_loop_without_its_condition_sync_goes_wrong_deferred(rng):
    x = rng_x(rng, 3)
    m = np.array(10, np.int64)
    right = executor(loop_plan(with_body_sync=False), "inline").run([x, m])
    assert right[3].shape == loop_expected(x, 10)[3].shape
    got = executor(loop_plan(with_body_sync=False), "deferred").run([x, m])
    assert got[3].shape != loop_expected(x, 10)[3].shape  # the host read a stale condition


def if_plan():
    b = Builder()
    x = b.input()
    p = b.buf("bool", HOST_VISIBLE)
    t, e, y = b.buf(), b.buf(), b.buf()
    cond_if = If("branch", p, (launch("Mul", [x, x], [t]),), (t,), (launch("Add", [x, x], [e]),), (e,), (y,))
    return b.plan([launch("Positive", [x], [p]), Sync("the host reads the condition"), cond_if,
                   Sync("outputs")], [y])


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_if_plan(rng, schedule):
    ex = executor(if_plan(), schedule, seed=2)
    for sign in (1, -1, 1):
        x = sign * np.abs(rng_x(rng, 6))
        np.testing.assert_allclose(ex.run([x])[0], x * x if sign > 0 else x + x, rtol=1e-6)


# ---- (g) errors ----------------------------------------------------------------------------------

@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("where", ["device", "host"])
def test_failing_op_names_its_node_and_the_next_run_works(rng, schedule, where):
    b = Builder()
    x = b.input()
    a, c, y = b.buf(), b.buf(space=HOST_VISIBLE if where == "host" else DEVICE), b.buf()
    check = (host if where == "host" else launch)("CheckPositive", [x], [c], node="must_be_positive")
    plan = b.plan([launch("Add", [x, x], [a]), check, launch("Mul", [a, c], [y]), Sync("outputs")], [y])
    ex = executor(plan, schedule, seed=5)
    x = np.abs(rng_x(rng)) + 0.1
    np.testing.assert_allclose(ex.run([x])[0], 2 * x * x, rtol=1e-6)
    with pytest.raises(RuntimeShapeError, match=r"node 'must_be_positive' \(CheckPositive\): CheckPositive: 2 "):
        ex.run([np.array([1, -1, 0, 2], np.float32)])
    for stream in (p.stream for p in ex.pool_sets()):
        assert stream.pending == 0
    np.testing.assert_allclose(ex.run([x])[0], 2 * x * x, rtol=1e-6)


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_replays_read_and_write_each_runs_own_memory(rng, schedule):
    """A replayed specialization takes every run's input arrays and the outputs its allocator hands
    out, never the memory of the run that captured it (the inline schedule passes them straight
    into the launches, the others patch the captured arguments)."""
    ex = executor(scale_plan(), schedule, seed=2)
    given = []

    def allocate(shapes):
        given.append([np.full(s, np.nan, np.float32) for s in shapes])
        return given[-1]
    for i in range(4):
        x = rng_x(rng, 7)
        (y,) = ex.run([x], allocate_outputs=allocate)
        assert y is given[-1][0]
        np.testing.assert_allclose(y, scale_expected(x), rtol=1e-5)
    assert sum(1 for _ in ex.specializations()) == 1
    assert all(np.all(np.isfinite(g[0])) for g in given)  # each run wrote its own output


@pytest.mark.parametrize("allocate, message", [
    (lambda shapes: [np.empty(shapes[0], np.float64)], r"output 0 was allocated as \[7\]:float64, expected \[7\]:float32"),
    (lambda shapes: [np.empty((5,), np.float32)], r"output 0 was allocated as \[5\]:float32, expected \[7\]:float32"),
    (lambda shapes: [], r"allocate_outputs returned 0 arrays for 1 outputs"),
])
def test_outputs_an_allocator_gets_wrong_are_named(rng, allocate, message):
    ex = executor(scale_plan())
    x = rng_x(rng, 7)
    ex.run([x])  # the replayed path checks them too, not only the first run
    with pytest.raises(HipepError, match=message):
        ex.run([x], allocate_outputs=allocate)
    np.testing.assert_allclose(ex.run([x])[0], scale_expected(x), rtol=1e-5)


def test_a_failing_launch_keeps_the_kernel_time_of_those_before_it(rng):
    import time

    from hipep import counters

    b = Builder()
    x = b.input()
    a, c = b.buf(), b.buf()
    plan = b.plan([launch("Add", [x, x], [a]), launch("CheckPositive", [a], [c], node="check"), Sync("outputs")],
                  [c])
    slow = [0]
    add = registry.lookup(D, "Add")
    saved = add.reference

    def slow_add(inputs, attrs):
        time.sleep(0.002)
        slow[0] += 1
        return saved(inputs, attrs)
    object.__setattr__(add, "reference", slow_add)
    try:
        ex2 = executor(plan)
        ex2.run([np.ones(3, np.float32)])
        before = counters.snapshot().get("kernel_us", 0)
        with pytest.raises(RuntimeShapeError, match=r"node 'check' \(CheckPositive\)"):
            ex2.run([-np.ones(3, np.float32)])
        assert slow[0] == 2
        assert counters.snapshot().get("kernel_us", 0) - before >= 2000  # the Add's 2 ms still counted
    finally:
        object.__setattr__(add, "reference", saved)


def test_wrong_shape_rule_is_caught(rng):
    b = Builder()
    x = b.input()
    y = b.buf()
    b.buf()  # room for the bigger result: the rule, not memory, must be what catches it
    plan = b.plan([launch("WrongRule", [x], [y], node="liar"), Sync("outputs")], [y])
    for schedule in SCHEDULES:
        with pytest.raises(RuntimeShapeError, match=r"node 'liar' \(WrongRule\): output 0 .* shape \[8\], but the "
                                                    r"shape rule said \[4\]"):
            executor(plan, schedule).run([rng_x(rng, 4)])


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_op_without_shape_rule_falls_back_to_running_it(rng, schedule):
    b = Builder()
    x = b.input()
    a, y = b.buf(), b.buf()
    plan = b.plan([launch("Add", [x, x], [a]), launch("NoRule", [a], [y]), Sync("outputs")], [y])
    ex = executor(plan, schedule, seed=8)
    for n in (3, 30):
        x_ = rng_x(rng, n)
        np.testing.assert_allclose(ex.run([x_])[0], np.concatenate([2 * x_, 2 * x_ + 1]), rtol=1e-6)


def test_real_registry_op_errors_keep_their_message(rng):
    b = Builder()
    x, w = b.input(), b.input(name="w")
    y = b.buf()
    plan = b.plan([Launch("::MatMul", "proj", {}, (x, w), (y,)), Sync("outputs")], [y])
    ex = executor(plan, "deferred")
    good = [rng.standard_normal((2, 3)).astype(np.float32), rng.standard_normal((3, 4)).astype(np.float32)]
    np.testing.assert_allclose(ex.run(good)[0], good[0] @ good[1], rtol=1e-5)
    with pytest.raises(RuntimeShapeError) as info:
        ex.run([good[0], rng.standard_normal((5, 4)).astype(np.float32)])
    msg = str(info.value)
    assert "node 'proj' (MatMul)" in msg and "[2, 3]" in msg and "[5, 4]" in msg
    np.testing.assert_allclose(ex.run(good)[0], good[0] @ good[1], rtol=1e-5)


def test_malformed_plans_fail_at_load():
    b = Builder()
    x = b.input()
    y = b.buf()
    with pytest.raises(HipepError, match="unknown op hipep.test::Nope"):
        executor(b.plan([Launch(f"{D}::Nope", "n", {}, (x,), (y,))], [y]))
    with pytest.raises(HipepError, match="refers to %42"):
        executor(b.plan([launch("Copy", [42], [y])], [y]))
    with pytest.raises(HipepError, match="got 2 inputs"):
        executor(b.plan([launch("Copy", [x], [y]), Sync("o")], [y])).run([np.zeros(1, np.float32)] * 2)
    with pytest.raises(HipepError, match="is int64, the plan expects float32"):
        executor(b.plan([launch("Copy", [x], [y]), Sync("o")], [y])).run([np.zeros(1, np.int64)])


def test_plan_format_lists_everything():
    text = loop_plan().format()
    assert "loop the_loop" in text and "host_visible slot" in text and "sync  # the host reads" in text
    assert "launch hipep.test::Less" in text and "yield" in text


def test_runs_count_their_wall_time_and_the_hosts_waits_for_the_device(rng):
    """hipep.stats()'s run_us is each run's wall time in the executor, sync_wait_us the part the
    host spent waiting for the device (none on the CPU device, whose programs run on the calling
    thread; a device that reports waits has them added), so run_us - sync_wait_us is hipep's own
    host work per run."""
    import time

    from hipep import counters

    ex = executor(scale_plan())
    x = rng_x(rng, 7)
    ex.run([x])
    before = counters.snapshot()
    t0 = time.perf_counter_ns()
    for _ in range(20):
        ex.run([x])
    wall_us = (time.perf_counter_ns() - t0) / 1000
    after = counters.snapshot()
    run_us = after.get("run_us", 0) - before.get("run_us", 0)
    assert 0 < run_us <= wall_us
    assert after.get("sync_wait_us", 0) == before.get("sync_wait_us", 0)

    class Waiting(CpuDevice):
        def sync_wait_ns(self, stream):
            return 3_000_000  # 3 ms a run, as a GPU's sync would report

    waiting = Executor(ex.plan, Waiting())
    waiting.run([x])
    before = counters.snapshot().get("sync_wait_us", 0)
    waiting.run([x])
    assert counters.snapshot().get("sync_wait_us", 0) - before == 3000
