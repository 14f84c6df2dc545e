"""DVPP engines on the device: task durations from the per-chip rates, channels, limits."""

from __future__ import annotations

import pytest

from msprof_py.device import DeviceSpec, Engine, SpecError, TaskKind, TaskLog, TaskType
from msprof_py.device.dvpp import (
    Dvpp,
    DvppLimitError,
    DvppSpec,
    DvppUnsupportedError,
    dvpp_spec,
    jpegd_ns,
    jpegd_output,
    vpc_ns,
)

P310P = dvpp_spec(DeviceSpec.preset("ascend310p"))


def test_310p_channels_reach_the_documented_caps() -> None:
    # n x 128 FPS at 1080p, cap 2048 -> 16 channels; VPC n x 360, cap 4320 -> 12
    assert (P310P.jpegd_channels, P310P.jpegd_cap_fps_1080p) == (16, 2048)
    assert (P310P.vpc_channels, P310P.vpc_cap_fps_1080p) == (12, 4320)


def test_jpegd_duration_scales_with_pixels() -> None:
    # one 1080p frame on one channel: 1 / 128 s
    assert jpegd_ns(P310P, [(1920, 1080)]) == (7_812_500, 1)
    # 4K has 4x the pixels: 1 / 32 s (the documented 4K rate)
    assert jpegd_ns(P310P, [(3840, 2160)]) == (31_250_000, 1)
    # 224x224 -> 50176 px / (128 x 2073600 px/s) = 189_043 ns
    assert jpegd_ns(P310P, [(224, 224)])[0] == round(50176 * 1e9 / (128 * 2073600))
    # a batch of 32 1080p frames spreads over all 16 channels: 32 / 2048 s
    assert jpegd_ns(P310P, [(1920, 1080)] * 32) == (15_625_000, 16)
    # software decode (progressive): 15 FPS at 1080p, one channel
    assert jpegd_ns(P310P, [(1920, 1080)], software=True) == (round(1e9 / 15), 1)


def test_vpc_duration_follows_the_input_pixels() -> None:
    assert vpc_ns(P310P, [(1920, 1080)], [(1920, 1080)]) == (round(1e9 / 360), 1)
    # 8K -> 4K: 16x the 1080p pixels -> 22.5 FPS on one channel
    assert vpc_ns(P310P, [(7680, 4320)], [(3840, 2160)]) == (round(1e9 / 22.5), 1)
    # 24 frames over 12 channels: 24 / 4320 s
    assert vpc_ns(P310P, [(1920, 1080)] * 24, [(224, 224)] * 24) == (round(24e9 / 4320), 12)


def test_output_strides_and_buffer() -> None:
    # 1000 -> 1008 (16-aligned), 30 rows -> 32 (16-aligned, at least 32): YUV420SP 3/2
    assert jpegd_output(P310P, 1000, 30) == (1008, 32, 1008 * 32 * 3 // 2)
    assert jpegd_output(P310P, 1920, 1080) == (1920, 1088, 1920 * 1088 * 3 // 2)


@pytest.mark.parametrize("size", [(31, 64), (64, 31), (8193, 100)])
def test_jpegd_limits(size: tuple[int, int]) -> None:
    with pytest.raises(DvppLimitError, match=r"outside 32x32 to 8192x8192"):
        jpegd_ns(P310P, [size])
    jpegd_ns(P310P, [(32, 32)])  # the edges are inside
    jpegd_ns(P310P, [(8192, 8192)])


def test_910a_has_no_acl_jpeg_decoder_and_no_vpc() -> None:
    d = dvpp_spec(DeviceSpec.preset("ascend910a"))
    with pytest.raises(DvppUnsupportedError, match="no acl JPEG decoder"):
        jpegd_ns(d, [(224, 224)])
    with pytest.raises(DvppUnsupportedError, match="no VPC"):
        vpc_ns(d, [(224, 224)], [(112, 112)])


def test_a_spec_without_dvpp_section_still_loads(tmp_path) -> None:
    raw = {k: v for k, v in DeviceSpec.preset("ascend310p").raw.items() if k != "dvpp"}
    spec = DeviceSpec.from_mapping(raw)
    assert dvpp_spec(spec) == DvppSpec()  # no engines: everything on the CPU
    bad = tmp_path / "bad.toml"
    bad.write_text('base = "ascend310p"\n[dvpp]\njpegd_channels = "many"\n')
    with pytest.raises(SpecError, match=r"dvpp.jpegd_channels"):
        DeviceSpec.load(bad)
    bad.write_text('base = "ascend310p"\n[dvpp]\nturbo = true\n')
    with pytest.raises(SpecError, match=r"unknown field 'dvpp.turbo'"):
        DeviceSpec.load(bad)


def test_tasks_share_the_channels_across_streams() -> None:
    engine = Engine(DeviceSpec.preset("ascend310p"))
    log = TaskLog()
    engine.bus.subscribe(log)
    dvpp = Dvpp.of(engine)
    assert Dvpp.of(engine) is dvpp
    # a 16-channel batch holds every channel: a decode on a second stream waits for it
    first = dvpp.decode(engine.default_stream, [(1920, 1080)] * 16)
    other = engine.create_stream()
    second = dvpp.decode(other, [(1920, 1080)])
    assert first.end_ns - first.start_ns == 7_812_500
    assert second.start_ns == first.end_ns
    assert second.end_ns - second.start_ns == 7_812_500
    # VPC is a separate engine: it runs next to the JPEGD batch
    third = engine.create_stream()
    resize = dvpp.vpc(third, "Resize", [(1920, 1080)], [(224, 224)])
    assert resize.start_ns < first.end_ns
    assert [t.kind for t in log.tasks] == [TaskKind.DVPP] * 3
    assert {t.task_type for t in log.tasks} == {TaskType.DVPP}
    assert first.attrs["channels"] == 16 and first.attrs["engine"] == "JPEGD"
