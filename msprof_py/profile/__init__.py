"""The stored profile: schema (one place for every table and column), writer and ``load()``.

``load`` and ``Profile`` are imported on first use: the recorder in every profiled
process needs the schema and the writer only, not pandas (which ``load`` builds frames with).
"""

from __future__ import annotations

import typing as _typing

from msprof_py.lazy import lazy_getattr
from msprof_py.profile.errors import ProfileError, ProfileWarning
from msprof_py.profile.schema import RAW_DIR, TABLES

if _typing.TYPE_CHECKING:
    from msprof_py.profile.loading import Profile, load

__all__ = ["RAW_DIR", "TABLES", "Profile", "ProfileError", "ProfileWarning", "load"]

__getattr__ = lazy_getattr(
    __name__,
    globals(),
    {"Profile": "msprof_py.profile.loading", "load": "msprof_py.profile.loading"},
)
