"""Loop and Scan models shared by the interpreter's device-memory tests (tests/unit) and the GPU
tests: each exercises one thing a loop does to memory, with feeds that make it do it.

  * fibonacci: carried values that trade places (a <- b, b <- a + b: a copy's destination is a
    later copy's source), a condition the body computes on the device (the loop ends early), the
    iteration counter used as data, and a stacked scan output;
  * growing: a carried value whose shape grows every iteration (its slot grows, and moves, in
    the middle of the loop), trip count from an input;
  * scan: Scan with two states and two scan inputs, one read in reverse along axis 1, its scan
    output stacked along axis 1;
  * swap: carried values that are each other's arguments as they are (their copies overlap, so
    they are staged through scratch memory every iteration).
"""
from __future__ import annotations

import numpy as np
from onnx import TensorProto as TP
from onnx import helper

from helpers import make_model, tensor


def fibonacci_model(dtype=TP.FLOAT):
    """Loop(M, cond, a, b) -> (a, b, stack of a * i): a, b = b, a + b while sum(b) < limit."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["b_in"], ["a_out"]),
         helper.make_node("Add", ["a_in", "b_in"], ["b_out"]),
         helper.make_node("ReduceSum", ["b_out"], ["total"], keepdims=0),
         helper.make_node("Less", ["total", "limit"], ["cond_out"]),
         helper.make_node("Cast", ["i"], ["i_f"], to=dtype),
         helper.make_node("Mul", ["a_in", "i_f"], ["scan_out"])],
        "fib_body",
        [tensor("i", TP.INT64, []), tensor("cond_in", TP.BOOL, []),
         tensor("a_in", dtype, [2, 3]), tensor("b_in", dtype, [2, 3])],
        [tensor("cond_out", TP.BOOL, []), tensor("a_out", dtype, [2, 3]), tensor("b_out", dtype, [2, 3]),
         tensor("scan_out", dtype, [2, 3])])
    loop = helper.make_node("Loop", ["M", "cond", "a0", "b0"], ["a", "b", "stack"], body=body, name="fib")
    return make_model([loop],
                      [tensor("M", TP.INT64, []), tensor("cond", TP.BOOL, []), tensor("a0", dtype, [2, 3]),
                       tensor("b0", dtype, [2, 3]), tensor("limit", dtype, [])],
                      [tensor("a", dtype, [2, 3]), tensor("b", dtype, [2, 3]), tensor("stack", dtype, None)],
                      opset=16)


def fibonacci_feeds(dtype=np.float32):
    """Feeds that end by the condition (limit reached), by the trip count, after one iteration,
    and at once (cond false, or M = 0: no iteration, an empty stack of (2, 3) rows)."""
    a0 = np.arange(6, dtype=dtype).reshape(2, 3) * dtype(0.5)
    b0 = np.ones((2, 3), dtype)
    feeds = []
    for m, cond, limit in ((20, True, 200.0), (3, True, 1e9), (1, True, 1e9), (5, False, 1e9), (0, True, 1e9)):
        feeds.append({"M": np.array(m, np.int64), "cond": np.array(cond), "a0": a0, "b0": b0,
                      "limit": np.array(limit, dtype)})
    return feeds


def growing_model():
    """Loop(M) over v: v <- Concat(v, [i]) (float32), its sum stacked: v's extent grows by one
    element each iteration."""
    body = helper.make_graph(
        [helper.make_node("Cast", ["i"], ["i_f"], to=TP.FLOAT),
         helper.make_node("Unsqueeze", ["i_f", "zero"], ["i_row"]),
         helper.make_node("Concat", ["v_in", "i_row"], ["v_out"], axis=0),
         helper.make_node("ReduceSum", ["v_out"], ["sum"], keepdims=0),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "grow_body",
        [tensor("i", TP.INT64, []), tensor("cond_in", TP.BOOL, []), tensor("v_in", TP.FLOAT, ["n"])],
        [tensor("cond_out", TP.BOOL, []), tensor("v_out", TP.FLOAT, ["m"]), tensor("sum", TP.FLOAT, [])],
        [helper.make_tensor("zero", TP.INT64, [1], [0])])
    loop = helper.make_node("Loop", ["M", "", "v0"], ["v", "sums"], body=body, name="grow")
    return make_model([loop], [tensor("M", TP.INT64, []), tensor("v0", TP.FLOAT, ["k"])],
                      [tensor("v", TP.FLOAT, None), tensor("sums", TP.FLOAT, None)], opset=16)


def growing_feeds():
    return [{"M": np.array(m, np.int64), "v0": np.arange(k, dtype=np.float32)} for m, k in ((40, 3), (7, 1), (1, 5), (0, 2))]


def scan_model():
    """Scan(s, t; x, y) -> (s, t, outs): s <- s + x_k * y_k, t <- t * 0.5 + s; y read in reverse
    along its axis 1; outs (s after each step) stacked along axis 1."""
    body = helper.make_graph(
        [helper.make_node("Mul", ["x_k", "y_k"], ["xy"]),
         helper.make_node("Add", ["s_in", "xy"], ["s_out"]),
         helper.make_node("Mul", ["t_in", "half"], ["t_half"]),
         helper.make_node("Add", ["t_half", "s_out"], ["t_out"]),
         helper.make_node("Identity", ["s_out"], ["out_k"])],
        "scan_body",
        [tensor("s_in", TP.FLOAT, [4]), tensor("t_in", TP.FLOAT, [4]), tensor("x_k", TP.FLOAT, [4]),
         tensor("y_k", TP.FLOAT, [4])],
        [tensor("s_out", TP.FLOAT, [4]), tensor("t_out", TP.FLOAT, [4]), tensor("out_k", TP.FLOAT, [4])],
        [helper.make_tensor("half", TP.FLOAT, [], [0.5])])
    scan = helper.make_node("Scan", ["s0", "t0", "x", "y"], ["s", "t", "outs"], body=body, num_scan_inputs=2,
                            scan_input_axes=[0, 1], scan_input_directions=[0, 1], scan_output_axes=[1],
                            name="scan")
    return make_model([scan],
                      [tensor("s0", TP.FLOAT, [4]), tensor("t0", TP.FLOAT, [4]), tensor("x", TP.FLOAT, ["n", 4]),
                       tensor("y", TP.FLOAT, [4, "n"])],
                      [tensor("s", TP.FLOAT, [4]), tensor("t", TP.FLOAT, [4]), tensor("outs", TP.FLOAT, [4, "n"])],
                      opset=16)


def scan_feeds():
    rng = np.random.default_rng(5)
    return [{"s0": rng.standard_normal(4).astype(np.float32), "t0": rng.standard_normal(4).astype(np.float32),
             "x": rng.standard_normal((n, 4)).astype(np.float32), "y": rng.standard_normal((4, n)).astype(np.float32)}
            for n in (6, 1, 17)]


def swap_model():
    """Loop(M) over (a, b) -> (b, a) and a stack of a: the carried values trade places every
    iteration (each result is the other's argument as it is, so their copies overlap)."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["b_in"], ["a_out"]),
         helper.make_node("Identity", ["a_in"], ["b_out"]),
         helper.make_node("Identity", ["a_in"], ["seen"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "swap_body",
        [tensor("i", TP.INT64, []), tensor("cond_in", TP.BOOL, []), tensor("a_in", TP.FLOAT, [3]),
         tensor("b_in", TP.FLOAT, [3])],
        [tensor("cond_out", TP.BOOL, []), tensor("a_out", TP.FLOAT, [3]), tensor("b_out", TP.FLOAT, [3]),
         tensor("seen", TP.FLOAT, [3])])
    loop = helper.make_node("Loop", ["M", "", "a0", "b0"], ["a", "b", "seen_all"], body=body, name="swap")
    return make_model([loop], [tensor("M", TP.INT64, []), tensor("a0", TP.FLOAT, [3]), tensor("b0", TP.FLOAT, [3])],
                      [tensor("a", TP.FLOAT, [3]), tensor("b", TP.FLOAT, [3]), tensor("seen_all", TP.FLOAT, None)],
                      opset=16)


def swap_feeds():
    a0, b0 = np.array([1, 2, 3], np.float32), np.array([-4, -5, -6], np.float32)
    return [{"M": np.array(m, np.int64), "a0": a0, "b0": b0} for m in (5, 6, 1)]


MODELS = {"fibonacci": (fibonacci_model, fibonacci_feeds), "growing": (growing_model, growing_feeds),
          "scan": (scan_model, scan_feeds), "swap": (swap_model, swap_feeds)}
