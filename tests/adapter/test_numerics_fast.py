"""numerics="fast": fp16/bf16 matmuls and convolutions widened to fp32 (a fresh process)."""

from __future__ import annotations

import pytest
from adapter_helpers import run_script

from msprof_py.adapter import fast_numerics


def test_only_functional_cube_ops_are_widened() -> None:
    assert fast_numerics.upcasts("mm", writes=False)
    assert fast_numerics.upcasts("convolution_backward_overrideable", writes=False)
    assert not fast_numerics.upcasts("mm", writes=True)  # mm.out writes its own tensor
    assert not fast_numerics.upcasts("add", writes=False)


def test_fast_numerics_round_fp32_results_and_keep_the_rest_bitwise() -> None:
    result = run_script(
        """
        import torch, msprof_py.adapter as ad
        from msprof_py.device import TaskLog
        npu = ad.install(numerics="fast")
        log = TaskLog(); npu.subscribe(log)
        torch.manual_seed(0)
        a, b = torch.randn(33, 70), torch.randn(70, 17)
        x, w = torch.randn(2, 3, 9, 9), torch.randn(4, 3, 3, 3)
        out = {}
        for dt in (torch.float16, torch.bfloat16):
            got = (a.to(dt).npu() @ b.to(dt).npu()).cpu()
            want = (a.to(dt).float() @ b.to(dt).float()).to(dt)
            out[f"mm {dt}"] = (got.dtype == dt, torch.equal(got, want))
            xi = x.to(dt).npu().requires_grad_()
            y = torch.nn.functional.conv2d(xi, w.to(dt).npu(), padding=1)
            want = torch.nn.functional.conv2d(x.to(dt).float(), w.to(dt).float(), padding=1)
            out[f"conv {dt}"] = (y.dtype == dt, torch.equal(y.cpu(), want.to(dt)))
            y.sum().backward()
            out[f"grad {dt}"] = (xi.grad.dtype == dt, xi.grad.shape == x.shape)
        # float32 and non-cube ops are computed as on CPU
        f32 = (a.npu() @ b.npu()).cpu()
        out["fp32 mm"] = (True, torch.equal(f32, a @ b))
        h = a.half()
        out["fp16 add"] = (True, torch.equal((h.npu() + h.npu()).cpu(), h + h))
        # the timeline does not depend on the numerics: an fp16 MatMul is costed as fp16
        mms = [t for t in log.tasks if t.op_type == "MatMul"]
        print({k: v for k, v in out.items()})
        print("matmul dtypes", sorted({t.input_dtypes for t in mms}))
        """
    )
    assert result.returncode == 0, result.stderr
    first, second = result.stdout.strip().splitlines()[-2:]
    checks = eval(first)  # the dict printed above
    assert checks and all(all(v) for v in checks.values()), checks
    assert "FLOAT16" in second.upper() or "HALF" in second.upper(), second


def test_the_compiled_path_widens_as_the_python_path_does() -> None:
    """With numerics "fast" the compiled kernel runs and learns every op it runs with "cpu"
    (an fp16 add) and computes the widened ops itself (an fp16 matmul, a convolution and its
    backward): bitwise what fast_numerics.call_widened gives on CPU."""
    result = run_script(
        """
        import torch, msprof_py.adapter as ad
        from msprof_py.adapter import backend
        from msprof_py.adapter.fast_numerics import call_widened
        ad.install(numerics="fast")
        if backend.NATIVE is None:
            print("no compiled path"); raise SystemExit(0)
        aten = torch.ops.aten
        # a fixed input: for about 1 in 20 random 64x64 inputs CPU's own fp16 mm happens to
        # round every element as the widened one does, and the first check below would fail
        torch.manual_seed(0)
        h = torch.randn(64, 64).half().npu()
        for _ in range(3):  # plans made, launches learned
            h + h; h @ h
        counts = [backend.NATIVE.counts()]
        for _ in range(10):
            h + h
        counts.append(backend.NATIVE.counts())
        for _ in range(10):
            h @ h
        counts.append(backend.NATIVE.counts())
        ran = [(b[2] - a[2], b[1] - a[1]) for a, b in zip(counts, counts[1:])]
        widened = call_widened(aten.mm.default, (h.cpu(), h.cpu()), {})
        # sizes where widening shows: CPU's own fp16 kernels round differently
        same = [not torch.equal(h.cpu() @ h.cpu(), widened), torch.equal((h @ h).cpu(), widened)]
        torch.manual_seed(0)
        x, w = torch.randn(2, 16, 12, 12).half(), torch.randn(8, 16, 3, 3).half()
        conv_args = ([1, 1], [1, 1], [1, 1], False, [0, 0], 1)
        xn, wn = x.npu().requires_grad_(), w.npu().requires_grad_()
        y = torch.nn.functional.conv2d(xn, wn, padding=1)
        want = call_widened(aten.convolution.default, (x, w, None, *conv_args), {})
        plain = aten.convolution.default(x, w, None, *conv_args)
        same += [not torch.equal(plain, want), torch.equal(y.cpu(), want)]
        grad = torch.randn(y.shape).half()
        y.backward(grad.npu())
        grads = call_widened(
            aten.convolution_backward.default,
            (grad, x, w, None, *conv_args, [True, True, False]),
            {},
        )
        same += [torch.equal(xn.grad.cpu(), grads[0]), torch.equal(wn.grad.cpu(), grads[1])]
        print(ran, same)
        """
    )
    assert result.returncode == 0, result.stderr
    last = result.stdout.strip().splitlines()[-1]
    if last == "no compiled path":
        pytest.skip("the compiled per-op path is not built here")
    assert last == "[(10, 10), (10, 10)] [True, True, True, True, True, True]", last
