"""Fidelity benchmark: the simulated NPU against published Ascend results.

    .venv/bin/python benchmarks/bench_fidelity.py            # every case, writes RESULTS.md
    .venv/bin/python benchmarks/bench_fidelity.py --only gemm_best --no-write
    .venv/bin/python benchmarks/bench_fidelity.py --only resnet50_bs256_amp_graph --sweep

Each case of ``benchmarks/fidelity_anchors.toml`` runs in a fresh process (one npu backend per
process) in shapes-only mode (``msprof_py.adapter.install(numerics="none", device=preset)``);
the 8-card case runs 8 ranks under torchrun. The table (case, preset, anchor, source,
simulated value, ratio, within +-15 %) replaces the fidelity section of
``benchmarks/RESULTS.md`` (with ``--only``, the other cases keep their rows and details, and
the sweep is kept unless ``--sweep`` reruns it). Simulated figures are deterministic: two runs
give the same table (wall times, printed separately, are not).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import tomllib

HERE = Path(__file__).resolve().parent
ANCHORS = HERE / "fidelity_anchors.toml"
RESULTS = HERE / "RESULTS.md"
BEGIN, END = "<!-- fidelity:begin -->", "<!-- fidelity:end -->"
TOLERANCE = 0.15
SWEEP = (32, 64, 128, 256, 512)


def load_cases() -> list[dict[str, Any]]:
    """The anchor cases, in file order."""
    return tomllib.loads(ANCHORS.read_text(encoding="utf-8"))["case"]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(HERE.parent), env.get("PYTHONPATH", "")])
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def run_case(case: dict[str, Any]) -> dict[str, Any]:
    """Run one case in a fresh interpreter and return its JSON result."""
    if case["kind"] == "resnet50_8p":
        return run_8p(case)
    code = (
        "import json, sys; from fidelity import workloads; "
        "case = json.loads(sys.argv[1]); "
        "print('RESULT ' + json.dumps(getattr(workloads, case['kind'])(case)))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, json.dumps(case)],
        capture_output=True,
        text=True,
        env=_env(),
        check=False,
        cwd=HERE.parent,
    )
    if proc.returncode:
        last = (proc.stderr.strip().splitlines() or ["failed"])[-1]
        if "NpuOutOfMemory" in last:
            return {"value": float("nan"), "oom": last.split(": ", 1)[-1]}
        raise RuntimeError(f"case {case.get('id', case['kind'])} failed: {last}")
    out = proc.stdout
    return json.loads(next(ln for ln in out.splitlines() if ln.startswith("RESULT "))[7:])


def run_8p(case: dict[str, Any]) -> dict[str, Any]:
    """8 DDP ranks under torchrun, then the same model on one rank: the speed-up."""
    ranks = 8
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "rank.py"
        script.write_text(
            "import json, os, sys\n"
            "from fidelity import workloads\n"
            "res = workloads.resnet50_ddp_rank(json.loads(sys.argv[1]))\n"
            "with open(os.path.join(sys.argv[2], f\"rank{res['rank']}.json\"), 'w') as f:\n"
            "    json.dump(res, f)\n",
            encoding="utf-8",
        )
        exe = Path(sys.executable).parent / "torchrun"
        torchrun = [str(exe)] if exe.exists() else [sys.executable, "-m", "torch.distributed.run"]
        cmd = [*torchrun, "--standalone", f"--nproc-per-node={ranks}", str(script)]
        subprocess.run(
            [*cmd, json.dumps(case), tmp],
            env=_env(),
            check=True,
            cwd=HERE.parent,
            capture_output=True,
            text=True,
        )
        per_rank = [json.loads((Path(tmp) / f"rank{r}.json").read_text()) for r in range(ranks)]
    single = run_case({**case, "kind": "resnet50"})
    step_8p = max(r["steps_ns"][-1] for r in per_rank)
    rate_8p = ranks * case["batch"] / (step_8p * 1e-9)
    return {
        "value": rate_8p / single["value"],
        "rate_8p": rate_8p,
        "rate_1p": single["value"],
        "hccl_tasks_per_step": per_rank[0]["hccl_tasks"],
    }


def fmt(x: float) -> str:
    """A figure with about four significant digits."""
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:,.1f}" if abs(x) >= 100 else f"{x:.2f}"


def table(rows: list[tuple[dict[str, Any], dict[str, Any]]]) -> list[str]:
    """Markdown rows: case, preset, anchor, source, simulated, ratio, within +-15 %."""
    lines = [
        "| case | preset | metric | anchor | source | simulated | ratio | within ±15% |",
        "|---|---|---|---:|---|---:|---:|---|",
    ]
    for case, res in rows:
        ratio = res["value"] / case["anchor"]
        ok = abs(ratio - 1) <= TOLERANCE
        verdict = "yes" if ok else f"no: {case.get('why_not', case.get('expect', ''))}"
        lines.append(
            f"| {case['id']} | {case['preset']} | {case['metric']} | {fmt(case['anchor'])} "
            f"| {case['source']} | {fmt(res['value'])} | {ratio:.2f} | {verdict} |"
        )
    return lines


PREAMBLE = (
    "Command: `.venv/bin/python benchmarks/bench_fidelity.py` (anchors and sources: "
    "`benchmarks/fidelity_anchors.toml`). Every case runs in shapes-only mode "
    '(`install(numerics="none", device=preset)`); figures are simulated device time, '
    "deterministic (two runs give this same table). Training throughput is the last of 3 "
    "steps (SGD momentum for ResNet-50, AdamW for BERT-Large, GradScaler with AMP); the graph "
    'row runs the model compiled (`torch.compile(model, backend="npu")`, step 1 compiles).'
)


def _detail(case: dict[str, Any], res: dict[str, Any]) -> str:
    parts = []
    if case.get("mode"):
        parts.append(f"measured in {case['mode']}")
    if case.get("expect"):
        parts.append(case["expect"])
    if "rate_8p" in res:
        parts.append(
            f"simulated {fmt(res['rate_8p'])} img/s on 8 ranks vs {fmt(res['rate_1p'])} on 1; "
            f"HCCL tasks per step on rank 0: {res['hccl_tasks_per_step']} (DDP's single first "
            "bucket, then its rebuilt 25 MB buckets)"
        )
    if "busbw" in res:
        parts.append(f"simulated busbw {fmt(res['busbw'])} GB/s ({res['algorithm']})")
    return "; ".join(parts)


def sweep() -> tuple[list[str], list[dict[str, Any]]]:
    """ResNet-50 on the 910A over batch sizes, fp32 and AMP: throughput and peak memory."""
    lines = [
        "| batch | fp32 img/s | AMP img/s | fp32 peak GiB | AMP peak GiB | AMP / fp32 memory |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    points = []
    for bs in SWEEP:
        res = {
            amp: run_case({"kind": "resnet50", "preset": "ascend910a", "batch": bs, "amp": amp})
            for amp in (False, True)
        }
        f32, amp = res[False], res[True]
        points.append({"batch": bs, "fp32": f32, "amp": amp})

        def rate(r: dict[str, Any]) -> str:
            return "OOM" if "oom" in r else fmt(r["value"])

        def gib(r: dict[str, Any]) -> str:
            return "OOM (> 30 GiB usable)" if "oom" in r else f"{r['peak_bytes'] / 2**30:.2f}"

        share = (
            "-" if "oom" in f32 or "oom" in amp else f"{amp['peak_bytes'] / f32['peak_bytes']:.2f}"
        )
        lines.append(f"| {bs} | {rate(f32)} | {rate(amp)} | {gib(f32)} | {gib(amp)} | {share} |")
    return lines, points


def _old_section() -> list[str]:
    """The lines of the fidelity section RESULTS.md has now (empty if none)."""
    text = RESULTS.read_text(encoding="utf-8")
    if BEGIN not in text:
        return []
    return text.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n").splitlines()


def _kept(old: list[str], case_id: str) -> tuple[str | None, list[str]]:
    """The table row and detail lines ``old`` holds for ``case_id``."""
    row = next((ln for ln in old if ln.startswith(f"| {case_id} |")), None)
    return row, [ln for ln in old if ln.startswith(f"- {case_id}: ")]


def _sweep_section(old: list[str]) -> list[str]:
    """The batch-sweep subsection of ``old`` (its heading to the end)."""
    for i, ln in enumerate(old):
        if ln.startswith("### ResNet-50 batch sweep"):
            return [*old[i:], ""] if old[-1] else old[i:]
    return []


def section(
    results: dict[str, tuple[dict[str, Any], dict[str, Any]]],
    sweep_lines: list[str] | None,
    old: list[str],
) -> list[str]:
    """The fidelity section: every case of the anchor file in file order, from ``results``
    when it ran now, else its row and details kept from ``old`` (a ``--only`` run updates its
    cases and keeps the rest); the sweep from ``sweep_lines`` or kept from ``old``."""
    head = table([])
    rows, notes = [], []
    for case in load_cases():
        if case["id"] in results:
            c, res = results[case["id"]]
            rows += table([(c, res)])[len(head) :]
            detail = _detail(c, res)
            notes += [f"- {c['id']}: {detail}"] if detail else []
        else:
            row, kept = _kept(old, case["id"])
            rows += [row] if row else []
            notes += kept
    lines = ["## Fidelity against published Ascend results", "", PREAMBLE, "", *head, *rows, ""]
    lines += ["Details:", "", *notes, ""]
    if sweep_lines is not None:
        lines += ["### ResNet-50 batch sweep (ascend910a, shapes only)", "", *sweep_lines, ""]
    else:
        lines += _sweep_section(old)
    return lines


def write_results(lines: list[str]) -> None:
    """Replace the fidelity section of RESULTS.md (appended the first time)."""
    text = RESULTS.read_text(encoding="utf-8")
    block = "\n".join([BEGIN, *lines, END])
    if BEGIN in text:
        head, rest = text.split(BEGIN, 1)
        text = head + block + rest.split(END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    RESULTS.write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--only", nargs="*", help="case ids to run (default: all); the others keep their rows"
    )
    parser.add_argument("--no-sweep", action="store_true", help="skip the batch sweep")
    parser.add_argument("--sweep", action="store_true", help="run the batch sweep with --only")
    parser.add_argument("--no-write", action="store_true", help="print, do not write RESULTS.md")
    args = parser.parse_args(argv)
    cases = [c for c in load_cases() if not args.only or c["id"] in args.only]
    results = {}
    for case in cases:
        res = run_case(case)
        results[case["id"]] = (case, res)
        keep = ("wall_s", "rate_8p", "rate_1p", "busbw", "hccl_tasks_per_step")
        extra = {k: v for k, v in res.items() if k in keep}
        print(f"{case['id']}: {res['value']:.4g} (anchor {case['anchor']}) {extra}", flush=True)
    run_sweep = args.sweep or (not args.no_sweep and not args.only)
    sweep_lines = sweep()[0] if run_sweep else None
    lines = section(results, sweep_lines, _old_section())
    print("\n".join(lines))
    if not args.no_write:
        write_results(lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
