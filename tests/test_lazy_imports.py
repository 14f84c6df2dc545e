"""What ``msprof`` and a recorded process import: no pandas until a profile is loaded.

The launcher reads its options and runs the application before anything loads a profile (it
imports pandas and the writers in the background meanwhile); every recorded process needs the
schema and the writer only. The lazy package attributes still give the real objects, whatever
was imported first.
"""

from __future__ import annotations

import subprocess
import sys

import pytest


def _modules_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys\nprint(' '.join(sys.modules))"],
        check=True,
        capture_output=True,
        text=True,
    )
    return set(out.stdout.split())


@pytest.mark.parametrize(
    "code",
    [
        "import msprof_py.cli",
        "import msprof_py.collectors.recorder",
        "import msprof_py.collectors.run",
        "from msprof_py.profile import ProfileError, RAW_DIR",
        "from msprof_py.exporters import StepWindow, ExportError",
    ],
)
def test_no_pandas_before_a_profile_is_loaded(code: str) -> None:
    assert "pandas" not in _modules_after(code)


def test_a_subcommand_is_imported_when_invoked() -> None:
    loaded = _modules_after(
        "from msprof_py.cli import main\n"
        "try:\n    main(['analyze', '--help'])\nexcept SystemExit:\n    pass"
    )
    assert "msprof_py.analyzers.command" in loaded
    assert "msprof_py.compare.command" not in loaded and "msprof_py.gates.command" not in loaded


def test_lazy_names_are_the_real_objects_whatever_came_first() -> None:
    # in a fresh process: the submodule imported before the package's name is asked for
    # (the import system then sets the package attribute "loading", never "load")
    code = """
import importlib
loading = importlib.import_module("msprof_py.profile.loading")
from msprof_py.profile import Profile, load
assert load is loading.load and Profile is loading.Profile
importlib.import_module("msprof_py.report.build")
importlib.import_module("msprof_py.exporters.chrome")
import msprof_py, msprof_py.analyzers, msprof_py.exporters, msprof_py.report
from msprof_py.analyzers.api import analyze
assert msprof_py.analyzers.analyze is analyze and msprof_py.analyze is analyze
assert msprof_py.exporters.write_chrome_trace.__module__ == "msprof_py.exporters.chrome"
assert msprof_py.report.write_report.__module__ == "msprof_py.report.build"
assert msprof_py.load is load
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "ok", out.stderr


@pytest.mark.parametrize("package", ["msprof_py.profile", "msprof_py.analyzers", "msprof_py"])
def test_an_unknown_name_is_an_attribute_error(package: str) -> None:
    import importlib

    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        _ = importlib.import_module(package).nothing_here


def test_a_recorded_process_writes_its_parts_without_pandas(tmp_path) -> None:
    # pyarrow's ``pa.array`` on a list imports pandas (0.2 s of the run): the writer builds
    # its string arrays from buffers
    loaded = _modules_after(
        "import pathlib, torch, msprof_py\n"
        "from msprof_py.collectors.session import SessionConfig, start_session\n"
        f"start_session(SessionConfig(output={str(tmp_path)!r}, export=False))\n"
        "x = torch.ones(4, device='npu')\n"
        "for _ in range(3):\n"
        "    x = x * 2\n"
        "    msprof_py.step()\n"
        f"assert list(pathlib.Path({str(tmp_path)!r}).glob('*/msprof_raw/tasks-*.parquet'))"
    )
    assert "pyarrow.parquet" in loaded and "pandas" not in loaded
