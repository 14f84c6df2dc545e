"""The stored profile: schema (one place for every table and column), writer and ``load()``.

``load`` and ``Profile`` are imported on first use: the recorder in every profiled
process needs the schema and the writer only, not pandas (which ``load`` builds frames with);
so is ``TABLES`` (the schema imports pyarrow, which the ``msprof`` launcher needs only after
the application ran).
"""

from __future__ import annotations

import typing as _typing

from msprof_py.lazy import lazy_getattr
from msprof_py.profile.errors import ProfileError, ProfileWarning
from msprof_py.profile.layout import RAW_DIR

if _typing.TYPE_CHECKING:
    from msprof_py.profile.loading import Profile, load
    from msprof_py.profile.schema import TABLES

__all__ = ["RAW_DIR", "TABLES", "Profile", "ProfileError", "ProfileWarning", "load"]

__getattr__ = lazy_getattr(
    __name__,
    globals(),
    {
        "Profile": "msprof_py.profile.loading",
        "load": "msprof_py.profile.loading",
        # the schema imports pyarrow, which the launcher needs only after the run
        "TABLES": "msprof_py.profile.schema",
    },
)
