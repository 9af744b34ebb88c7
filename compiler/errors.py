"""The compiler's one error type (re-exported by every module that raises it)."""


class CompileError(ValueError):
    """A network that cannot be compiled for the chosen chip, with the reason."""
