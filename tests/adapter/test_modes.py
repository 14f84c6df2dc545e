"""Install settings that need a fresh process: numerics "none", measured host time, errors."""

from __future__ import annotations

import pytest
import torch
from adapter_helpers import run_script

import msprof_py.adapter
from msprof_py.adapter.selftest import BackendUnavailableError, check_torch
from msprof_py.device import SimulatedNpu


def test_numerics_none_profiles_a_model_too_big_for_host_memory() -> None:
    result = run_script(
        """
        import resource, torch, torch.nn as nn, msprof_py.adapter as ad
        from msprof_py.device import TaskLog
        npu = ad.install(numerics="none")
        log = TaskLog(); npu.subscribe(log)
        with torch.device("npu"):  # 16 GiB of fp32 weights, built on the device only
            model = nn.Sequential(*[nn.Linear(16384, 16384) for _ in range(16)])
        loss = model(torch.randn(8, 16384, device="npu")).sum()
        loss.backward()
        print("allocated_gib", torch.npu.memory_allocated() / 2**30)
        print("matmuls", sum(t.op_type == "MatMul" for t in log.tasks))
        print("rss_gib", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20)
        try:
            loss.item()
        except ad.NumericsNoneError as e:
            print("error", e)
        """
    )
    assert result.returncode == 0, result.stderr
    out = dict(line.split(" ", 1) for line in result.stdout.strip().splitlines())
    assert float(out["allocated_gib"]) > 32  # weights and their gradients, simulated
    # forward, grad weight, and grad input for all but the first layer
    assert int(out["matmuls"]) == 16 + 16 + 15
    assert float(out["rss_gib"]) < 2  # the host never held the weights
    assert "Tensor.item()" in out["error"] and "numerics='none'" in out["error"]


def test_numerics_none_fails_clearly_on_data_dependent_ops() -> None:
    result = run_script(
        """
        import torch, msprof_py.adapter as ad
        ad.install(numerics="none")
        x = torch.randn(4, device="npu")
        y = (x * 2).relu()  # shapes only: fine
        print(y.shape)
        torch.nonzero(x)
        """
    )
    assert result.returncode != 0
    assert "torch.Size([4])" in result.stdout
    assert "aten::nonzero" in result.stderr and "numerics='none'" in result.stderr


def test_measured_host_time_adds_python_time() -> None:
    result = run_script(
        """
        import time, torch, msprof_py.adapter as ad
        npu = ad.install(host_time="measured")
        x = torch.randn(8, device="npu")
        before = npu.engine.host_ns
        time.sleep(0.05)
        x + 1
        print(npu.engine.host_ns - before)
        """
    )
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) >= 50_000_000  # the 50 ms sleep shows on the host clock


def test_modeled_host_time_is_deterministic() -> None:
    code = """
        import time, torch, msprof_py.adapter as ad
        npu = ad.install()
        x = torch.randn(64, 64, device="npu")
        for _ in range(5):
            time.sleep(0.01)
            x = (x @ x).tanh()
        torch.npu.synchronize()
        print(npu.engine.host_ns)
    """
    first, second = run_script(code), run_script(code)
    assert first.returncode == 0, first.stderr
    assert first.stdout == second.stdout


def test_install_twice(npu: SimulatedNpu) -> None:
    assert msprof_py.adapter.install() is npu
    assert msprof_py.adapter.install("ascend910b", "cpu", "modeled") is npu
    with pytest.raises(RuntimeError, match="already installed with different settings"):
        msprof_py.adapter.install(numerics="none")
    with pytest.raises(ValueError, match="numerics must be one of"):
        msprof_py.adapter.install(numerics="gpu")
    assert msprof_py.adapter.current_device() is npu


def test_device_module_queries(npu: SimulatedNpu) -> None:
    assert torch.npu.is_available() and torch.npu.device_count() == 1
    assert torch.npu.current_device() == 0
    torch.npu.set_device(0)
    torch.npu.set_device("npu:0")
    with pytest.raises(RuntimeError, match="invalid npu device index"):
        torch.npu.set_device(8)  # a 910B server has 8 NPUs (0-7)
    assert torch.npu.get_device_name() == "Ascend910B2 (simulated)"
    props = torch.npu.get_device_properties(0)
    assert props.total_memory == 62 * 2**30 and props.cube_core_num == 24


def test_self_test_names_the_torch_version(monkeypatch: pytest.MonkeyPatch) -> None:
    check_torch()  # the installed torch passes
    monkeypatch.setattr(torch, "__version__", "2.99.0")
    with pytest.raises(BackendUnavailableError, match=r"needs torch 2\.13\.\*, found torch 2\.99"):
        check_torch()


def test_a_different_device_preset() -> None:
    result = run_script(
        """
        import torch, msprof_py.adapter as ad
        npu = ad.install("ascend910a")
        x = torch.randn(512, 512, device="npu")
        x @ x
        print(npu.spec.name, torch.npu.get_device_name())
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["ascend910a", "Ascend910A", "(simulated)"]
