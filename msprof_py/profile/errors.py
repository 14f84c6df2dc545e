"""What loading a profile raises and warns (no pandas: the CLI catches these before it loads)."""


class ProfileError(ValueError):
    """A path holds no loadable profile, or a damaged one (the message names the file and says
    what is wrong)."""


class ProfileWarning(UserWarning):
    """Something about a profile that loaded anyway (parts dropped from a partial profile, a
    ``meta.json`` edited after recording)."""
