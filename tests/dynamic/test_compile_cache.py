"""The op compile cache: misses and hits, the host time each mode charges, OP State."""

from __future__ import annotations

import pytest
import torch

from msprof_py.adapter import compile_cache, runtime
from msprof_py.adapter.compile_cache import CompileCache
from msprof_py.device import SimulatedNpu, TaskLog
from msprof_py.device.records import HostKind
from msprof_py.device.spec import CompileSpec, DeviceSpec


def _spans(log: TaskLog, prefix: str) -> list[tuple[str, int]]:
    return [
        (h.name, h.end_ns - h.start_ns)
        for h in log.host
        if h.kind is HostKind.API and h.name.startswith(prefix)
    ]


def _host_cost(npu: SimulatedNpu, fn) -> int:
    """Host time ``fn`` takes on the simulated clock."""
    torch.npu.synchronize()
    start = npu.engine.host_ns
    fn()
    return npu.engine.host_ns - start


def test_presets_carry_the_chip_defaults() -> None:
    assert DeviceSpec.preset("ascend910b").compile.jit_compile is False  # A2: binary kernels
    assert DeviceSpec.preset("ascend910a").compile.jit_compile is True
    assert DeviceSpec.preset("ascend310p").compile.jit_compile is True


def test_a_spec_without_the_section_builds_nothing() -> None:
    raw = dict(DeviceSpec.preset("ascend910b").raw)
    raw.pop("compile")
    assert DeviceSpec.from_mapping(raw).compile == CompileSpec(False, 0, 0)


def test_binary_mode_tiles_each_new_shape_once(
    npu: SimulatedNpu, cache: CompileCache, log: TaskLog
) -> None:
    import torch_npu

    torch_npu.npu.set_compile_mode(jit_compile=False)
    assert torch_npu.npu.is_jit_compile_false()
    a, b = torch.ones(4, 8).npu(), torch.ones(6, 8).npu()
    tiling = npu.spec.compile.tiling_ns
    stage1 = npu.spec.dispatch.stage1_ns
    first = _host_cost(npu, lambda: a + a)
    again = _host_cost(npu, lambda: a + a)
    other = _host_cost(npu, lambda: b + b)
    # task queue on: the host pays stage 1 per launch, and the tiling of a new key
    assert (first, again, other) == (stage1 + tiling, stage1, stage1 + tiling)
    assert _spans(log, "tiling ") == [("tiling Add", tiling)] * 2
    assert _spans(log, "compile ") == []
    stats = cache.stats()
    assert (stats.keys, stats.tilings, stats.compiles) == (2, 2, 0)
    assert stats.tiling_ns == 2 * tiling
    adds = [t for t in log.tasks if t.op_type == "Add"]
    assert len(adds) == 3 and all(t.attrs == {"op_state": "dynamic"} for t in adds)


def test_jit_mode_compiles_each_new_shape_online(
    npu: SimulatedNpu, cache: CompileCache, log: TaskLog
) -> None:
    import torch_npu

    torch_npu.npu.set_compile_mode(jit_compile=True)
    assert not torch_npu.npu.is_jit_compile_false()
    compile_ns = npu.spec.compile.online_compile_ns
    assert compile_ns == 10_000_000  # the preset's [U] 10 ms
    xs = [torch.ones(n, 8).npu() for n in (2, 3, 2, 5, 3)]
    costs = [_host_cost(npu, lambda x=x: x.mul(x)) for x in xs]
    stage1 = npu.spec.dispatch.stage1_ns
    new = stage1 + compile_ns
    assert costs == [new, new, stage1, new, stage1]  # 3 distinct shapes
    assert _spans(log, "compile ") == [("compile Mul", compile_ns)] * 3
    assert cache.stats().compile_ns == 3 * compile_ns
    muls = [t for t in log.tasks if t.op_type == "Mul"]
    assert len(muls) == 5 and all(t.attrs == {"op_state": "static"} for t in muls)


def test_dtype_format_and_attributes_are_part_of_the_key(
    npu: SimulatedNpu, cache: CompileCache
) -> None:
    cache.set_mode(True)
    x = torch.ones(4, 8).npu()
    x.sum(0)
    x.sum(0)  # a hit
    x.sum(1)  # another attribute: another kernel
    x.half().sum(0)  # Cast (new) + the fp16 ReduceSum (new)
    stats = cache.stats()
    assert stats.keys == 4  # sum(0), sum(1), cast, fp16 sum(0)
    assert stats.compiles == 4


def test_attributes_keep_what_selects_a_kernel() -> None:
    t = torch.ones(2)
    got = compile_cache.attributes((t, 1, [0, 1], 0.5, torch.float16, None, [t, t], True, "mean"))
    assert got == (1, (0, 1), torch.float16, None, True, "mean")


def test_a_host_op_kernel_goes_through_the_cache(npu: SimulatedNpu, cache: CompileCache) -> None:
    cache.set_mode(False)
    cell = torch.nn.LSTMCell(4, 8).npu()
    x = torch.ones(3, 4).npu()
    with torch.no_grad():
        cell(x)
        n = cache.stats().tilings
        cell(x)
        assert cache.stats().tilings == n > 0  # same shapes: no new tiling
        cell(torch.ones(2, 4).npu())
    assert cache.stats().tilings > n


@pytest.mark.parametrize("bad", [1, "yes", None])
def test_set_compile_mode_wants_a_bool(npu: SimulatedNpu, bad: object) -> None:
    import torch_npu

    with pytest.raises(TypeError, match="jit_compile must be True or False"):
        torch_npu.npu.set_compile_mode(jit_compile=bad)


def test_the_default_mode_is_the_chips(npu: SimulatedNpu) -> None:
    fresh = CompileCache(npu.spec.compile)
    assert fresh.jit is False and fresh.attrs == {"op_state": "dynamic"}
    assert runtime.state().compiled.spec == npu.spec.compile


def _varied_program() -> None:
    """Ops whose compile keys differ by attributes, wrapped numbers, lists and None."""
    a = torch.randn(5, 6).npu()
    conv = torch.nn.Conv2d(3, 4, 3, padding=1).npu()
    image = torch.randn(2, 3, 6, 6).npu()
    for n in (1, 2, 1, 3, 2):
        a + n, a % 7, a % n, a * 2.5, a.sum(dim=n % 2), a.sum(dim=[0, 1])
        a.add_(a, alpha=n), torch.softmax(a, n % 2), a.clamp(min=n), a.clamp(-1.0, 1.0)
        torch.cat([a, a], dim=n % 2), a.narrow(1, 0, n).contiguous(), a.topk(n)
        conv(image).relu().mean()


def _timeline(log: TaskLog) -> list[tuple]:
    """Tasks and host records with times relative to the first host record."""
    zero = log.host[0].start_ns
    tasks = [
        (t.name, t.op_type, t.attrs, t.start_ns - zero, t.end_ns - zero, t.input_shapes)
        for t in log.tasks
    ]
    host = [(h.kind, h.name, h.start_ns - zero, h.end_ns - zero) for h in log.host]
    return tasks + host


class _AlwaysAsk:
    """A kernel-cost entry that never remembers an attribute tuple: every launch asks the
    compile cache with the full key (the reference behaviour)."""

    def __init__(self, kernels: tuple, present: tuple) -> None:
        self.kernels, self.present, self.fields = kernels, present, None

    epoch = property(lambda self: -1, lambda self, value: None)
    seen = property(lambda self: set(), lambda self, value: None)


@pytest.mark.parametrize("jit", [False, True])
def test_the_fast_compile_key_gives_the_reference_timeline(
    npu: SimulatedNpu, cache: CompileCache, monkeypatch: pytest.MonkeyPatch, jit: bool
) -> None:
    """The backend's per-entry attribute sets and precomputed attribute slots give the same
    tilings and compiles, at the same host times, as the full key ``(costs key,
    attributes(args))`` looked up in the cache on every launch."""
    from msprof_py.adapter import backend

    cache.set_mode(jit)
    checked = []
    real_launch = backend.launch

    def spy(state, plan, inputs, outputs, args):  # type: ignore[no-untyped-def]
        checked.append(
            compile_cache.attributes_at(args, plan.attr_slots) == compile_cache.attributes(args)
        )
        return real_launch(state, plan, inputs, outputs, args)

    runs = []
    for reference in (True, False):
        torch.npu.synchronize()
        cache.clear()  # both runs start from an empty cache (the second with warm cost entries)
        with monkeypatch.context() as m:
            if reference:
                m.setattr(backend, "_KERNEL_CACHE", {})
                m.setattr(backend, "_Planned", _AlwaysAsk)
                m.setattr(
                    backend, "attributes_at", lambda args, slots: compile_cache.attributes(args)
                )
                m.setattr(backend, "launch", spy)
            log = TaskLog()
            npu.subscribe(log)
            try:
                torch.manual_seed(0)
                _varied_program()
                torch.npu.synchronize()
            finally:
                npu.unsubscribe(log)
        runs.append((_timeline(log), cache.stats()))
    assert checked and all(checked)
    (ref, ref_stats), (fast, fast_stats) = runs
    assert fast_stats == ref_stats and fast_stats.keys > 20
    spans = [r for r in fast if r[1].startswith(("tiling ", "compile "))]
    assert len(spans) == (ref_stats.compiles if jit else ref_stats.tilings)
    assert fast == ref
