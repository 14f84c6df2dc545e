"""msprof-py."""
