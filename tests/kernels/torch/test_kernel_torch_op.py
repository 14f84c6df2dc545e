"""A DSL kernel registered as a torch op: values, autograd, its task in a model profile, and
the FlashAttention sample kernel from a small transformer."""

from __future__ import annotations

import math
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import msprof_py
import msprof_py.adapter
from msprof_py.kernels import (
    Add,
    DataCopy,
    GetBlockIdx,
    GetBlockNum,
    SyncError,
    TPipe,
    TPosition,
    TQue,
    launch,
)
from msprof_py.kernels.torch_op import register

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "sample_runs"))

import flash_attention_kernel as fa  # noqa: E402


def add_kernel(x, y, z, total: int) -> None:
    per = total // GetBlockNum()
    base = GetBlockIdx() * per
    pipe = TPipe()
    qx, qy, qz = TQue(TPosition.VECIN, 1), TQue(TPosition.VECIN, 1), TQue(TPosition.VECOUT, 1)
    for q in (qx, qy, qz):
        pipe.InitBuffer(q, 1, per * 2)
    xl, yl = qx.AllocTensor("float16"), qy.AllocTensor("float16")
    DataCopy(xl, x[base:], per)
    DataCopy(yl, y[base:], per)
    qx.EnQue(xl)
    qy.EnQue(yl)
    xl, yl = qx.DeQue(), qy.DeQue()
    zl = qz.AllocTensor("float16")
    Add(zl, xl, yl, per)
    qz.EnQue(zl)
    qx.FreeTensor(xl)
    qy.FreeTensor(yl)
    zl = qz.DeQue()
    DataCopy(z[base:], zl, per)
    qz.FreeTensor(zl)


ADD = register(
    "msprof_test::dsl_add",
    add_kernel,
    block_dim=4,
    shape_fn=lambda x, y: [(x.shape, x.dtype)],
    tiling=lambda x, y: (x.numel(),),
    backward=lambda inputs, outputs, grads: (grads[0], 2 * grads[0]),
)


def _kernel_tasks(rec, op_type: str):
    tasks = rec.load().tasks
    return tasks[tasks.op_type == op_type]


def test_registered_op_computes_with_the_dsl_on_cpu_and_npu_with_autograd() -> None:
    x = torch.randn(4096).half()
    y = torch.randn(4096).half()
    np.testing.assert_array_equal(ADD(x, y).numpy(), (x.numpy() + y.numpy()))
    assert torch.ops.msprof_test.dsl_add(x, y)[0].shape == x.shape
    msprof_py.adapter.install()
    xn, yn = x.to("npu").requires_grad_(), y.to("npu").requires_grad_()
    z = ADD(xn, yn)
    assert z.device.type == "npu"
    np.testing.assert_array_equal(z.cpu().detach().numpy(), x.numpy() + y.numpy())
    z.float().sum().backward()
    assert torch.equal(xn.grad.cpu(), torch.ones(4096, dtype=torch.half))
    assert torch.equal(yn.grad.cpu(), torch.full((4096,), 2.0, dtype=torch.half))


def test_the_op_is_one_task_in_a_model_profile_timed_by_its_pipe_simulation() -> None:
    from msprof_py.kernels import launch

    x = np.random.default_rng(0).standard_normal(8192).astype(np.float16)
    sim = launch(add_kernel, 4, x, x, np.zeros_like(x), 8192)
    with msprof_py.record(tempfile.mkdtemp()) as rec:
        xn = torch.from_numpy(x).to("npu")
        for _ in range(2):  # same shape twice: the cost is cached, both tasks alike
            ADD(xn, xn)
        torch.npu.synchronize()
    tasks = _kernel_tasks(rec, "dsl_add")
    assert len(tasks) == 2
    spec = sim.chip.spec
    expected = spec.dispatch.device_sched_ns + round(sim.duration_ns)
    assert list(tasks.end_ns - tasks.start_ns) == [expected, expected]
    assert set(tasks.task_type) == {"AI_VECTOR_CORE"} and set(tasks.block_dim) == {4}
    assert set(tasks.bytes) == {3 * 8192 * 2}


SHAPES_ONLY = """
import json, sys, torch, msprof_py.adapter as ad
from msprof_py.adapter.tensors import backing_of
from msprof_py.device import TaskLog
sys.path.insert(0, {here!r})
from test_kernel_torch_op import ADD
npu = ad.install(numerics="none")
log = TaskLog(); npu.subscribe(log)
x = torch.ones(8192, dtype=torch.half).to("npu")
z = ADD(x, x)
ADD(x, x)
torch.npu.synchronize()
tasks = [t.duration_ns for t in log.tasks if t.op_type == "dsl_add"]
where = backing_of(z).device.type
print(json.dumps({{"tasks": tasks, "sims": ADD.simulations, "meta": where}}))
"""


@pytest.mark.slow  # a fresh process (~10 s): the device is installed once per process
def test_shapes_only_mode_costs_the_kernel_without_values() -> None:
    import json
    import subprocess

    from msprof_py.kernels import launch

    code = SHAPES_ONLY.format(here=str(Path(__file__).parent))
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    x = np.zeros(8192, np.float16)
    sim = launch(add_kernel, 4, x, x, np.zeros_like(x), 8192)
    expected = sim.chip.spec.dispatch.device_sched_ns + round(sim.duration_ns)
    assert got["tasks"] == [expected, expected]
    assert got["sims"] == 1  # simulated once on zeros, then cached
    assert got["meta"] == "meta"  # the output holds no values


class TinyAttentionBlock(torch.nn.Module):
    """One self-attention layer whose attention is the FlashAttention DSL kernel."""

    def __init__(self, dim: int, heads: int, attend) -> None:
        super().__init__()
        self.heads, self.attend = heads, attend
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        o = self.attend(q, k, v, mask)
        return self.proj(o.transpose(1, 2).reshape(b, n, c))


@pytest.mark.parametrize(("causal", "dtype"), [(False, "float16"), (True, "bfloat16")])
def test_flash_attention_kernel_equals_numpy_on_a_small_case(causal: bool, dtype: str) -> None:
    x = fa.make_inputs(2, 1, 128, 64, seed=3, dtype=dtype)
    out, result = fa.fa_launch(x["q"], x["k"], x["v"], x["mask"], causal=causal)
    ref = fa.reference(x["q"], x["k"], x["v"], x["mask"], causal)
    got = fa.bf16.from_bf16(out) if dtype == "bfloat16" else out.astype(np.float32)
    assert np.abs(got - ref).max() < fa.TOLERANCE[dtype]
    # bf16 is not fp16: its error is larger (7 mantissa bits), and it is really rounded
    assert (np.abs(got - ref).max() > 1e-3) == (dtype == "bfloat16")
    assert result.core_type == "mix" and result.block_dim == 2 * 128 // fa.BR
    assert result.split_mix and {sb.name for sb in result.blocks[0].sub_blocks} == {
        "aic", "aiv0", "aiv1"
    }  # fmt: skip
    names = {r.name for r in result.instructions()}
    # row statistics are vector instructions on UB tensors, never scalar reads
    assert {"RowReduceMax", "RowReduceSum", "BroadcastRows"} <= names
    assert not names & {"GetValue", "SetValue", "ReduceMax"}
    # each AIV reads its 32 x 128 fp32 half of S (4 blocks x 1 tile); on a causal diagonal tile
    # (every tile here) also 32 rows of the mask band, the same size
    reads = [r for r in result.instructions() if r.unit[:3] == "aiv" and r.pipe == "MTE2"]
    reads = [r for r in reads if r.nbytes == 16384]
    assert len(reads) == 4 * 2 * (2 if causal else 1)


def test_flash_attention_without_kernel_type_fails_naming_it() -> None:
    x = fa.make_inputs(1, 1, 128, 64)
    t = fa.FaTiling(1, 128, 64, 0.125, 128 // fa.BR, 128 // fa.BC, 1)
    kt = np.ascontiguousarray(x["k"].swapaxes(-1, -2))
    args = (x["q"], kt, x["v"], x["mask"], np.zeros_like(x["q"]), fa.causal_band())
    with pytest.raises(SyncError, match=r"^block 0: .*launched without kernel_type.*"
                       r"kernel_type='mix_aic_1_2'"):  # fmt: skip
        launch(fa.flash_attention, 2, *args, *fa.workspaces(2, 64, np.float16), t,
               strict_sync=False)  # fmt: skip


def test_causal_skips_the_tiles_right_of_the_diagonal() -> None:
    x = fa.make_inputs(1, 1, 256, 64)
    out, causal = fa.fa_launch(x["q"], x["k"], x["v"], x["mask"], causal=True)
    ref = fa.reference(x["q"], x["k"], x["v"], x["mask"], causal=True)
    assert np.abs(out.astype(np.float32) - ref).max() < fa.TOLERANCE["float16"]
    mmads = sum(1 for r in causal.instructions() if r.name == "Mmad")
    # 4 q tiles x 2 K/V tiles x 2 matmuls without the mask; q tiles 0, 1 visit one tile
    assert mmads == 4 * 2 * 2 - 2 * 2


@pytest.mark.slow  # two full 8-block launches (~15 s)
@pytest.mark.parametrize("causal", [False, True])
def test_sampled_flash_attention_time_matches_the_full_launch(causal: bool) -> None:
    from msprof_py.device.spec import DeviceSpec

    spec = DeviceSpec.load("ascend910b")
    x = fa.make_inputs(1, 1, 512, 64)
    _, full = fa.fa_launch(x["q"], x["k"], x["v"], x["mask"], causal=causal)
    sampled = fa.fa_measure(spec, 1, 1, 512, 64, causal)
    measured = full.duration_us + spec.dispatch.device_sched_ns / 1e3
    assert abs(sampled.time_us - measured) / measured < 0.02


def test_naive_attention_is_measured_on_the_npu() -> None:
    msprof_py.adapter.install()
    plain = fa.naive_measure(1, 2, 256, 64)
    causal = fa.naive_measure(1, 2, 256, 64, causal=True)
    scores = 2 * 256 * 256 * 2  # fp16 B*H*N*N
    # matmul, mul, cast + add, softmax, matmul; causal adds one add
    assert (plain.kernels, causal.kernels) == (6, 7)
    assert plain.time_us > 0 and causal.time_us > plain.time_us
    assert plain.peak_bytes >= 2 * scores  # two score matrices live at once
    assert plain.hbm_bytes >= 6 * scores  # mul, add, softmax each read and write S


def test_causal_bf16_flash_attention_op_matches_sdpa_with_its_gradients() -> None:
    op = fa.register_flash_attention("msprof_test::flash_attention_causal", causal=True)
    torch.manual_seed(1)
    q, k, v = (torch.randn(1, 2, 128, 64).bfloat16().requires_grad_() for _ in range(3))
    out = op(q, k.transpose(-1, -2), v, torch.zeros(1, 128))
    assert out.dtype is torch.bfloat16
    qf, kf, vf = (t.detach().float().requires_grad_() for t in (q, k, v))
    ref = F.scaled_dot_product_attention(qf, kf, vf, is_causal=True)
    assert (out.float() - ref).abs().max() < fa.TOLERANCE["bfloat16"]
    g = torch.randn_like(ref)
    out.backward(g.bfloat16())
    ref.backward(g)
    for mine, want in ((q.grad, qf.grad), (k.grad, kf.grad), (v.grad, vf.grad)):
        assert mine.dtype is torch.bfloat16
        assert (mine.float() - want).abs().max() < 0.05 * want.abs().max()


def test_flash_attention_op_in_a_transformer_matches_sdpa_and_shows_in_the_profile() -> None:
    op = fa.register_flash_attention("msprof_test::flash_attention")

    def attend(q, k, v, mask):
        return op(q.contiguous(), k.transpose(-1, -2).contiguous(), v.contiguous(), mask)

    torch.manual_seed(0)
    block = TinyAttentionBlock(128, 2, attend).half()
    x = torch.randn(1, 128, 128).half()
    mask = torch.zeros(1, 128)
    mask[:, 112:] = -1e4
    with torch.no_grad():  # forward values vs torch's SDPA on CPU
        b, n, _ = x.shape
        q, k, v = block.qkv(x).float().view(b, n, 3, 2, 64).permute(2, 0, 3, 1, 4)
        sdpa = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None, None, :])
        mine = attend(q.half(), k.half(), v.half(), mask)
    assert (mine.float() - sdpa).abs().max() < 1e-2
    with msprof_py.record(tempfile.mkdtemp()) as rec:
        model = block.to("npu")
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        loss = model(x.to("npu"), mask.to("npu")).float().pow(2).mean()
        loss.backward()
        opt.step()
        torch.npu.synchronize()
    assert math.isfinite(loss.item())
    assert model.qkv.weight.grad is not None and model.qkv.weight.grad.abs().sum() > 0
    tasks = _kernel_tasks(rec, "flash_attention")
    assert len(tasks) == 1 and tasks.task_type.iloc[0] == "MIX_AIC"


@pytest.mark.slow  # ~2.3 s: two training steps with the kernel simulated per forward
def test_the_transformer_training_script_runs_the_dsl_kernel_as_its_attention() -> None:
    import train_transformer as tt

    msprof_py.adapter.install()
    small = {"seq_len": 128, "d_model": 64, "n_heads": 2, "n_layers": 1}
    with msprof_py.record(tempfile.mkdtemp()) as rec:
        dsl = tt.train(2, 1, cfg=tt.Config(**small, attention="dsl"), verbose=False)
    math_ = tt.train(2, 1, cfg=tt.Config(**small), verbose=False)
    # fp16 inside the kernel: the losses follow the fp32 matmul-and-softmax attention closely
    assert dsl.losses[1] < dsl.losses[0]
    np.testing.assert_allclose(dsl.losses, math_.losses, rtol=2e-3)
    tasks = _kernel_tasks(rec, "flash_attention_causal")  # one forward per step (1 layer)
    assert len(tasks) == 2 and set(tasks.task_type) == {"MIX_AIC"}
    with pytest.raises(ValueError, match="multiple of 128"):
        tt.SelfAttention(tt.Config(attention="dsl"))  # the default seq_len is 64


@pytest.mark.slow  # the sample's --quick table at one head: 8 rows of naive + sampled FA runs
def test_the_flash_attention_sample_prints_its_table(capsys) -> None:
    assert fa.main(["--quick", "--heads", "1"]) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.lstrip().startswith("causal"))
    for col in ("naive us", "FA us", "speed", "naive MiB", "FA MiB", "naive HBM MiB", "FA HBM MiB"):
        assert col in header
    rows = [line.split() for line in out.splitlines() if line.split()[:1] in (["no"], ["yes"])]
    assert sorted((r[0], int(r[1]), int(r[2])) for r in rows) == sorted(
        (c, s, d) for c in ("no", "yes") for s in (512, 1024) for d in (64, 128)
    )
    for r in rows:  # speed-up = naive / FA time (both printed to 0.1 us)
        naive, fa_us, speed = (float(r[i].replace(",", "").rstrip("x")) for i in (4, 5, 6))
        assert speed == pytest.approx(naive / fa_us, abs=0.01 + 0.06 * naive / fa_us**2)
        # the seed's direction: faster, and never more device memory (peak MiB, columns 8, 9;
        # at one head and seq 512 the inputs dominate both peaks)
        assert speed > 1 and float(r[9].replace(",", "")) <= float(r[8].replace(",", ""))
    assert out.count("measured here") == 2 and "values: FlashAttention kernel vs numpy" in out
