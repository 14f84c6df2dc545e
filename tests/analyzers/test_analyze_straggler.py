"""The slow rank's cause, named: the host sync that keeps its device idle (issue 13)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from analyze_helpers import Builder, cluster

from msprof_py.analyzers import analyze, communication, context, engine
from msprof_py.analyzers.findings import FIRED
from msprof_py.analyzers.rules_compute import RuleContext

STEP = 16_000  # ns
STEPS = 4
ITEM = "Tensor.item() (aten::_local_scalar_dense)"


def rank(r: int, item: bool, mm_ns: int = 10_000, wait: int | None = None) -> Builder:
    """One DDP rank: a 10 us matmul, then a 2 us all-reduce (launched 1 us after). With
    ``item`` the rank reads the loss every step: the host blocks until the all-reduce is done
    (13 us into the step) and dispatches the next step at 16 us, so its device idles 4 us
    per step; the other rank queues its next step at once and waits those 4 us inside its
    all-reduce (the notify wait)."""
    b = Builder(rank=r)
    for i in range(STEPS):
        t0 = i * STEP
        b.step(i, t0, t0 + STEP)
        end = t0 + 1_000 + mm_ns
        b.op("aten::mm", t0, t0 + 1_000, [dict(start=t0 + 1_000, end=end,
             op_type="MatMul", task_type="AI_CORE")], step=i, module="DDP/Linear")  # fmt: skip
        w = (0 if item else 4_000) if wait is None else wait
        b.op("c10d::allreduce_", t0 + 1_000, t0 + 2_000, [dict(start=end,
             end=end + 2_000 + w, kind="collective", task_type="HCCL", op_type="allreduce",
             collective="allreduce", world_size=2, notify_wait_ns=w, bytes=4_096)],
             step=i)  # fmt: skip
        if item:
            op = b.op("aten::_local_scalar_dense", t0 + 2_000, t0 + 13_500, step=i)
            b.event("sync", ITEM, t0 + 2_000, t0 + 13_000, parent_id=op, step=i)
    return b


def test_rank_that_calls_item_is_slow_for_that_sync() -> None:
    profile = cluster(rank(0, item=False), rank(1, item=True))
    per_rank = {r: context.prepare(profile, r, warmup=0) for r in profile.ranks}
    slow = communication.slow_rank(communication.ranks(per_rank), per_rank)
    assert slow["slow_rank"] == 1 and slow["cause"] == "idle"
    named = slow["idle_cause"]
    assert named["part"] == "synchronisation"
    assert named["what"] == ".item() (aten::_local_scalar_dense)"
    assert named["per_step"] == pytest.approx(1.0)
    assert named["what_excess_ns"] == pytest.approx(11_000)  # rank 0 never syncs
    f = engine.run_rule("slow_rank", RuleContext(per_rank[0], per_rank))
    assert f.status == FIRED and f.rank == 1
    assert "idle - the host waits in .item() (aten::_local_scalar_dense)" in f.message
    assert f.evidence["idle_cause"]["part"] == "synchronisation"


def test_compute_cause_is_not_renamed() -> None:
    """A rank slow for its compute keeps the plain cause."""
    profile = cluster(rank(0, False, wait=3_000), rank(1, False, mm_ns=13_000, wait=0))
    per_rank = {r: context.prepare(profile, r, warmup=0) for r in profile.ranks}
    slow = communication.slow_rank(communication.ranks(per_rank), per_rank)
    assert slow["cause"] == "compute" and slow["idle_cause"] is None


@pytest.mark.slow
def test_recorded_ddp_rank_that_alone_calls_item(tmp_path: Path) -> None:
    """Two DDP ranks recorded under msprof (about a minute): rank 1 reads the loss every
    step, rank 0 never syncs; rank 1 is the straggler and its cause names the .item()."""
    script = Path(__file__).with_name("ddp_item_rank.py")
    cmd = [sys.executable, "-m", "msprof_py.cli_entry", f"--output={tmp_path}", "--no-report"]
    done = subprocess.run(
        [*cmd, "python", str(script), "6"], cwd=tmp_path, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    a = analyze(next(tmp_path.glob("msprof_*")))
    f = a.finding("slow_rank")
    assert f.status == FIRED and f.rank == 1
    assert "idle - the host waits in .item() (aten::_local_scalar_dense)" in f.message
    named = f.evidence["idle_cause"]
    assert named["per_step"] == pytest.approx(1.0)
    assert named["what_excess_ns"] >= 0.5 * sum(max(0, v) for v in named["excess_ns"].values())
