"""DVPP on its own stream (decode overlaps compute), batched VPC calls and ColorJitter: the
values equal the CPU path, the timing is hand-computed from the 910B preset's DVPP rates
(JPEGD 128 and VPC 360 1080p frames/s per channel, 16 and 12 channels)."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from PIL import Image, ImageEnhance

from msprof_py.device import TaskKind, TaskLog
from msprof_py.device.dvpp import PIXELS_1080P


def _jpeg(width: int, height: int, seed: int = 0) -> bytes:
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 256, (height // 4 + 1, width // 4 + 1, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(base).resize((width, height), Image.BILINEAR).save(buf, format="JPEG")
    return buf.getvalue()


def _vpc_ns(pixels: int, channels: int) -> int:
    return round(pixels * 1e9 / (channels * 360 * PIXELS_1080P))


def _dvpp(log: TaskLog) -> list:
    return [t for t in log.tasks if t.kind is TaskKind.DVPP]


def _kernels(log: TaskLog) -> list:
    return [t for t in log.tasks if t.kind is TaskKind.KERNEL]


def test_decode_overlaps_the_compute_queued_before_it(tvn, log) -> None:
    """The host queues a long matmul, then decodes (no synchronize between): JPEGD runs on
    the DVPP stream while the matmul runs; the op that reads the image waits for both."""
    a = torch.ones(2048, 2048).to("npu")
    (mm_out,) = [a @ a]
    data = _jpeg(640, 480)
    img = tvn.decode_jpeg(data, device="npu")
    scaled = img.float()
    mm = next(k for k in _kernels(log) if k.op_type == "MatMul")
    (jpegd,) = _dvpp(log)
    assert jpegd.stream_id != mm.stream_id
    assert jpegd.duration_ns == round(640 * 480 * 1e9 / (128 * PIXELS_1080P))
    assert jpegd.start_ns < mm.end_ns and mm.start_ns < jpegd.end_ns  # they overlap
    consumer = [k for k in _kernels(log) if k.start_ns >= mm.start_ns and k is not mm][-1]
    assert consumer.stream_id == mm.stream_id
    assert consumer.start_ns >= max(jpegd.end_ns, mm.end_ns)
    assert torch.equal(scaled.cpu(), tvn.decode_jpeg(data).float()) and mm_out.shape[0] == 2048


def test_a_synchronised_loop_sees_no_overlap(tvn, log) -> None:
    a = torch.ones(1024, 1024).to("npu")
    _ = a @ a
    torch.npu.synchronize()
    tvn.decode_jpeg(_jpeg(320, 240), device="npu")
    mm = next(k for k in _kernels(log) if k.op_type == "MatMul")
    (jpegd,) = _dvpp(log)
    assert jpegd.start_ns >= mm.end_ns


def test_a_list_of_npu_images_is_one_batch_vpc_task(tvn, log) -> None:
    from torchvision_npu import transforms as T

    datas = [_jpeg(96, 96, seed=i) for i in range(14)]
    images = tvn.decode_jpeg(datas, device="npu")
    out = T.Resize(48)(images)
    cpu = [T.Resize(48)(tvn.decode_jpeg(d)) for d in datas]
    assert all(torch.equal(o.cpu(), c) for o, c in zip(out, cpu, strict=True))
    decode, resize = _dvpp(log)
    assert resize.name == "acldvppVpcBatchCropResizeAsync" and resize.attrs["images"] == 14
    # 14 pictures over min(14, 12) channels, the input pixels at 360 1080p frames/s each
    assert resize.attrs["channels"] == 12
    assert resize.duration_ns == _vpc_ns(14 * 96 * 96, 12)
    assert resize.start_ns >= decode.end_ns  # same DVPP stream, in order
    assert resize.stream_id == decode.stream_id


def test_random_crops_of_a_list_draw_per_image_like_the_cpu_loop(tvn, log) -> None:
    from torchvision_npu import transforms as T

    datas = [_jpeg(200 + 8 * i, 160, seed=i) for i in range(3)]
    crop = T.RandomResizedCrop(64)
    torch.manual_seed(5)
    cpu = [T.ToTensor()(crop(tvn.decode_jpeg(d))) for d in datas]
    torch.manual_seed(5)
    dev = T.ToTensor()(crop(tvn.decode_jpeg(datas, device="npu")))
    assert all(torch.equal(d.cpu(), c) for d, c in zip(dev, cpu, strict=True))
    (task,) = [t for t in _dvpp(log) if t.op_type == "CropResize"]
    torch.manual_seed(5)
    areas = [w * h for _, _, w, h in (crop.params(200 + 8 * i, 160) for i in range(3))]
    assert task.attrs["images"] == 3 and task.duration_ns == _vpc_ns(sum(areas), 3)


def test_an_nchw_batch_is_one_task_with_one_crop(tvn, log) -> None:
    from torchvision_npu import transforms as T

    cpu = torch.stack([tvn.decode_jpeg(_jpeg(96, 80, seed=i)) for i in range(4)])
    out = T.CenterCrop(64)(cpu.to("npu"))
    assert out.shape == (4, 3, 64, 64) and torch.equal(out.cpu(), T.CenterCrop(64)(cpu))
    (task,) = _dvpp(log)
    assert task.op_type == "Crop" and task.attrs["images"] == 4
    assert task.duration_ns == _vpc_ns(4 * 64 * 64, 4)


def test_color_jitter_equals_the_cpu_path_on_vpc(tvn, log) -> None:
    from torchvision_npu import transforms as T

    from msprof_py.adapter.torchvision_npu._device import pil_decode

    data = _jpeg(160, 120)
    jitter = T.ColorJitter(brightness=0.4, contrast=0.4, saturation=0.4, hue=0.1)
    torch.manual_seed(11)
    cpu = T.ToTensor()(jitter(pil_decode(data)))
    torch.manual_seed(11)
    dev = T.ToTensor()(jitter(tvn.decode_jpeg(data, device="npu")))
    assert torch.equal(cpu, dev.cpu())
    task = _dvpp(log)[-1]
    assert task.op_type == "ColorJitter" and task.duration_ns == _vpc_ns(160 * 120, 1)


def test_color_jitter_factors(tvn) -> None:
    from torchvision_npu import transforms as T

    img = Image.new("RGB", (32, 32), (100, 50, 20))
    bright = T.ColorJitter(brightness=(1.5, 1.5))(img)
    assert bright.getpixel((0, 0)) == ImageEnhance.Brightness(img).enhance(1.5).getpixel((0, 0))
    assert bright.getpixel((0, 0)) == (150, 75, 30)
    assert T.ColorJitter()(img) is img  # nothing to adjust
    # a third of a turn: red -> green (H 0 -> int(255 / 3) = 85 of 256)
    red = Image.new("RGB", (32, 32), (255, 0, 0))
    r, g, b = T.adjust_hue(red, 1 / 3).getpixel((0, 0))
    assert g == 255 and b == 0 and r <= 6
    with pytest.raises(ValueError, match="hue must lie in"):
        T.ColorJitter(hue=0.6)
    with pytest.raises(TypeError, match="before ToTensor"):
        T.ColorJitter(brightness=0.2)(torch.zeros(3, 8, 8))
