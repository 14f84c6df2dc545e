"""The device spec comes from the profile itself: a profile never makes msprof read a file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from msprof_py.analyzers.context import load_spec
from msprof_py.device.spec import DeviceSpec


def test_a_path_in_the_device_field_is_never_read(tmp_path: Path) -> None:
    spec_file = tmp_path / "custom.toml"
    spec_file.write_text('base = "ascend910a"\n', encoding="utf-8")
    assert DeviceSpec.load(spec_file).name == "ascend910a"  # a valid file the CLI would accept
    spec, why = load_spec({"device": str(spec_file)})
    assert spec is None and "not a preset" in why
    spec, why = load_spec({"device": "/etc/passwd"})
    assert spec is None and "not a preset" in why


def test_the_inline_spec_round_trips_a_user_file(tmp_path: Path) -> None:
    spec_file = tmp_path / "custom.toml"
    spec_file.write_text('base = "ascend910b"\n[cube]\ncores = 20\n', encoding="utf-8")
    original = DeviceSpec.load(spec_file)
    spec, why = load_spec({"device": "whatever", "device_spec": dict(original.raw)})
    assert why == "" and spec == original and spec.cube.cores == 20


def test_presets_and_bad_inline_specs(tmp_path: Path) -> None:
    spec, _ = load_spec({"device": "ascend310p"})
    assert spec is not None and spec.name == "ascend310p"
    spec, why = load_spec({"device": "ascend910b", "device_spec": ["not", "a", "table"]})
    assert spec is None and "must be a table" in why
    spec, why = load_spec({"device_spec": {"device": {"name": "x"}}})
    assert spec is None and "missing" in why


def test_recorded_profiles_carry_their_spec(tmp_path: Path) -> None:
    code = (
        "import torch, msprof_py\n"
        f"with msprof_py.record(output={str(tmp_path)!r}, device='ascend910a') as rec:\n"
        "    (torch.ones(4, device='npu') * 2).sum().item()\n"
        "from msprof_py.analyzers.context import load_spec\n"
        "meta = rec.load().meta[0]\n"
        "print(meta['device'], load_spec(meta)[0].cube.cores, load_spec(meta)[0].origin)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ascend910a 32 the profile's device_spec"
