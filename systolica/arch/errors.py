"""The chip description's error types."""


class ConfigError(ValueError):
    """A chip configuration that cannot be built."""


class ImageError(ValueError):
    """A program image that must not run: not an image, truncated, of a format version
    this program does not read, corrupted, or built for another chip
    (docs/image-format.md). The message names the file or the consumer and says what
    to do."""
