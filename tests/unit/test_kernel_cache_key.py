"""The kernel cache's key covers every header a module may include: a CUBIN compiled before a
change to kernels/hipep_device.h or to a module's own header (matmul_nbits.h) is never reused."""
from __future__ import annotations

import os

from hipep.runtime import kernel_cache


def test_cache_key_changes_with_every_header(tmp_path, monkeypatch):
    (tmp_path / kernel_cache.HEADER).write_text("// portability header\n")
    (tmp_path / "shared.h").write_text("#define WIDTH 4\n")
    (tmp_path / "mod.hip").write_text('#include "shared.h"\n')
    monkeypatch.setenv(kernel_cache.KERNELS_ENV, str(tmp_path))
    monkeypatch.setattr(kernel_cache, "nvrtc_version", lambda: (13, 0))
    source = kernel_cache.module_source("mod")
    first = kernel_cache.cache_key(source, "sm_90", {})
    assert kernel_cache.cache_key(source, "sm_90", {}) == first
    (tmp_path / "shared.h").write_text("#define WIDTH 8\n")
    os.utime(tmp_path / "shared.h", ns=(1, 10**18))  # a new mtime even within the clock's resolution
    second = kernel_cache.cache_key(source, "sm_90", {})
    assert second != first
    (tmp_path / kernel_cache.HEADER).write_text("// portability header, changed\n")
    os.utime(tmp_path / kernel_cache.HEADER, ns=(1, 10**18))
    assert kernel_cache.cache_key(source, "sm_90", {}) not in (first, second)


def test_a_header_or_module_added_to_the_folder_is_seen(tmp_path, monkeypatch):
    """The folder is listed once per state of it (its mtime), not walked on every key."""
    (tmp_path / kernel_cache.HEADER).write_text("// portability header\n")
    (tmp_path / "mod.hip").write_text("// a module\n")
    monkeypatch.setenv(kernel_cache.KERNELS_ENV, str(tmp_path))
    monkeypatch.setattr(kernel_cache, "nvrtc_version", lambda: (13, 0))
    source = kernel_cache.module_source("mod")
    first = kernel_cache.cache_key(source, "sm_90", {})
    assert "late" not in kernel_cache.kernel_sources()
    (tmp_path / "extra.h").write_text("#define EXTRA 1\n")
    (tmp_path / "late.hip").write_text("// a module added later\n")
    os.utime(tmp_path, ns=(1, 10**18))  # the folder's new state even within the clock's resolution
    assert kernel_cache.cache_key(source, "sm_90", {}) != first
    assert "late" in kernel_cache.kernel_sources()
    assert "a module added later" in kernel_cache.module_source("late")
