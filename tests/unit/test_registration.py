"""Registration and the op registry's first load, from fresh interpreters (both are per-process)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest


def _run(script: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    return subprocess.run([sys.executable, "-P", "-c", textwrap.dedent(script)], capture_output=True, text=True,
                          env=env, timeout=180)


def test_concurrent_first_lookups_see_the_whole_registry():
    done = _run("""
        import threading
        from hipep.ops import registry
        names = [("com.microsoft", "GroupQueryAttention"), ("", "Add"), ("", "Resize"), ("", "Loop"),
                 ("com.microsoft", "MatMulNBits"), ("", "TopK"), ("", "Einsum"), ("", "Scan")] * 2
        barrier = threading.Barrier(len(names))
        missing = []
        def look(domain, op):
            barrier.wait()
            if registry.lookup(domain, op) is None:
                missing.append(op)
        threads = [threading.Thread(target=look, args=n) for n in names]
        [t.start() for t in threads]
        [t.join() for t in threads]
        assert not missing, missing
        print("all found")
        """)
    assert done.returncode == 0 and "all found" in done.stdout, done.stderr[-2000:]


def test_genai_registration_is_idempotent_after_the_readme_snippet():
    pytest.importorskip("onnxruntime_genai")
    done = _run("""
        import hipep, onnxruntime_genai as og
        og.register_execution_provider_library("HipExecutionProvider", hipep.get_library_path())  # the README
        from hipep.tools.generate import register_with_genai
        register_with_genai()
        register_with_genai()
        print("registered")
        """)
    assert done.returncode == 0 and "registered" in done.stdout, done.stderr[-2000:]
