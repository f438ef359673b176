"""When a compiled subgraph's runs are replayed natively (hipep.runtime.native_replay): the
`Recorder` builds a record once one specialization's runs repeat, teaches it the shapes of runs that
missed, and drops it when it cannot serve; its learner thread keeps the record a window of variants
ahead of the runs."""
from __future__ import annotations

import atexit
import logging
import os
import select
import threading
import weakref

from ..errors import HipepError
from .cuda_memory import OrtDeviceArray
from .native_replay import WINDOW, NotRecordable, NotYet, Record

log = logging.getLogger("hipep")

MAX_REFUSALS = 4  # records refused for a compiled subgraph before it stops trying

_LEARNERS: "weakref.WeakSet[threading.Thread]" = weakref.WeakSet()
_SHUTTING_DOWN = False


@atexit.register
def _stop_learners() -> None:
    """Ends the learner threads before the interpreter finalizes: a daemon thread that is inside
    native code then (taking the GIL back as it returns) would be ended in a way C++ cannot unwind."""
    global _SHUTTING_DOWN
    _SHUTTING_DOWN = True
    for thread in list(_LEARNERS):
        thread.join(timeout=5)


def _learner(recorder_ref, native_ref, wake_read: int, wake_write: int) -> None:
    """Learns variants ahead of the runs while they run natively: waits in select (without the
    GIL) until a run comes close to the last shapes predicted (native code writes a byte to the
    pipe), then extends the line. On a GPU it learns while the decode loop's thread waits for its
    step's kernels. Holds the recorder and the record's native side only while it learns, so a
    session's end frees them at once; ends with the record."""
    try:
        while True:
            ready, _, _ = select.select([wake_read], [], [], 0.1)
            if ready:
                os.read(wake_read, 4096)
            recorder, native = recorder_ref(), native_ref()
            if _SHUTTING_DOWN or recorder is None or native is None or recorder.record is None \
                    or recorder.record.native is not native:
                return
            if native.take_need() >= 0:
                _extend(recorder, native)
            del recorder, native
    finally:
        native = native_ref()
        if native is not None:
            native.close()  # no more writes to the pipe
        del native
        os.close(wake_read)
        os.close(wake_write)


def _extend(recorder: "Recorder", native) -> None:
    rec = recorder.record
    with recorder._lock:
        todo = rec.extension()
        if todo:  # runs ask again only near the end of this extension
            native.set_frontier(todo[-1][1], WINDOW)
    # one variant at a time under the lock: a run through Python learns in between
    for shapes, ordinal in todo:
        with recorder._lock:
            if recorder.record is not rec:
                return
            try:
                if not rec._learn([shapes], [ordinal]):
                    break
            except Exception as e:  # noqa: BLE001 - runs miss and go through Python instead
                log.debug("hipep: native replay: learning ahead failed: %s: %s", type(e).__name__, e)
                break
    with recorder._lock:
        if recorder.record is rec and todo and rec.frontier != todo[-1][1]:
            native.set_frontier(rec.frontier, WINDOW)  # stopped short: ask from what is there


class Recorder:
    """A compiled subgraph's native replay: builds a record once one specialization's runs repeat,
    teaches it the shapes of runs that missed, and drops it when it cannot serve."""

    def __init__(self, compiled):
        self._compiled = weakref.ref(compiled)  # (it holds the recorder: no cycle, freed when its session ends)
        self._lock = threading.Lock()  # one run learns at a time; the others go on without
        self.record: Record | None = None
        self.previous = None  # (spec, input shapes, addresses) of the latest run through Python
        self.refusals = 0
        self.carried = None  # (spec, tensor positions) a dropped record followed as they moved

    def after_run(self) -> None:
        if not self._lock.acquire(timeout=0.002):  # (the learner holds it for one variant at a time)
            return
        try:
            self._after_run()
        finally:
            self._lock.release()

    def _after_run(self) -> None:
        compiled = self._compiled()
        if compiled is None:
            return
        ex = compiled.executor
        last, ex.last_run = ex.last_run, None
        slot = getattr(compiled, "native_slot", None)
        if last is None or slot is None:
            return
        spec, context, ins, outs, env = last
        shapes = tuple(None if a is None else tuple(a.shape) for a in ins)
        ptrs = tuple(0 if a is None else getattr(a, "ptr", -1) for a in (*ins, *outs))
        previous, self.previous = self.previous, (spec, shapes, ptrs)
        rec = self.record
        if rec is not None:
            if rec.native.broken:
                self.drop()
            elif rec.holds(spec, ins, outs):
                rec.learn(shapes, previous[1] if previous and previous[0] is spec else None)
                return
            elif spec is not rec.spec:
                if any(s is rec.spec for s in list(ex._specs.values())):
                    return  # another layout (a prompt between decode steps): the record stays
                self.drop()  # its layout left the executor's cache: a run of it would miss forever
            else:  # a tensor the record takes as fixed moved: built anew below, that one moving too
                self.carried = (spec, rec.moving | rec.moved(ins, outs))
                self.drop()
        if self.refusals >= MAX_REFUSALS or previous is None or previous[0] is not spec:
            return
        if not all(a is None or type(a) is OrtDeviceArray for a in ins) or \
                not all(type(a) is OrtDeviceArray for a in outs):
            return  # tensors in host memory: the Python path stages them
        moving = {p for p, (a, b) in enumerate(zip(previous[2], ptrs)) if a != b}
        if self.carried is not None and self.carried[0] is spec:
            moving |= self.carried[1]
        home = context.home_of is spec
        if not home:
            if spec.home or any(c.home_of is spec for c in list(ex._all_contexts)):
                return  # its home was in flight: recorded from a run there
            if ex.wants_home(spec, context):
                ex.give_home(spec)  # the next runs take it, the first captures, then one is recorded
                return
        idle = spec.home if home else ex._contexts
        try:
            idle.remove(context)
        except ValueError:
            return  # in use by another run
        try:
            rec = Record(ex, spec, context, ins, outs, env, moving)
            rec._push_graphs()
            rec.learn(shapes, previous[1])
        except (NotRecordable, HipepError) as e:
            self.refusals += not isinstance(e, NotYet)
            log.debug("hipep: %s: no native replay: %s", ex.plan.name, e)
            idle.append(context)
            return
        self.record, self.carried = rec, None  # (the record's own moving set is carried at its drop)
        slot.install(rec.native)
        if _SHUTTING_DOWN:
            return
        wake_read, wake_write = os.pipe()
        os.set_blocking(wake_write, False)  # native code never waits to wake the learner
        rec.native.set_wakeup(wake_write)
        learner = threading.Thread(target=_learner, args=(weakref.ref(self), weakref.ref(rec.native), wake_read,
                                                          wake_write), daemon=True, name="hipep native replay learner")
        _LEARNERS.add(learner)
        learner.start()

    def drop(self) -> None:
        rec, self.record = self.record, None
        if rec is None:
            return
        compiled = self._compiled()
        slot = getattr(compiled, "native_slot", None)
        if slot is not None:
            slot.clear()
        rec.native.close()
        rec.close()
