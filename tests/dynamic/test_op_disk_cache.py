"""ACL's on-disk op compile cache: a second run of the same shapes in jit mode compiles
nothing; a new shape still compiles; disable/force and an unnamed folder behave as documented."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from msprof_py.adapter import op_disk_cache, runtime
from msprof_py.adapter.compile_cache import CompileCache
from msprof_py.adapter.op_disk_cache import DiskCache
from msprof_py.device import SimulatedNpu, TaskLog
from msprof_py.device.records import HostKind


def _compiles(log: TaskLog) -> list[str]:
    return [h.name for h in log.host if h.kind is HostKind.API and h.name.startswith("compile ")]


def _run(npu: SimulatedNpu, folder: Path, rows: int) -> tuple[CompileCache, list[str], int]:
    """One "process": a fresh cache on ``folder`` in jit mode, ``x + x`` on a (rows, 8)
    tensor; the cache, its compile spans and the host time of the add."""
    state = runtime.state()
    saved = state.compiled
    state.compiled = cache = CompileCache(npu.spec.compile, DiskCache(folder, npu.spec.soc_version))
    cache.set_mode(True)
    log = TaskLog()
    x = torch.ones(rows, 8).npu()
    torch.npu.synchronize()
    npu.subscribe(log)
    try:
        start = npu.engine.host_ns
        x + x
        cost = npu.engine.host_ns - start
    finally:
        npu.unsubscribe(log)
        state.compiled = saved
    return cache, _compiles(log), cost


def test_a_second_run_of_the_same_shapes_skips_the_online_compile(
    npu: SimulatedNpu, tmp_path: Path
) -> None:
    compile_ns = npu.spec.compile.online_compile_ns
    first, spans, cost_first = _run(npu, tmp_path, 4)
    assert spans == ["compile Add"] and first.stats().compiles == 1
    path = tmp_path / "msprof_op_cache" / f"{npu.spec.soc_version}.keys"
    assert path.read_text().count("\n") == first.disk.writes >= 1
    second, spans, cost_second = _run(npu, tmp_path, 4)
    assert spans == [] and second.stats().compiles == 0 and second.stats().disk_hits == 1
    assert cost_first - cost_second == compile_ns  # the online compile is all that differs
    third, spans, _ = _run(npu, tmp_path, 5)  # a new shape compiles, and joins the cache
    assert spans == ["compile Add"] and third.stats().disk_hits == 0


def test_binary_kernels_never_touch_the_disk(npu: SimulatedNpu, tmp_path: Path) -> None:
    cache = CompileCache(npu.spec.compile, DiskCache(tmp_path, "chip"))
    cache.set_mode(False)
    cache.miss(npu.engine, ("Add", (4,)), ["Add"])
    assert cache.stats().tilings == 1 and not (tmp_path / "msprof_op_cache").exists()


def test_modes_and_folders_from_the_environment(tmp_path: Path) -> None:
    key = ("Add", ((4, 8), "torch.float32", "ND"))
    assert op_disk_cache.from_env("chip", {}) is None  # no folder named: no disk cache
    named = {"ACL_OP_COMPILER_CACHE_DIR": str(tmp_path)}
    assert (
        op_disk_cache.from_env("chip", {**named, "ACL_OP_COMPILER_CACHE_MODE": "disable"}) is None
    )
    cache = op_disk_cache.from_env("chip", named)
    assert cache is not None and not cache.lookup(key)
    cache.store(key)
    again = op_disk_cache.from_env("chip", {"ASCEND_CACHE_PATH": str(tmp_path)})
    assert again is not None and again.lookup(key) and again.hits == 1
    forced = op_disk_cache.from_env("chip", {**named, "ACL_OP_COMPILER_CACHE_MODE": "force"})
    assert forced is not None and not forced.lookup(key) and not forced.path.exists()
    with pytest.warns(UserWarning, match="not one of enable, disable, force"):
        assert op_disk_cache.from_env("chip", {**named, "ACL_OP_COMPILER_CACHE_MODE": "on"}) is None


def test_set_option_names_the_cache_over_the_environment(npu: SimulatedNpu, tmp_path: Path) -> None:
    import torch_npu

    state = runtime.state()
    saved = state.compiled.disk
    try:
        torch_npu.npu.set_option({"ACL_OP_COMPILER_CACHE_DIR": str(tmp_path)})
        assert state.compiled.disk is not None
        assert state.compiled.disk.path.parent == tmp_path / "msprof_op_cache"
        torch_npu.npu.set_option({"ACL_OP_COMPILER_CACHE_MODE": "disable"})
        assert state.compiled.disk is None
        torch_npu.npu.set_option({"ACL_PRECISION_MODE": "must_keep_origin_dtype"})  # accepted
        with pytest.raises(TypeError, match="must be a dict"):
            torch_npu.npu.set_option("ACL_OP_COMPILER_CACHE_MODE=enable")
    finally:
        state.compiled.disk = saved
