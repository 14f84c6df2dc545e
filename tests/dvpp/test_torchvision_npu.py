"""The torchvision_npu shim: CPU-equal values, JPEGD/VPC tasks on the timeline, fallbacks."""

from __future__ import annotations

import io
import subprocess
import sys
import types

import numpy as np
import pytest
import torch
from PIL import Image

from msprof_py.device import TaskKind, TaskLog
from msprof_py.device.dvpp import PIXELS_1080P


def _jpeg(width: int, height: int, seed: int = 0, **save: object) -> bytes:
    rng = np.random.default_rng(seed)
    arr = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="JPEG", **save)
    return buf.getvalue()


def _dvpp(log: TaskLog) -> list:
    return [t for t in log.tasks if t.kind is TaskKind.DVPP]


def test_import_resolves_to_the_shim(tvn) -> None:
    assert tvn.__name__ == "msprof_py.adapter.torchvision_npu"
    with pytest.raises(ValueError, match="one of PIL, npu"):
        tvn.set_image_backend("cv3")


def test_torchvision_set_image_backend_npu_routes_to_the_shim(tvn) -> None:
    """A stand-in torchvision module (the real one does not load here): 'npu' selects the
    shim's backend, other names go to torchvision's own function."""
    chosen = ["PIL"]
    fake = types.ModuleType("torchvision")

    def set_image_backend(backend: str) -> None:
        chosen[0] = backend

    fake.set_image_backend = set_image_backend
    fake.get_image_backend = lambda: chosen[0]
    tvn.patch_torchvision(fake)
    tvn.patch_torchvision(fake)  # a second import patches nothing more
    try:
        fake.set_image_backend("npu")
        assert tvn.get_image_backend() == "npu" and fake.get_image_backend() == "npu"
        assert chosen == ["PIL"]
        fake.set_image_backend("accimage")
        assert chosen == ["accimage"] and tvn.get_image_backend() == "PIL"
        assert fake.get_image_backend() == "accimage"
    finally:
        tvn.set_image_backend("PIL")


def test_decode_on_npu_equals_pil_and_costs_one_jpegd_task(tvn, log) -> None:
    data = _jpeg(320, 240)
    cpu = tvn.decode_jpeg(data)
    dev = tvn.decode_jpeg(data, device="npu")
    assert dev.device.type == "npu" and dev.dtype == torch.uint8
    assert torch.equal(cpu, dev.cpu())
    (task,) = _dvpp(log)
    # 910B preset: 128 1080p frames/s per channel -> 76800 px / (128 x 2073600 px/s)
    assert task.duration_ns == round(320 * 240 * 1e9 / (128 * PIXELS_1080P))
    assert task.op_type == "JpegDecode" and task.bytes == len(data)
    copies = [t for t in log.tasks if t.kind is TaskKind.MEMCPY and t.bytes == len(data)]
    assert len(copies) == 1 and copies[0].end_ns <= task.start_ns  # the bytes go first


def test_batch_decode_spreads_over_the_channels(tvn, log) -> None:
    batch = [_jpeg(256, 256, seed=i) for i in range(20)]
    out = tvn.decode_jpeg(batch, device="npu")
    assert [torch.equal(o.cpu(), tvn.decode_jpeg(b)) for o, b in zip(out, batch, strict=True)] == [
        True
    ] * 20
    (task,) = _dvpp(log)
    assert task.attrs["channels"] == 16
    assert task.duration_ns == round(20 * 256 * 256 * 1e9 / (16 * 128 * PIXELS_1080P))


def test_progressive_jpeg_decodes_at_the_software_rate(tvn, log) -> None:
    data = _jpeg(256, 128, progressive=True)
    tvn.decode_jpeg(data, device="npu")
    (task,) = _dvpp(log)
    assert task.attrs["software"] is True
    assert task.duration_ns == round(256 * 128 * 1e9 / (15 * PIXELS_1080P))


def test_image_below_the_decoder_limit_falls_back_to_the_host(tvn, log) -> None:
    data = _jpeg(16, 16)
    before = sum(tvn.FALLBACKS.values())
    with pytest.warns(UserWarning, match="outside 32x32"):
        dev = tvn.decode_jpeg(data, device="npu")
    assert torch.equal(dev.cpu(), tvn.decode_jpeg(data))
    assert not _dvpp(log) and sum(tvn.FALLBACKS.values()) == before + 1


def test_transforms_equal_the_cpu_path_and_run_on_vpc(tvn, log) -> None:
    from torchvision_npu import transforms as T

    data = _jpeg(300, 200)
    pipeline = T.Compose(
        [T.Resize(128), T.CenterCrop(112), T.ToTensor(), T.Normalize([0.5] * 3, [0.2] * 3)]
    )
    from msprof_py.adapter.torchvision_npu._device import pil_decode

    cpu = pipeline(pil_decode(data))
    dev = pipeline(tvn.decode_jpeg(data, device="npu"))
    assert dev.device.type == "npu" and cpu.shape == (3, 112, 112)
    assert torch.equal(cpu, dev.cpu())
    decode, resize, crop = _dvpp(log)
    assert decode.op_type == "JpegDecode"
    assert (resize.op_type, crop.op_type) == ("Resize", "Crop")
    # VPC: input pixels over 360 1080p frames/s; Resize(128) of 300x200 reads 300x200,
    # the crop reads its 112x112 box
    assert resize.duration_ns == round(300 * 200 * 1e9 / (360 * PIXELS_1080P))
    assert crop.duration_ns == round(112 * 112 * 1e9 / (360 * PIXELS_1080P))
    # ToTensor and Normalize ran as npu kernels after the VPC tasks
    kernels = [t for t in log.tasks if t.kind is TaskKind.KERNEL]
    assert kernels and min(k.start_ns for k in kernels) >= crop.end_ns


def test_random_resized_crop_matches_with_the_same_seed(tvn, log) -> None:
    from torchvision_npu import transforms as T

    data = _jpeg(200, 160)
    from msprof_py.adapter.torchvision_npu._device import pil_decode

    crop = T.RandomResizedCrop(64)
    torch.manual_seed(3)
    cpu = T.ToTensor()(crop(pil_decode(data)))
    torch.manual_seed(3)
    dev = T.ToTensor()(crop(tvn.decode_jpeg(data, device="npu")))
    assert torch.equal(cpu, dev.cpu())
    task = _dvpp(log)[-1]
    assert task.op_type == "CropResize"
    torch.manual_seed(3)
    _, _, w, h = crop.params(200, 160)
    assert task.duration_ns == round(w * h * 1e9 / (360 * PIXELS_1080P))


def test_default_loader_follows_the_backend(tvn, log, tmp_path) -> None:
    path = tmp_path / "a.jpg"
    path.write_bytes(_jpeg(64, 48))
    assert isinstance(tvn.default_loader(path), Image.Image) and not _dvpp(log)
    tvn.set_image_backend("npu")
    try:
        img = tvn.default_loader(path)
    finally:
        tvn.set_image_backend("PIL")
    assert img.device.type == "npu" and img.shape == (3, 48, 64)
    assert len(_dvpp(log)) == 1


@pytest.mark.slow
def test_910a_decode_on_npu_is_a_one_line_error() -> None:
    code = (
        "import io, msprof_py.adapter; msprof_py.adapter.install('ascend910a');"
        "import torchvision_npu; from PIL import Image; b = io.BytesIO();"
        "Image.new('RGB', (64, 64)).save(b, format='JPEG');"
        "torchvision_npu.decode_jpeg(b.getvalue(), device='npu')"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("msprof_py.adapter.torchvision_npu._device.DvppUnavailableError")
    assert "no acl JPEG decoder" in last and "set_image_backend('PIL')" in last
