"""Run the whole OpInfo database on npu vs CPU and write a conformance summary.

    python -m tests.conformance.report [--ops abs,add] [--output opinfo_report]
        [--case-timeout 120] [--max-samples N]

The ops run in a worker process that appends one JSON line per case to ``results.jsonl``; if
the worker dies (a crash in a kernel, say), the op it was running is recorded as an error and a
new worker carries on with the next op. A case that runs longer than ``--case-timeout`` seconds
is an error too; ``--resume`` keeps the results of an earlier run (and only runs what is
missing), so it also re-summarizes a finished run against the current list of known
differences. At the end ``summary.md`` (counts per verdict, pass rate, a table of the
mismatches and errors with their reasons) and ``results.json`` are written to ``--output``.

The pass rate is passed / (passed + mismatches + errors): skipped cases (a dtype CPU does not
support, no autograd, a sample that cannot be moved) are left out. Listed known differences
(``known_differences.yaml``) count as what they are, and are marked in the table.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
VERDICTS = ("pass", "mismatch", "error", "skipped")


class CaseTimeout(BaseException):
    """A case ran past its time limit (a BaseException, so no sample loop swallows it)."""


def _alarm(signum: int, frame: Any) -> None:
    raise CaseTimeout


def work(ops: list[str], results: Path, case_timeout: int, max_samples: int | None) -> None:
    """The worker: run ``ops`` (skipping those already in ``results``), appending verdicts."""
    warnings.simplefilter("ignore")
    import torch

    import msprof_py.adapter
    from tests.conformance import opinfo_runner as runner

    msprof_py.adapter.install()
    torch.set_num_threads(1)
    database = runner.op_db()
    done = _finished(results)
    signal.signal(signal.SIGALRM, _alarm)
    with results.open("a", encoding="utf-8") as out:
        for name in ops:
            if name in done:
                continue
            out.write(json.dumps({"start": name}) + "\n")
            out.flush()
            info = database.get(name)
            if info is None:
                record = {"op": name, "dtype": "*", "direction": "*", "status": "error"}
                record.update(detail="no OpInfo of that name", samples=0, known="")
                out.write(json.dumps(record) + "\n")
            for dtype, direction in runner.cases(info) if info is not None else ():
                start = time.perf_counter()
                signal.alarm(case_timeout)
                try:
                    verdict = runner.run_case(info, dtype, direction, max_samples)
                except CaseTimeout:
                    verdict = runner.Verdict(
                        name,
                        runner.dtype_name(dtype),
                        direction,
                        "error",
                        f"timed out after {case_timeout} s",
                        known=runner.known_reason(name, runner.dtype_name(dtype), direction),
                    )
                finally:
                    signal.alarm(0)
                record = verdict.as_dict()
                record["seconds"] = round(time.perf_counter() - start, 3)
                out.write(json.dumps(record) + "\n")
                out.flush()
            out.write(json.dumps({"end": name}) + "\n")
            out.flush()


def _read(results: Path) -> list[dict[str, Any]]:
    if not results.exists():
        return []
    lines = results.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def _finished(results: Path) -> set[str]:
    return {r["end"] for r in _read(results) if "end" in r}


def run_all(
    ops: list[str], output: Path, case_timeout: int, max_samples: int | None, fresh: bool
) -> list[dict[str, Any]]:
    """Run ``ops`` in worker processes (restarting after a crash); the verdict records."""
    output.mkdir(parents=True, exist_ok=True)
    results = output / "results.jsonl"
    if fresh and results.exists():
        results.unlink()
    ops_file = output / "ops.txt"
    ops_file.write_text("\n".join(ops) + "\n", encoding="utf-8")
    while True:
        done = _finished(results)
        if all(name in done for name in ops):
            break
        command = [sys.executable, "-m", "tests.conformance.report", "--worker"]
        command += ["--ops-file", str(ops_file), "--output", str(output)]
        command += ["--case-timeout", str(case_timeout)]
        if max_samples is not None:
            command += ["--max-samples", str(max_samples)]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        code = subprocess.run(command, cwd=ROOT, env=env, check=False).returncode
        records = _read(results)
        started = [r["start"] for r in records if "start" in r]
        ended = {r["end"] for r in records if "end" in r}
        crashed = [name for name in started if name not in ended]
        if not crashed:
            if code != 0:
                raise SystemExit(f"the conformance worker failed (exit code {code})")
            continue
        with results.open("a", encoding="utf-8") as out:
            for name in dict.fromkeys(crashed):
                seen = {
                    (r.get("dtype"), r.get("direction")) for r in records if r.get("op") == name
                }
                record = {
                    "op": name,
                    "dtype": "*",
                    "direction": "*",
                    "status": "error",
                    "detail": f"the worker process died (exit code {code}) in this op",
                    "samples": 0,
                    "known": "",
                    "after": sorted(str(s) for s in seen),
                }
                out.write(json.dumps(record) + "\n")
                out.write(json.dumps({"end": name}) + "\n")
    return [r for r in _read(results) if "status" in r]


def annotate(records: list[dict[str, Any]]) -> None:
    """Mark each record with the current known_differences.yaml (a --resume re-reads it)."""
    from tests.conformance.opinfo_runner import known_entry

    for record in records:
        entry = known_entry(record["op"], record["dtype"], record["direction"])
        record["known"] = entry.reason if entry is not None else ""
        record["flaky"] = entry.flaky if entry is not None else False


def summarize(records: list[dict[str, Any]], command: str) -> str:
    """The markdown summary of verdict records."""
    counts = Counter(r["status"] for r in records)
    ran = counts["pass"] + counts["mismatch"] + counts["error"]
    rate = counts["pass"] / ran if ran else 0.0
    ops = {r["op"] for r in records}
    failing_ops = {r["op"] for r in records if r["status"] in ("mismatch", "error")}
    known = sum(1 for r in records if r["status"] in ("mismatch", "error") and r["known"])
    lines = [
        "# OpInfo conformance: npu vs CPU",
        "",
        f"Command: `{command}`",
        "",
        f"{len(ops)} ops, {len(records)} cases (op x dtype x forward/backward).",
        "",
        "| verdict | cases |",
        "|---|---:|",
        *(f"| {v} | {counts[v]} |" for v in VERDICTS),
        "",
        f"Pass rate (pass / (pass + mismatch + error)): **{rate:.1%}** ({counts['pass']}/{ran});"
        f" ops with every case passing or skipped: {len(ops) - len(failing_ops)}/{len(ops)}."
        f" Failing cases listed in known_differences.yaml: {known}.",
        "",
        "## Mismatches and errors",
        "",
        "| op | dtype | direction | verdict | detail | known difference |",
        "|---|---|---|---|---|---|",
    ]
    from_list = [r for r in records if r["known"] and not r.get("flaky")]
    passing = sorted({r["op"] for r in from_list if r["status"] == "pass"})
    if passing:
        lines[-4:-4] = [f"Listed differences that passed in this run: {', '.join(passing)}.", ""]
    for r in sorted(records, key=lambda r: (r["op"], r["direction"], r["dtype"])):
        if r["status"] in ("mismatch", "error"):
            detail = r["detail"].replace("|", "\\|")
            reason = r["known"].replace("|", "\\|").replace("\n", " ")
            lines.append(
                f"| {r['op']} | {r['dtype']} | {r['direction']} | {r['status']} | {detail} "
                f"| {reason} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", help="comma-separated OpInfo full names (default: all)")
    parser.add_argument("--output", default="opinfo_report", help="folder for the results")
    parser.add_argument("--case-timeout", type=int, default=120, help="seconds per case")
    parser.add_argument("--max-samples", type=int, default=None, help="samples per case")
    parser.add_argument("--resume", action="store_true", help="keep results of an earlier run")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--ops-file", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    output = Path(args.output)
    if args.worker:
        ops = Path(args.ops_file).read_text(encoding="utf-8").split()
        work(ops, output / "results.jsonl", args.case_timeout, args.max_samples)
        return 0
    if args.ops:
        ops = [name.strip() for name in args.ops.split(",") if name.strip()]
    else:
        from torch.testing._internal.common_methods_invocations import op_db

        ops = [info.full_name for info in op_db]
    start = time.perf_counter()
    records = run_all(ops, output, args.case_timeout, args.max_samples, fresh=not args.resume)
    annotate(records)
    command = "python -m tests.conformance.report " + " ".join(argv or sys.argv[1:])
    summary = summarize(records, command.strip())
    summary += f"\nWall time: {time.perf_counter() - start:.0f} s.\n"
    (output / "summary.md").write_text(summary, encoding="utf-8")
    (output / "results.json").write_text(json.dumps(records, indent=1) + "\n", encoding="utf-8")
    counts = Counter(r["status"] for r in records)
    print(", ".join(f"{v}: {counts[v]}" for v in VERDICTS), f"-> {output / 'summary.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
