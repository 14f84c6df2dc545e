"""The npu's backward runs on the thread that calls it (one OpenMP team, as CPU eager has) and
is recorded as autograd's device thread, as torch_npu's backward runs (issue 20)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from adapter_helpers import run_script


def test_the_backward_runs_on_the_calling_thread_and_starts_no_device_thread() -> None:
    """With two intra-op threads, an npu backward runs its ops (and its hooks) on the main
    thread, which meanwhile records as ident + 1 (the engine still starts its idle
    ``pt_autograd_0`` worker, which then runs nothing, so it opens no OpenMP team of its
    own); nested backwards (autograd.grad in a hook) keep the outer mark."""
    result = run_script(
        """
        import threading, torch
        import msprof_py.adapter as ad
        ad.install()
        from msprof_py.adapter import backward_thread as bt
        torch.set_num_threads(2)
        main = threading.get_ident()
        seen = []
        w = torch.randn(256, 256).npu().requires_grad_()
        def hook(g):
            with torch.enable_grad():  # nested, same thread
                inner = torch.autograd.grad((w * 3).sum(), w)[0]
            seen.append((threading.get_ident() == main, bt.in_backward(),
                         bt.current_ident() == main + 1, float(inner.sum().cpu())))
            return g
        for _ in range(3):
            y = (w * 2).sum()
            y.register_hook(hook)
            y.backward()
        print(seen[0], len(seen), bt.in_backward(), bt.current_ident() == main,
              float(w.grad.sum().cpu()))
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[-2] == (
        f"(True, True, True, {3.0 * 256 * 256}) 3 False True {2.0 * 3 * 256 * 256}"
    )


def test_a_recorded_backward_keeps_the_device_thread_lane() -> None:
    """Recorded (compiled path and Python path alike), the backward's host ops sit on a
    thread of their own named pt_autograd_0, as before, and the forward's on MainThread; the
    thread values are the main thread's ident and ident + 1."""
    result = run_script(
        """
        import threading, warnings, torch, msprof_py
        warnings.simplefilter("ignore")
        with msprof_py.record("out") as rec:
            lin = torch.nn.Linear(8, 8).npu()
            x = torch.randn(4, 8).npu()
            for _ in range(2):
                lin(x).sum().backward()
                msprof_py.step()
        p = rec.load()
        ops = p.host_events[p.host_events["kind"] == "op"]
        back = set(ops.loc[ops["name"] == "aten::mm", "thread"])  # only the backward's
        fwd = set(ops.loc[ops["name"] == "aten::addmm", "thread"])
        main = threading.get_ident()
        names = p.thread_names(0)
        print(back == {main + 1}, fwd == {main}, names[main + 1], names[main])
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[-2] == "True True pt_autograd_0 MainThread"


def test_the_device_thread_placement_can_be_kept() -> None:
    """``MSPROF_PY_BACKWARD_THREAD=device``: torch's placement, the backward's hooks run on
    autograd's device thread (not the caller's), nothing is marked; the npu storages freed
    there (without the GIL) return their device memory: twenty more steps hold no more."""
    code = """
        import threading, torch
        import msprof_py.adapter as ad
        ad.install()
        from msprof_py.adapter import backward_thread as bt
        w = torch.randn(4).npu().requires_grad_()
        seen = []
        y = (w * 2).sum()
        y.register_hook(lambda g: seen.append((threading.get_ident(), bt.in_backward())))
        y.backward()
        del y
        held = []
        for _ in range(20):
            (w.exp() * w).sum().backward()
            held.append(torch.npu.memory_allocated())
        print(len(set(held)) == 1)
        print(seen[0][0] != threading.get_ident(), seen[0][1])
        """
    env = {**os.environ, "MSPROF_PY_BACKWARD_THREAD": "device"}
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[-3:-1] == ["True", "True False"]
