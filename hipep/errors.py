"""hipep's exception types (plain Python, importable from every layer)."""


class HipepError(Exception):
    """An error hipep found itself: bad options, bad model, bad input at run time."""


class OptionError(HipepError, ValueError):
    """A provider option is unknown or has a bad value."""


class ModelError(HipepError, ValueError):
    """The model (file, graph, node) is malformed or unusable."""


class RuntimeShapeError(HipepError, ValueError):
    """Inputs at run time disagree with what a node needs (shapes, dimensions, values)."""
