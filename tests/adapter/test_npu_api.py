"""``torch.npu`` and ``transfer_to_npu`` answer what training libraries ask of them."""

from __future__ import annotations

import pytest
import torch
from adapter_helpers import run_script

from msprof_py.device import SimulatedNpu


def _run_ok(code: str) -> list[str]:
    result = run_script(code, timeout=600)  # torch.compile's first run is slow on a busy box
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_bf16_support_follows_the_cube_of_the_preset() -> None:
    code = """
        import torch, msprof_py.adapter as ad
        ad.install(device={preset!r})
        print(torch.npu.is_bf16_supported(), torch.bfloat16 in torch.npu.get_amp_supported_dtype())
    """
    assert _run_ok(code.format(preset="ascend910b")) == ["True True"]
    assert _run_ok(code.format(preset="ascend910a")) == ["False False"]


def test_device_capability_is_none_unless_configured(
    npu: SimulatedNpu, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TORCH_NPU_DEVICE_CAPABILITY", raising=False)
    assert torch.npu.get_device_capability() is None
    monkeypatch.setenv("TORCH_NPU_DEVICE_CAPABILITY", "8.0")
    assert torch.npu.get_device_capability(0) == (8, 0)
    monkeypatch.setenv("TORCH_NPU_DEVICE_CAPABILITY", "eight")
    with pytest.warns(UserWarning, match="not 'major.minor'"):
        assert torch.npu.get_device_capability() is None


def test_rng_state_all_round_trips(npu: SimulatedNpu) -> None:
    from torch.npu import random as npu_random

    assert npu_random is torch.npu.random
    states = torch.npu.random.get_rng_state_all()
    first = torch.rand(3, device="npu").cpu()
    torch.npu.random.set_rng_state_all(states)
    assert torch.equal(torch.rand(3, device="npu").cpu(), first)
    assert torch.npu.default_generators[0] is torch.default_generator


def test_device_context_selects_and_restores_the_index(npu: SimulatedNpu) -> None:
    assert torch.npu.current_device() == 0
    with torch.npu.device("npu:0"):
        assert torch.npu.current_device() == 0
    with torch.npu.device_of(torch.ones(1, device="npu")):
        assert torch.npu.current_device() == 0
    assert torch.npu.is_current_stream_capturing() is False
    assert torch.npu.memory_cached() == torch.npu.memory_reserved()


def test_memory_fraction_is_validated(npu: SimulatedNpu) -> None:
    with pytest.raises(ValueError, match="invalid memory fraction"):
        torch.npu.set_per_process_memory_fraction(1.5)
    torch.npu.set_per_process_memory_fraction(0.5)
    assert torch.npu.get_per_process_memory_fraction() == 0.5
    torch.npu.set_per_process_memory_fraction(1.0)


def test_transfer_to_npu_answers_cuda_queries_and_keeps_torch_device() -> None:
    lines = _run_ok(
        """
        import torch, msprof_py.adapter as ad
        ad.install()
        from torch_npu.contrib import transfer_to_npu
        print(torch.cuda.is_bf16_supported(), torch.cuda.get_device_capability())
        print(torch.device is torch._C.device, torch.device("cuda").type)
        with torch.device("cuda"):
            print(torch.zeros(2).device, torch.arange(3).device)
        print(len(torch.cuda.random.get_rng_state_all()), torch.cuda.is_current_stream_capturing())
        print(torch.utils._triton.has_triton(), torch.distributed.is_nccl_available())
        """
    )
    assert lines == ["True None", "True cuda", "npu:0 npu:0", "1 False", "False True"]


@pytest.mark.slow  # ~35 s; graph-mode tests cover torch.compile on npu
def test_torch_compile_works_after_transfer_to_npu() -> None:
    lines = _run_ok(
        """
        import torch, msprof_py.adapter as ad
        ad.install()
        from torch_npu.contrib import transfer_to_npu
        torch.manual_seed(0)
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU(), torch.nn.Linear(8, 2))
        model = model.to(device)
        x = torch.randn(4, 8, device=device)
        eager = model(x)
        compiled = torch.compile(model)(x)
        compiled.sum().backward()
        print(compiled.device, torch.equal(eager.cpu(), compiled.cpu()))
        """
    )
    assert lines == ["npu:0 True"]
