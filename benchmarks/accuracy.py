"""hipep vs ONNX Runtime's CPU EP, output by output: `python benchmarks/accuracy.py [--models ...]`
(the same as `python -m hipep accuracy`). See hipep/tools/accuracy.py."""
import sys

from hipep.tools.accuracy import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
