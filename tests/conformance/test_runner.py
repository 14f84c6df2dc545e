"""The conformance runner itself: comparison, moving samples, verdicts, the summary."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch
from opinfo_runner import (
    compare,
    known_differences,
    op_db,
    run_case,
    sample_sides,
    stale,
    unexpected,
)
from report import summarize

from msprof_py.device import SimulatedNpu

ROOT = Path(__file__).resolve().parents[2]


def _on_npu(t: torch.Tensor) -> torch.Tensor:
    return t.to("npu")


def test_compare_is_bitwise_and_nan_aware(npu: SimulatedNpu) -> None:
    x = torch.tensor([1.0, float("nan"), -0.0, 4.0])
    assert compare(x, _on_npu(x.clone())) is None
    signed = torch.tensor([1.0, float("nan"), 0.0, 4.0])
    assert "1/4 values differ" in compare(x, _on_npu(signed))  # -0.0 is not 0.0 bitwise
    moved = torch.tensor([float("nan"), 1.0, -0.0, 4.0])
    assert "NaN positions differ" in compare(x, _on_npu(moved))
    off = torch.tensor([1.0, float("nan"), -0.0, 4.5])
    found = compare(x, _on_npu(off))
    assert "max abs diff 0.5" in found and "first at [3]" in found
    assert "dtype float16" in compare(x, _on_npu(x.half()))
    assert "shape (2, 2)" in compare(x, _on_npu(x.reshape(2, 2)))
    assert "on cpu" in compare(x, x.clone())
    assert compare(x, x.clone(), cpu_ok=True) is None


def test_compare_walks_tuples_lists_and_scalars(npu: SimulatedNpu) -> None:
    a, b = torch.arange(6.0).reshape(2, 3), torch.ones(3)
    assert compare((a, [b, 2]), (_on_npu(a), [_on_npu(b), 2])) is None
    found = compare((a, [b, 2]), (_on_npu(a), [_on_npu(b + 1), 2]))
    assert found.startswith("out[1][0]: 3/3 values differ, max abs diff 1")
    assert "list of 1, expected list of 2" in compare([a, b], [_on_npu(a)])
    assert compare(math.nan, math.nan) is None
    assert compare(3, 4) == "out: 4, expected 3"
    assert compare(torch.device("cpu"), torch.device("npu:0")) is None
    assert compare({"device": "cpu"}, {"device": "npu"}) is None
    assert compare(torch.device("cpu"), torch.device("cpu")) is None
    assert compare(torch.device("npu:0"), torch.device("cpu")) is not None
    assert compare("mean", "sum") == "out: 'sum', expected 'mean'"
    assert compare(torch.tensor([True, False]), _on_npu(torch.tensor([True, True]))) is not None


@dataclass
class _Sample:
    input: Any
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)

    @staticmethod
    def output_process_fn_grad(out: Any) -> Any:
        return out


def test_samples_keep_structure_layout_and_cpu_tensors(npu: SimulatedNpu) -> None:
    base = torch.arange(12.0).reshape(3, 4)
    expanded = base[:, :1].to("npu").expand(3, 4)  # stride 0
    offset = base.to("npu")[1:, 1::2]  # storage offset, non-contiguous
    sections = torch.tensor([1, 2])  # made on CPU on purpose (tensor_split's indices)
    sample = _Sample(expanded, ([offset, 2.5], sections), {"device": "npu", "out_dtype": None})
    (inp, args, kwargs), npu_side = sample_sides(sample)
    assert npu_side[0] is expanded
    for cpu_t, npu_t in ((inp, expanded), (args[0][0], offset)):
        assert cpu_t.device.type == "cpu"
        assert cpu_t.stride() == npu_t.stride()
        assert cpu_t.storage_offset() == npu_t.storage_offset()
        assert torch.equal(cpu_t, npu_t.cpu())
    assert inp.stride()[1] == 0 and offset.storage_offset() == 5
    assert args[0][1] == 2.5 and torch.equal(args[1], sections) and args[1] is not sections
    assert kwargs == {"device": "cpu", "out_dtype": None}


@dataclass
class _FakeOp:
    """The parts of an OpInfo the runner uses."""

    op: Any
    dtypes: tuple = (torch.float32,)
    full_name: str = "fake"
    name: str = "fake"
    supports_autograd: bool = True
    inplace_variant: Any = None

    def supported_dtypes(self, device: str) -> set[torch.dtype]:
        return set(self.dtypes)

    def supported_backward_dtypes(self, device: str) -> set[torch.dtype]:
        return set(self.dtypes)

    def sample_inputs(self, device: str, dtype: torch.dtype, requires_grad: bool = False) -> Any:
        return self.sample_inputs_func(self, device, dtype, requires_grad)

    @staticmethod
    def sample_inputs_func(op: Any, device: str, dtype: torch.dtype, requires_grad: bool) -> Any:
        for n in (3, 5):
            x = torch.linspace(-1, 1, n, dtype=dtype, device=device)
            yield _Sample(x.requires_grad_(requires_grad))

    @staticmethod
    def gradcheck_wrapper(op: Any, *args: Any, **kwargs: Any) -> Any:
        return op(*args, **kwargs)


def test_verdicts_of_a_good_a_wrong_and_a_failing_op(npu: SimulatedNpu) -> None:
    good = _FakeOp(lambda x: torch.randn_like(x) * x.exp())  # seeded RNG on both sides
    assert run_case(good, torch.float32, "forward").status == "pass"
    backward = run_case(good, torch.float32, "backward")
    assert (backward.status, backward.samples) == ("pass", 2)

    def off_on_npu(x: torch.Tensor) -> torch.Tensor:
        return x * 2 + (0.25 if x.device.type == "npu" and x.numel() == 5 else 0)

    wrong = run_case(_FakeOp(off_on_npu), torch.float32, "forward")
    assert wrong.status == "mismatch"
    assert wrong.detail.startswith("sample 1: out: 5/5 values differ, max abs diff 0.25")

    def fails_on_npu(x: torch.Tensor) -> torch.Tensor:
        if x.device.type == "npu":
            raise RuntimeError("no kernel\nsecond line of a long message")
        return x

    failing = run_case(_FakeOp(fails_on_npu), torch.float32, "forward")
    assert (failing.status, failing.detail) == ("error", "sample 0: RuntimeError: no kernel")

    def writes_its_input(x: torch.Tensor) -> torch.Tensor:
        total = x.sum()
        x.add_(1.0 if x.device.type == "cpu" else 2.0)
        return total

    written = run_case(_FakeOp(writes_its_input), torch.float32, "forward")
    assert written.status == "mismatch" and written.detail.startswith("sample 0: inputs[0]: ")
    inplace = _FakeOp(torch.exp, inplace_variant=torch.Tensor.exp_)
    assert run_case(inplace, torch.float32, "inplace").status == "pass"
    assert run_case(_FakeOp(torch.exp), torch.float32, "inplace").status == "skipped"
    skipped = run_case(_FakeOp(torch.exp), torch.float16, "forward")
    assert (skipped.status, skipped.detail) == ("skipped", "no CPU support for float16")


def test_known_differences_name_real_ops_with_reasons() -> None:
    names = op_db()
    entries = known_differences()
    assert entries
    for key, entry in entries.items():
        op, dtype, direction = key.split("/")
        assert op in names, key
        assert direction in ("forward", "backward", "inplace", "out", "*"), key
        assert dtype == "*" or hasattr(torch, dtype), key
        assert len(entry.reason) > 20, key


def _record(op: str, status: str, known: str = "", flaky: bool = False) -> dict[str, Any]:
    return {
        "op": op,
        "dtype": "float32",
        "direction": "forward",
        "status": status,
        "detail": f"{status} detail",
        "samples": 1,
        "known": known,
        "flaky": flaky,
    }


def test_summary_counts_pass_rate_and_failure_table() -> None:
    records = [
        _record("a", "pass"),
        _record("b", "pass"),
        _record("c", "pass"),
        _record("d", "mismatch", known="listed | reason"),
        _record("e", "error"),
        _record("f", "skipped"),
    ]
    text = summarize(records, "python -m tests.conformance.report")
    assert "| pass | 3 |" in text and "| skipped | 1 |" in text
    assert "**60.0%** (3/5)" in text  # skipped cases are left out
    assert "ops with every case passing or skipped: 4/6" in text
    assert "| d | float32 | forward | mismatch | mismatch detail | listed \\| reason |" in text
    assert "| e | float32 | forward | error | error detail |  |" in text
    assert [line.split(":")[0] for line in unexpected(records)] == ["e/float32/forward"]


@pytest.mark.parametrize(
    ("status", "flaky", "is_stale"),
    [("pass", False, True), ("mismatch", False, False), ("pass", True, False)],
)
def test_listed_differences_that_pass_are_stale(status: str, flaky: bool, is_stale: bool) -> None:
    records = [_record("d", status, known="a reason", flaky=flaky)]
    assert bool(stale(records)) is is_stale


@pytest.mark.slow  # ~18 s; the OpInfo fast subset runs the same worker code
def test_report_runs_ops_in_a_worker_and_writes_the_summary(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "tests.conformance.report", "--ops", "abs,no_such_op"]
    command += ["--output", str(tmp_path), "--max-samples", "2"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    records = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    by_case = {(r["op"], r["dtype"], r["direction"]): r["status"] for r in records}
    assert by_case[("abs", "float32", "forward")] == "pass"
    assert (
        by_case[("abs", "float32", "backward")] == by_case[("abs", "float32", "inplace")] == "pass"
    )
    assert by_case[("no_such_op", "*", "*")] == "error"
    summary = (tmp_path / "summary.md").read_text(encoding="utf-8")
    assert "**85.7%** (6/7)" in summary  # abs: 3 dtypes forward, backward, in place, out=
    assert "| no_such_op | * | * | error | no OpInfo of that name |" in summary
