"""The npu's device guard and hooks (``msprof_py/adapter/native/device_guard.cpp``): the same
answers as torch's Python-backend guard, without calling Python, so a Ctrl-C during training
is a KeyboardInterrupt and never an abort.

torch asks the guard for the current stream from functions it declares noexcept (an autograd
node's input metadata, stream guards). Its Python-backend guard takes the GIL and looks up the
Python method ``type_`` for each question: an interrupt pending at that moment throws out of
the noexcept function and the process aborts ("terminate called without an active
exception"). Both paths run each script in a fresh process: ``MSPROF_NATIVE=0`` registers the
Python guard, the default the compiled one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from msprof_py.adapter import native

needs_native = pytest.mark.skipif(native.load() is None, reason=native.status())

#: trains for argv[1] seconds (and on, up to 30 s more, until it has made 11 steps and caught
#: 51 interrupts) while another thread sends SIGINT every 0-2 step times (at least 0-2 ms, so
#: a slow machine's steps still finish between interrupts); each interrupt during a step is one
#: KeyboardInterrupt, caught, and the loop goes on
STORM = """
import os, random, signal, sys, threading, time, torch, msprof_py.adapter
msprof_py.adapter.install()
model = torch.nn.Sequential(
    torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)
).to("npu")
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
armed = False

def on_sigint(signum, frame):
    global armed
    if armed:  # one KeyboardInterrupt per arming: none escapes the loop below
        armed = False
        raise KeyboardInterrupt

def step():
    loss = model(torch.randn(8, 16).to("npu")).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()

for _ in range(3):  # warm: plans made, launches learned
    step()
began = time.monotonic()
for _ in range(5):
    step()
# interrupts every 0-2 steps' time (at least 0-2 ms): about half the steps are interrupted,
# at every point of a step, on a fast machine as on a slow one
spacing = max(0.002, 2 * (time.monotonic() - began) / 5)
signal.signal(signal.SIGINT, on_sigint)
stop = threading.Event()

def pester():
    while not stop.is_set():
        time.sleep(random.random() * spacing)
        os.kill(os.getpid(), signal.SIGINT)

threading.Thread(target=pester, daemon=True).start()
interrupted = steps = 0
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end or (
    (steps <= 10 or interrupted <= 50) and time.monotonic() < end + 30
):
    try:
        armed = True
        step()
        armed = False
        steps += 1
    except KeyboardInterrupt:
        interrupted += 1
stop.set()
print("interrupted", interrupted, "steps", steps)
"""

#: what the guard and hooks answer, through torch's public API
ANSWERS = """
import torch, msprof_py.adapter
msprof_py.adapter.install()
x = torch.ones(3, device="npu", requires_grad=True)
(x * 2).sum().backward()
stream = torch.accelerator.current_stream()
print("current stream", stream.stream_id, stream.device)
print("new stream", torch.Stream("npu").stream_id)
print("accelerator", torch.accelerator.current_accelerator(), torch.accelerator.device_count())
print("grad", x.grad.tolist(), x.grad.device)
with torch.Stream("npu"):
    print("in a stream", torch.accelerator.current_stream().stream_id)
print("hooks", torch._C._get_privateuse1_backend_name(), torch.npu.is_available())
"""


def _run(
    tmp_path: Path, body: str, *args: str, python_path: bool
) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(body))
    env = dict(os.environ)
    env.pop("MSPROF_NATIVE", None)
    if python_path:
        env["MSPROF_NATIVE"] = "0"
    return subprocess.run(
        [sys.executable, str(script), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


@needs_native
def test_interrupts_during_training_never_abort_the_process(tmp_path: Path) -> None:
    result = _run(tmp_path, STORM, "2", python_path=False)
    assert result.returncode == 0, (result.returncode, result.stderr[-2000:])
    assert "terminate called" not in result.stderr
    _, interrupted, _, steps = result.stdout.split()
    assert int(interrupted) > 50 and int(steps) > 10, result.stdout


@pytest.mark.slow
def test_the_python_guard_aborts_under_the_same_interrupts(tmp_path: Path) -> None:
    """The control: with torch's Python guard the same loop is killed by SIGABRT (why the
    compiled guard exists). Up to three tries: the abort needs an interrupt to land in the
    guard's lookup."""
    for _ in range(3):
        result = _run(tmp_path, STORM, "4", python_path=True)
        if result.returncode == -signal.SIGABRT:
            assert "terminate called without an active exception" in result.stderr
            return
    pytest.fail(f"the Python guard survived: {result.stdout}")


@needs_native
def test_the_compiled_guard_answers_as_the_python_guard_does(tmp_path: Path) -> None:
    compiled = _run(tmp_path, ANSWERS, python_path=False)
    python = _run(tmp_path, ANSWERS, python_path=True)
    assert compiled.returncode == 0, compiled.stderr[-2000:]
    assert python.returncode == 0, python.stderr[-2000:]
    assert compiled.stdout == python.stdout
    assert "current stream 0 npu:0" in compiled.stdout
    assert "grad [2.0, 2.0, 2.0] npu:0" in compiled.stdout


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="lists threads through /proc")
def test_the_exit_waits_for_autograds_npu_thread_only_once_it_exists() -> None:
    code = """
        import time, torch, msprof_py.adapter
        from msprof_py.adapter.registration import autograd_device_threads_started
        msprof_py.adapter.install()
        x = torch.ones(4, device="npu", requires_grad=True)
        y = (x * 2).sum()
        print(autograd_device_threads_started())
        y.backward()
        for _ in range(500):  # torch starts them as the backward begins; each names itself
            if autograd_device_threads_started():
                break
            time.sleep(0.01)
        print(autograd_device_threads_started())
    """
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    assert out.stdout.split() == ["False", "True"]
