"""Differential fuzzing of hipep's CPU device against ONNX Runtime's CPU EP.

Each case is a model and one or more sets of feeds:

* **graphs**: random small graphs of ops hipep implements (elementwise, comparisons, Where,
  Cast, reductions, Reshape/Transpose/Concat/Slice/Gather/Squeeze/Unsqueeze/Expand/..., MatMul,
  Gemm, Softmax, LayerNormalization, TopK, NonZero ...), with random shapes (zero-sized dims and
  broadcasting included), dtypes (f32, f16, i32, i64, bool where the op takes them), symbolic
  input dims, and attributes that are valid or, now and then, out of range. A case may run the
  same sessions several times: new values, other extents for the symbolic dims, a repeat.
* **mutations** of such models: truncated bytes, flipped bytes, attributes of the wrong type,
  dangling inputs, cycles, huge dims (2^40, 2^62), wrong input names/dtypes/ranks at run time,
  NaN/Inf inputs, and a few more.

Every case builds `hipep.InferenceSession(model, device="cpu")` and the CPU EP's session from the
same bytes, runs both on the same feeds and is judged (`judge`):

* pass: the outputs agree (dtype, shape, NaN positions, values within the tolerance of the ops
  that made them, see `Check`); both reject; hipep rejects with a clear error: one of hipep's
  error types, or ORT's error carrying hipep's own error type and reason;
* finding: a crash or hang, different answers, hipep answering where the CPU EP rejects, an
  unclear error (a Python exception that is not hipep's, or a traceback).

Cases run in a pool of long-lived worker processes (`Pool`): a crash or hang ends only that
worker, the parent starts another and runs the case again alone in a fresh worker, and every
finding is saved with its seed as a reproducer (`model.onnx`, `feeds.npz`, `case.json`).

    python -m hipep.tools.fuzz --cases 10000 --workers 2 --seed 0
    python -m hipep.tools.fuzz --replay .cache/fuzz/findings/<case>

Generation reads its choices from a `Source`: `SeededSource(seed)` makes case `seed` the same on
every machine, `HypothesisSource` lets hypothesis drive (and shrink) the same generator through
the `cases()` strategy.

The parts, one module each: `cases` (sources, `Case`/`Check`/`Outcome`, `GraphGen`), `graph_ops`
(the op families and `gen_graph`), `mutations` (mutated models and feeds, `gen_case`, `cases()`),
`judge` (verdicts and the known findings), `workers` (`execute` and the worker `Pool`),
`campaign` (campaigns and reproducers) and `cli` (`python -m hipep.tools.fuzz`). This package
re-exports their entry points.
"""
from __future__ import annotations

from .campaign import campaign, format_summary, load_case, save_case, signature
from .cases import Case, Check, GraphGen, HypothesisSource, InputSpec, Invalid, Outcome, SeededSource, Val
from .cli import main
from .graph_ops import FAMILIES, check_for, gen_graph
from .judge import KNOWN, Result, compare, error_clarity, judge, known_finding, optimizer_explains
from .mutations import MUTATIONS, cases, gen_case, gen_mutation
from .workers import Pool, execute, run_one, worker_main

__all__ = ["FAMILIES", "KNOWN", "MUTATIONS", "Case", "Check", "GraphGen", "HypothesisSource", "InputSpec", "Invalid",
           "Outcome", "Pool", "Result", "SeededSource", "Val", "campaign", "cases", "check_for", "compare",
           "error_clarity", "execute", "format_summary", "gen_case", "gen_graph", "gen_mutation", "judge",
           "known_finding", "load_case", "main", "optimizer_explains", "run_one", "save_case", "signature",
           "worker_main"]
