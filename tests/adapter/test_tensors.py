"""Tensors on the npu device behave like tensors on a real out-of-tree device."""

from __future__ import annotations

import copy
import io

import pytest
import torch
from torch import nn

from msprof_py.adapter import backend, runtime, tensors
from msprof_py.device import SimulatedNpu, TaskKind, TaskLog


def test_device_basics(npu: SimulatedNpu) -> None:
    assert torch.device("npu:0").type == "npu"
    x = torch.arange(6.0).reshape(2, 3)
    for moved in (x.npu(), x.to("npu"), x.to(torch.device("npu:0"))):
        assert type(moved) is torch.Tensor
        assert moved.device == torch.device("npu:0") and moved.is_npu and not x.is_npu
        assert torch.equal(moved.cpu(), x)
    assert torch.tensor([1.5, 2.5], device="npu").cpu().tolist() == [1.5, 2.5]
    assert torch.zeros(2, 2, device="npu").sum().item() == 0.0
    assert str(torch.ones(2, device="npu")) == "tensor([1., 1.], device='npu:0')"


def test_random_factories_match_cpu(npu: SimulatedNpu) -> None:
    torch.manual_seed(7)
    on_cpu = torch.randn(5, 3)
    torch.manual_seed(7)
    on_npu = torch.randn(5, 3, device="npu")
    assert torch.equal(on_cpu, on_npu.cpu())
    torch.npu.manual_seed(3)
    a = torch.rand(4, device="npu").cpu()
    torch.npu.manual_seed_all(3)
    assert torch.equal(a, torch.rand(4, device="npu").cpu())


def test_views_share_storage_and_cost_nothing(npu: SimulatedNpu, log: TaskLog) -> None:
    x = torch.arange(12.0, device="npu")
    before = len(log.tasks)
    v = x.view(3, 4).t()[1:]
    assert len(log.tasks) == before  # views run no kernel
    assert v.shape == (3, 3) and not v.is_contiguous()
    v.mul_(10)
    assert x.cpu().tolist()[1] == 10.0  # writes through the view reach the base
    assert tensors.backing_of(x) is tensors.backing_of(v) is not None


def test_out_and_resizing_ops(npu: SimulatedNpu) -> None:
    out = torch.empty(0, device="npu")
    torch.arange(5, out=out)
    assert out.shape == (5,) and out.cpu().tolist() == [0, 1, 2, 3, 4]
    x = torch.randn(4, 4, device="npu")
    assert torch.equal(torch.isfinite(x).cpu(), torch.isfinite(x.cpu()))
    y = torch.cat([x, x], dim=0)
    assert y.shape == (8, 4) and torch.equal(y.cpu(), torch.cat([x.cpu(), x.cpu()]))


def test_a_tensor_the_kernel_resizes_holds_device_memory_for_its_bytes(npu: SimulatedNpu) -> None:
    """``torch.arange`` and an ``out=`` tensor grown by the CPU kernel (which resizes the host
    storage in place) hold device memory for their bytes, as a fresh tensor does: the memory
    timeline counts them."""

    def held_bytes(t: torch.Tensor) -> int:
        held = tensors.memory_of(t)
        return 0 if held is None else npu.memory.block_size(held.address)

    made = torch.arange(1000, device="npu")  # int64: 8000 bytes
    assert held_bytes(made) >= 8000
    out = torch.empty(0, device="npu")
    assert held_bytes(out) == 0
    before = npu.memory.allocated_bytes
    torch.mul(torch.ones(500, device="npu"), 2, out=out)
    assert out.shape == (500,) and held_bytes(out) >= 2000
    assert npu.memory.allocated_bytes - before >= 2000  # the ones are freed: the out remains
    same = held_bytes(out)
    torch.mul(torch.ones(500, device="npu"), 3, out=out)  # fits: nothing new
    assert held_bytes(out) == same and out.cpu()[0].item() == 3.0


def test_mixing_devices_is_torchs_error(npu: SimulatedNpu) -> None:
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.ones(3, device="npu") + torch.ones(3)
    assert (torch.ones(3, device="npu") + torch.tensor(2.0)).cpu().tolist() == [3.0] * 3
    with pytest.raises(TypeError, match="can't convert npu:0 device type tensor to numpy"):
        torch.ones(2, device="npu").numpy()


def test_save_and_load_state_dicts(npu: SimulatedNpu) -> None:
    model = torch.nn.Linear(3, 2).to("npu")
    buffer = io.BytesIO()
    torch.save({"model": model.state_dict(), "t": torch.arange(4, device="npu")}, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer)
    assert loaded["t"].device.type == "npu" and loaded["t"].cpu().tolist() == [0, 1, 2, 3]
    for key, value in model.state_dict().items():
        assert loaded["model"][key].device.type == "npu"
        assert torch.equal(loaded["model"][key].cpu(), value.cpu())
    fresh = torch.nn.Linear(3, 2).to("npu")
    fresh.load_state_dict(loaded["model"])
    assert torch.equal(fresh.weight.cpu(), model.weight.cpu())


@pytest.mark.skipif(backend.NATIVE is None, reason="npu storages show their bytes when built")
def test_an_npu_checkpoint_saves_each_storage_once_as_torch_npus_do(npu: SimulatedNpu) -> None:
    """With the compiled path, ``torch.save`` takes torch's own way for npu tensors: each
    storage written once and tagged ``npu:0`` (as a torch_npu checkpoint), so tensors that
    share one (a view, tied weights in a state dict) share it again after loading, on the npu
    or, with ``map_location="cpu"``, on the CPU."""
    weight = torch.randn(4, 6, device="npu")
    buffer = io.BytesIO()
    torch.save({"weight": weight, "rows": weight[1:], "tied": weight.detach()}, buffer)
    assert b"npu:0" in buffer.getvalue()
    for location, device in ((None, "npu"), ("cpu", "cpu")):
        buffer.seek(0)
        loaded = torch.load(buffer, map_location=location)
        assert {t.device.type for t in loaded.values()} == {device}
        assert torch.equal(loaded["rows"].cpu(), weight[1:].cpu())
        loaded["weight"].add_(1)  # one storage: the rows and the tied copy see it
        assert torch.equal(loaded["rows"].cpu(), weight[1:].cpu() + 1)
        assert torch.equal(loaded["tied"].cpu(), weight.cpu() + 1)


def test_tensors_that_require_grad_save_and_load_as_on_cpu(npu: SimulatedNpu) -> None:
    """A parameter and a result computed from it (not a leaf) save and load as on CPU eager:
    both load as leaves that require grad (saving the result failed on load: its CPU copy was
    itself a non-leaf, whose requires_grad cannot be set)."""
    loaded = {}
    for device in ("cpu", "npu"):
        weight = torch.ones(3, device=device, requires_grad=True)
        buffer = io.BytesIO()
        torch.save({"weight": weight, "doubled": weight * 2}, buffer)
        buffer.seek(0)
        loaded[device] = torch.load(buffer)
    for name in ("weight", "doubled"):
        cpu, on_npu = loaded["cpu"][name], loaded["npu"][name]
        assert on_npu.device.type == "npu" and torch.equal(on_npu.cpu(), cpu.detach())
        assert (
            (on_npu.requires_grad, on_npu.is_leaf)
            == (cpu.requires_grad, cpu.is_leaf)
            == (True, True)
        )


@pytest.mark.parametrize("location", ["npu", "npu:0", {"cpu": "npu"}])
@pytest.mark.parametrize("native", [True, False], ids=["compiled", "python"])
def test_a_cpu_checkpoint_loads_onto_npu_with_map_location(
    npu: SimulatedNpu, location: object, native: bool
) -> None:
    """``torch.load(..., map_location="npu")`` of a checkpoint saved on CPU (the usual way to
    resume, or to load pretrained weights) restores each storage on the npu and rebuilds the
    tensors on it with ``set_``: torch would make the storage with the device's registered
    allocator, which a Python backend has none of, and crashed the process. Tensors that
    shared a storage still share one (with the compiled path; the Python path's npu storages
    show a null data pointer, which ``torch.load`` does not cache by), each holds device
    memory, and values are the saved ones on both op paths."""
    state = runtime.STATE
    assert state is not None
    weights = torch.randn(4, 6)
    model = torch.nn.Linear(3, 2)
    buffer = io.BytesIO()
    torch.save({"w": weights, "rows": weights[1:], "model": model.state_dict()}, buffer)
    buffer.seek(0)
    state.native = native
    try:
        loaded = torch.load(buffer, map_location=location)
        assert {
            t.device.type for t in (loaded["w"], loaded["rows"], *loaded["model"].values())
        } == {"npu"}
        assert torch.equal(loaded["w"].cpu(), weights) and torch.equal(
            loaded["rows"].cpu(), weights[1:]
        )
        assert loaded["rows"].storage_offset() == 6 and tensors.memory_of(loaded["w"]) is not None
        if native and backend.NATIVE is not None:
            loaded["w"].add_(1)  # one storage: the rows see it
            assert torch.equal(loaded["rows"].cpu(), weights[1:] + 1)
        fresh = torch.nn.Linear(3, 2).to("npu")
        fresh.load_state_dict(loaded["model"])
        assert torch.equal(fresh.weight.cpu(), model.weight)
    finally:
        state.native = True


def test_set_points_an_npu_tensor_at_an_npu_storage(npu: SimulatedNpu) -> None:
    """``Tensor.set_`` with an npu storage (what ``torch.load`` rebuilds tensors with): the
    tensor becomes a view of the storage, with or without a geometry, an npu storage converts
    to CPU and back, ``torch.UntypedStorage(..., device="npu")`` makes one, and a CPU storage
    is refused with torch's error."""
    values = torch.arange(12, dtype=torch.float32)
    source = values.to("npu").untyped_storage()
    whole = torch.empty(0, device="npu").set_(source)
    assert whole.shape == (12,) and torch.equal(whole.cpu(), values)
    part = torch.empty(0, device="npu").set_(source, 2, (2, 3), (1, 2))
    assert torch.equal(part.cpu(), values[2:8].as_strided((2, 3), (1, 2)))
    assert torch.equal(torch.empty(0).set_(source.cpu()), values)
    back = torch.empty(0).set_(source.cpu()).untyped_storage().to(device="npu")
    assert back.device.type == "npu" and torch.equal(
        torch.empty(0, device="npu").set_(back).cpu(), values
    )
    made = torch.UntypedStorage([1, 2, 3], device="npu")  # torch's constructor crashed
    assert made.device.type == "npu" and made.new().device.type == "npu"
    assert torch.empty(0, dtype=torch.uint8, device="npu").set_(made).cpu().tolist() == [1, 2, 3]
    with pytest.raises(RuntimeError, match="must match"):
        torch.empty(0, device="npu").set_(torch.UntypedStorage(8))


def test_item_and_value_ops_wait_for_the_device(npu: SimulatedNpu, log: TaskLog) -> None:
    engine = npu.engine
    big = torch.randn(2048, 2048, device="npu")
    product = big @ big
    total = product.sum()
    kernel_end = log.tasks[-1].end_ns
    assert engine.host_ns < kernel_end  # asynchronous so far
    value = total.item()
    assert isinstance(value, float)
    assert engine.host_ns > kernel_end  # .item() blocked until the sum was done
    copy = log.tasks[-1]
    assert copy.kind is TaskKind.MEMCPY and copy.op_type == "MEMCPY_D2H"


def test_modules_train_on_npu(npu: SimulatedNpu) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    model = model.to("npu")
    assert all(
        p.device.type == "npu" and isinstance(p, torch.nn.Parameter) for p in model.parameters()
    )
    loss = model(torch.randn(5, 4, device="npu")).pow(2).mean()
    loss.backward()
    assert all(p.grad is not None and p.grad.device.type == "npu" for p in model.parameters())


def test_python_numbers_in_tensor_arguments(npu: SimulatedNpu) -> None:
    x = torch.arange(6.0)
    got = ((x.to("npu") * 3 + 1) % 7).cpu()
    assert torch.equal(got, (x * 3 + 1) % 7)
    assert torch.equal(torch.remainder(x.to("npu"), 4).cpu(), torch.remainder(x, 4))
    assert (torch.arange(6, device="npu") + 2.5).dtype == torch.float32
    assert (torch.ones(3, dtype=torch.float16, device="npu") * 2.5).dtype == torch.float16


def test_deepcopy_of_npu_modules_and_tensors(npu: SimulatedNpu) -> None:
    """timm's model EMA deep-copies a model already on the device: buffers, parameters, tied
    weights and a tensor's attributes come out equal and independent (it segfaulted: torch
    copied storage bytes the Python backend's storages do not hold)."""
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)).to("npu")
    model(torch.randn(2, 3, 8, 8, device="npu")).sum().backward()
    twin = copy.deepcopy(model)
    for a, b in zip(model.state_dict().values(), twin.state_dict().values(), strict=True):
        assert b.device.type == "npu" and torch.equal(a.cpu(), b.cpu())
    twin[1].running_mean.add_(1.0)
    assert not torch.equal(model[1].running_mean.cpu(), twin[1].running_mean.cpu())
    t = torch.randn(3, device="npu", requires_grad=True)
    t.tag = "ema"
    u = copy.deepcopy(t)
    assert u.requires_grad and u.is_leaf and u.tag == "ema" and torch.equal(u.cpu(), t.cpu())
    pair = copy.deepcopy([t, t])
    assert pair[0] is pair[1]  # the memo keeps one copy of one tensor


def test_npu_generators_draw_as_cpu_generators_of_the_same_seed(npu: SimulatedNpu) -> None:
    gen = torch.Generator(device="npu").manual_seed(3)
    assert gen.device == torch.device("npu", 0)
    assert isinstance(gen, torch.Generator) and isinstance(torch.default_generator, torch.Generator)
    ref = torch.Generator().manual_seed(3)
    assert torch.equal(
        torch.randn(4, generator=gen, device="npu").cpu(), torch.randn(4, generator=ref)
    )
    x = torch.empty(6, device="npu").uniform_(generator=gen)
    assert torch.equal(x.cpu(), torch.empty(6).uniform_(generator=ref))
    assert torch.Generator("cpu").device == torch.device("cpu")
