"""Where the one-row int4 GEMV's time goes on a GPU: candidate designs (benchmarks/gemv_study.hip)
against hipep's own MatMulNBits kernels, a kernel that only loads the weights (the floor for this
access pattern) and a device-to-device copy of the same bytes.

Each row times a CUDA graph of R launches over R copies of the weights (R copies span well past
the L2, so every launch streams its weights from HBM), replayed 20 times between two events: the
time per launch holds the gap between graph nodes, as a decode step's replay does. Shapes: the
~1.1B llama's projections (hidden 2048, FFN 8192, vocab 32000) and a 4096 x 4096 reference; 4-bit
weights, block 32, no zero points, fp16 A and scales.

usage: python benchmarks/gemv_study.py [--out results/] [--ncu] [--only-cols]
  --only-cols: hipep's kernels, the columns-a-warp forms and the tensor-core candidate only
  --ncu: one launch of each kernel on the first shape, for `ncu --set ...` runs (no timing)
"""
from __future__ import annotations

import argparse
import ctypes
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

SHAPES = (("4096x4096", 4096, 4096), ("qkv", 2048, 3072), ("o", 2048, 2048), ("gate/up", 2048, 8192),
          ("down", 8192, 2048), ("lm_head", 2048, 32000))
BLOCK = 32
# gemv_study_tc.hip: h2_mma (rounds of loads in flight U, warps a column group SPLIT, A staged as pairs
# or as whole mma operands FRAG), entries h2_mma_u{U}_s{SPLIT}_f{FRAG}; h2_tc (hipep's tensor-core row
# GEMV, kernels/matmul_nbits_tc.h, at other U and SPLIT), entries h2_tc_u{U}_s{SPLIT}
MMA_VARIANTS = tuple((u, s, f) for f in (0, 1) for u, s in ((4, 1), (8, 1), (4, 2), (8, 2), (4, 4), (8, 4)))
TC_VARIANTS = ((2, 2), (4, 2), (2, 4), (4, 4), (2, 8), (4, 8))
# hipep_mnb_gemv_row1 with C columns a warp and S warps a column, one round of U chunks a lane
# (U * 32 * S chunks cover the row), launch bounds LB: the entries row1_cols_u{U}_c{C}_s{S}_lb{LB}.
COLS_VARIANTS = ((2, 2, 1, 4), (2, 4, 1, 3), (2, 8, 1, 2), (1, 4, 2, 4), (1, 8, 2, 3), (2, 4, 1, 4), (2, 2, 1, 5),
                 (4, 2, 1, 3), (4, 4, 1, 2), (2, 2, 2, 4), (2, 4, 2, 3), (1, 4, 4, 4), (1, 8, 4, 3), (2, 8, 2, 2),
                 (4, 1, 2, 5), (4, 2, 2, 3), (2, 2, 4, 4), (2, 4, 4, 3), (4, 4, 2, 2))
SPAN = 400 * 2**20  # bytes of weights the R copies span
REPLAYS = 20


def _driver():
    from cuda.bindings import driver

    return driver


def _ck(r):
    d = _driver()
    err = r[0] if isinstance(r, tuple) else r
    if err != d.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"CUDA driver call failed: {err}")
    if isinstance(r, tuple):
        return r[1] if len(r) == 2 else r[1:]
    return None


class Launch:
    """A kernel launch with its parameter array kept alive (cuLaunchKernel takes its address)."""

    def __init__(self, func, grid: int, block: int, smem: int, values: list):
        self.func, self.grid, self.block, self.smem, self.values = func, grid, block, smem, values
        self.argv = (ctypes.c_void_p * len(values))(*[ctypes.addressof(v) for v in values])

    def issue(self, stream) -> None:
        _ck(_driver().cuLaunchKernel(self.func, self.grid, 1, 1, self.block, 1, 1, self.smem, stream,
                                     ctypes.addressof(self.argv), 0))


class OverlappedLaunch(Launch):
    """A launch with programmatic stream serialization allowed, as hipep launches its kernels that
    wait for their predecessor in their own code (hipep_grid_wait)."""

    def issue(self, stream) -> None:
        from hipep.runtime.cuda_graphs import _overlap_config  # the configuration hipep's launches use

        config = _overlap_config((self.grid, 1, 1), (self.block, 1, 1), self.smem)
        config.hStream = stream
        _ck(_driver().cuLaunchKernelEx(config, self.func, ctypes.addressof(self.argv), 0))


def time_graph(stream, issue_all, count: int) -> float:
    """µs per node of a captured graph of `count` nodes, replayed REPLAYS times between events."""
    d = _driver()
    _ck(d.cuStreamBeginCapture(stream, d.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED))
    issue_all()
    graph = _ck(d.cuStreamEndCapture(stream))
    exe = _ck(d.cuGraphInstantiate(graph, 0))
    for _ in range(3):
        _ck(d.cuGraphLaunch(exe, stream))
    e0, e1 = _ck(d.cuEventCreate(0)), _ck(d.cuEventCreate(0))
    _ck(d.cuEventRecord(e0, stream))
    for _ in range(REPLAYS):
        _ck(d.cuGraphLaunch(exe, stream))
    _ck(d.cuEventRecord(e1, stream))
    _ck(d.cuEventSynchronize(e1))
    ms = _ck(d.cuEventElapsedTime(e0, e1))
    for h in (exe,):
        _ck(d.cuGraphExecDestroy(h))
    _ck(d.cuGraphDestroy(graph))
    return ms * 1000.0 / (REPLAYS * count)


def study(device, ncu: bool, only_cols: bool = False) -> list[dict]:
    from hipep.runtime import gpu_quant as gq

    d = _driver()
    stream = _ck(d.cuStreamCreate(0))
    with open(os.path.join(HERE, "gemv_study.hip")) as f:
        study_module = device._module("gemv_study", f.read())
    with open(os.path.join(HERE, "gemv_study_tc.hip")) as f:
        tc_module = device._module("gemv_study_tc", f.read())
    mnb_module = device._module("matmul_nbits")
    row_module = device._module("matmul_nbits_row")

    def fn(module, name):
        return _ck(d.cuModuleGetFunction(module, name.encode()))

    rows = []
    rng = np.random.default_rng(0)
    for shape, k, n in SHAPES[:1] if ncu else SHAPES:
        nb, row_bytes = k // BLOCK, k // 2
        w_bytes, s_bytes = n * row_bytes, n * nb * 2
        op_bytes = w_bytes + s_bytes + 2 * k + 2 * n  # weights, scales, A, Y
        copies = 1 if ncu else max(2, min(64, -(-SPAN // op_bytes)))
        w = rng.integers(0, 256, (n, row_bytes), dtype=np.uint8)
        s = rng.uniform(0.005, 0.02, (n, nb)).astype(np.float16)
        a = rng.uniform(-1, 1, k).astype(np.float16)
        ws = [int(_ck(d.cuMemAlloc(w_bytes))) for _ in range(copies)]
        ss = [int(_ck(d.cuMemAlloc(s_bytes))) for _ in range(copies)]
        for p, q in zip(ws, ss):
            _ck(d.cuMemcpyHtoD(p, w.ctypes.data, w.nbytes))
            _ck(d.cuMemcpyHtoD(q, s.ctypes.data, s.nbytes))
        a_ptr, y_ptr, sink = (int(_ck(d.cuMemAlloc(x))) for x in (2 * k, 2 * n, 4 * n + 256))
        _ck(d.cuMemcpyHtoD(a_ptr, a.ctypes.data, a.nbytes))
        deq = np.empty((n, k), np.float32)
        deq[:, 0::2] = (w & 0xF).astype(np.float32) - 8
        deq[:, 1::2] = (w >> 4).astype(np.float32) - 8
        want = (deq * np.repeat(s.astype(np.float32), BLOCK, axis=1)) @ a.astype(np.float32)

        def measure(label, launches, computes=True):
            if ncu:
                launches[0].issue(stream)
                _ck(d.cuStreamSynchronize(stream))
                return
            us = time_graph(stream, lambda: [x.issue(stream) for x in launches], len(launches))
            err = float("nan")
            if computes:
                y = np.empty(n, np.float16)
                _ck(d.cuMemcpyDtoH(y.ctypes.data, y_ptr, y.nbytes))
                err = float(np.linalg.norm(y.astype(np.float32) - want) / np.linalg.norm(want))
            moved = op_bytes if computes else w_bytes
            rows.append({"shape": shape, "kernel": label, "us": us, "gbps": moved / us / 1e3, "bytes": moved,
                         "rel_l2": err})
            print(f"{shape:10s} {label:46s} {us:8.2f} µs {moved / us / 1e3:7.0f} GB/s  rel L2 {err:.1e}", flush=True)

        u64, i64, i32 = ctypes.c_uint64, ctypes.c_longlong, ctypes.c_int
        # hipep: the general GEMV (f32 dequantization, 2 columns a warp, A staged per block)
        tile = gq._gemv_k_tile(1, 32, k, BLOCK)
        args = gq.MatMulNBitsArgs(1, n, k, k, row_bytes, nb, 0, 5, tile, 0, 1, 1, 1, 0)
        f = fn(mnb_module, "hipep_mnb_gemv_f16_b4_m1")
        measure("hipep general GEMV (f32 dequantization)",
                [Launch(f, -(-n // (gq.GEMV_WARPS * gq.GEMV_COLS)), 256, (tile // 32) * (32 + gq.GEMV_PAD) * 4,
                        [u64(a_ptr), u64(ws[i]), u64(ss[i]), u64(0), u64(0), u64(y_ptr), args]) for i in range(copies)])
        # hipep: the row GEMV as the binding launches it (h2: fp16 A; q8: A in int8, accuracy_level 4)
        for variant in ("h2", "q8"):
            per_chunk = 64 if variant == "h2" else 36 + 4 * 32 // BLOCK
            chunks = min(k // 32, gq.GEMV_SMEM_BUDGET // per_chunk)
            args = gq.MatMulNBitsArgs(1, n, k, k, row_bytes, nb, 0, 5, chunks * 32, 0, 1, 1, 1, int(variant == "q8"))
            f = fn(row_module, f"hipep_mnb_gemv_row_{variant}_f16_b4")
            measure(f"hipep row GEMV {variant}" + (" (A quantized: rel L2 is int8's)" if variant == "q8" else ""),
                    [Launch(f, -(-n // gq.GEMV_WARPS), 256, gq.row_smem(chunks, BLOCK, variant == "q8"),
                            [u64(a_ptr), u64(ws[i]), u64(ss[i]), u64(0), u64(0), u64(y_ptr), args])
                     for i in range(copies)])
            q8 = variant == "q8"
            measure(f"hipep row GEMV {variant}, overlapped launches (as hipep launches it)",
                    [OverlappedLaunch(f, -(-n // gq.GEMV_WARPS), 256, gq.row_smem(chunks, BLOCK, q8),
                                      [u64(a_ptr), u64(ws[i]), u64(ss[i]), u64(0), u64(0), u64(y_ptr), args])
                     for i in range(copies)])
            if chunks <= 128:  # the variant hipep takes past one wave (measured here at every grid)
                u = next(x for x in (1, 2, 4) if 32 * x >= chunks)
                f = fn(row_module, f"hipep_mnb_gemv_row1_{variant}_f16_b4_u{u}")
                measure(f"hipep row1 GEMV {variant} (U {u}), overlapped launches",
                        [OverlappedLaunch(f, -(-n // gq.GEMV_WARPS), 256, gq.row_smem(chunks, BLOCK, q8),
                                          [u64(a_ptr), u64(ws[i]), u64(ss[i]), u64(0), u64(0), u64(y_ptr), args])
                         for i in range(copies)])
        # hipep's row1 template with C columns a warp (one round of loads a lane: U * 32 chunks cover the row)
        chunks = k // 32
        for u, c_, s_, lb in COLS_VARIANTS:
            if u * 32 * s_ != chunks:
                continue
            f = fn(study_module, f"row1_cols_u{u}_c{c_}_s{s_}_lb{lb}")
            per_sm = _ck(d.cuOccupancyMaxActiveBlocksPerMultiprocessor(f, 256, chunks * 64))
            args = gq.MatMulNBitsArgs(1, n, k, k, row_bytes, nb, 0, 5, k, 0, 1, 1, 1, 0)
            grid = -(-n * s_ // (gq.GEMV_WARPS * c_))
            measure(f"row1, {c_} column(s) a warp, {s_} warp(s) a column, U {u}, {grid} blocks, {per_sm}/SM; "
                    "overlapped launches",
                    [OverlappedLaunch(f, grid, 256, chunks * 64,
                                      [u64(a_ptr), u64(ws[i]), u64(ss[i]), u64(0), u64(0), u64(y_ptr), args])
                     for i in range(copies)])
        # tensor cores: 8 columns a warp as mma.sync's B operand (h2_mma), SPLIT warps a column group
        for u_m, s_m, frag in MMA_VARIANTS:
            if chunks % (4 * s_m):
                continue
            f = fn(tc_module, f"h2_mma_u{u_m}_s{s_m}_f{frag}")
            grid = -(-n * s_m // 64)
            measure(f"h2_mma{' (A as mma operands)' if frag else ''}, {s_m} warp(s) a column group, {u_m} rounds "
                    f"in flight, {grid} blocks; overlapped launches",
                    [OverlappedLaunch(f, grid, 256, chunks * (64 * (1 + frag) + 4),
                                      [u64(a_ptr), u64(ws[i]), u64(ss[i]), u64(y_ptr), i32(n), i32(row_bytes), i32(nb),
                                       i32(5), i32(k)]) for i in range(copies)])
        # tensor cores: 16 columns a warp as mma.sync's A operand (h2_tc), SPLIT warps a column group
        for u_t, s_t in TC_VARIANTS:
            if chunks % (4 * s_t):
                continue
            f = fn(tc_module, f"h2_tc_u{u_t}_s{s_t}")
            grid = -(-n * s_t // 128)
            args = gq.MatMulNBitsArgs(1, n, k, k, row_bytes, nb, 0, 5, k, 0, 1, 1, 1, 0)
            measure(f"h2_tc, {s_t} warp(s) a column group, {u_t} rounds in flight, {grid} blocks; overlapped launches",
                    [OverlappedLaunch(f, grid, 256, chunks * gq.TC_SMEM_PER_CHUNK,
                                      [u64(a_ptr), u64(ws[i]), u64(ss[i]), u64(0), u64(0), u64(y_ptr), args])
                     for i in range(copies)])
        if only_cols:
            _finish_shape(d, stream, rows, shape, ws, ss + [a_ptr, y_ptr, sink], w_bytes, copies, ncu)
            continue
        # candidates
        f = fn(study_module, "read_only_c1_u4")
        measure("read_only (weights' loads only)",
                [Launch(f, -(-n // 4), 128, 0, [u64(ws[i]), u64(sink), i64(n), i64(row_bytes)]) for i in range(copies)],
                computes=False)
        for c in (1, 2):
            f = fn(study_module, f"read_with_a_c{c}_u4")
            measure(f"read_with_a (+A from L1), {c} column(s) a warp",
                    [Launch(f, -(-n // (4 * c)), 128, 0, [u64(a_ptr), u64(ws[i]), u64(sink), i64(n), i64(row_bytes)])
                     for i in range(copies)], computes=False)
        params = lambda i: [u64(a_ptr), u64(ws[i]), u64(ss[i]), u64(y_ptr), i64(n), i64(row_bytes), i64(nb), i32(5)]
        f = fn(study_module, "f32_a_l1_c2_u4")
        measure("f32_a_l1, 2 columns a warp", [Launch(f, -(-n // 8), 128, 0, params(i)) for i in range(copies)])
        for c, u in ((1, 4), (2, 4), (2, 2)):
            f = fn(study_module, f"h2_a_l1_c{c}_u{u}")
            measure(f"h2_a_l1, {c} column(s) a warp, {u} chunks in flight",
                    [Launch(f, -(-n // (4 * c)), 128, 0, params(i)) for i in range(copies)])
        words = k // 8
        for u in (4, 2):
            aw = next(x for x in (1, 2, 4) if x * 256 >= words)
            f = fn(study_module, f"h2_a_staged_a1_u{u}_w{aw}")
            measure(f"h2_a_staged, a warp a column, {u} chunks in flight",
                    [Launch(f, -(-n // 8), 256, words * 16,
                            [u64(a_ptr), u64(ws[i]), u64(ss[i]), u64(y_ptr), i32(n), i32(row_bytes), i32(nb), i32(5),
                             i32(k)]) for i in range(copies)])
        # persistent warps (one wave, next column's loads in flight) and half2 sums per chunk
        u_k, aw = max(1, k // 1024), next(x for x in (1, 2, 4) if x * 256 >= words)
        staged_params = lambda i: [u64(a_ptr), u64(ws[i]), u64(ss[i]), u64(y_ptr), i32(n), i32(row_bytes), i32(nb),
                                   i32(5), i32(k)]
        f = fn(study_module, f"h2_staged_hacc_u{u_k}_w{aw}")
        measure("h2_a_staged, chunk words summed in half2",
                [Launch(f, -(-n // 8), 256, words * 16, staged_params(i)) for i in range(copies)])
        sms = _ck(d.cuDeviceGetAttribute(d.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                                         _ck(d.cuCtxGetDevice())))
        for hacc in (0, 1):
            f = fn(study_module, f"h2_persist_u{u_k}_w{aw}_h{hacc}")
            per_sm = _ck(d.cuOccupancyMaxActiveBlocksPerMultiprocessor(f, 256, words * 16))
            for fill in (1.0, 0.5):
                grid = min(-(-n // 8), max(1, int(sms * per_sm * fill)))
                measure(f"h2_persist{' half2 sums' if hacc else ''}, {grid} blocks ({per_sm}/SM max)",
                        [Launch(f, grid, 256, words * 16, staged_params(i)) for i in range(copies)])
        # one round of loads per lane: load order, half2 sums, overlapped launches
        for order, hacc, label in ((0, 0, "A then B"), (1, 0, "B then A"), (2, 0, "B, wait, A; overlapped launches"),
                                   (0, 1, "A then B, half2 sums"), (2, 1, "B, wait, A; overlapped, half2 sums")):
            f = fn(study_module, f"h2_row1_u{u_k}_w{aw}_o{order}_h{hacc}")
            kind = OverlappedLaunch if order == 2 else Launch
            measure(f"h2_row1, {label}", [kind(f, -(-n // 8), 256, words * 16, staged_params(i)) for i in range(copies)])
        # K split among S warps of a column, one round of loads a lane
        for s_ in (2, 4):
            u_s = u_k // s_
            if u_s < 1:
                continue
            for order, label in ((0, "A then B"), (2, "B, wait, A; overlapped launches")):
                f = fn(study_module, f"h2_splitk_u{u_s}_w{aw}_s{s_}_o{order}")
                kind = OverlappedLaunch if order == 2 else Launch
                measure(f"h2_splitk, {s_} warps a column, {label}",
                        [kind(f, -(-n * s_ // 8), 256, words * 16, staged_params(i)) for i in range(copies)])
        # bulk copies of a block's columns into shared memory, issued at its start (sm_90+)
        if device.capability >= (9, 0):
            for c_, stages in ((8, 1), (8, 2), (16, 2), (16, 4), (32, 4)):
                f = fn(study_module, f"h2_bulk_c{c_}_s{stages}")
                smem = 128 + c_ * row_bytes + 2 * k
                _ck(d.cuFuncSetAttribute(f, d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem))
                measure(f"h2_bulk, {c_} columns a block in {stages} bulk copies",
                        [Launch(f, -(-n // c_), 256, smem, staged_params(i)) for i in range(copies)])
                measure(f"h2_bulk, {c_} columns a block in {stages} bulk copies; overlapped launches",
                        [OverlappedLaunch(f, -(-n // c_), 256, smem, staged_params(i)) for i in range(copies)])
        _finish_shape(d, stream, rows, shape, ws, ss + [a_ptr, y_ptr, sink], w_bytes, copies, ncu)
    return rows


def _finish_shape(d, stream, rows: list, shape: str, ws: list, others: list, w_bytes: int, copies: int,
                  ncu: bool) -> None:
    """A shape's last row, the copy of the weights' bytes (read and write counted, timed as the
    kernels are; not under --ncu), then its memory freed: the weights' copies `ws` and `others`."""
    if not ncu:
        dst = [int(_ck(d.cuMemAlloc(w_bytes))) for _ in range(copies)]
        us = time_graph(stream, lambda: [_ck(d.cuMemcpyDtoDAsync(dst[i], ws[i], w_bytes, stream))
                                         for i in range(copies)], copies)
        rows.append({"shape": shape, "kernel": "device-to-device copy of the weights (read + write)", "us": us,
                     "gbps": 2 * w_bytes / us / 1e3, "bytes": 2 * w_bytes, "rel_l2": float("nan")})
        print(f"{shape:10s} {'copy of the weights (read + write)':46s} {us:8.2f} µs "
              f"{2 * w_bytes / us / 1e3:7.0f} GB/s")
        others = others + dst
    for p in ws + others:
        _ck(d.cuMemFree(p))


def render(info: dict, rows: list[dict], copy_gbps: float, command: str) -> str:
    import gpu_harness as gh

    lines = gh.header_lines(f"One-row int4 GEMV designs on {info['gpu']}", info, command)
    lines += ["- time per launch: a CUDA graph of R launches over R copies of the weights (spanning "
              f"{SPAN // 2**20} MiB, past the L2), replayed {REPLAYS} times between events; gaps between nodes included",
              "- GB/s: weights, scales, A and Y per launch / time (read_only: the weights only; the copy: read and "
              "write counted)", f"- device-to-device copy of 1 GiB in this run: {copy_gbps:.0f} GB/s", ""]
    lines += ["| shape | kernel | µs | GB/s | % of copy | rel L2 vs f32 |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['shape']} | {r['kernel']} | {r['us']:.2f} | {r['gbps']:.0f} | "
                     f"{100 * r['gbps'] / copy_gbps:.0f} % | {r['rel_l2']:.1e} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    import gpu_harness as gh
    from machine import machine_info

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="folder for <date>-gemv-study-<gpu>.md")
    ap.add_argument("--ncu", action="store_true", help="one launch of each kernel, for a profiler")
    ap.add_argument("--only-cols", action="store_true",
                    help="hipep's kernels, the columns-a-warp rows and h2_mma only (skip the other candidates)")
    ap.add_argument("--device-id", type=int, default=0)
    args = ap.parse_args(argv)
    try:
        device = gh.require_gpu(args.device_id)
    except gh.Unavailable as e:
        return gh.fail("gemv_study.py", str(e))
    device._current()
    rows = study(device, args.ncu, args.only_cols)
    if args.ncu or not args.out:
        return 0
    info = {**machine_info(), **gh.gpu_info(device)}
    copy = gh.copy_bandwidth(device)
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"{info['date']}-gemv-study-{gh.device_slug(info['gpu'])}.md")
    command = "python benchmarks/gemv_study.py " + " ".join(argv if argv is not None else sys.argv[1:])
    with open(path, "w") as f:
        f.write(render(info, rows, copy["gbps"], command.strip()))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
