"""Module conversions keep shared parameters and buffers shared, and parameters themselves."""

from __future__ import annotations

import copy

import pytest
import torch
from adapter_helpers import run_script
from torch import nn

from msprof_py.device import SimulatedNpu


class TiedLM(nn.Module):
    """An embedding and an LM head sharing one weight, as in GPT-2 and BERT."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(10, 4)
        self.mix = nn.Linear(4, 4)
        self.head = nn.Linear(4, 10, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.mix(self.emb(ids))))


def _tied(model: TiedLM) -> bool:
    return model.head.weight is model.emb.weight


@pytest.mark.parametrize(
    "convert",
    [
        lambda m: m.to("npu"),
        lambda m: m.npu(),
        lambda m: m.to(device="npu", dtype=torch.float16),
        lambda m: m.to("npu").half(),
        lambda m: m.to("npu").to(torch.bfloat16),
        lambda m: m.to("npu").double(),
        lambda m: m.to("npu").cpu(),
    ],
    ids=["to", "npu", "to-dtype", "half", "bf16", "double", "back-to-cpu"],
)
def test_ties_survive_every_conversion(npu: SimulatedNpu, convert) -> None:
    torch.manual_seed(0)
    model = TiedLM()
    params = list(model.parameters())
    converted = convert(model)
    assert converted is model
    assert _tied(model)
    assert len(list(model.parameters())) == len(params) == 3
    # the same Parameter objects, converted in place, as on CUDA
    assert all(a is b for a, b in zip(params, model.parameters(), strict=True))


def test_grads_are_converted_with_their_parameters(npu: SimulatedNpu) -> None:
    torch.manual_seed(0)
    model = TiedLM()
    model(torch.tensor([[1, 2, 3]])).sum().backward()
    expected = model.emb.weight.grad.clone()
    model.to("npu")
    assert _tied(model)
    assert model.emb.weight.grad.device.type == "npu"
    assert torch.equal(model.emb.weight.grad.cpu(), expected)


def test_tied_model_trains_bitwise_like_cpu_with_optimizer_built_before_to(
    npu: SimulatedNpu,
) -> None:
    torch.manual_seed(0)
    cpu_model = TiedLM()
    npu_model = copy.deepcopy(cpu_model)
    assert _tied(npu_model)
    cpu_opt = torch.optim.AdamW(cpu_model.parameters(), lr=0.1)
    npu_opt = torch.optim.AdamW(npu_model.parameters(), lr=0.1)  # built before .to, as on CUDA
    npu_model.to("npu")
    ids = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8]])
    for _ in range(3):
        for model, opt, x in ((cpu_model, cpu_opt, ids), (npu_model, npu_opt, ids.to("npu"))):
            opt.zero_grad()
            model(x).logsumexp(-1).mean().backward()
            opt.step()
    for a, b in zip(cpu_model.parameters(), npu_model.parameters(), strict=True):
        assert b.device.type == "npu"
        assert torch.equal(a, b.cpu())


def test_state_dict_round_trip_keeps_ties(npu: SimulatedNpu) -> None:
    torch.manual_seed(0)
    source = TiedLM().to("npu")
    target = TiedLM().to("npu")
    target.load_state_dict(source.state_dict())
    assert _tied(target)
    assert torch.equal(target.head.weight.cpu(), source.emb.weight.cpu())
    back = TiedLM()
    back.load_state_dict({k: v.cpu() for k, v in source.state_dict().items()})
    assert _tied(back)


def test_shared_submodules_and_buffers_stay_shared(npu: SimulatedNpu) -> None:
    block = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3))
    model = nn.ModuleDict({"a": block, "b": block, "c": nn.Linear(3, 3)})
    running = torch.zeros(3)
    model["c"].register_buffer("stat", running)
    model["a"][0].register_buffer("stat", running)
    model.to("npu")
    assert model["a"] is model["b"]
    assert len(list(model.parameters())) == 6
    assert model["c"].stat is model["a"][0].stat
    assert model["c"].stat.device.type == "npu"
    assert model["a"][1].running_mean.device.type == "npu"


def test_cuda_calls_under_transfer_to_npu_keep_ties() -> None:
    result = run_script(
        """
        import torch, msprof_py.adapter
        msprof_py.adapter.install()
        from torch_npu.contrib import transfer_to_npu
        from torch import nn
        emb = nn.Embedding(10, 4); head = nn.Linear(4, 10, bias=False); head.weight = emb.weight
        model = nn.ModuleList([emb, head]).cuda()
        assert model[1].weight is model[0].weight, "untied"
        assert model[0].weight.device.type == "npu", model[0].weight.device
        model.half()
        assert model[1].weight is model[0].weight and model[0].weight.dtype == torch.float16
        print("ok")
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
