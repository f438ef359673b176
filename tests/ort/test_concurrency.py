"""Dynamic shapes with one compile per session; several sessions; concurrent runs."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import hipep
from hipep.demo import build_attention_block

from helpers import assignment, cpu_ep, cpu_session, middle_model, session

CPU_EP = cpu_ep()  # hipep's CPU reference device (HipCpuExecutionProvider beside a GPU)


def _x(rng, batch, seq):
    return rng.standard_normal((batch, seq, 32)).astype(np.float32)


def test_dynamic_dims_compile_once_per_session(rng):
    model = build_attention_block()
    before = hipep.stats().get("compiled_subgraphs", 0)
    sess = session(model)
    fused = len(assignment(sess)[CPU_EP])
    after_create = hipep.stats()["compiled_subgraphs"]
    assert after_create - before == fused
    cpu = cpu_session(model)
    for batch, seq in [(1, 1), (4, 9), (2, 3), (1, 33), (4, 9)]:
        x = _x(rng, batch, seq)
        for g, w in zip(sess.run(None, {"x": x}), cpu.run(None, {"x": x})):
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    assert hipep.stats()["compiled_subgraphs"] == after_create


def test_two_sessions_in_one_process(rng):
    a_model, b_model = build_attention_block(seed=1), middle_model()
    a, b = session(a_model), session(b_model)
    a_cpu, b_cpu = cpu_session(a_model), cpu_session(b_model)
    for _ in range(3):
        x = _x(rng, 2, 5)
        np.testing.assert_allclose(a.run(None, {"x": x})[0], a_cpu.run(None, {"x": x})[0], rtol=1e-5, atol=1e-6)
        f = {"x": rng.standard_normal((3, 3, 3)).astype(np.float32), "y": rng.standard_normal(3).astype(np.float32)}
        np.testing.assert_allclose(b.run(None, f)[0], b_cpu.run(None, f)[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("disable_fallback", [False, True])
def test_four_threads_on_one_session(rng, disable_fallback):
    model = build_attention_block()
    sess = session(model, disable_fallback=disable_fallback)
    cpu = cpu_session(model)
    inputs = [_x(rng, 1 + i % 3, 2 + i) for i in range(16)]
    expected = [cpu.run(None, {"x": x}) for x in inputs]
    failures: list[str] = []
    barrier = threading.Barrier(4)

    def worker(t):
        barrier.wait()
        for rep in range(3):
            for i in range(t, len(inputs), 4):
                got = sess.run(None, {"x": inputs[i]})
                for g, w in zip(got, expected[i]):
                    if g.shape != w.shape or not np.allclose(g, w, rtol=1e-5, atol=1e-6):
                        failures.append(f"thread {t} input {i} rep {rep}")

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a worker hung"
    assert not failures, failures
