"""Two warnings torch gives on msprof-py's npu are avoided: torch.compile's "global hooks on
modules" (the session follows module calls by wrapping ``Module.__call__``, with no global
hook) and DDP's "Time stats are currently only collected for CPU and CUDA devices" (the npu
has no C++ timer: DDP's runtime-stats call is skipped on npu modules).

Each script runs in its own process; the DDP script also runs as a control that undoes our
measure, which shows the code path does warn."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

COMPILE = """
import sys, torch, msprof_py, msprof_py.adapter

msprof_py.adapter.install()
model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()).to("npu")
if sys.argv[2] == "before":
    compiled = torch.compile(model)
with msprof_py.record(sys.argv[1]) as rec:
    if sys.argv[2] == "inside":  # the wrapper binds the session's Module.__call__
        compiled = torch.compile(model)
    for _ in range(3):
        compiled(torch.randn(4, 8).to("npu")).sum().backward()
    print("global hooks:", bool(torch.nn.modules.module._has_any_global_hook()))
    print("frames compiled:", torch._dynamo.utils.counters["stats"]["unique_graphs"])
ops = rec.load().host_events
ops = ops[ops["kind"] == "op"]
graphs = ops[ops["name"].astype(str).str.contains("npu_graph::.*_forward", regex=True)]
print("modules:", sorted(set(graphs["module"])))
compiled(torch.randn(4, 8).to("npu")).sum().backward()  # after the recording: still runs
print("frames compiled after:", torch._dynamo.utils.counters["stats"]["unique_graphs"])
"""

DDP = """
import sys, warnings, torch, torch.distributed as dist
import msprof_py.adapter, msprof_py.adapter.distributed as hccl
from torch.nn.parallel import DistributedDataParallel as DDP

msprof_py.adapter.install()
hccl.register()
dist.init_process_group("hccl", init_method=f"tcp://127.0.0.1:{sys.argv[1]}", rank=0, world_size=1)
model = DDP(torch.nn.Linear(8, 8).to("npu"))
assert isinstance(model.logger, hccl.NpuDdpLogger)
if sys.argv[2] == "control":
    model.logger = model.logger.logger  # DDP's own logger back
for _ in range(3):  # DDP collects its runtime stats from the second iteration on
    model(torch.randn(4, 8).to("npu")).sum().backward()
dist.destroy_process_group()
print("trained")
"""


def _run(body: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    script = cwd / "script.py"
    script.write_text(textwrap.dedent(body))
    return subprocess.run(
        [sys.executable, str(script), *args], cwd=cwd, capture_output=True, text=True, timeout=300
    )


def _free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


@pytest.mark.parametrize("compiled", ["inside", pytest.param("before", marks=pytest.mark.slow)])
def test_torch_compile_under_recording_sees_no_global_hooks(tmp_path: Path, compiled: str) -> None:
    """The session follows module calls without global hooks, so torch.compile has nothing
    to warn about; the session's wrapper of Module.__call__ adds no guard (a guard on the
    recorder's state recompiled the model on its second call), whether the model was
    compiled before the recording or inside it (then Dynamo compiles through the wrapper)."""
    result = _run(COMPILE, str(tmp_path / "out"), compiled, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "global hooks: False" in result.stdout
    assert "frames compiled: 1" in result.stdout, result.stdout
    assert "global hooks on modules" not in result.stderr, result.stderr[-3000:]
    # the compiled wrapper stands for the module it compiled: the forward graph launches are
    # that module's, with no extra level for the wrapper
    assert "modules: ['Sequential']" in result.stdout, result.stdout
    assert "frames compiled after:" in result.stdout, result.stdout


@pytest.mark.parametrize("mode", ["user", pytest.param("control", marks=pytest.mark.slow)])
def test_ddp_on_the_npu_says_nothing_about_time_stats(tmp_path: Path, mode: str) -> None:
    result = _run(DDP, _free_port(), mode, cwd=tmp_path)
    assert result.returncode == 0 and "trained" in result.stdout, result.stderr[-3000:]
    warned = "Time stats are currently only collected for CPU and CUDA devices" in result.stderr
    assert warned == (mode == "control"), result.stderr[-3000:]
