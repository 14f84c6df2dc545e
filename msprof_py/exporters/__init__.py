"""Exporters: Ascend-compatible profile folders and Chrome/Perfetto traces, from stored profiles.

They work on the stored profile only (:mod:`msprof_py.profile`), never on live runtime
objects, and import no torch.

* :func:`export_run` writes the torch_npu layout (``profiler_info*.json``,
  ``ASCEND_PROFILER_OUTPUT/``, the CANN ``PROF_*`` folder) into one rank's ``*_ascend_pt``
  folder, for msprof-analyze and MindStudio Insight (:mod:`.ascend_pt`).
* :func:`write_chrome_trace` writes a Chrome/Perfetto trace of a profile (:mod:`.chrome`).

The writers (and pandas behind them) and :class:`StepWindow` (pyarrow behind it) are imported
on first use: ``msprof`` starts the application before it needs them.
"""

from __future__ import annotations

import typing as _typing
from pathlib import Path

from msprof_py.exporters.errors import ExportError
from msprof_py.lazy import lazy_getattr

if _typing.TYPE_CHECKING:
    from msprof_py.exporters.ascend_pt import ExportExistsError
    from msprof_py.exporters.chrome import write_chrome_trace
    from msprof_py.exporters.window import StepWindow
    from msprof_py.exporters.window import select_steps as select_steps

__all__ = [
    "ExportError",
    "ExportExistsError",
    "StepWindow",
    "export_run",
    "write_chrome_trace",
]


def export_run(run_dir: Path, steps: StepWindow | None = None) -> None:
    """Write every Ascend export of one rank's run folder (``*_ascend_pt`` with ``msprof_raw/``).

    ``steps``: export only those steps (the raw profile keeps them all). Raises
    :class:`ExportExistsError` (a ``FileExistsError``) when the folder already holds an
    export: exports never overwrite, and nothing is written in that case.
    """
    from msprof_py.exporters.ascend_pt import export_ascend_pt
    from msprof_py.exporters.window import select_steps
    from msprof_py.profile import load

    profile = None if steps is None else select_steps(load(Path(run_dir)), steps)
    export_ascend_pt(Path(run_dir), profile)


#: names imported on first use, and the module each comes from
_LAZY = {
    "ExportExistsError": "msprof_py.exporters.ascend_pt",
    "write_chrome_trace": "msprof_py.exporters.chrome",
    # the window imports the schema, hence pyarrow: msprof's launcher needs neither to start
    "StepWindow": "msprof_py.exporters.window",
    "select_steps": "msprof_py.exporters.window",
}


__getattr__ = lazy_getattr(__name__, globals(), _LAZY)
