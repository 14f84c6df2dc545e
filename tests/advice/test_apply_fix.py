"""The recipes of ``apply_fix.py`` that the recommendation check applies (fast checks)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
import apply_fix

import msprof_py.adapter

msprof_py.adapter.install()
INDEX_STEP = str(Path(__file__).with_name("index_step.py"))


@pytest.fixture
def restored(monkeypatch: pytest.MonkeyPatch) -> None:
    """Undo the recipes' patches after the test."""
    monkeypatch.setattr(torch.Tensor, "item", torch.Tensor.item)
    monkeypatch.setattr(torch.npu, "synchronize", torch.npu.synchronize)
    monkeypatch.setattr(torch.npu.Event, "elapsed_time", torch.npu.Event.elapsed_time)


def _engine():
    from msprof_py.adapter import runtime

    return runtime.state().npu.engine


def test_defer_syncs_reads_values_without_waiting(restored: None) -> None:
    x = torch.arange(4096.0).to("npu")
    start, end = torch.npu.Event(enable_timing=True), torch.npu.Event(enable_timing=True)
    torch.npu.synchronize()
    apply_fix.defer_syncs()
    start.record()
    total = (x * 2).sum()
    end.record()
    engine = _engine()
    host = engine.host_ns
    assert not end.query()  # the device is still behind the host
    torch.npu.synchronize()
    assert total.item() == 2 * sum(range(4096))
    ms = start.elapsed_time(end)
    assert engine.host_ns == host  # neither call waited for the device
    assert ms == (end._event.recorded_ns - start._event.recorded_ns) / 1e6 and ms > 0
    assert torch.tensor(3).item() == 3  # CPU tensors read as before


def test_item_waits_without_the_recipe() -> None:
    x = torch.arange(4096.0).to("npu")
    total = (x * 2).sum()
    engine = _engine()
    host = engine.host_ns
    assert total.item() == 2 * sum(range(4096))
    assert engine.host_ns > host


def test_dtype_recipe_sets_the_scripts_option() -> None:
    args = apply_fix.dtype_args(INDEX_STEP, ["--steps", "4"], {"from": "int64", "to": "int32"})
    assert args == ["--steps", "4", "--index-dtype", "int32"]
    with pytest.raises(SystemExit, match="no script option known for float64"):
        apply_fix.dtype_args(INDEX_STEP, [], {"from": "float64", "to": "float32"})


def test_script_option_must_exist_in_the_script() -> None:
    assert apply_fix.script_option_args(INDEX_STEP, [], ["--batch-size=8"]) == ["--batch-size=8"]
    with pytest.raises(SystemExit, match="has no --fast option"):
        apply_fix.script_option_args(INDEX_STEP, [], ["--fast"])


def test_internal_format_recipe_sets_the_flag_before_the_script(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from msprof_py.adapter import runtime

    monkeypatch.setattr(runtime.state(), "internal_format", True)
    script = tmp_path / "seen.py"
    out = tmp_path / "flag.txt"
    script.write_text(
        "import torch\n"
        f"open({str(out)!r}, 'w').write(str(torch.npu.config.allow_internal_format))\n"
    )
    recipe = '{"internal_format": false}'
    monkeypatch.setattr(sys, "argv", ["apply_fix.py", recipe, str(script)])
    apply_fix.main()
    assert out.read_text() == "False"


def test_a_list_of_recipes_applies_each_in_order(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The joint check's form: the format flag set and the script's dtype option added."""
    from msprof_py.adapter import runtime

    monkeypatch.setattr(runtime.state(), "internal_format", True)
    script = tmp_path / "seen.py"
    out = tmp_path / "seen.txt"
    script.write_text(
        'import sys, torch\n"--index-dtype"\n'
        f"open({str(out)!r}, 'w').write(f'{{torch.npu.config.allow_internal_format}} "
        "{sys.argv[1:]}')\n"
    )
    recipes = '[{"internal_format": false}, {"dtype": {"from": "int64", "to": "int32"}}]'
    monkeypatch.setattr(sys, "argv", ["apply_fix.py", recipes, str(script), "--steps", "2"])
    apply_fix.main()
    assert out.read_text() == "False ['--steps', '2', '--index-dtype', 'int32']"
