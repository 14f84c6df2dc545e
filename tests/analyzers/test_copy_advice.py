"""exposed_copies: the advice follows each exposed copy's kind (pageable host copies are told
to pin, pinned ones to prefetch, device-to-device ones never to pin)."""

from __future__ import annotations

import pytest
from analyze_helpers import Builder

from msprof_py.analyzers import context, engine
from msprof_py.analyzers.findings import FIRED
from msprof_py.analyzers.rules_compute import RuleContext

STEP = 100_000


def exposed(copy_kind: str, pinned: bool):
    b = Builder().step(0, 0, STEP)
    b.task(
        0, 30_000, kind="memcpy", task_type="DMA", copy_kind=copy_kind, bytes=3 << 20,
        pinned=pinned, op_type="MEMCPY",
    )  # fmt: skip
    b.op("aten::mm", 30_000, 31_000, [dict(start=30_000, end=STEP, task_type="AI_CORE")])
    data = context.prepare(b.build(), 0, warmup=0)
    f = engine.run_rule("exposed_copies", RuleContext(data, {0: data}))
    assert f.status == FIRED, f.message
    return f


def test_pageable_host_copy_is_told_to_pin() -> None:
    f = exposed("HOST_TO_DEVICE", pinned=False)
    assert "pin_memory=True" in f.advice
    assert "1 of them from pageable memory" in f.message and "(pageable)" in f.message


def test_pinned_host_copy_is_not_told_to_pin() -> None:
    f = exposed("HOST_TO_DEVICE", pinned=True)
    assert "already pinned" in f.advice and "pin_memory" not in f.advice
    assert "pageable" not in f.message  # no "0 pageable copies" as evidence
    assert "prefetch" in f.advice


@pytest.mark.parametrize("pinned", [False, True])
def test_device_copy_is_never_told_to_pin(pinned: bool) -> None:
    f = exposed("DEVICE_TO_DEVICE", pinned=pinned)
    assert "pin" not in f.advice.lower()
    assert "pageable" not in f.message and "pinned" not in f.message
    assert "D2D" in f.message and "device-to-device" in f.advice
    assert f.evidence["by_kind"] == [
        {"direction": "D2D", "pinned": False, "count": 1, "exposed_us_per_step": 30.0}
    ]
