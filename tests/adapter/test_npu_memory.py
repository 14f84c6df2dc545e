"""npu tensors take simulated device memory and give it back; exceeding it is torch's OOM."""

from __future__ import annotations

import pytest
import torch

from msprof_py.adapter import NpuOutOfMemory
from msprof_py.device import SimulatedNpu


def test_statistics_follow_what_the_script_holds(npu: SimulatedNpu) -> None:
    torch.npu.empty_cache()
    base = torch.npu.memory_allocated()
    torch.npu.reset_peak_memory_stats()
    x = torch.empty(1024, 1024, device="npu")  # 4 MiB
    assert torch.npu.memory_allocated() - base == 4 * 2**20
    y = x * 2
    assert torch.npu.memory_allocated() - base == 8 * 2**20
    assert torch.npu.memory_reserved() >= torch.npu.memory_allocated()
    del x, y
    assert torch.npu.memory_allocated() == base
    assert torch.npu.max_memory_allocated() - base == 8 * 2**20
    stats = torch.npu.memory_stats()
    assert stats["allocated_bytes.all.peak"] == torch.npu.max_memory_allocated()
    assert "Allocated memory" in torch.npu.memory_summary()
    free, total = torch.npu.mem_get_info()
    assert total == 62 * 2**30 and 0 < free <= total
    torch.npu.empty_cache()
    assert torch.npu.memory_reserved() < 62 * 2**30


def test_views_share_memory(npu: SimulatedNpu) -> None:
    base = torch.npu.memory_allocated()
    x = torch.empty(256, 256, device="npu")
    views = [x.view(-1), x.t(), x[0], x.detach()]
    assert torch.npu.memory_allocated() - base == 256 * 256 * 4
    del x
    assert torch.npu.memory_allocated() - base == 256 * 256 * 4  # the views keep it alive
    del views
    assert torch.npu.memory_allocated() == base


def test_out_of_memory_is_torchs_error_with_the_simulated_totals(npu: SimulatedNpu) -> None:
    with pytest.raises(torch.OutOfMemoryError) as info:
        torch.empty(80 * 2**30, dtype=torch.uint8, device="npu")
    assert isinstance(info.value, NpuOutOfMemory)
    message = str(info.value)
    assert message.startswith("NPU out of memory. Tried to allocate 80.00 GiB")
    assert "62.00 GiB total capacity" in message and "free" in message
    assert torch.npu.memory_allocated() < 2**30  # nothing leaked


def test_torch_accelerator_is_forwarded(npu: SimulatedNpu) -> None:
    assert torch.accelerator.current_accelerator().type == "npu"
    torch.accelerator.synchronize()
    assert torch.accelerator.memory_allocated() == torch.npu.memory_allocated()
    assert torch.accelerator.max_memory_reserved() == torch.npu.max_memory_reserved()
