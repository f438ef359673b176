"""tests/ort_differences.py names tests by node id; a test renamed or moved to another file would
leave its entry naming nothing, and the test would then fail on the older releases it lists (and an
entry naming nothing hides no failure it should). Every entry names a test function that exists
in the file it names."""
from __future__ import annotations

import re
from pathlib import Path

from ort_differences import DIFFERENCES

ROOT = Path(__file__).resolve().parents[2]


def test_every_listed_case_names_an_existing_test():
    missing = []
    for diff in DIFFERENCES:
        for case in diff.cases:
            path, _, rest = case.partition("::")
            function = re.split(r"[\[*]", rest, maxsplit=1)[0]
            file = ROOT / path
            # a def, or a module-level name bound to a made test (tests/ops_vision_harness.case_tests)
            defined = rf"^(def {re.escape(function)}\(|(\w+, )*{re.escape(function)}(, \w+)* = )"
            if not file.is_file() or not re.search(defined, file.read_text(), re.M):
                missing.append(case)
    assert not missing, f"entries naming no test: {missing}"
