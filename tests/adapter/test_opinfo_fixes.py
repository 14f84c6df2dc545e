"""Backend fixes found by the OpInfo conformance suite (tests/conformance): each test here
failed before its fix."""

from __future__ import annotations

import pytest
import torch

from msprof_py.device import SimulatedNpu


def test_zero_gradients_are_real_zeros(npu: SimulatedNpu) -> None:
    # autograd builds the gradient of sgn/sign of real inputs with _efficientzerotensor, whose
    # CPU result has no storage: the npu tensor adopting it crashed when read
    x = torch.randn(5, device="npu", requires_grad=True)
    (grad,) = torch.autograd.grad(torch.sgn(x).sum(), x)
    assert grad.device.type == "npu"
    assert torch.equal(grad.cpu(), torch.zeros(5))
    zeros = torch.ops.aten._efficientzerotensor([2, 3], dtype=torch.float16, device="npu")
    assert zeros.dtype == torch.float16
    assert torch.equal(zeros.cpu(), torch.zeros(2, 3, dtype=torch.float16))


def test_backward_kernels_with_a_cpu_kernel_run_whole(npu: SimulatedNpu) -> None:
    # mish_backward (and silu_backward) have a fused CPU kernel and a composite one for other
    # devices: the npu ran the composite one and a third of mish's gradients were off by an ulp
    x = torch.empty(1000).uniform_(-9, 9, generator=torch.Generator().manual_seed(0))
    for fn in (torch.nn.functional.silu, torch.nn.functional.mish):
        grads = []
        for device in ("cpu", "npu"):
            leaf = x.to(device).requires_grad_()
            (grad,) = torch.autograd.grad(fn(leaf).sum(), leaf)
            grads.append(grad.cpu())
        assert torch.equal(grads[0], grads[1]), fn


def test_python_numbers_keep_their_wrapped_number_semantics(npu: SimulatedNpu) -> None:
    # torch hands the fallback wrapped numbers (2.5 in `2.5 - t`) as Python scalars; they were
    # rebuilt as float32 0-dim tensors, which promote like tensors and lose double precision
    half = torch.tensor(1.0, dtype=torch.float16)
    assert torch.sub(2.5, half.to("npu")).dtype == torch.float16  # type: ignore[arg-type]
    assert torch.mul(half.to("npu"), 3).dtype == torch.float16
    wide = torch.ones(3, dtype=torch.float64)
    for fn in (lambda t: t + 0.1, lambda t: torch.add(t, 0.1), lambda t: 0.1 * t):
        assert torch.equal(fn(wide.to("npu")).cpu(), fn(wide))


def test_conjugate_and_negative_views_read_and_compute_like_cpu(npu: SimulatedNpu) -> None:
    # z.conj() is a lazy view (a bit, not new bytes): copying it off the device recursed until
    # the stack overflowed (segfault), and host views dropped the bit
    z = torch.randn(3, 3, dtype=torch.complex64)
    on_npu = z.to("npu")
    assert torch.equal(on_npu.conj().cpu(), z.conj())
    assert torch.equal((on_npu.conj() * 2).cpu(), z.conj() * 2)
    assert torch.equal((on_npu.mH @ on_npu).cpu(), z.mH @ z)
    copied = torch.zeros(3, 3, dtype=torch.complex64, device="npu").copy_(on_npu.conj())
    assert torch.equal(copied.cpu(), z.conj())
    x = torch.randn(4)
    assert torch.equal((x.to("npu")._neg_view() + 1).cpu(), x._neg_view() + 1)
    # autograd of complex ops conjugates gradients lazily
    r = torch.rand(3)
    grads = []
    for device in ("cpu", "npu"):
        abs_, angle = (r.to(device, copy=True).requires_grad_() for _ in range(2))
        out = torch.view_as_real(torch.polar(abs_, angle)).sum()
        grads.append([g.cpu() for g in torch.autograd.grad(out, (abs_, angle))])
    assert all(torch.equal(a, b) for a, b in zip(*grads, strict=True))


def test_in_place_ops_check_shapes_like_cpu(npu: SimulatedNpu) -> None:
    # composite in-place ops call their .out with self as out: the fallback got two host views
    # of self (and a boxed call cannot pass C++'s reference), so CPU's "an in-place op cannot
    # resize its input" checks did not fire and the npu tensor was resized
    cases = [
        (lambda x, y: x.logical_and_(y), (5, 1), (5, 5)),
        (lambda x, y: x.ldexp_(y), (5, 1), (5, 5)),
        (lambda x, y: x.addr_(y[0], y[1]), (), (2, 3)),
    ]
    for fn, shape, other in cases:
        errors = []
        for device in ("cpu", "npu"):
            x, y = torch.ones(shape, device=device), torch.ones(other, device=device)
            with pytest.raises(RuntimeError) as raised:
                fn(x, y)
            errors.append(str(raised.value).splitlines()[0])
            assert x.shape == shape
        assert errors[0] == errors[1]
    x = torch.arange(4.0)
    on_npu = x.to("npu")
    assert torch.equal(on_npu.add_(on_npu).cpu(), x.add_(x))


def test_mode_with_out_tensors(npu: SimulatedNpu) -> None:
    # mode.values is a composite that refused any device but CPU, CUDA and XPU
    x = torch.tensor([[1.0, 2.0, 2.0], [3.0, 3.0, 1.0]])
    expected = torch.mode(x, 1)
    values = torch.empty(2, device="npu")
    indices = torch.empty(2, dtype=torch.int64, device="npu")
    torch.mode(x.to("npu"), 1, out=(values, indices))
    assert torch.equal(values.cpu(), expected.values)
    assert torch.equal(indices.cpu(), expected.indices)
