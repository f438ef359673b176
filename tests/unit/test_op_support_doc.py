"""docs/op-support.md is generated from the op registry (tools/op_support.py); the committed
doc must list exactly what the registry holds."""
from __future__ import annotations

from helpers import load_script


def _tool():
    return load_script("tools/op_support.py", "op_support")


def _rows(section: str) -> dict[tuple[str, str], str]:
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) > 2 and cells[0] not in ("domain",):
            rows[(cells[0], cells[1])] = line
    return rows


def test_committed_doc_matches_registry():
    tool = _tool()
    committed = tool.committed_registry_section()
    assert committed is not None, "docs/op-support.md is missing or has no registry section: run python tools/op_support.py"
    expected = tool.registry_section()
    if committed == expected:
        return
    have, want = _rows(committed), _rows(expected)
    missing = sorted(f"{d}::{o}" for d, o in want.keys() - have.keys())
    extra = sorted(f"{d}::{o}" for d, o in have.keys() - want.keys())
    changed = sorted(f"{d}::{o}" for (d, o) in want.keys() & have.keys() if want[(d, o)] != have[(d, o)])
    raise AssertionError(
        "docs/op-support.md is out of date with the op registry; regenerate it with "
        "`python tools/op_support.py`.\n"
        f"  ops not in the doc: {', '.join(missing) or 'none'}\n"
        f"  ops no longer registered: {', '.join(extra) or 'none'}\n"
        f"  rows that changed: {', '.join(changed) or 'none (header only)'}")


def test_doc_lists_every_registered_op():
    tool = _tool()
    from hipep.ops import all_ops

    rows = _rows(tool.registry_section())
    assert set(rows) == {(op.domain or "ai.onnx", op.op_type) for op in all_ops()}
