"""``msprof_py`` exports only its API: ``dir(msprof_py)`` lists what ``__all__`` names and no
helper imports (``Any``, ``TYPE_CHECKING``, submodules pulled in by the imports)."""

from __future__ import annotations

import msprof_py


def test_dir_shows_only_the_api() -> None:
    public = [name for name in dir(msprof_py) if not name.startswith("__")]
    assert public == sorted(msprof_py.__all__)
    assert "Any" not in public and "TYPE_CHECKING" not in public
    assert {"load", "analyze", "record", "Profile", "Analysis"} <= set(public)
