"""hipep's xDSL layer: the hip dialect, type conversions and the shape merge rule.

This package is the only place in hipep that imports xdsl (a version bump touches one folder):
passes and tools reach xDSL through `hipep.ir.api`.
"""
