"""The compiler's error types, raised by every pass and caught by the front ends."""


class CompileError(ValueError):
    """A network that cannot be compiled for the chosen chip, with the reason and what
    to change: the user's to fix."""


class InternalError(RuntimeError):
    """A broken invariant of the compiler itself (a bug, not the input's fault)."""

    def __init__(self, message: str):
        super().__init__(f"internal: {message}")
