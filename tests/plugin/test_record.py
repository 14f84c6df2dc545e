"""msprof_py.record(): in-process recordings, many per process, each leaving nothing behind."""

from __future__ import annotations

import pytest
import torch
from torch.nn.modules import module as nn_module
from torch.optim import optimizer as optim_module

import msprof_py
from msprof_py.adapter import runtime
from msprof_py.collectors.session import active_session
from msprof_py.gates.figures import figures


def _train(steps: int = 3, explicit: bool = False) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    model = model.to("npu")
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(16, 32).to("npu")
    y = torch.randint(0, 4, (16,)).to("npu")
    for _ in range(steps):
        if explicit:  # inference steps the script marks itself
            with torch.no_grad():
                model(x).argmax(dim=1)
            msprof_py.step()
            continue
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()


def _recorded_figures(**kwargs: object) -> dict[str, object]:
    with msprof_py.record(**kwargs) as rec:
        _train()
    return figures(rec.analyze()).to_dict()


def _global_hooks() -> tuple[int, int, int]:
    return (
        len(nn_module._global_forward_pre_hooks),
        len(nn_module._global_forward_hooks),
        len(optim_module._global_optimizer_post_hooks),
    )


def test_the_same_code_recorded_twice_gives_identical_figures_whatever_ran_between(
    tmp_path,
) -> None:
    first = _recorded_figures(output=tmp_path)
    # leave the device busy and the allocator fragmented: pending work, cached odd-sized
    # blocks, npu tensors only a reference cycle holds
    junk = [torch.randn(n, 33).to("npu") for n in (7, 1000, 31)]
    for t in junk:
        (t @ t.T).relu()
    cycle: list[object] = [torch.randn(4096).to("npu")]
    cycle.append(cycle)
    del junk, cycle, t  # (tensors alive before a recording do count in its peak memory)
    second = _recorded_figures(output=tmp_path)
    assert first == second
    assert first["steps"] == 2  # 3 steps, the first left out as warm-up
    assert first["launches_per_step"] > 0 and first["peak_memory_mb"] > 0
    assert len(list(tmp_path.iterdir())) == 2  # two run folders, none overwritten


def test_a_recording_leaves_no_hook_observer_or_session_behind(tmp_path) -> None:
    msprof_py.adapter.install()
    npu = runtime.state().npu
    hooks = _global_hooks()
    subscribers = list(npu.bus._subscribers)
    init_process_group = torch.distributed.init_process_group
    module_call = torch.nn.Module.__call__
    with msprof_py.record(tmp_path) as rec:
        assert active_session() is rec.session
        # module calls are followed through Module.__call__, optimizer steps by a hook
        assert _global_hooks() == (hooks[0], hooks[1], hooks[2] + 1)
        assert torch.nn.Module.__call__ is not module_call
        _train(steps=2, explicit=True)
    assert _global_hooks() == hooks
    assert torch.nn.Module.__call__ is module_call
    assert npu.bus._subscribers == subscribers
    assert runtime.state().observer is None
    assert active_session() is None
    assert torch.distributed.init_process_group is init_process_group
    assert rec.status == "completed"
    profile = rec.load()
    assert profile.meta[0]["command"] == "msprof_py.record"
    assert list(profile.steps["source"]) == ["msprof_py.step", "msprof_py.step"]


def test_an_exception_inside_still_leaves_a_loadable_profile(tmp_path) -> None:
    with pytest.raises(ValueError, match="boom"), msprof_py.record(tmp_path) as rec:
        _train(steps=2)
        raise ValueError("boom")
    assert rec.status == "exception"
    assert rec.load().meta[0]["status"] == "exception"
    assert active_session() is None


def test_an_empty_recording_and_results_asked_too_early_say_why(tmp_path) -> None:
    rec = msprof_py.record(tmp_path)
    with pytest.raises(RuntimeError, match="not started"):
        rec.load()
    with rec:
        with pytest.raises(RuntimeError, match="another recording is running"):
            msprof_py.record(tmp_path).start()
        with pytest.raises(RuntimeError, match="already started"):
            rec.start()
    assert rec.run_dir is None
    with pytest.raises(RuntimeError, match="nothing was recorded"):
        rec.analyze()
