"""A CUDA stream's workspace (hipep.runtime.cuda: CudaDevice._workspace, cuda_stream.workspace_bytes):
grown, never freed while the stream lives (captured graphs keep each buffer's address), and grown
geometrically, so prompts of ever longer lengths allocate a few buffers instead of one a length.
The device's allocator is a stand-in here: no GPU is needed."""
from __future__ import annotations

from types import SimpleNamespace

from hipep.runtime import cuda
from hipep.runtime.cuda_stream import WORKSPACE_EXTRA_MAX, WORKSPACE_MIN, workspace_bytes


def test_the_first_buffer_is_the_request_or_the_minimum():
    assert workspace_bytes(0, 100) == WORKSPACE_MIN
    assert workspace_bytes(0, 5 << 20) == 5 << 20


def test_a_larger_request_grows_the_buffer_by_half_again_at_least():
    assert workspace_bytes(1 << 20, (1 << 20) + 1) == 3 << 19
    assert workspace_bytes(1 << 20, 4 << 20) == 4 << 20  # past half again: the request itself


def test_the_growth_past_a_large_request_is_bounded():
    last = 300 << 20
    assert workspace_bytes(last, last + 1) == last + 1 + WORKSPACE_EXTRA_MAX


def test_growing_prompt_lengths_allocate_a_few_buffers():
    """Requests growing by 32 kB each (a prompt a token longer each time, its split-K partials), 500
    of them: a logarithmic number of buffers, each address handed out stable until a larger one is
    needed, their sum within 3x the largest buffer (itself at most half again the largest request),
    a fiftieth of what one buffer a length would hold."""
    allocs = []

    def alloc(kind, nbytes):
        allocs.append(nbytes)
        return SimpleNamespace(ptr=0x10000 * len(allocs), nbytes=nbytes)

    dev = object.__new__(cuda.CudaDevice)
    dev.alloc = alloc
    stream = SimpleNamespace(workspace=[])
    ptrs = [dev._workspace(stream, (1 << 16) + 32768 * i) for i in range(500)]
    assert len(allocs) <= 16, allocs  # log base 1.5 of the 250-fold growth, where each length would take one
    assert sum(allocs) <= 3 * allocs[-1] and allocs[-1] <= 1.5 * ((1 << 16) + 32768 * 499)
    assert sum(allocs) < sum((1 << 16) + 32768 * i for i in range(500)) / 50  # one buffer a length: 4.1 GB
    assert [m.nbytes for m in stream.workspace] == allocs and ptrs[-1] == stream.workspace[-1].ptr
    assert dev._workspace(stream, 1000) == ptrs[-1] and len(allocs) <= 16  # a smaller request: the newest buffer
