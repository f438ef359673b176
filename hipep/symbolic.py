"""Symbolic integers: how shapes become expressions without rewriting every shape rule.

A `SymInt` is an `int` with the value it has in the run being traced *and* an expression saying
where that value comes from (input dims, integer arithmetic). The runtime hands shape rules
SymInt dims; arithmetic on them builds expressions, and every decision a rule takes on them —
`d == 1`, `d < 0`, `max(t, cap)` — is recorded as a guard: a constraint expression with the
result it had. A rule's output dims are then expressions over the inputs' dims, valid for every
input whose guards evaluate the same way. Where a rule leaves symbolic ground (`int(d)`, `d / 2`,
a numpy conversion that calls `__index__`), the value is pinned: a guard `expr == value`.

Expressions are plain data, so a traced shape program can be stored with a plan:
  * an `int` is a constant;
  * `("s", name)` is a symbol (the runtime names input dims `"i3.1"`: input 3, axis 1);
  * `(op, a, b)` with op in `+ - * // % max min` (`//`, `%`: floor semantics, as Python's), or
    `("neg", a)`.
`compile_exprs` turns a list of them into one Python function of the symbol values.
"""
from __future__ import annotations

import functools
import operator
import threading
from typing import Any, Iterable

Expr = Any  # int | tuple


def sym(name: str) -> tuple:
    return ("s", name)


# ---- guard recording -------------------------------------------------------------------------

class Trace:
    """Collects the guards recorded while it is active on this thread."""

    def __init__(self):
        self.guards: dict[tuple, bool] = {}

    def record(self, op: str, a: Expr, b: Expr, result: bool) -> None:
        if isinstance(a, int) and isinstance(b, int):
            return  # constant: holds for every input
        if a == b and op in ("==", "<=", ">=", "!=", "<", ">"):
            return  # an expression against itself: decided for every input
        self.guards[(op, a, b)] = bool(result)

    def __enter__(self):
        _active.stack = getattr(_active, "stack", []) + [self]
        return self

    def __exit__(self, *exc):
        _active.stack = _active.stack[:-1]


_active = threading.local()


def _record(op: str, a: Expr, b: Expr, result: bool) -> None:
    stack = getattr(_active, "stack", None)
    if stack:
        stack[-1].record(op, a, b, result)


# ---- the integer -----------------------------------------------------------------------------

_FOLD = {"+": operator.add, "-": operator.sub, "*": operator.mul, "//": operator.floordiv,
         "%": operator.mod, "max": max, "min": min}


def expr_of(x) -> Expr:
    return x.expr if isinstance(x, SymInt) else int(x)


def _make(op: str, a, b) -> "SymInt | int":
    ea, eb = expr_of(a), expr_of(b)
    value = _FOLD[op](int.__int__(a) if isinstance(a, SymInt) else int(a),
                      int.__int__(b) if isinstance(b, SymInt) else int(b))
    if isinstance(ea, int) and isinstance(eb, int):
        return value
    # a few identities keep expressions short (they are evaluated on every run)
    if op in ("+", "-") and eb == 0:
        return a if isinstance(a, SymInt) else SymInt(value, ea)
    if op == "+" and ea == 0:
        return b if isinstance(b, SymInt) else SymInt(value, eb)
    if op == "*" and eb == 1 or op == "//" and eb == 1:
        return a if isinstance(a, SymInt) else SymInt(value, ea)
    if op == "*" and ea == 1:
        return b if isinstance(b, SymInt) else SymInt(value, eb)
    if op == "*" and (ea == 0 or eb == 0):
        return 0
    return SymInt(value, (op, ea, eb))


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) or _is_np_int(x)


def _is_np_int(x) -> bool:
    try:
        import numpy as np
    except ImportError:  # pragma: no cover
        return False
    return isinstance(x, np.integer)


class SymInt(int):
    """An int that remembers the expression it was computed from (see the module docstring)."""

    def __new__(cls, value: int, expr: Expr):
        obj = int.__new__(cls, value)
        obj.expr = expr
        return obj

    def __repr__(self):
        return f"{int.__int__(self)}{{{format_expr(self.expr)}}}"

    __str__ = int.__repr__
    __hash__ = int.__hash__

    def __reduce__(self):  # copies and pickles are plain ints
        return (int, (int.__int__(self),))

    # arithmetic that stays symbolic
    def __add__(self, o):
        return _make("+", self, o) if _is_int(o) else NotImplemented

    def __radd__(self, o):
        return _make("+", o, self) if _is_int(o) else NotImplemented

    def __sub__(self, o):
        return _make("-", self, o) if _is_int(o) else NotImplemented

    def __rsub__(self, o):
        return _make("-", o, self) if _is_int(o) else NotImplemented

    def __mul__(self, o):
        return _make("*", self, o) if _is_int(o) else NotImplemented

    def __rmul__(self, o):
        return _make("*", o, self) if _is_int(o) else NotImplemented

    def __floordiv__(self, o):
        return _make("//", self, o) if _is_int(o) else NotImplemented

    def __rfloordiv__(self, o):
        return _make("//", o, self) if _is_int(o) else NotImplemented

    def __mod__(self, o):
        return _make("%", self, o) if _is_int(o) else NotImplemented

    def __rmod__(self, o):
        return _make("%", o, self) if _is_int(o) else NotImplemented

    def __neg__(self):
        return _make("-", 0, self)

    def __pos__(self):
        return self

    def __abs__(self):
        return self if self >= 0 else -self

    # decisions: recorded as guards
    def _compare(self, op: str, o, fn):
        if not _is_int(o):
            if isinstance(o, float):
                self.pin()
                return fn(int.__int__(self), o)
            return NotImplemented
        r = fn(int.__int__(self), value(o))
        _record(op, self.expr, expr_of(o), r)
        return r

    def __eq__(self, o):
        return self._compare("==", o, operator.eq)

    def __ne__(self, o):
        return self._compare("!=", o, operator.ne)

    def __lt__(self, o):
        return self._compare("<", o, operator.lt)

    def __le__(self, o):
        return self._compare("<=", o, operator.le)

    def __gt__(self, o):
        return self._compare(">", o, operator.gt)

    def __ge__(self, o):
        return self._compare(">=", o, operator.ge)

    def pin(self) -> int:
        """The plain value, recording that the trace depends on it exactly."""
        v = int.__int__(self)
        _record("==", self.expr, v, True)
        return v


def _pinning(name: str):
    base = getattr(int, name)

    def method(self, *args):
        args = tuple(a.pin() if isinstance(a, SymInt) else a for a in args)
        return base(self.pin(), *args)
    method.__name__ = name
    return method


# Everything else leaves symbolic ground: the value is pinned, then the plain int method runs.
for _name in ("__int__", "__index__", "__float__", "__bool__", "__truediv__", "__rtruediv__", "__pow__",
              "__rpow__", "__lshift__", "__rlshift__", "__rshift__", "__rrshift__", "__and__", "__rand__",
              "__or__", "__ror__", "__xor__", "__rxor__", "__invert__", "__round__", "__trunc__", "__floor__",
              "__ceil__", "__divmod__", "__rdivmod__"):
    setattr(SymInt, _name, _pinning(_name))


def value(x) -> int:
    """The plain value of an int or SymInt, without pinning (for messages and sizes)."""
    return int.__int__(x) if isinstance(x, SymInt) else int(x)


# ---- expressions as code ---------------------------------------------------------------------

def symbols_of(e: Expr, out: set | None = None) -> set:
    out = set() if out is None else out
    if isinstance(e, tuple):
        if e[0] == "s":
            out.add(e[1])
        else:
            for a in e[1:]:
                symbols_of(a, out)
    return out


def evaluate(e: Expr, values: dict) -> int:
    """The expression's value with `values` for its symbols (KeyError names a missing one)."""
    if isinstance(e, int):
        return e
    if e[0] == "s":
        return values[e[1]]
    return _FOLD[e[0]](evaluate(e[1], values), evaluate(e[2], values))


def format_expr(e: Expr) -> str:
    if isinstance(e, int):
        return str(e)
    if e[0] == "s":
        return e[1]
    if e[0] in ("max", "min"):
        return f"{e[0]}({format_expr(e[1])}, {format_expr(e[2])})"
    return f"({format_expr(e[1])} {e[0]} {format_expr(e[2])})"


def _code(e: Expr, names: dict[str, str]) -> str:
    if isinstance(e, int):
        return repr(e)
    if e[0] == "s":
        return names[e[1]]
    if e[0] in ("max", "min"):
        return f"{e[0]}({_code(e[1], names)}, {_code(e[2], names)})"
    return f"({_code(e[1], names)} {e[0]} {_code(e[2], names)})"


@functools.lru_cache(maxsize=256)
def compiled(src: str, filename: str):
    """The code object of generated source `src` (a function definition), compiled once per
    process: a new input shape's run generates the same source as the shapes before it (its shape
    program, the replay's patches), and Python's compile costs about a millisecond where exec'ing
    the code object into a fresh scope costs microseconds. The most recent 256 are kept (a large
    plan's probe source runs to tens of kB)."""
    return compile(src, filename, "exec")


def compile_exprs(exprs: Iterable[Expr], symbols: list[str], fn_name: str = "evaluate"):
    """One Python function f(values) → tuple of the exprs' values, `values` being the symbols'
    values in the order of `symbols`. Generated once; a call costs about what the arithmetic does."""
    names = {s: f"v{i}" for i, s in enumerate(symbols)}
    body = ", ".join(_code(e, names) for e in exprs)
    unpack = ", ".join(names[s] for s in symbols)
    src = f"def {fn_name}(values):\n"
    if symbols:
        src += f"    ({unpack},) = values\n"
    src += f"    return ({body}{',' if body else ''})\n"
    scope: dict = {}
    exec(compiled(src, f"<hipep {fn_name}>"), scope)
    return scope[fn_name]


def compile_guards(guards: dict[tuple, bool], symbols: list[str], fn_name: str = "guards_hold"):
    """One function f(values) → True when every guard evaluates as recorded."""
    names = {s: f"v{i}" for i, s in enumerate(symbols)}
    terms = []
    for (op, a, b), result in guards.items():
        t = f"({_code(a, names)} {op} {_code(b, names)})"
        terms.append(t if result else f"not {t}")
    unpack = ", ".join(names[s] for s in symbols)
    src = f"def {fn_name}(values):\n"
    if symbols:
        src += f"    ({unpack},) = values\n"
    src += f"    return {' and '.join(terms) if terms else 'True'}\n"
    scope: dict = {}
    exec(compiled(src, f"<hipep {fn_name}>"), scope)
    return scope[fn_name]


def format_guard(guard: tuple, result: bool) -> str:
    op, a, b = guard
    text = f"{format_expr(a)} {op} {format_expr(b)}"
    return text if result else f"not ({text})"
