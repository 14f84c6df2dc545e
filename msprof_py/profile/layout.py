"""The names of a raw profile's folder and metadata file, and the "none" of its id columns.

Apart from :mod:`msprof_py.profile.schema` (which imports pyarrow for the column types) so
that the ``msprof`` launcher can find what a run recorded, and check its options, without
loading pyarrow first.
"""

from __future__ import annotations

__all__ = ["META_FILE", "NO_ID", "RAW_DIR"]

#: the folder of one rank's raw profile, inside its ``*_ascend_pt`` folder
RAW_DIR = "msprof_raw"
#: the raw profile's metadata (run facts, parts list with row counts and checksums)
META_FILE = "meta.json"
#: "none" in id columns (no host op, outside any step ...)
NO_ID = -1
