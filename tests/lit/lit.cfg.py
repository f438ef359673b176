# lit configuration for hipep's IR tests: each .mlir file runs hipep-opt and checks its output
# with FileCheck (the `filecheck` command from the Python filecheck package).
import os
import sys

import lit.formats

config.name = "hipep"
config.test_format = lit.formats.ShTest()
config.suffixes = [".mlir"]
config.test_source_root = os.path.dirname(__file__)
config.excludes = ["lit.cfg.py"]

config.substitutions.append(("%hipep-opt", f"{sys.executable} -m hipep.tools.opt"))

# The repository root goes first on PYTHONPATH so `-m hipep.tools.opt` finds this checkout.
_root = os.path.dirname(os.path.dirname(config.test_source_root))
_path = [_root] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])
config.environment["PYTHONPATH"] = os.pathsep.join(_path)
# filecheck and `not` are found on PATH; keep the interpreter's bin directory on it.
config.environment["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
