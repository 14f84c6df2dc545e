"""The real ``msprof-analyze compare`` (PyPI msprof-analyze) on our ascend_pt exports: it
accepts them and its OverallMetrics agree with ``msprof compare``'s."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

import pytest
from compare_helpers import run, save
from msprof_analyze_cli import msprof_analyze

from msprof_py.compare import compare
from msprof_py.exporters.ascend_pt import export_ascend_pt

pytest.importorskip("msprof_analyze")

_M = "{http://schemas.openxmlformats.org/spreadsheetml/2006/main}"
_REL = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}id"


def sheet_rows(book: Path, name: str) -> list[list[object]]:
    """The rows of sheet ``name`` of an xlsx (stdlib only: openpyxl is not required)."""
    with zipfile.ZipFile(book) as z:
        shared = []
        if "xl/sharedStrings.xml" in z.namelist():
            for si in ET.fromstring(z.read("xl/sharedStrings.xml")).iter(f"{_M}si"):
                shared.append("".join(t.text or "" for t in si.iter(f"{_M}t")))
        rels = ET.fromstring(z.read("xl/_rels/workbook.xml.rels"))
        target = {r.get("Id"): r.get("Target") for r in rels}
        sheets = ET.fromstring(z.read("xl/workbook.xml")).iter(f"{_M}sheet")
        rid = next(s.get(_REL) for s in sheets if s.get("name") == name)
        xml = ET.fromstring(z.read("xl/" + target[rid].lstrip("/").removeprefix("xl/")))
    rows = []
    for row in xml.iter(f"{_M}row"):
        cells: dict[int, object] = {}
        for c in row.iter(f"{_M}c"):
            letters = re.match(r"[A-Z]+", c.get("r", "A")).group()
            col = sum((ord(ch) - 64) * 26**i for i, ch in enumerate(reversed(letters))) - 1
            v = c.find(f"{_M}v")
            if c.get("t") == "s":
                cells[col] = shared[int(v.text)]
            elif c.get("t") == "inlineStr":
                cells[col] = "".join(t.text or "" for t in c.iter(f"{_M}t"))
            elif v is not None:
                cells[col] = v.text if c.get("t") in ("str", "e") else float(v.text)
        rows.append([cells.get(i) for i in range(max(cells, default=-1) + 1)])
    return rows


def msprof_analyze_compare(new: Path, base: Path, out: Path) -> tuple[str, dict[str, list]]:
    """Run ``msprof-analyze compare -d new -bp base -o out``: its output and OverallMetrics
    (index, without the tree indent -> the row's cells)."""
    proc = msprof_analyze(
        "compare", "-d", str(new), "-bp", str(base), "-o", str(out), cwd=out.parent
    )
    text = proc.stdout + proc.stderr
    (book,) = out.glob("performance_comparison_result_*.xlsx")
    rows = sheet_rows(book, "OverallMetrics")
    return text, {str(r[0]).strip(): r for r in rows if r and isinstance(r[0], str)}


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("exported")
    out = {}
    for version in ("base", "new"):
        run_dir = save(run(version), root / version) / "host_0_ascend_pt"
        export_ascend_pt(run_dir)
        out[version] = run_dir
    return out


def test_msprof_analyze_compare_agrees(exported: dict[str, Path], tmp_path: Path) -> None:
    text, theirs = msprof_analyze_compare(exported["new"], exported["base"], tmp_path / "out")
    assert "Model Profiling Time Distribution" in text
    ours = {
        r["index"]: r for r in compare(exported["base"], exported["new"]).overall.to_dict("records")
    }
    steps = 2  # msprof-analyze sums the whole profile; ours are per step
    pairs = {"Computing Time": "Computing Time", "Conv (Forward)": "Conv (Forward)",
             "Matmul": "MatMul", "Vector": "Vector",
             "Uncovered Communication Time": "Uncovered Communication Time"}  # fmt: skip
    for their_index, our_index in pairs.items():
        row = theirs[their_index]  # Index, base ms, ratio, number, new ms, ratio, number, diff
        assert row[1] == pytest.approx(ours[our_index]["base_duration_ms"] * steps), their_index
        assert row[4] == pytest.approx(ours[our_index]["new_duration_ms"] * steps), their_index
    assert theirs["Computing Time"][3] == ours["Computing Time"]["base_number"] * steps
    # their E2E is the span of device work (first task to last), ours the step windows:
    # theirs is shorter, and Free = E2E - Computing - Uncovered Communication on both
    for col in (1, 4):
        e2e, comp = theirs["E2E Time"][col], theirs["Computing Time"][col]
        comm, free = theirs["Uncovered Communication Time"][col], theirs["Free Time"][col]
        assert free == pytest.approx(e2e - comp - comm)
        side = "base_duration_ms" if col == 1 else "new_duration_ms"
        assert e2e <= ours["E2E Time"][side] * steps


def _kineto_trace(path: Path) -> Path:
    """A GPU torch.profiler trace of BASE's model: kernels, a memcpy, ac2g flows, steps."""
    events: list[dict] = [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}},
        {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "GPU 0"}},
    ]
    flow = 0
    for step in (1, 2):
        t0 = 1_000_000 + step * 100
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}",
                       "pid": 1, "tid": 1, "ts": t0, "dur": 100})  # fmt: skip
        t, dev = t0, t0 + 2
        for op, kernel, dur in (
            ("aten::mm", "ampere_sgemm_128x64_nn", 10),
            ("aten::add", "vectorized_elementwise_kernel", 4),
            ("aten::convolution", "sm80_xmma_fprop_implicit_gemm_f32f32", 8),
        ):
            events += [
                {"ph": "X", "cat": "cpu_op", "name": op, "pid": 1, "tid": 1, "ts": t, "dur": 2},
                {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
                 "tid": 1, "ts": t + 0.5, "dur": 1, "args": {"correlation": flow}},
                {"ph": "X", "cat": "kernel", "name": kernel, "pid": 0, "tid": 7, "ts": dev,
                 "dur": dur, "args": {"stream": 7, "correlation": flow, "device": 0}},
                {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": flow, "pid": 1, "tid": 1,
                 "ts": t + 0.5, "bp": "e"},
                {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": flow, "pid": 0, "tid": 7,
                 "ts": dev, "bp": "e"},
            ]  # fmt: skip
            flow, t, dev = flow + 1, t + 2, dev + dur
        events.append({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)",
                       "pid": 0, "tid": 7, "ts": dev, "dur": 3,
                       "args": {"stream": 7, "device": 0, "bytes": 4096}})  # fmt: skip
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}), encoding="utf-8")
    return path


def test_msprof_analyze_compare_takes_a_gpu_baseline(exported, tmp_path: Path) -> None:
    """A GPU Kineto trace as -bp: msprof-analyze classifies the CUDA kernels as our names.py
    does (sgemm: MatMul, xmma fprop implicit GEMM: Conv) and compares with our NPU export."""
    trace = _kineto_trace(tmp_path / "gpu.pt.trace.json")
    text, theirs = msprof_analyze_compare(exported["new"], trace, tmp_path / "out")
    assert "| GPU |" in text
    assert theirs["Matmul"][1] == pytest.approx(0.020)  # 2 steps x 10 us
    assert theirs["Conv (Forward)"][1] == pytest.approx(0.016)
    assert theirs["Vector"][1] == pytest.approx(0.008)
    assert theirs["Computing Time"][1] == pytest.approx(0.044)
