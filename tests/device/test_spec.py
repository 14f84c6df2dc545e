"""DeviceSpec: presets load, every value is sourced, derived figures, and clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from msprof_py.device.spec import DeviceSpec, SpecError, preset_names, spec_fields


def test_presets_ship_the_three_required_devices() -> None:
    assert {"ascend910b", "ascend910a", "ascend310p"} <= set(preset_names())


@pytest.mark.parametrize("name", ["ascend910b", "ascend910a", "ascend310p"])
def test_every_preset_value_carries_a_source(name: str) -> None:
    spec = DeviceSpec.preset(name)
    for dotted in spec_fields():
        if dotted == "cube.fractal":
            continue
        if dotted.startswith("hccl.group_") and not spec.hccl.mesh_size:
            continue  # the link between HCCS groups: only where a server has several
        assert spec.source_of(dotted), f"{name}: {dotted} has no source"
    for dtype in spec.cube.fractal:
        assert spec.source_of(f"cube.fractal.{dtype}")


def test_910b_headline_figures_match_the_reference() -> None:
    spec = DeviceSpec.load()  # the default preset
    assert spec.name == "ascend910b"
    assert spec.cube.cores == 24 and spec.vector.cores == 48 and spec.aicpu.cores == 6
    # 24 cores x 16x16x16 MACs x 2 FLOPs x 1.8 GHz = 353.9 TFLOPS (reference section 1)
    assert spec.cube_peak_flops("float16") == pytest.approx(24 * 4096 * 2 * 1.8e9)
    assert spec.cube_peak_flops("bfloat16") == spec.cube_peak_flops("float16")
    assert spec.cube_peak_flops("int8") == pytest.approx(2 * spec.cube_peak_flops("float16"))
    assert spec.cube_peak_flops("float32") == pytest.approx(spec.cube_peak_flops("float16") / 2)
    # 48 AIV x 128 fp16 lanes x 1.8 GHz
    assert spec.vector_peak_ops("float16") == pytest.approx(48 * 128 * 1.8e9)
    assert spec.memory.hbm_capacity_bytes == 64 * 2**30
    assert spec.memory.effective_bandwidth == pytest.approx(1.6e12 * 0.8)
    assert spec.dispatch.stage1_ns == 6000 and spec.dispatch.stage2_ns == 10000
    assert spec.allocation.huge_page_bytes == 2 * 2**20


def test_910a_is_coupled_and_has_no_fp32_cube() -> None:
    spec = DeviceSpec.preset("ascend910a")
    assert spec.shares_core_pool
    assert spec.cube_peak_flops() == pytest.approx(32 * 4096 * 2 * 1e9)
    with pytest.raises(SpecError, match="float32"):
        spec.cube_fractal("float32")


def test_310p_peak_matches_the_reference() -> None:
    assert DeviceSpec.preset("ascend310p").cube_peak_flops() / 1e12 == pytest.approx(69.5, abs=0.05)


def test_unknown_preset_lists_the_available_ones() -> None:
    with pytest.raises(SpecError, match=r"available: .*ascend910b"):
        DeviceSpec.load("ascend999")


def test_user_file_can_override_a_preset(tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text(
        'base = "ascend910b"\n[cube]\ncores = 20\n[memory]\nhbm_capacity_bytes = 34359738368\n'
    )
    spec = DeviceSpec.load(path)
    assert spec.cube.cores == 20
    assert spec.memory.hbm_capacity_bytes == 32 * 2**30
    assert spec.vector.cores == 48  # untouched fields come from the base
    assert spec.source_of("cube.cores") == "user file mine.toml"
    assert spec.source_of("vector.cores") == "S1 [V]"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('base = "ascend910b"\n[cube]\ncores = "many"\n', "field 'cube.cores' must be an integer"),
        ('base = "ascend910b"\n[cube]\ncores = 0\n', "field 'cube.cores' must be >= 1"),
        ('base = "ascend910b"\n[cube]\ncorez = 3\n', "unknown field 'cube.corez'"),
        (
            'base = "ascend910b"\n[memory]\nhbm_efficiency = 1.5\n',
            "'memory.hbm_efficiency' must be in",
        ),
        ('base = "ascend910b"\n[nope]\nx = 1\n', "unknown section"),
        (
            'base = "ascend910b"\n[device]\ncore_mode = "fused"\n',
            "'device.core_mode' must be one of",
        ),
        ('[device]\nname = "x"\n', "missing field 'device.soc_version'"),
        ('base = "ascend910b"\n[cube.fractal]\nfloat16 = [16, 16]\n', "cube.fractal.float16"),
        ('base = "ascend910b"\n[allocation]\nalignment_bytes = 48\n', "power of two"),
        ("[cube\n", "not valid TOML"),
    ],
)
def test_invalid_files_name_the_field(tmp_path: Path, body: str, message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(body)
    with pytest.raises(SpecError, match=message):
        DeviceSpec.from_file(path)


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="not found"):
        DeviceSpec.from_file(tmp_path / "absent.toml")


def test_coupled_mode_requires_equal_core_counts(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('base = "ascend910a"\n[vector]\ncores = 16\n')
    with pytest.raises(SpecError, match=r"vector\.cores"):
        DeviceSpec.from_file(path)
