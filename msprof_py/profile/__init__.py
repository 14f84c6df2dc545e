"""The stored profile: schema (one place for every table and column), writer and ``load()``."""

from msprof_py.profile.load import Profile, ProfileError, ProfileWarning, load
from msprof_py.profile.schema import RAW_DIR, TABLES

__all__ = ["RAW_DIR", "TABLES", "Profile", "ProfileError", "ProfileWarning", "load"]
