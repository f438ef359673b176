"""hipep-opt: xDSL's opt driver with hipep's dialect and passes.

    hipep-opt input.mlir -p 'hip-infer-shapes,hip-lower-slices'
    python -m hipep.tools.opt --help        # lists the passes

Dialects: hip, builtin, func, tensor, arith, memref, scf. Passes: hipep.passes.PASSES.
"""
from __future__ import annotations

import sys
from collections.abc import Sequence

from ..ir.api import xDSLOptMain, builtin, func, tensor, arith, memref, scf


class HipepOptMain(xDSLOptMain):
    def __init__(self, args: Sequence[str] | None = None):
        super().__init__(description="hipep-opt: hipep's IR passes on .mlir files", args=args)

    def register_all_dialects(self):
        from ..ir.dialect import HipDialect

        for d in (builtin.Builtin, func.Func, tensor.Tensor, arith.Arith, memref.MemRef, scf.Scf, HipDialect):
            self.ctx.register_dialect(d.name, lambda d=d: d)

    def register_all_passes(self):
        from ..passes import PASSES

        for name, cls in PASSES.items():
            self.register_pass(name, lambda cls=cls: cls)


def main(argv: Sequence[str] | None = None) -> int:
    HipepOptMain(args=argv).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
