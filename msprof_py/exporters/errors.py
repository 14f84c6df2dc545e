"""What an export raises (no pandas: the CLI checks its options before it loads anything)."""


class ExportError(ValueError):
    """A profile cannot be exported (the message says why)."""
