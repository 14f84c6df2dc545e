"""Compiled training on the npu backend equals eager CPU bitwise (losses, parameters, buffers)."""

from __future__ import annotations

import pytest
import torch
from graph_models import cnn, mlp, train

from msprof_py.device import SimulatedNpu


@pytest.mark.parametrize(
    ("make", "shape"), [(cnn, (2, 3, 8, 8)), (mlp, (4, 8))], ids=["cnn", "mlp"]
)
def test_three_compiled_steps_equal_eager_cpu(npu: SimulatedNpu, make, shape) -> None:
    torch.manual_seed(0)
    model = make()
    inputs = [torch.randn(shape) for _ in range(3)]
    cpu_losses, cpu_model = train(model, inputs, "cpu")
    npu_losses, npu_model = train(model, inputs, "npu", lambda m: torch.compile(m, backend="npu"))
    for a, b in zip(cpu_losses, npu_losses, strict=True):
        assert torch.equal(a, b)
    cpu_state = cpu_model.state_dict()
    for name, value in npu_model.state_dict().items():
        assert value.device.type == "npu"
        assert torch.equal(value.cpu(), cpu_state[name]), name


def test_bn_running_stats_update_in_place_without_copy_kernels(npu: SimulatedNpu) -> None:
    """GE's BNTrainingUpdate writes the running stats in place (AssignRemovePass): the
    forward plan of a conv+BN+ReLU step has no MemcpyAsync, the buffers still equal CPU."""
    from msprof_py.graph.runner import compiled_graphs

    torch.manual_seed(0)
    model = cnn()
    inputs = [torch.randn(2, 3, 8, 8) for _ in range(2)]
    _, cpu_model = train(model, inputs, "cpu")
    _, npu_model = train(model, inputs, "npu", lambda m: torch.compile(m, backend="npu"))
    [forward] = [g for g in compiled_graphs() if g.name.endswith("_forward")]
    plan = forward.last_plan
    op_types = [k.op_type for k in plan.kernels]
    assert "MemcpyAsync" not in op_types
    copies = [n.name for n in plan.graph.nodes if n.target == "copy_"]
    assert len(copies) == 3  # running_mean, running_var, num_batches_tracked
    hits = [r for r in plan.records if r.pass_name == "AssignRemovePass" and r.hit]
    assert sorted(r.nodes[-1] for r in hits) == sorted(copies)
    bn = cpu_model[1]
    npu_bn = npu_model[1]
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        assert torch.equal(getattr(npu_bn, name).cpu(), getattr(bn, name)), name
    assert int(npu_bn.num_batches_tracked) == 2


def test_backward_fuses_relu_grad_into_bn_backward(npu: SimulatedNpu) -> None:
    """The backward of a conv+BN+ReLU step runs ReluGrad inside the BN backward kernel
    (BNTrainingUpdateGradReluGradV2FusionPass); losses and parameters stay bitwise CPU."""
    from msprof_py.graph.runner import compiled_graphs

    torch.manual_seed(0)
    model = cnn()
    inputs = [torch.randn(2, 3, 8, 8) for _ in range(2)]
    cpu_losses, cpu_model = train(model, inputs, "cpu")
    npu_losses, npu_model = train(model, inputs, "npu", lambda m: torch.compile(m, backend="npu"))
    assert all(torch.equal(a, b) for a, b in zip(cpu_losses, npu_losses, strict=True))
    cpu_state = cpu_model.state_dict()
    for name, value in npu_model.state_dict().items():
        assert torch.equal(value.cpu(), cpu_state[name]), name
    [backward] = [g for g in compiled_graphs() if g.name.endswith("_backward")]
    plan = backward.last_plan
    [k] = [k for k in plan.kernels if k.pass_name == "BNTrainingUpdateGradReluGradV2FusionPass"]
    assert k.op_type == "BNTrainingUpdateGradReluGradV2"
    assert k.members == ("threshold_backward", "native_batch_norm_backward")
    # eager: TransData + ReluGrad, BNTrainingUpdateGrad + BNTrainingReduceGrad -> one kernel
    assert [k.op_type for k in plan.kernels] == [
        "MatMul", "TransData", "MatMul", "ReduceSum", "BNTrainingUpdateGradReluGradV2",
        "Conv2DBackpropFilter", "BiasAddGrad",
    ]  # fmt: skip
    act = 2 * 4 * 6 * 6 * 4  # one fp32 activation (1152 bytes)
    # dy, relu output, conv output in; BN weight, running and saved stats (4 fp32 each) in;
    # dx and the BN weight / bias gradients out
    assert k.cost.bytes == 3 * act + 5 * 16 + act + 2 * 16 == 4720
