"""``import torch_npu`` inside the instrumented runtime, transfer_to_npu, torch_npu.profiler."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch
from adapter_helpers import run_script

from msprof_py.device import SimulatedNpu

ROOT = Path(__file__).resolve().parents[2]


def test_import_torch_npu_gives_the_shim(npu: SimulatedNpu) -> None:
    import torch_npu

    assert torch_npu.npu is torch.npu
    assert torch_npu.__name__ == "msprof_py.adapter.torch_npu"
    from torch_npu.optim import NpuFusedAdamW

    assert issubclass(NpuFusedAdamW, torch.optim.AdamW)
    for name in (
        "npu_format_cast",
        "get_npu_format",
        "npu_fusion_attention",
        "npu_rms_norm",
        "npu_rotary_mul",
        "npu_swiglu",
    ):
        assert callable(getattr(torch_npu, name))


def test_no_top_level_torch_npu_is_shipped() -> None:
    assert not (ROOT / "torch_npu").exists()
    result = run_script("import importlib.util; print(importlib.util.find_spec('torch_npu'))")
    assert result.stdout.strip() == "None"  # only an installed adapter resolves it
    assert importlib.util.find_spec("msprof_py.adapter.torch_npu") is not None


def test_transfer_to_npu_runs_a_cuda_script_unchanged() -> None:
    result = run_script(
        """
        import torch, msprof_py.adapter as ad
        ad.install()
        import torch_npu
        from torch_npu.contrib import transfer_to_npu
        assert torch.cuda.is_available()
        x = torch.randn(4, 8, device="cuda")
        model = torch.nn.Linear(8, 2).cuda()
        with torch.cuda.amp.autocast():
            y = model(x)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            z = model(x)
        torch.cuda.synchronize()
        event = torch.cuda.Event(enable_timing=True)
        print(x.device, y.device, y.dtype, z.dtype, isinstance(torch.device("cuda"), torch.device))
        moved = x.to(torch.device("cuda:0"))
        print(moved.device, x.cuda().device, x.is_cuda, torch.cuda.memory_allocated() > 0)
        print(torch.amp.GradScaler("cuda")._device, type(event).__name__)
        """
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "npu:0 npu:0 torch.float16 torch.bfloat16 True"
    assert lines[1] == "npu:0 npu:0 True True"
    assert lines[2] == "npu Event"


def test_profiler_api_records_the_scheduled_steps(tmp_path: Path) -> None:
    result = run_script(
        f"""
        import torch, msprof_py, msprof_py.adapter as ad
        ad.install()
        import torch_npu
        config = torch_npu.profiler._ExperimentalConfig(
            profiler_level=torch_npu.profiler.ProfilerLevel.Level1,
            aic_metrics=torch_npu.profiler.AiCMetrics.PipeUtilization,
        )
        ready = []
        x = torch.randn(16, 16, device="npu")
        with torch_npu.profiler.profile(
            activities=[torch_npu.profiler.ProfilerActivity.CPU,
                        torch_npu.profiler.ProfilerActivity.NPU],
            schedule=torch_npu.profiler.schedule(wait=1, warmup=1, active=2, repeat=1),
            on_trace_ready=torch_npu.profiler.tensorboard_trace_handler({str(tmp_path)!r}),
            record_shapes=True,
            experimental_config=config,
        ) as prof:
            for _ in range(6):
                x = (x @ x).tanh()
                prof.step()
        profile = msprof_py.load({str(tmp_path)!r})
        print(prof.step_num, list(profile.steps["step"]), set(profile.tasks["step"]))
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[0] == "6 [2, 3] {2, 3}"
    (run_dir,) = tmp_path.glob("*_ascend_pt")
    assert (run_dir / "msprof_raw" / "meta.json").is_file()


def test_profiler_can_profile_several_windows_in_one_process(tmp_path: Path) -> None:
    result = run_script(
        f"""
        import torch, msprof_py, msprof_py.adapter as ad
        ad.install()
        import torch_npu
        x = torch.randn(16, 16, device="npu")
        for k, steps in enumerate((2, 3)):
            handler = torch_npu.profiler.tensorboard_trace_handler({str(tmp_path)!r} + f"/w{{k}}")
            with torch_npu.profiler.profile(on_trace_ready=handler) as prof:
                for _ in range(steps):
                    x = (x @ x).tanh()
                    prof.step()
            profile = msprof_py.load(prof.trace_dir)
            print(k, list(profile.steps["step"]), len(profile.tasks) > 0)
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[:2] == ["0 [0, 1] True", "1 [0, 1, 2] True"]
    for k in (0, 1):
        (run_dir,) = (tmp_path / f"w{k}").glob("*_ascend_pt")
        assert (run_dir / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv").is_file()


def test_profiler_schedule_actions() -> None:
    from msprof_py.adapter.torch_npu import profiler

    action = profiler.schedule(wait=1, warmup=1, active=2)
    assert [action(i).name for i in range(5)] == [
        "NONE",
        "WARMUP",
        "RECORD",
        "RECORD_AND_SAVE",
        "NONE",
    ]
