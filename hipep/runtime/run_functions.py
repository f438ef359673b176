"""The functions the executor generates from a plan or a shape program and calls on every run
(hipep.runtime.executor): the run's symbols and the guards' verdict from its inputs (`probe`,
`signature`), the input and output checks, the in-place pairs, and the replay's patches. Each is
Python source built once and compiled, so a run costs one call where a loop over the plan would
interpret it again."""
from __future__ import annotations

import numpy as np

from ..errors import HipepError
from ..plan import Plan
from ..symbolic import _code as expr_code
from ..symbolic import compiled
from .shapes import MAX_BYTES, MAX_EXTENT, ShapeProgram


def _data_pointers_py(arrays):
    return [0 if a is None else a.__array_interface__["data"][0] for a in arrays]


try:  # one native call for all pointers of a run (numpy's own way costs ~1.7 us per array)
    from .._native import data_pointers as _data_pointers
except ImportError:  # the runtime without the plugin library (a plan run on its own)
    _data_pointers = _data_pointers_py


def picker(indices):
    if not indices:
        return lambda env: ()
    src = "def pick(env):\n    return (" + ", ".join(f"env[{i}]" for i in indices) + ",)\n"
    scope: dict = {}
    exec(compiled(src, "<hipep pick>"), scope)
    return scope["pick"]


def _signature_lines(plan: Plan, shape: ShapeProgram) -> list[str]:
    """Source lines that bind x<pos> (the input) and s<pos> (its shape) for every traced input and
    return None when an input's presence or rank differs from the trace, an input read by element
    has fewer elements than the trace read, or a pinned input holds other bytes than the trace
    used (compared bit for bit: a NaN the trace saw matches itself; hipep.runtime.shapes)."""
    lines = []
    for pos, r in enumerate(shape.ranks):
        if plan.values[plan.inputs[pos]].kind == "weight":
            continue
        if r is None:
            lines.append(f"    if ins[{pos}] is not None: return None")
        else:
            lines.append(f"    x{pos} = ins[{pos}]")
            lines.append(f"    if x{pos} is None: return None")
            lines.append(f"    s{pos} = x{pos}.shape")
            lines.append(f"    if len(s{pos}) != {r}: return None")
    read_sizes: dict[int, int] = {}
    for name in shape.symbols:
        if name[0] == "d":
            pos, k = map(int, name[1:].split("."))
            read_sizes[pos] = max(read_sizes.get(pos, 0), k + 1)
    for pos, n in read_sizes.items():  # an input read by element may have shrunk: trace again
        lines.append(f"    if x{pos}.size < {n}: return None")
    for pos, data in sorted(shape.pins.items()):  # one read of the whole input (OrtDeviceArray.tobytes)
        lines.append(f"    if x{pos}.tobytes() != {data!r}: return None")
    return lines


def signature_function(plan: Plan, shape: ShapeProgram):
    """f(inputs) → the symbol values of this run (in `shape.symbols` order), or None when the
    inputs' presence or ranks differ from the traced ones, or a pinned input's bytes do."""
    lines = ["def signature(ins):"] + _signature_lines(plan, shape)
    terms = []
    for name in shape.symbols:
        kind, pos, k = name[0], *map(int, name[1:].split("."))
        terms.append(f"s{pos}[{k}]" if kind == "i" else f"int(x{pos}.reshape(-1)[{k}])")
    lines.append("    return (" + ", ".join(terms) + ("," if terms else "") + ")")
    scope: dict = {}
    exec(compiled("\n".join(lines) + "\n", "<hipep signature>"), scope)
    return scope["signature"]


def plain_inputs_function(dtypes, device_arrays=frozenset()):
    """f(inputs) → True when every input is None, a C-contiguous numpy array or one of the
    device's own arrays (`device_arrays`: its classes), of exactly the plan's dtype (what ORT
    hands Compute), so Executor._check_inputs has nothing to do."""
    lines = ["def inputs_plain(ins):"]
    scope: dict = {"ndarray": np.ndarray, "OWN": device_arrays}
    for pos, dtype in enumerate(dtypes):
        scope[f"D{pos}"] = dtype
        lines += [f"    x = ins[{pos}]",
                  "    if x is not None:",
                  "        c = x.__class__",
                  "        if c is ndarray:",
                  f"            if x.dtype is not D{pos} or not x.flags.c_contiguous:",
                  "                return False",
                  f"        elif c not in OWN or x.dtype is not D{pos}:",
                  "            return False"]
    lines.append("    return True")
    exec(compiled("\n".join(lines) + "\n", "<hipep inputs_plain>"), scope)
    return scope["inputs_plain"]


def exact_outputs_function(dtypes):
    """f(arrays, shapes) → True when `arrays` are exactly one per output, each of the plan's dtype
    object and of its shape (`shapes` a tuple of tuples); False sends the caller to the detailed
    check that names what differs."""
    n = len(dtypes)
    scope: dict = {f"D{j}": d for j, d in enumerate(dtypes)}
    names = "".join(f"a{j}, " for j in range(n))
    dtypes_same = " and ".join(f"a{j}.dtype is D{j}" for j in range(n)) or "True"
    src = (f"def outputs_exact(arrays, shapes):\n"
           f"    if len(arrays) != {n}: return False\n"
           + (f"    ({names}) = arrays\n" if n else "")
           + f"    return {dtypes_same} and ({''.join(f'a{j}.shape, ' for j in range(n))}) == shapes\n")
    exec(compiled(src, "<hipep outputs_exact>"), scope)
    return scope["outputs_exact"]


def alias_function(name: str, pairs):
    """f(inputs, outputs) → per declared in-place pair (output position, input position, what),
    whether ORT handed out the output in the input's memory. Memory that overlaps without being
    the same tensor is an error: no kernel is written for it."""
    lines = ["def aliases(ins, outs):"]
    arrays = []
    for j, pos, _what in pairs:
        arrays += [f"outs[{j}]", f"ins[{pos}]"]
    lines.append(f"    p = data_pointers(({', '.join(arrays)},))")
    for k, (j, pos, _what) in enumerate(pairs):
        lines += [f"    src = ins[{pos}]",
                  "    if src is None:",
                  f"        a{k} = False",
                  "    else:",
                  f"        o, i, on, sn = p[{2 * k}], p[{2 * k + 1}], outs[{j}].nbytes, src.nbytes",
                  f"        a{k} = o == i and on == sn",
                  f"        if not a{k} and o < i + sn and i < o + on:",
                  f"            overlap({k})"]
    lines.append("    return (" + ", ".join(f"a{k}" for k in range(len(pairs))) + ",)")

    def overlap(k):
        raise HipepError(f"{name}: {pairs[k][2]} overlap in memory without being the same buffer")

    scope: dict = {"data_pointers": _data_pointers, "overlap": overlap}
    exec(compiled("\n".join(lines) + "\n", "<hipep aliases>"), scope)
    return scope["aliases"]


def patch_function(sites):
    """f(inputs, outputs, external view shapes) → a run's replay patches: (node, argument, array)
    for every captured argument that is ORT's memory, in the order of `sites`."""
    scope: dict = {}
    items = []
    for m, (node, k, (kind, index, view)) in enumerate(sites):
        scope[f"n{m}"] = node
        a = f"{'ins' if kind == 'in' else 'outs'}[{index}]"
        items.append(f"(n{m}, {k}, {a if view < 0 else f'{a}.reshape(ext[{view}])'})")
    src = "def patches(ins, outs, ext):\n    return [" + ", ".join(items) + "]\n"
    exec(compiled(src, "<hipep patches>"), scope)
    return scope["patches"]


def probe_function(plan: Plan, shape: ShapeProgram, value_guards: dict, layout_indices, outs):
    """f(inputs) → (symbol values, layout signature, output shapes), or None when the inputs'
    presence or ranks differ from the traced ones, a pinned input's bytes do, a value guard breaks,
    or an output would be too large to allocate (the caller's slow path then says which). One call
    per run: the signature, the value guards, the layout key and the output shapes of _Program in
    one function."""
    names = {s: f"v{i}" for i, s in enumerate(shape.symbols)}
    lines = ["def probe(ins):"] + _signature_lines(plan, shape)
    for i, name in enumerate(shape.symbols):
        kind, pos, k = name[0], *map(int, name[1:].split("."))
        lines.append(f"    v{i} = " + (f"s{pos}[{k}]" if kind == "i" else f"int(x{pos}.reshape(-1)[{k}])"))
    terms = []
    for (op, a, b), result in value_guards.items():
        t = f"({expr_code(a, names)} {op} {expr_code(b, names)})"
        terms.append(t if result else f"not {t}")
    if terms:
        lines.append(f"    if not ({' and '.join(terms)}): return None")
    for j, (vid, exprs) in enumerate(zip(plan.outputs, outs)):
        lines.append(f"    o{j} = (" + "".join(f"{expr_code(e, names)}, " for e in exprs) + ")")
        if any(not isinstance(e, int) for e in exprs):  # static shapes were checked when traced
            limit = MAX_BYTES // np.dtype(plan.values[vid].dtype).itemsize
            dims = [f"o{j}[{k}]" for k in range(len(exprs))]
            lines.append(f"    n{j} = {' * '.join(dims)}")
            # (an empty tensor's other extents must be int64 too; the max only where it is empty)
            empty_past_int64 = f"(not n{j} and max({', '.join(dims)}, 0) > {MAX_EXTENT})"
            lines.append(f"    if n{j} > {limit} or {empty_past_int64}: return None")
    env = "".join(f"v{i}, " for i in range(len(shape.symbols)))
    layout = "".join(f"v{i}, " for i in layout_indices)
    lines.append(f"    return ({env}), ({layout}), (" + "".join(f"o{j}, " for j in range(len(outs))) + ")")
    scope: dict = {}
    exec(compiled("\n".join(lines) + "\n", "<hipep probe>"), scope)
    return scope["probe"]
