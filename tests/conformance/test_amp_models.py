"""Whole models trained under AMP on npu equal a CPU reference of CUDA's autocast policy.

The npu follows ``torch.autocast("cuda")``'s policy (torch_npu does the same), not CPU
autocast's, so the reference is CPU training inside :class:`cuda_autocast.CudaPolicyOnCpu`:
torch's own CPU autocast machinery running CUDA's tables, read from torch's AutocastCUDA kernels.
Parameters after three optimizer steps (fp16 with a GradScaler, bf16 without) must be bitwise
equal. Heavier models are slow-marked; the default run keeps one case per HF model.
"""

from __future__ import annotations

import pytest
import test_hf_models as hf
import torch
from cuda_autocast import CudaPolicyOnCpu
from model_helpers import compare_training
from optional import LazyModule, needs
from torch.nn import functional as F

from msprof_py.device import SimulatedNpu

pytestmark = needs("transformers")
transformers = LazyModule("transformers")

FP16 = (torch.float16, True)  # with a GradScaler
BF16 = (torch.bfloat16, False)


def test_reference_runs_cuda_tables_and_restores_cpu_autocast() -> None:
    x = torch.randn(4, 4)
    with torch.autocast("cpu", dtype=torch.float16):
        assert torch.exp(x.half()).dtype == torch.float16  # CPU autocast leaves exp alone
    with CudaPolicyOnCpu(), torch.autocast("cpu", dtype=torch.float16):
        assert torch.exp(x.half()).dtype == torch.float32  # CUDA's fp32 list
        assert torch.mm(x, x).dtype == torch.float16
        assert torch.softmax(x.half(), -1).dtype == torch.float32
        # fp32_set_opt_dtype: an explicit dtype is kept
        assert torch.softmax(x.half(), -1, dtype=torch.float16).dtype == torch.float16
        assert torch.cat([x.half(), x]).dtype == torch.float32  # promote
        with pytest.raises(RuntimeError, match="unsafe"):
            F.binary_cross_entropy(torch.rand(4), torch.rand(4))
    with torch.autocast("cpu", dtype=torch.float16):
        assert torch.exp(x.half()).dtype == torch.float16  # CPU's own kernels are back


def test_reference_dropout_is_the_fused_form() -> None:
    # the npu (like CUDA) runs dropout as native_dropout; CPU's decomposition rounds 1/(1-p)
    # to the input dtype first, so in bf16 the two differ
    x = torch.randn(256, dtype=torch.bfloat16)
    torch.manual_seed(0)
    fused = torch.ops.aten.native_dropout(x, 0.1, True)[0]
    torch.manual_seed(0)
    with CudaPolicyOnCpu(), torch.autocast("cpu", dtype=torch.bfloat16):
        got = F.dropout(x, 0.1, True)
    assert torch.equal(got, fused)


def _case(name: str, amp: tuple[torch.dtype, bool], attn: str = "eager") -> None:
    build, batches = hf.MODELS[name]
    result = compare_training(
        lambda: build(attn), batches(), hf._hf_loss, amp=amp[0], scaler=amp[1]
    )
    assert result.problems() == []


@pytest.mark.parametrize(
    ("name", "amp"),
    [("gpt2", FP16), ("bert", BF16), ("t5", FP16), ("llama", BF16), ("bart", BF16), ("vit", FP16)],
)
def test_hf_model_under_amp_trains_like_the_cuda_policy_on_cpu(
    npu: SimulatedNpu, name: str, amp: tuple[torch.dtype, bool]
) -> None:
    _case(name, amp)


@pytest.mark.slow
@pytest.mark.parametrize("attn", hf.ATTENTION)
@pytest.mark.parametrize("amp", [FP16, BF16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("name", sorted(hf.MODELS))
def test_hf_models_under_amp_all_variants(
    npu: SimulatedNpu, name: str, amp: tuple[torch.dtype, bool], attn: str
) -> None:
    _case(name, amp, attn)


@pytest.mark.slow
@pytest.mark.parametrize("amp", [FP16, BF16], ids=["fp16", "bf16"])
@pytest.mark.parametrize(
    "name", ["resnet18", "vit_tiny_patch16_224", "convnext_atto", "efficientnet_b0"]
)
def test_timm_models_under_amp(npu: SimulatedNpu, name: str, amp: tuple[torch.dtype, bool]) -> None:
    pytest.importorskip("timm")
    import test_timm_models as tm

    result = compare_training(
        lambda: tm._build(name), tm._batches(), tm._loss, "adamw-foreach", amp=amp[0], scaler=amp[1]
    )
    assert result.problems() == []
