"""The chip description's error type."""


class ConfigError(ValueError):
    """A chip configuration that cannot be built."""
