"""The torch_npu shim's fused ops, fused optimizers and format API on the simulated npu."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from adapter_helpers import run_script
from torch import nn

from msprof_py.adapter.tensors import storage_format
from msprof_py.device import SimulatedNpu, TaskLog, TaskType


@pytest.fixture(scope="module")
def tnpu(npu: SimulatedNpu):
    """The shim's modules (imported after the device is installed)."""
    from msprof_py.adapter.torch_npu import format_api, fused, optim

    class Shim:
        pass

    shim = Shim()
    shim.fused, shim.optim, shim.format_api = fused, optim, format_api
    return shim


def _kernels(log: TaskLog, start: int) -> list:
    return [t for t in log.tasks[start:] if t.kind.value == "kernel"]


def _nbytes(*tensors: torch.Tensor) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


# ---- npu_fusion_attention ----------------------------------------------------------------


def _to_layout(t: torch.Tensor, layout: str) -> torch.Tensor:
    """[B, N, S, D] -> the layout's shape."""
    b, n, s, d = t.shape
    if layout == "BNSD":
        return t.contiguous()
    if layout == "BSND":
        return t.transpose(1, 2).contiguous()
    if layout == "BSH":
        return t.transpose(1, 2).reshape(b, s, n * d).contiguous()
    return t.permute(2, 0, 1, 3).reshape(s, b, n * d).contiguous()  # SBH


def _reference_attention(q, k, v, scale, mask=None, pse=None):
    """softmax(scale * (q k^T + pse) masked) v on [B, N, S, D] tensors (True = masked)."""
    scores = q @ k.transpose(-1, -2)
    if pse is not None:
        scores = scores + pse
    scores = scores * scale
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    return scores.softmax(dim=-1) @ v


def _leaves(*tensors: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """CPU leaves and npu leaves holding the same values."""
    cpu = [t.clone().requires_grad_() for t in tensors]
    dev = [t.to("npu").requires_grad_() for t in tensors]
    return cpu, dev


@pytest.mark.parametrize("layout", ["BSH", "SBH", "BSND", "BNSD"])
def test_fusion_attention_matches_the_reference_with_gradients_in_every_layout(
    tnpu, log: TaskLog, layout: str
) -> None:
    torch.manual_seed(0)
    b, n, s, d = 2, 4, 48, 16
    scale = 1 / math.sqrt(d)
    bnsd = [torch.randn(b, n, s, d) for _ in range(3)]
    mask = torch.rand(b, 1, s, s) > 0.7
    mask[..., 0] = False  # every row keeps one key
    (qc, kc, vc), (qn, kn, vn) = _leaves(*(_to_layout(t, layout) for t in bnsd))
    start = len(log.tasks)
    out, softmax_max, softmax_sum, softmax_out, seed, offset, numels = (
        tnpu.fused.npu_fusion_attention(
            qn, kn, vn, n, layout, atten_mask=mask.to("npu"), scale=scale
        )
    )
    (fa,) = _kernels(log, start)
    assert (fa.name, fa.op_type, fa.task_type) == (
        "npu_fusion_attention",
        "FlashAttentionScore",
        TaskType.MIX_AIC,
    )
    assert fa.flops == 4 * b * n * s * s * d
    # bytes: q, k, v, out, the fp32 statistics and the mask, never a B*N*S*S score matrix
    assert fa.bytes == _nbytes(qn, kn, vn, out, softmax_max, softmax_sum, mask)
    assert (seed, offset, numels) == (0, 0, b * n * s * s)
    assert softmax_max.shape == softmax_sum.shape == (b, n, s, 8)
    assert softmax_max.dtype == torch.float32 and softmax_out.numel() == 0
    assert out.shape == qn.shape and out.device.type == "npu"

    def to_bnsd(t: torch.Tensor) -> torch.Tensor:
        if layout == "BNSD":
            return t
        if layout == "BSND":
            return t.transpose(1, 2)
        if layout == "BSH":
            return t.reshape(b, s, n, d).transpose(1, 2)
        return t.reshape(s, b, n, d).permute(1, 2, 0, 3)

    ref = _reference_attention(to_bnsd(qc), to_bnsd(kc), to_bnsd(vc), scale, mask)
    torch.testing.assert_close(to_bnsd(out.cpu()), ref.detach(), rtol=1e-5, atol=1e-6)
    scores = (to_bnsd(qc) @ to_bnsd(kc).transpose(-1, -2) * scale).masked_fill(mask, -math.inf)
    row_max = scores.amax(-1)
    torch.testing.assert_close(softmax_max.cpu()[..., 3], row_max.detach())
    row_sum = (scores - row_max[..., None]).exp().sum(-1)
    torch.testing.assert_close(softmax_sum.cpu()[..., 0], row_sum.detach())

    grad = torch.randn_like(qc)
    layout_ref = _to_layout(ref, layout) if layout != "BNSD" else ref
    layout_ref.backward(grad)
    start = len(log.tasks)
    out.backward(grad.to("npu"))
    (fag,) = _kernels(log, start)
    assert (fag.op_type, fag.task_type) == ("FlashAttentionScoreGrad", TaskType.MIX_AIC)
    assert fag.flops == 2.5 * fa.flops
    for dev, cpu in ((qn, qc), (kn, kc), (vn, vc)):
        assert dev.grad.device.type == "npu"
        torch.testing.assert_close(dev.grad.cpu(), cpu.grad, rtol=1e-5, atol=1e-5)


def test_fusion_attention_in_half_precision_accumulates_in_fp32(tnpu, log: TaskLog) -> None:
    torch.manual_seed(1)
    b, n, s, d = 1, 2, 64, 64
    q, k, v = (torch.randn(b, n, s, d, dtype=torch.float16) for _ in range(3))
    out = tnpu.fused.npu_fusion_attention(
        q.to("npu"), k.to("npu"), v.to("npu"), n, "BNSD", scale=d**-0.5
    )[0]
    assert out.dtype == torch.float16
    ref = _reference_attention(q.float(), k.float(), v.float(), d**-0.5)
    # fp16 output of an fp32 computation: within fp16 rounding of the reference
    torch.testing.assert_close(out.cpu().float(), ref, rtol=2e-3, atol=2e-3)


def test_fusion_attention_never_puts_the_score_matrix_in_device_memory(tnpu, log: TaskLog) -> None:
    torch.manual_seed(2)
    b, n, s, d = 1, 2, 2048, 64
    q, k, v = (torch.randn(b, s, n * d, dtype=torch.float16, device="npu") for _ in range(3))
    torch.npu.synchronize()
    before = torch.npu.memory_allocated()
    torch.npu.reset_peak_memory_stats()
    out, softmax_max, softmax_sum, *_ = tnpu.fused.npu_fusion_attention(
        q, k, v, n, "BSH", scale=d**-0.5
    )
    growth = torch.npu.max_memory_allocated() - before
    score_matrix = b * n * s * s * 2  # fp16 scores a non-fused attention would write
    assert growth <= _nbytes(out, softmax_max, softmax_sum) + 64 * 1024  # outputs (+ rounding)
    assert growth < score_matrix / 10


@pytest.mark.parametrize(("sparse_mode", "sq", "skv"), [(2, 40, 40), (3, 24, 40), (3, 40, 40)])
def test_fusion_attention_causal_modes_mask_and_skip_the_upper_triangle(
    tnpu, log: TaskLog, sparse_mode: int, sq: int, skv: int
) -> None:
    torch.manual_seed(3)
    b, n, d = 2, 2, 16
    q = torch.randn(b, n, sq, d)
    k, v = torch.randn(b, n, skv, d), torch.randn(b, n, skv, d)
    shift = 0 if sparse_mode == 2 else skv - sq  # left-up / right-down aligned diagonal
    causal = torch.ones(sq, skv, dtype=torch.bool).triu(1 + shift)
    compressed = torch.ones(2048, 2048, dtype=torch.bool).triu(1).to("npu")
    start = len(log.tasks)
    out = tnpu.fused.npu_fusion_attention(
        q.to("npu"),
        k.to("npu"),
        v.to("npu"),
        n,
        "BNSD",
        atten_mask=compressed,
        scale=0.25,
        sparse_mode=sparse_mode,
    )[0]
    torch.testing.assert_close(out.cpu(), _reference_attention(q, k, v, 0.25, causal))
    (fa,) = _kernels(log, start)
    kept = int((~causal).sum())
    assert fa.flops == pytest.approx(4 * b * n * kept * d)  # the masked blocks are skipped


def test_fusion_attention_band_pse_and_grouped_query_heads(tnpu, log: TaskLog) -> None:
    torch.manual_seed(4)
    b, n, n_kv, s, d = 2, 4, 2, 32, 8
    q = torch.randn(b, s, n, d)
    k, v = torch.randn(b, s, n_kv, d), torch.randn(b, s, n_kv, d)
    pse = torch.randn(1, n, s, s)
    pre, nxt = 5, 2
    full = torch.zeros(s, s, dtype=torch.bool)
    (qc, kc, vc, pc), (qn, kn, vn, pn) = _leaves(q, k, v, pse)
    out = tnpu.fused.npu_fusion_attention(
        qn, kn, vn, n, "BSND", pse=pn, atten_mask=full.to("npu"), scale=0.3,
        pre_tockens=pre, next_tockens=nxt,
    )[0]  # fmt: skip
    rows, cols = torch.arange(s)[:, None], torch.arange(s)[None]
    band = (cols - rows > nxt) | (rows - cols > pre)
    kb = kc.transpose(1, 2).repeat_interleave(n // n_kv, dim=1)
    vb = vc.transpose(1, 2).repeat_interleave(n // n_kv, dim=1)
    ref = _reference_attention(qc.transpose(1, 2), kb, vb, 0.3, band, pc).transpose(1, 2)
    torch.testing.assert_close(out.cpu(), ref.detach(), rtol=1e-5, atol=1e-6)
    grad = torch.randn_like(ref)
    ref.backward(grad)
    out.backward(grad.to("npu"))
    for dev, cpu in ((qn, qc), (kn, kc), (vn, vc), (pn, pc)):
        torch.testing.assert_close(dev.grad.cpu(), cpu.grad, rtol=1e-5, atol=1e-5)


def test_fusion_attention_varlen_tnd_attends_within_each_sequence(tnpu, log: TaskLog) -> None:
    torch.manual_seed(5)
    n, d, lengths = 2, 8, [5, 11, 7]
    ends = torch.tensor(lengths).cumsum(0).tolist()
    t = ends[-1]
    q, k, v = (torch.randn(t, n, d) for _ in range(3))
    out, softmax_max, *_, numels = tnpu.fused.npu_fusion_attention(
        q.to("npu"), k.to("npu"), v.to("npu"), n, "TND", scale=0.5,
        actual_seq_qlen=ends, actual_seq_kvlen=ends, sparse_mode=3,
        atten_mask=torch.ones(2048, 2048, dtype=torch.bool).triu(1).to("npu"),
    )  # fmt: skip
    assert softmax_max.shape == (t, n, 8) and numels == n * sum(x * x for x in lengths)
    start = 0
    for end in ends:
        seg = slice(start, end)
        causal = torch.ones(end - start, end - start, dtype=torch.bool).triu(1)
        ref = _reference_attention(
            *(x[seg].transpose(0, 1) for x in (q, k, v)), 0.5, causal
        ).transpose(0, 1)
        torch.testing.assert_close(out.cpu()[seg], ref)
        start = end


def test_fusion_attention_dropout_uses_the_same_mask_forward_and_backward(
    tnpu, log: TaskLog
) -> None:
    torch.manual_seed(6)
    b, n, s, d = 1, 2, 32, 8
    q, k, v = (torch.randn(b, n, s, d) for _ in range(3))
    vn = v.to("npu").requires_grad_()
    start = len(log.tasks)
    out, *_, seed, _offset, numels = tnpu.fused.npu_fusion_attention(
        q.to("npu"), k.to("npu"), vn, n, "BNSD", scale=0.3, keep_prob=0.5
    )
    ops = [t.op_type for t in _kernels(log, start)]
    assert ops == ["DropOutGenMaskV3", "FlashAttentionScore"]
    assert seed != 0 and numels == b * n * s * s
    full = _reference_attention(q, k, v, 0.3)
    assert not torch.allclose(out.cpu(), full)
    grad = torch.randn(b, n, s, d)
    out.backward(grad.to("npu"))
    # out = P_drop v is linear in v, so <grad, out> == <dv, v> only if the backward regenerated
    # the forward's dropout mask
    lhs = (grad * out.detach().cpu()).sum()
    rhs = (vn.grad.cpu() * v).sum()
    torch.testing.assert_close(lhs, rhs, rtol=1e-4, atol=1e-4)


def test_fusion_attention_rejects_bad_arguments(tnpu) -> None:
    q = torch.randn(1, 2, 8, 4, device="npu")
    with pytest.raises(ValueError, match="input_layout"):
        tnpu.fused.npu_fusion_attention(q, q, q, 2, "XYZ")
    with pytest.raises(NotImplementedError, match="sparse_mode"):
        tnpu.fused.npu_fusion_attention(q, q, q, 2, "BNSD", sparse_mode=6)
    with pytest.raises(RuntimeError, match="npu tensor"):
        tnpu.fused.npu_fusion_attention(q.cpu(), q, q, 2, "BNSD")


# ---- vector fused ops ----------------------------------------------------------------------


def _check_vector_op(log, fn, ref, inputs, op_type, grad_op_type, n_outputs=1):
    """fn (npu) equals ref (CPU) with gradients; one kernel forward and one backward."""
    cpu, dev = _leaves(*inputs)
    start = len(log.tasks)
    got = fn(*dev)
    (kernel,) = _kernels(log, start)
    assert (kernel.op_type, kernel.task_type) == (op_type, TaskType.AI_VECTOR_CORE)
    got = got if isinstance(got, tuple) else (got,)
    want = ref(*cpu)
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == n_outputs
    for g, w in zip(got, want, strict=True):
        assert g.device.type == "npu" and g.dtype == w.dtype
        torch.testing.assert_close(g.cpu(), w.detach(), rtol=1e-5, atol=1e-6)
    grad = torch.randn_like(want[0])
    want[0].backward(grad)
    start = len(log.tasks)
    got[0].backward(grad.to("npu"))
    (kernel,) = _kernels(log, start)
    assert kernel.op_type == grad_op_type
    for d, c in zip(dev, cpu, strict=True):
        torch.testing.assert_close(d.grad.cpu(), c.grad, rtol=1e-5, atol=1e-5)


def test_rms_norm_matches_the_reference_with_gradients(tnpu, log: TaskLog) -> None:
    torch.manual_seed(7)
    eps = 1e-5

    def ref(x, gamma):
        rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        return x * rstd * gamma, rstd

    x, gamma = torch.randn(4, 6, 32), torch.rand(32) + 0.5
    _check_vector_op(
        log,
        lambda a, g: tnpu.fused.npu_rms_norm(a, g, epsilon=eps),
        ref,
        [x, gamma],
        "RmsNorm",
        "RmsNormGrad",
        n_outputs=2,
    )
    _, rstd = tnpu.fused.npu_rms_norm(x.to("npu"), gamma.to("npu"))
    assert rstd.shape == (4, 6, 1) and rstd.dtype == torch.float32


@pytest.mark.parametrize("mode", ["half", "interleave"])
def test_rotary_mul_matches_torch_npus_definition(tnpu, log: TaskLog, mode: str) -> None:
    torch.manual_seed(8)

    def ref(x, r1, r2):
        if mode == "half":
            x1, x2 = x.chunk(2, dim=-1)
            rotated = torch.cat((-x2, x1), dim=-1)
        else:
            rotated = torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)
        return x * r1 + rotated * r2

    b, s, n, d = 2, 10, 3, 16
    x, r1, r2 = torch.randn(b, s, n, d), torch.randn(1, s, 1, d), torch.randn(1, s, 1, d)
    _check_vector_op(
        log,
        lambda *a: tnpu.fused.npu_rotary_mul(*a, rotary_mode=mode),
        ref,
        [x, r1, r2],
        "RotaryMul",
        "RotaryMulGrad",
    )


@pytest.mark.parametrize("dim", [-1, 0])
def test_swiglu_is_silu_of_the_first_half_times_the_second(tnpu, log: TaskLog, dim: int) -> None:
    torch.manual_seed(9)

    def ref(x):
        a, b = x.chunk(2, dim=dim)
        return F.silu(a) * b

    _check_vector_op(
        log, lambda x: tnpu.fused.npu_swiglu(x, dim=dim), ref, [torch.randn(8, 12)], "SwiGlu",
        "SwiGluGrad",
    )  # fmt: skip


# ---- fused optimizers ------------------------------------------------------------------------


def _model() -> nn.Module:
    torch.manual_seed(10)
    return nn.Sequential(nn.Linear(12, 16), nn.Tanh(), nn.Linear(16, 3))


@pytest.mark.parametrize(
    ("name", "reference", "kwargs", "op_type"),
    [
        ("NpuFusedAdamW", torch.optim.AdamW, {"lr": 1e-2, "weight_decay": 0.1}, "ApplyAdamW"),
        ("NpuFusedAdamW", torch.optim.AdamW, {"lr": 1e-2, "amsgrad": True}, "ApplyAdamW"),
        ("NpuFusedAdam", torch.optim.Adam, {"lr": 1e-2, "weight_decay": 0.05}, "ApplyAdam"),
        ("NpuFusedSGD", torch.optim.SGD, {"lr": 0.1}, "ApplyGradientDescent"),
        (
            "NpuFusedSGD",
            torch.optim.SGD,
            {"lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 1e-3},
            "ApplyMomentum",
        ),
        (
            "NpuFusedSGD",
            torch.optim.SGD,
            {"lr": 0.1, "momentum": 0.8, "dampening": 0.1},
            "ApplyMomentum",
        ),
    ],
)  # fmt: skip
def test_fused_optimizers_equal_torch_optim_with_one_kernel_per_step(
    tnpu, log: TaskLog, name: str, reference: type, kwargs: dict, op_type: str
) -> None:
    cpu_model = _model()
    npu_model = _model().to("npu")

    # two groups with different learning rates: still one kernel for the whole step
    def groups(m: nn.Module) -> list[dict]:
        return [
            {"params": m[0].parameters()},
            {"params": m[2].parameters(), "lr": kwargs["lr"] / 2},
        ]

    ref_opt = reference(groups(cpu_model), **kwargs)
    opt = getattr(tnpu.optim, name)(groups(npu_model), **kwargs)
    assert isinstance(opt, reference)
    data = torch.randn(5, 8, 12)
    for step in range(4):
        for model, optimizer in ((cpu_model, ref_opt), (npu_model, opt)):
            optimizer.zero_grad()
            x = data[step].to(next(model.parameters()).device)
            model(x).pow(2).mean().backward()
        ref_opt.step()
        start = len(log.tasks)
        opt.step()
        (kernel,) = _kernels(log, start)
        assert (kernel.op_type, kernel.name, kernel.task_type) == (
            op_type,
            name,
            TaskType.AI_VECTOR_CORE,
        )
        for p_cpu, p_npu in zip(cpu_model.parameters(), npu_model.parameters(), strict=True):
            assert torch.equal(p_npu.cpu(), p_cpu)
    # the state has torch.optim's layout, so it loads into torch.optim and back
    state = opt.state_dict()
    for p_cpu, p_npu in zip(cpu_model.parameters(), npu_model.parameters(), strict=True):
        for key, value in ref_opt.state[p_cpu].items():
            got = opt.state[p_npu][key]
            assert torch.equal(got.cpu(), value), key
    opt.load_state_dict(state)


def test_fused_optimizer_step_returns_the_closure_loss_and_skips_params_without_grad(
    tnpu, log: TaskLog
) -> None:
    model = _model().to("npu")
    opt = tnpu.optim.NpuFusedAdamW(model.parameters(), lr=1e-3)
    frozen = model[0].weight.detach().cpu().clone()
    x = torch.randn(4, 12, device="npu")

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = model(x).sum()
        loss.backward()
        model[0].weight.grad = None
        return loss

    loss = opt.step(closure)
    assert loss.device.type == "npu"
    assert torch.equal(model[0].weight.detach().cpu(), frozen)
    assert model[0].weight not in opt.state
    with pytest.raises(ValueError, match="learning rate"):
        tnpu.optim.NpuFusedSGD(model.parameters())


@pytest.mark.parametrize("norm_type", [2.0, math.inf])
def test_clip_grad_norm_fused_matches_torch_clip_grad_norm(
    tnpu, log: TaskLog, norm_type: float
) -> None:
    cpu_model, npu_model = _model(), _model().to("npu")
    x = torch.randn(6, 12)
    cpu_model(x).pow(2).sum().backward()
    npu_model(x.to("npu")).pow(2).sum().backward()
    opt = tnpu.optim.NpuFusedSGD(npu_model.parameters(), lr=0.1)
    start = len(log.tasks)
    total = opt.clip_grad_norm_fused_(0.5, norm_type=norm_type)
    ops = [t.op_type for t in _kernels(log, start)]
    assert ops == ["LpNormV2" if norm_type == 2.0 else "ReduceMax", "Mul"]
    expected = torch.nn.utils.clip_grad_norm_(cpu_model.parameters(), 0.5, norm_type=norm_type)
    torch.testing.assert_close(total.cpu(), expected)
    for p_cpu, p_npu in zip(cpu_model.parameters(), npu_model.parameters(), strict=True):
        torch.testing.assert_close(p_npu.grad.cpu(), p_cpu.grad)
    start = len(log.tasks)
    opt.clip_grad_norm_fused_(1e6)  # already within the bound: norm only, no scaling
    assert [t.op_type for t in _kernels(log, start)] == ["LpNormV2"]


def test_fused_optimizer_updates_conv_weights_in_their_private_format(tnpu, log: TaskLog) -> None:
    torch.manual_seed(11)
    conv = nn.Conv2d(3, 20, 3)
    ref = nn.Conv2d(3, 20, 3)
    ref.load_state_dict(conv.state_dict())
    conv = conv.to("npu")
    opt = tnpu.optim.NpuFusedSGD(conv.parameters(), lr=0.1, momentum=0.9)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(2, 3, 8, 8)
    for _ in range(2):
        conv(x.to("npu")).sum().backward()
        ref(x).sum().backward()
        start = len(log.tasks)
        opt.step()
        ref_opt.step()
        (kernel,) = _kernels(log, start)  # FRACTAL_Z weight, grad and momentum: no TransData
        assert kernel.op_type == "ApplyMomentum"
        opt.zero_grad()
        ref_opt.zero_grad()
    assert storage_format(opt.state[conv.weight]["momentum_buffer"])[0] == "FRACTAL_Z"
    assert tnpu.format_api.get_npu_format(conv.weight) == 4
    assert torch.equal(conv.weight.detach().cpu(), ref.weight.detach())


def test_fused_ops_and_optimizers_run_on_shapes_only_with_numerics_none() -> None:
    result = run_script(
        """
        import torch, msprof_py.adapter
        npu = msprof_py.adapter.install(numerics="none")
        from msprof_py.device import TaskLog
        from msprof_py.adapter.torch_npu import format_api, fused, optim
        log = TaskLog(); npu.subscribe(log)
        q = torch.randn(2, 64, 64, device="npu", dtype=torch.float16, requires_grad=True)
        out = fused.npu_fusion_attention(q, q, q, 4, "BSH", keep_prob=0.9, sparse_mode=3)[0]
        out.sum().backward()
        x = torch.randn(4, 32, device="npu", requires_grad=True)
        g = torch.randn(32, device="npu", requires_grad=True)
        fused.npu_rms_norm(x, g)[0].sum().backward()
        fused.npu_swiglu(x).sum().backward()
        fused.npu_rotary_mul(x, x, x).sum().backward()
        m = torch.nn.Linear(8, 8).to("npu")
        opt = optim.NpuFusedAdamW(m.parameters())
        m(torch.randn(2, 8, device="npu")).sum().backward()
        opt.step()
        format_api.npu_format_cast(x, 29)
        ops = [t.op_type for t in log.kernels()]
        for op in ("FlashAttentionScoreGrad", "RmsNormGrad", "SwiGluGrad", "RotaryMulGrad",
                   "ApplyAdamW", "TransData"):
            assert op in ops, op
        print("ok", out.shape)
        """
    )
    assert result.returncode == 0, result.stderr
    assert "ok torch.Size([2, 64, 64])" in result.stdout


# ---- format API ------------------------------------------------------------------------------


def test_get_npu_format_reports_the_base_format_of_plain_tensors(tnpu) -> None:
    get = tnpu.format_api.get_npu_format
    assert get(torch.randn(8, 8, device="npu")) == 2  # ND
    assert get(torch.randn(2, 3, 4, 5, device="npu")) == 0  # NCHW
    assert get(torch.randn(1, 2, 3, 4, 5, device="npu")) == 30  # NCDHW


def test_format_cast_returns_a_new_tensor_after_one_transdata(tnpu, log: TaskLog) -> None:
    fa = tnpu.format_api
    x = torch.randn(40, 24, dtype=torch.float16)
    xn = x.to("npu")
    start = len(log.tasks)
    nz = fa.npu_format_cast(xn, 29)
    (td,) = _kernels(log, start)
    assert (td.op_type, td.input_formats, td.output_formats) == (
        "TransData",
        ("ND",),
        ("FRACTAL_NZ",),
    )
    # padded bytes: read 40x24 ND, write 40x24 padded to 48x32 (NZ blocks of 16 x C0=16)
    assert td.bytes == (40 * 24 + 48 * 32) * 2
    assert nz is not xn and fa.get_npu_format(nz) == 29 and fa.get_npu_format(xn) == 2
    assert torch.equal(nz.cpu(), x)  # values unchanged (read back through TransData to ND)

    start = len(log.tasks)
    assert fa.npu_format_cast(nz, "FRACTAL_NZ") is nz  # same format: nothing to do
    assert _kernels(log, start) == []
    back = fa.npu_format_cast(nz, 2)
    (td,) = _kernels(log, start)
    assert (td.input_formats, td.output_formats) == (("FRACTAL_NZ",), ("ND",))
    assert fa.get_npu_format(back) == 2 and torch.equal(back.cpu(), x)


def test_format_cast_between_base_formats_only_retags(tnpu, log: TaskLog) -> None:
    fa = tnpu.format_api
    x = torch.randn(2, 3, 4, 5, device="npu")
    start = len(log.tasks)
    assert fa.npu_format_cast(x, "NHWC") is x
    assert fa.get_npu_format(x) == 1
    assert fa.npu_format_cast(x, 0) is x and fa.get_npu_format(x) == 0
    assert _kernels(log, start) == []


def test_format_cast_in_place_converts_the_storage(tnpu, log: TaskLog) -> None:
    fa = tnpu.format_api
    x = torch.randn(2, 20, 4, 4)
    xn = x.to("npu")
    start = len(log.tasks)
    assert fa.npu_format_cast_(xn, 3) is xn
    (td,) = _kernels(log, start)
    assert (td.input_formats, td.output_formats) == (("ND",), ("NC1HWC0",))
    assert fa.get_npu_format(xn) == 3
    assert torch.equal(xn.cpu(), x)
    assert fa.get_npu_format(fa.npu_format_cast(torch.randn(3, 3, device="npu"), xn)) == 3


def test_format_cast_rejects_impossible_formats(tnpu) -> None:
    fa = tnpu.format_api
    with pytest.raises(ValueError, match="aclFormat"):
        fa.npu_format_cast(torch.randn(4, device="npu"), 999)
    with pytest.raises(ValueError, match="at most 4 dims"):
        fa.npu_format_cast(torch.randn(1, 2, 3, 4, 5, device="npu"), "NC1HWC0")
    vec = torch.randn(16, device="npu")
    with pytest.warns(UserWarning, match="NZ"):
        assert fa.npu_format_cast(vec, 29) is vec  # rank 1 stays ND, as in torch_npu
    assert fa.get_npu_format(vec) == 2
