"""scaled_dot_product_attention on npu: the CPU's kernel (bitwise), FlashAttention on A2."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from adapter_helpers import run_script

from msprof_py.device import SimulatedNpu, TaskLog, TaskType


def _inputs(shape_q: tuple, shape_kv: tuple, dtype: torch.dtype = torch.float32) -> list:
    g = torch.Generator().manual_seed(0)
    return [
        torch.randn(shape, generator=g, dtype=torch.float32).to(dtype)
        for shape in (shape_q, shape_kv, shape_kv)
    ]


CONFIGS = {
    "plain": ((2, 4, 8, 16), (2, 4, 8, 16), {}),
    "causal": ((2, 4, 8, 16), (2, 4, 8, 16), {"is_causal": True}),
    "long_causal": ((1, 2, 300, 32), (1, 2, 300, 32), {"is_causal": True}),
    "cross_scale": ((2, 4, 8, 16), (2, 4, 12, 16), {"scale": 0.3}),
    "float_mask": ((2, 4, 8, 16), (2, 4, 12, 16), {"mask": "float"}),
    "bool_mask": ((2, 4, 8, 16), (2, 4, 12, 16), {"mask": "bool"}),
    "gqa": ((2, 8, 8, 16), (2, 2, 8, 16), {"enable_gqa": True, "is_causal": True}),
    "three_dim": ((3, 8, 16), (3, 8, 16), {}),
}


def _mask(kind: str | None, sq: int, skv: int) -> torch.Tensor | None:
    if kind is None:
        return None
    g = torch.Generator().manual_seed(3)
    if kind == "bool":
        mask = torch.rand(sq, skv, generator=g) > 0.3
        mask[:, 0] = True  # no fully masked row
        return mask
    return torch.randn(sq, skv, generator=g)


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, options: dict) -> list:
    options = dict(options)
    mask = _mask(options.pop("mask", None), q.shape[-2], k.shape[-2])
    if mask is not None:
        mask = mask.to(q.device)
    leaves = [t.requires_grad_() for t in (q, k, v)]
    out = F.scaled_dot_product_attention(*leaves, attn_mask=mask, **options)
    (out * torch.arange(out.numel(), device=out.device).reshape(out.shape).sin()).sum().backward()
    return [out.detach().cpu(), *(t.grad.cpu() for t in leaves)]  # type: ignore[union-attr]


@pytest.mark.parametrize("name", CONFIGS)
def test_sdpa_output_and_grads_are_bitwise_cpu(npu: SimulatedNpu, name: str) -> None:
    shape_q, shape_kv, options = CONFIGS[name]
    cpu = _attend(*_inputs(shape_q, shape_kv), options)
    on_npu = _attend(*(t.to("npu") for t in _inputs(shape_q, shape_kv)), options)
    for a, b in zip(cpu, on_npu, strict=True):
        assert a.dtype == b.dtype and torch.equal(a, b), (a - b).abs().max()


def test_sdpa_differs_from_the_math_path_cpu_does_not_take(npu: SimulatedNpu) -> None:
    # the npu used to decompose SDPA (math path): the CPU's flash kernel rounds differently
    q, k, v = _inputs((1, 2, 300, 32), (1, 2, 300, 32))
    flash = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    math_path = torch.ops.aten._scaled_dot_product_attention_math(q, k, v, is_causal=True)[0]
    assert not torch.equal(flash, math_path)
    got = F.scaled_dot_product_attention(*(t.to("npu") for t in (q, k, v)), is_causal=True)
    assert torch.equal(flash, got.cpu())


def test_sdpa_under_autocast_matches_cpu_autocast(npu: SimulatedNpu) -> None:
    q, k, v = _inputs((2, 4, 8, 16), (2, 4, 8, 16))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    with torch.autocast("npu", dtype=torch.bfloat16):
        got = F.scaled_dot_product_attention(*(t.to("npu") for t in (q, k, v)), is_causal=True)
    assert got.dtype == torch.bfloat16 and torch.equal(expected, got.cpu())


def _kernels(log: TaskLog, start: int) -> list:
    return [t for t in log.tasks[start:] if t.kind.value == "kernel"]


def test_fp16_sdpa_on_ascend910b_is_one_flash_attention_kernel(
    npu: SimulatedNpu, log: TaskLog
) -> None:
    assert npu.spec.soc_version.startswith("Ascend910B")
    b, n, s, d = 2, 4, 64, 32
    q, k, v = (t.to("npu") for t in _inputs((b, n, s, d), (b, n, s, d), torch.float16))
    leaves = [t.requires_grad_() for t in (q, k, v)]
    start = len(log.tasks)
    out = F.scaled_dot_product_attention(*leaves, is_causal=True)
    (fa,) = _kernels(log, start)
    assert (fa.name, fa.op_type, fa.task_type) == (
        "aten::scaled_dot_product_attention",
        "FlashAttentionScore",
        TaskType.MIX_AIC,
    )
    kept = s * (s + 1) // 2  # the top-left causal mask skips the upper triangle
    assert fa.flops == pytest.approx(2 * b * n * (s * s * d + s * s * d) * kept / (s * s))
    # q, k, v, out (fp16) and the fp32 [B, N, S, 8] softmax max and sum
    assert fa.bytes == 4 * b * n * s * d * 2 + 2 * b * n * s * 8 * 4
    start = len(log.tasks)
    out.backward(torch.ones_like(out))
    grads = [k for k in _kernels(log, start) if k.name.startswith("aten::scaled")]
    assert [k.op_type for k in grads] == ["FlashAttentionScoreGrad"]
    assert grads[0].flops == pytest.approx(fa.flops * 5 / 2)  # five matmuls instead of two


def test_fp32_sdpa_runs_the_math_path_kernels(npu: SimulatedNpu, log: TaskLog) -> None:
    q, k, v = (t.to("npu") for t in _inputs((2, 4, 8, 16), (2, 4, 8, 16)))
    start = len(log.tasks)
    F.scaled_dot_product_attention(q, k, v)
    kernels = _kernels(log, start)
    assert [t.op_type for t in kernels] == ["Mul", "Mul", "BatchMatMul", "SoftmaxV2", "BatchMatMul"]
    assert kernels[2].flops == 2 * 8 * 8 * 8 * 16


def test_fp16_sdpa_on_ascend910a_runs_the_math_path() -> None:
    result = run_script(
        """
        import torch, torch.nn.functional as F, msprof_py.adapter
        from msprof_py.device import TaskLog
        npu = msprof_py.adapter.install(device="ascend910a")
        log = TaskLog()
        npu.subscribe(log)
        q = torch.randn(2, 4, 8, 16, device="npu", dtype=torch.float16)
        F.scaled_dot_product_attention(q, q, q, is_causal=True)
        kernels = [t for t in log.tasks if t.name == "aten::scaled_dot_product_attention"]
        print(" ".join(t.op_type for t in kernels))
        print(kernels[2].flops)
        """
    )
    assert result.returncode == 0, result.stderr
    types, flops = result.stdout.split("\n")[:2]
    assert types.split() == ["Mul", "Mul", "BatchMatMul", "Add", "SoftmaxV2", "BatchMatMul"]
    assert float(flops) == 2 * 8 * 8 * 8 * 16  # q k^T of the 8 (batch, head) pairs
