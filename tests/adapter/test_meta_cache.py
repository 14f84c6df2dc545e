"""Shapes only: meta results kept per (op, argument metadata) (``adapter/meta_cache.py``).

The unit tests call :class:`MetaCache` on meta tensors and compare every result with the meta
kernel's own (sizes, strides, dtype, storage size, identity of returned arguments); the last
test records a shapes-only AMP training program with the cache on and off in two processes and
requires identical device tables.
"""

from __future__ import annotations

import json

import pytest
import torch
from adapter_helpers import run_script

from msprof_py.adapter.meta_cache import MetaCache

aten = torch.ops.aten
META = "meta"


def _meta(*size: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.empty(size, dtype=dtype, device=META)


def _facts(value: object) -> object:
    """What a caller can see of a meta result."""
    if isinstance(value, torch.Tensor):
        return (
            tuple(value.shape),
            value.stride(),
            value.storage_offset(),
            value.dtype,
            value.untyped_storage().nbytes(),
        )
    if isinstance(value, (list, tuple)):
        return [_facts(v) for v in value]
    return value


CASES = [
    ("add", aten.add.Tensor, lambda: (_meta(4, 8), _meta(8)), {}),
    ("add, transposed input", aten.add.Tensor, lambda: (_meta(8, 4).t(), 1.0), {}),
    ("mm", aten.mm.default, lambda: (_meta(3, 5), _meta(5, 7)), {}),
    ("cat", aten.cat.default, lambda: ([_meta(2, 3), _meta(4, 3)], 0), {}),
    ("max.dim", aten.max.dim, lambda: (_meta(6, 9), 1, True), {}),
    ("sort", aten.sort.default, lambda: (_meta(5, 3), -1, False), {}),
    ("to fp16", aten._to_copy.default, lambda: (_meta(4, 4),), {"dtype": torch.float16}),
    ("foreach add", aten._foreach_add.List, lambda: ([_meta(3), _meta(2, 2)],) * 2, {}),
    ("sum dim", aten.sum.dim_IntList, lambda: (_meta(2, 3, 4), [1], False), {}),
]


@pytest.mark.parametrize(("label", "op", "make", "kwargs"), CASES, ids=[c[0] for c in CASES])
def test_a_kept_result_is_the_meta_kernels_result(
    label: str, op: torch._ops.OpOverload, make: object, kwargs: dict
) -> None:
    cache = MetaCache()
    first = cache.call(op, op, make(), kwargs)  # type: ignore[operator]
    again = cache.call(op, op, make(), kwargs)  # type: ignore[operator]
    assert (cache.misses, cache.hits) == (1, 1)
    assert _facts(again) == _facts(first) == _facts(op(*make(), **kwargs))  # type: ignore[operator]


def test_in_place_ops_return_their_argument_itself() -> None:
    cache = MetaCache()
    for _ in range(2):
        x, y = _meta(4, 4), _meta(4)
        assert cache.call(aten.add_.Tensor, aten.add_.Tensor, (x, y), {"alpha": 2}) is x
        xs = [_meta(3), _meta(5)]
        assert (
            cache.call(aten._foreach_mul_.Scalar, aten._foreach_mul_.Scalar, (xs, 0.5), {}) is None
        )
    assert cache.hits == 2


def test_the_key_tells_apart_layouts_dtypes_numbers_and_aliasing() -> None:
    cache = MetaCache()
    add = aten.add.Tensor
    contiguous = cache.call(add, add, (_meta(8, 4), 1.0), {})
    transposed = cache.call(add, add, (_meta(4, 8).t(), 1.0), {})
    assert contiguous.stride() == (4, 1) and transposed.stride() == (1, 8)
    half = cache.call(add, add, (_meta(8, 4, dtype=torch.float16), 1.0), {})
    assert half.dtype == torch.float16
    assert cache.call(aten.max.dim, aten.max.dim, (_meta(6, 9), 1, True), {})[0].shape == (6, 1)
    assert cache.call(aten.max.dim, aten.max.dim, (_meta(6, 9), 1, False), {})[0].shape == (6,)
    x = _meta(4)
    cache.call(aten.add_.Tensor, aten.add_.Tensor, (x, _meta(4)), {})
    before = cache.hits
    cache.call(aten.add_.Tensor, aten.add_.Tensor, (x, x), {})  # the same tensor twice
    assert cache.hits == before and cache.misses == 7


def test_a_resized_out_argument_is_not_kept() -> None:
    """``out=`` of the wrong size is resized by the kernel: every call must run it."""
    cache = MetaCache()
    for _ in range(3):
        out = _meta(0)
        result = cache.call(aten.add.out, aten.add.out, (_meta(2, 3), _meta(3)), {"out": out})
        assert result is out and out.shape == (2, 3)
    assert cache.hits == 0 and cache.misses == 3


def test_a_failing_call_is_never_kept() -> None:
    cache = MetaCache()
    for _ in range(2):
        with pytest.raises(RuntimeError):
            cache.call(aten.mm.default, aten.mm.default, (_meta(3, 5), _meta(4, 7)), {})
    assert len(cache) == 0 and cache.hits == 0


def test_results_sharing_a_storage_or_on_an_argument_are_not_kept() -> None:
    cache = MetaCache()
    x = _meta(4, 4)

    def view_of_arg(t: torch.Tensor) -> torch.Tensor:
        return t[1:]

    def two_views(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        fresh = torch.empty(8, device=META)
        return fresh[:4], fresh[4:]

    for fn in (view_of_arg, two_views):
        cache.call(fn, fn, (x,), {})
        cache.call(fn, fn, (x,), {})
    assert cache.hits == 0


def test_calls_with_a_cpu_tensor_are_not_kept() -> None:
    """A CPU tensor beside meta views (an index, a mask) has values a kernel may read."""
    cache = MetaCache()
    for _ in range(2):
        index = torch.tensor([0, 2])
        result = cache.call(aten.index.Tensor, aten.index.Tensor, (_meta(4, 3), [index]), {})
        assert result.shape == (2, 3)
    assert len(cache) == 0 and cache.hits == 0


def test_the_cache_stays_bounded() -> None:
    cache = MetaCache(limit=4)
    for n in range(1, 11):
        cache.call(aten.add.Tensor, aten.add.Tensor, (_meta(n), 1.0), {})
    assert 1 <= len(cache) <= 4


_TRAIN = """
import json, torch, torch.nn as nn, msprof_py.adapter as ad
from msprof_py.adapter import backend
from msprof_py.device import TaskLog
npu = ad.install(numerics="none")
backend.META_RESULTS.enabled = MODE == "on"
log = TaskLog(); npu.subscribe(log)
torch.manual_seed(0)
model = nn.Sequential(
    nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(),
    nn.Linear(8 * 8 * 8, 32), nn.LayerNorm(32), nn.GELU(), nn.Linear(32, 10),
).to("npu")
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
scaler = torch.amp.GradScaler("npu")
x = torch.zeros(4, 3, 8, 8).to("npu")
y = torch.zeros(4, dtype=torch.long).to("npu")
for _ in range(3):
    opt.zero_grad()
    with torch.autocast("npu", dtype=torch.float16):
        loss = nn.functional.cross_entropy(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
torch.npu.synchronize()
tasks = [(t.name, t.op_type, t.start_ns, t.end_ns, t.input_shapes, t.output_shapes,
          t.output_dtypes) for t in log.tasks]
memory = [(m.time_ns, m.action.value, m.size, m.allocated) for m in log.memory]
shapes = [(tuple(p.shape), p.stride(), str(p.dtype)) for p in model.parameters()]
print(json.dumps({"tasks": tasks, "memory": memory, "shapes": shapes,
                  "hits": backend.META_RESULTS.hits}))
"""


def test_a_shapes_only_amp_training_run_is_the_same_with_and_without_the_cache() -> None:
    runs = {}
    for mode in ("on", "off"):
        result = run_script(f"MODE = {mode!r}\n" + _TRAIN)
        assert result.returncode == 0, result.stderr[-4000:]
        runs[mode] = json.loads(result.stdout.strip().splitlines()[-1])
    on, off = runs["on"], runs["off"]
    assert on["hits"] > 50 and off["hits"] == 0
    assert len(on["tasks"]) > 150
    assert on["tasks"] == off["tasks"]
    assert on["memory"] == off["memory"]
    assert on["shapes"] == off["shapes"]
