"""low_utilisation proposes the largest batch that keeps peak memory within 80% of the
device's memory, capped at 256, with the throughput it models (hand-computed figures)."""

from __future__ import annotations

import pytest
from analyze_helpers import Builder

from msprof_py.analyzers import batchtune, context, engine
from msprof_py.analyzers.findings import FIRED, OK
from msprof_py.analyzers.rules_compute import RuleContext
from msprof_py.device.spec import DeviceSpec
from msprof_py.tune.search import Trial, TuneResult

USABLE = DeviceSpec.preset("ascend910b").memory.usable_bytes
GIB = 1024**3
STEP = 100_000


def run(batch: int, busy_ns: int, floor: int, activation: int, tuner=None, **meta):
    b = Builder(**meta).step(0, 0, STEP)
    copy = dict(start=0, end=100, kind="memcpy", copy_kind="HOST_TO_DEVICE", task_type="DMA")
    b.op(
        "aten::copy_",
        0,
        100,
        [copy | {"bytes": batch * 256 * 4}],
        input_shapes=f"{batch},256;{batch},256",
        input_dtypes="float32;float32",
    )
    kernel = dict(start=100, end=100 + busy_ns, task_type="AI_CORE", op_type="MatMul")  # busy
    b.op("aten::mm", 100, 1100, [kernel])
    b.mem(10, floor, floor)
    b.mem(5_000, floor + activation, floor + activation)
    data = context.prepare(b.build(), 0, warmup=0)
    return engine.run_rule("low_utilisation", RuleContext(data, {0: data}, tuner=tuner))


def test_memory_bound_batch() -> None:
    # floor + 3 x activation = 80% of usable memory: batch 32 -> 96
    act = GIB
    f = run(32, 10_000, int(0.8 * USABLE) - 3 * act, act)
    assert f.status == FIRED, f.message
    assert f.evidence["largest_batch_in_memory"] == 96 and f.evidence["best"] == 96
    # device work x3 = 30 us still under the 100 us step: the step stays, 3x the samples
    assert f.evidence["throughput_now"] == pytest.approx(32 / 100e-6)
    assert f.evidence["throughput"] == pytest.approx(96 / 100e-6)
    assert f.estimated_gain_us == pytest.approx(100 - 100 / 3, abs=1e-3)
    assert "Batch 96 is the largest" in f.message and "capped" not in f.message
    assert "to 96" in f.advice


def test_batch_capped_at_256_and_device_filling() -> None:
    # memory allows thousands; the proposal stops at 256 (8x); device work 40 us x 8 = 320 us
    f = run(32, 40_000, GIB, GIB)
    assert f.status == FIRED, f.message
    assert f.evidence["largest_batch_in_memory"] > 256 and f.evidence["best"] == 256
    assert "(capped at 256)" in f.message
    assert f.evidence["step_us"] == pytest.approx(320.0)
    assert f.evidence["throughput"] == pytest.approx(256 / 320e-6)
    assert f.evidence["speedup"] == pytest.approx((256 / 320) / (32 / 100))
    assert f.estimated_gain_us == pytest.approx(100 - 320 / 8)


def test_no_advice_at_the_cap_or_without_room() -> None:
    f = run(256, 10_000, GIB, GIB)
    assert f.status == OK and f.evidence["why"] == "at the cap"
    full = run(32, 10_000, int(0.8 * USABLE) - GIB // 64, GIB)
    assert full.status == OK and full.evidence["why"] == "no larger batch fits in memory"


def test_busy_device_gets_no_batch_advice() -> None:
    assert run(32, 90_000, GIB, GIB).status == OK


COMMAND = {"command": "python train.py --bs 32 --steps 3", "cwd": "/data/run"}


def test_without_the_tuner_the_advice_names_its_exact_command() -> None:
    act = GIB
    f = run(32, 10_000, int(0.8 * USABLE) - 3 * act, act, **COMMAND)
    assert f.status == FIRED and "estimated from the recorded memory" in f.message
    line = (
        "cd /data/run && msprof tune-batch --device=ascend910b --batch-arg=--bs "
        "--min-batch=32 --max-batch=256 --limit=0.8 --granularity=1 "
        "'--application=python train.py --bs 32 --steps 3'"
    )
    assert f"`{line}`" in f.advice and f.evidence["tune_command"] == line
    # no command recorded: the advice shows the form to use
    bare = run(32, 10_000, int(0.8 * USABLE) - 3 * act, act)
    assert "msprof tune-batch --application=" in bare.advice and "records no" in bare.advice


def _fake_tuner(trials: list[Trial], best: int, seen: list):
    def tune(req: batchtune.TuneRequest) -> TuneResult:
        seen.append(req)
        return TuneResult(trials=trials, best=best, limit=req.limit, max_batch=req.max_batch)

    return tune


def test_the_tuner_measures_the_batch() -> None:
    """The tuner's figures replace the estimate: batch 80 is its largest within 80% (the
    memory estimate says 96); throughput 80 / 200 us against 32 / 100 us."""
    act, cap = GIB, 62 * GIB
    trials = [
        Trial(32, 10 * GIB, cap, 100_000),
        Trial(64, 30 * GIB, cap, 160_000),
        Trial(128, error="out of memory"),
        Trial(96, 51 * GIB, cap, 230_000),  # 82% of the device
        Trial(80, 40 * GIB, cap, 200_000),
    ]
    seen: list = []
    f = run(32, 10_000, int(0.8 * USABLE) - 3 * act, act, _fake_tuner(trials, 80, seen), **COMMAND)
    assert f.status == FIRED, f.message
    (req,) = seen
    assert req.application == ("python", "train.py", "--bs", "32", "--steps", "3")
    assert (req.option, req.batch, req.cwd, req.device) == ("--bs", 32, "/data/run", "ascend910b")
    assert f.evidence["best"] == 80 and f.evidence["largest_batch_in_memory"] == 80
    assert "measured by the auto batch tuner: peak 40.00 GiB, 64.5% of the device" in f.message
    assert f.evidence["throughput"] == pytest.approx(80 / 200e-6)
    assert f.evidence["throughput_now"] == pytest.approx(32 / 100e-6)
    assert f.evidence["step_us"] == pytest.approx(200.0)
    # per 32 samples: 100 us now, 200 * 32 / 80 = 80 us at batch 80
    assert f.estimated_gain_us == pytest.approx(20.0)
    assert "to 80" in f.advice and "measured this in 5 shapes-only runs" in f.advice
    assert [r["batch"] for r in f.evidence["tuner"]["trials"]] == [32, 64, 80, 96, 128]


def test_the_tuner_finding_no_room_is_ok() -> None:
    cap = 62 * GIB
    f = run(32, 10_000, GIB, GIB, _fake_tuner([Trial(32, 55 * GIB, cap, 1)], 0, []), **COMMAND)
    assert f.status == OK and "already exceeds 80%" in f.evidence["why"]


def test_tuner_needs_a_rerunnable_command() -> None:
    # an interactive recording (no script): the estimate stands, the tuner is not called
    seen: list = []
    f = run(32, 10_000, int(0.8 * USABLE) - 3 * GIB, GIB, _fake_tuner([], 0, seen), command="-c")
    assert f.status == FIRED and not seen and f.evidence["best"] == 96


@pytest.mark.parametrize(
    ("command", "option"),
    [
        ("python t.py --batch-size 32", "--batch-size"),
        ("python t.py --steps 32 --batch_size=32", "--batch_size"),
        ("python t.py -b 32", "-b"),
        ("python t.py --steps 32", "--batch-size"),  # not a batch option: the default
    ],
)
def test_batch_option(command: str, option: str) -> None:
    argv = batchtune.application({"command": command})
    assert argv is not None and batchtune.batch_option(argv, 32) == option


def test_application_from_meta() -> None:
    assert batchtune.application({"command": "train.py --x 1"}) == (
        "python",
        "train.py",
        "--x",
        "1",
    )
    assert batchtune.application({"command": "python -c 'pass'"}) is None
    assert batchtune.application({}) is None
    spec = {"device": "x", "device_origin": "specs/small.toml"}
    assert batchtune.device_arg(spec, "/r") == "/r/specs/small.toml"
