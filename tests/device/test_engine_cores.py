"""The compiled scheduling core (``device/native/engine_core.c``) against the Python one.

Both must give the same answer to every question: random pool operations (including times
before a pruned timeline's first segment), and random programs of kernels, copies, memsets,
collectives, events, synchronisations and host time, with and without a listener, on the
default spec and on one whose stream and task queues are tiny (so the host blocks often).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from device_helpers import kernel
from hypothesis import given, settings
from hypothesis import strategies as st
from test_engine_properties import clocks, programs, run

from msprof_py.device import DeviceError, DeviceSpec, native
from msprof_py.device.engine import Engine, PythonEngine
from msprof_py.device.resources import ResourcePool
from msprof_py.device.schedule import PythonCore

COMPILED = native.load()
needs_compiled = pytest.mark.skipif(
    COMPILED is None, reason=f"compiled engine core: {native.status()}"
)

times = st.integers(-50, 2_000)
units = st.integers(-2, 9)
pool_ops = st.lists(
    st.one_of(
        st.tuples(st.just("earliest"), times, units, st.integers(-5, 400)),
        st.tuples(st.just("reserve"), times, times, units),
        st.tuples(st.just("prune"), times),
        st.tuples(st.just("busy"), times),
    ),
    max_size=80,
)


def _apply(pool: object, ops: list[tuple]) -> list:
    answers: list = []
    for op in ops:
        if op[0] == "earliest":
            answers.append(pool.earliest(*op[1:]))  # type: ignore[attr-defined]
        elif op[0] == "reserve":
            answers.append(pool.reserve(*op[1:]))  # type: ignore[attr-defined]
        elif op[0] == "prune":
            pool.prune(op[1])  # type: ignore[attr-defined]
        else:
            answers.append(pool.busy_units(op[1]))  # type: ignore[attr-defined]
        answers.append(len(pool))  # type: ignore[arg-type]
    return answers


@needs_compiled
@settings(max_examples=300, deadline=None)
@given(st.integers(1, 8), pool_ops)
def test_a_compiled_pool_answers_as_the_python_pool(capacity: int, ops: list[tuple]) -> None:
    assert COMPILED is not None
    expected = _apply(ResourcePool("p", capacity), ops)
    assert _apply(COMPILED.Pool("p", capacity), ops) == expected


@needs_compiled
def test_a_compiled_pool_refuses_what_the_python_pool_refuses() -> None:
    assert COMPILED is not None
    with pytest.raises(ValueError, match="needs at least one unit"):
        COMPILED.Pool("aic", 0)
    pool = COMPILED.Pool("aic", 4)
    assert (pool.name, pool.capacity, len(pool)) == ("aic", 4, 1)
    with pytest.raises(OverflowError):
        pool.reserve(0, 2**70, 1)


@pytest.fixture(scope="module")
def tiny_queues(tmp_path_factory: pytest.TempPathFactory) -> DeviceSpec:
    path: Path = tmp_path_factory.mktemp("spec") / "spec.toml"
    path.write_text(
        'base = "ascend910b"\n[limits]\nstream_depth = 3\n[dispatch]\ntask_queue_depth = 2\n'
    )
    return DeviceSpec.load(path)


def _same_run(program: list[tuple], spec: DeviceSpec | None, launch: bool) -> None:
    for subscribe in (True, False):
        python = run(
            program, launch=launch, subscribe=subscribe, spec=spec, engine_type=PythonEngine
        )
        compiled = run(program, launch=launch, subscribe=subscribe, spec=spec, engine_type=Engine)
        assert compiled[1].tasks == python[1].tasks
        assert compiled[1].host == python[1].host
        assert compiled[2] == python[2]
        assert clocks(compiled[0]) == clocks(python[0])
        python_engine, compiled_engine = python[0].engine, compiled[0].engine
        assert compiled_engine._queued_launches == list(python_engine._queued_launches)
        for name, pool in python_engine.pools.items():
            assert len(compiled_engine.pools[name]) == len(pool), name


@needs_compiled
@settings(max_examples=120, deadline=None)
@given(programs, st.booleans())
def test_the_compiled_core_schedules_as_the_python_core(program: list[tuple], launch: bool) -> None:
    assert issubclass(Engine, COMPILED.EngineCore)  # type: ignore[union-attr]
    _same_run(program, None, launch)


@needs_compiled
@settings(max_examples=120, deadline=None)
@given(programs, st.booleans())
def test_the_cores_agree_when_the_host_blocks_on_full_queues(
    tiny_queues: DeviceSpec, program: list[tuple], launch: bool
) -> None:
    _same_run(program, tiny_queues, launch)


def test_the_python_engine_runs_on_the_python_core() -> None:
    engine = PythonEngine(DeviceSpec.load())
    assert isinstance(engine, PythonCore)
    assert type(engine.default_stream).__name__ == "PythonStream"
    assert isinstance(engine.pools["aic"], ResourcePool)


@needs_compiled
def test_a_dead_stream_is_refused_by_both_cores() -> None:
    for engine_type in (PythonEngine, Engine):
        engine = engine_type(DeviceSpec.load())
        stream = engine.create_stream()
        engine.destroy_stream(stream)
        with pytest.raises(DeviceError, match=f"stream {stream.stream_id} does not exist"):
            engine.submit_memset(stream, 64)
        other = engine_type(DeviceSpec.load())
        other.create_stream()  # a live stream with the dead one's id, on another engine
        with pytest.raises(DeviceError, match="does not exist on this device"):
            other.launch_kernel(stream, kernel(10), "k", "K")


@needs_compiled
def test_both_cores_host_clocks_read_the_host_time_now() -> None:
    """``host_clock()`` reads the engine's host time when called, on either core: the compiled
    core's is its ``HostClock`` (which compiled code reads without a call), which takes no
    arguments."""
    clocks = {}
    for engine_type in (PythonEngine, Engine):
        engine = engine_type(DeviceSpec.load())
        clock = engine.host_clock()
        clocks[engine_type] = clock
        before = clock()
        engine.advance_host(1_234)
        assert (before, clock()) == (engine.host_ns - 1_234, engine.host_ns)
    assert type(clocks[Engine]) is COMPILED.HostClock
    assert type(clocks[PythonEngine]) is not COMPILED.HostClock
    with pytest.raises(TypeError, match="takes no arguments"):
        clocks[Engine](1)
    with pytest.raises(TypeError):
        COMPILED.HostClock(object())  # only an engine core has a host clock


def test_without_a_usable_build_the_python_cores_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No build, a stale build and MSPROF_NATIVE=0 each leave the Python cores, with the
    reason; a fresh process then builds its engine and allocator on them."""
    monkeypatch.delenv("MSPROF_NATIVE", raising=False)
    module, reason = native._import(tmp_path)
    assert module is None and reason.startswith("not built")
    native._module_path(tmp_path).write_bytes(b"not a module")
    (tmp_path / native._RECORD).write_text(json.dumps({"digest": "other sources"}))
    module, reason = native._import(tmp_path)
    assert module is None and "stale" in reason
    (tmp_path / native._RECORD).write_text(json.dumps({"digest": native.source_digest()}))
    module, reason = native._import(tmp_path)
    assert module is None and "does not load" in reason
    code = (
        "from msprof_py.device import SimulatedNpu, native;"
        "from msprof_py.device.schedule import PythonCore;"
        "from msprof_py.device.caching_core import PythonAllocatorCore;"
        "npu = SimulatedNpu();"
        "print(isinstance(npu.engine, PythonCore), isinstance(npu.memory, PythonAllocatorCore),"
        " native.status())"
    )
    for env in ({"MSPROF_NATIVE": "0"}, {"MSPROF_NATIVE_DIR": str(tmp_path)}):
        done = subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        assert done.stdout.split()[:3] == ["True", "True", "Python"], done.stdout


def test_a_lazy_build_imports_once_and_says_why() -> None:
    calls: list[int] = []

    def importer() -> tuple[object | None, str]:
        calls.append(1)
        return None, "not built (no module)"

    build = native.LazyBuild(importer)  # type: ignore[arg-type]
    assert build.status() == "Python (not built (no module))"
    assert build.load() is None and len(calls) == 1  # looked up once
    build.disable("self-test failed: strides differ")
    assert build.status() == "Python (self-test failed: strides differ)" and len(calls) == 1
