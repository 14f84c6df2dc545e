"""The compiled per-op path (``msprof_py.adapter.native``): the same values, errors and device
timeline as the Python path, and the Python path wherever the build is missing or stale.

Parity is checked by running each op twice in one process, once with ``state.native`` off
(every op takes the Python path) and once on, from the same device state, and comparing the
results and the tasks and memory events the device recorded."""

from __future__ import annotations

import functools
import gc
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

import msprof_py.adapter
from msprof_py.adapter import backend, native, runtime, tensors
from msprof_py.device import MemoryRecord, NpuOutOfMemoryError, SimulatedNpu, TaskRecord
from msprof_py.device.formats import storage_bytes

HERE = Path(__file__).parent

msprof_py.adapter.install()
needs_native = pytest.mark.skipif(backend.NATIVE is None, reason=native.status())


class _Counting:
    """Stands for the compiled module; ``ran`` and ``launched`` count the calls whose host half
    it ran (from the boxed kernel or from ``run()``) and those it also launched itself (a
    learned launch) since it was made."""

    def __init__(self, module: object) -> None:
        self.module = module
        self._start = module.counts() if module is not None else (0, 0)  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> object:
        return getattr(self.module, name)

    @property
    def ran(self) -> int:
        return self.module.counts()[0] - self._start[0]  # type: ignore[attr-defined]

    @property
    def launched(self) -> int:
        return self.module.counts()[1] - self._start[1]  # type: ignore[attr-defined]


def _device_records(
    fn: Callable[[], object],
    use_native: bool,
    learned: list[int] | None = None,
    direct: bool = True,
) -> tuple[object, list, int]:
    """``fn``'s result (on CPU), the task and memory records it caused, and how many ops the
    compiled path ran (appended to ``learned``: how many of those it also launched).
    ``direct``: the compiled boxed kernel runs plain ops itself (else each op goes through the
    Python fallback, which calls ``run()``)."""
    state = runtime.STATE
    assert state is not None
    records: list = []
    bus = state.npu.bus
    counting = _Counting(backend.NATIVE)
    saved_native, saved_module = state.native, backend.NATIVE
    state.native, backend.NATIVE = use_native, counting
    backend.NATIVE.set_direct(direct)  # type: ignore[union-attr]
    gc.collect()  # an earlier run's garbage (modules hold cycles) freed before, not during
    bus.subscribe(records.append)
    try:
        torch.manual_seed(0)
        result = fn()
        torch.npu.synchronize()
    finally:
        bus.unsubscribe(records.append)
        state.native, backend.NATIVE = saved_native, saved_module
        saved_module.set_direct(True)  # type: ignore[union-attr]
    kept = [_comparable(r) for r in records if isinstance(r, (TaskRecord, MemoryRecord))]
    if learned is not None:
        learned.append(counting.launched)
    return _to_cpu(result), kept, counting.ran


def _comparable(record: object) -> tuple:
    """A record without its ids and absolute times (the two runs follow one another)."""
    if isinstance(record, TaskRecord):
        return (
            "task",
            record.name,
            record.op_type,
            record.task_type,
            record.end_ns - record.start_ns,
            record.input_shapes,
            record.output_shapes,
            record.input_dtypes,
            record.output_dtypes,
            record.input_formats,
            record.output_formats,
        )
    assert isinstance(record, MemoryRecord)
    return ("memory", record.action, record.size, record.allocated, record.tag)


def _to_cpu(value: object) -> object:
    if isinstance(value, torch.Tensor):  # detached: a graph would keep npu tensors alive
        return value.detach().cpu()
    if isinstance(value, (list, tuple)):
        return [_to_cpu(v) for v in value]
    return value


def _same(a: object, b: object) -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor)
        assert (a.dtype, a.shape, a.stride()) == (b.dtype, b.shape, b.stride())
        # bitwise, NaN where NaN
        torch.testing.assert_close(b, a, rtol=0, atol=0, equal_nan=True)
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _same(x, y)
    else:
        assert a == b


def _npu(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(sum(shape) + 7 + seed)
    return torch.randn(*shape, generator=gen).to(dtype).to("npu")


# made per call, never at import: npu tensors a test module holds stay allocated on the
# device for every later test file of the same worker process (and its memory figures)
def _x() -> torch.Tensor:
    return _npu(4, 6, seed=1)


def _y() -> torch.Tensor:
    return _npu(4, 6, seed=2)


def _ints() -> torch.Tensor:
    return torch.arange(24, dtype=torch.int64).reshape(4, 6).to("npu")


def _converted_for_good() -> list[object]:
    """A convolution's NC1HWC0 output added to a plain 4-D tensor: the plain one is converted
    to NC1HWC0 for good (a TransData, the storage tagged and held in its padded size), which a
    learned launch repeats for the next plain tensor."""
    conv = torch.nn.Conv2d(2, 4, 3).to("npu")
    activation = conv(_npu(1, 2, 5, 5))
    plain = _npu(1, 4, 3, 3)
    total = activation + plain
    return [total, plain, tensors.storage_format(plain), tensors.storage_format(total)]


#: (name, program, whether the compiled path must run at least one of its ops)
CASES: list[tuple[str, Callable[[], object], bool]] = [
    ("add", lambda: _x() + _y(), True),
    ("a Python float (wrapped number)", lambda: _x() * 0.5, True),
    ("a Python int on an int tensor", lambda: _ints() % 7 + 3, True),
    ("a Python bool", lambda: _ints() + True, True),
    ("the same tensor twice", lambda: (lambda t: torch.add(t, t))(_x()), True),
    ("a 0-dim CPU tensor beside npu tensors", lambda: _x() * torch.tensor(3.0), True),
    ("non-contiguous and offset views", lambda: _x().t()[1:, :3] + _y().t()[:5, 1:], True),
    ("a tensor list (cat, stack)", lambda: torch.cat([_x(), _y(), _x()], dim=1).sum(0), True),
    ("several outputs (max.dim, sort)", lambda: [*torch.max(_x(), 1), *torch.sort(_y(), 0)], True),
    ("a list of outputs (foreach)", lambda: torch._foreach_mul([_x(), _y()], 2.0), True),
    ("a dtype argument", lambda: torch.sum(_ints(), 1, dtype=torch.float16), True),
    ("a random op (dropout)", lambda: torch.nn.functional.dropout(_x(), 0.5, True), True),
    (
        "matmul, softmax, layer norm",
        lambda: torch.nn.functional.layer_norm(_x() @ _y().t(), (4,)),
        True,
    ),
    ("empty tensors", lambda: _npu(0, 3) * 2, True),
    ("float16", lambda: _npu(3, 5, dtype=torch.float16) * _npu(3, 5, dtype=torch.float16), True),
    ("complex", lambda: torch.view_as_complex(_npu(4, 2)) * 2, True),
    ("in place", lambda: _npu(4, 6).add_(_y(), alpha=2).mul_(_x()).relu_(), True),
    ("in place on itself", lambda: (lambda t: t.add_(t))(_npu(3)), True),
    ("in place on a view", lambda: (lambda t: (t[1:].mul_(3), t)[1])(_npu(4, 2)), True),
    ("out= of the right size", lambda: torch.add(_x(), _y(), out=_npu(4, 6)), True),
    ("out= resized", lambda: torch.mul(_x(), 2, out=_npu(0)), True),
    (
        "out= of several outputs",
        lambda: torch.max(_x(), 1, out=(_npu(4), _ints()[:, 0].clone())),
        True,
    ),
    (
        "foreach in place",
        lambda: (lambda ts: (torch._foreach_add_(ts, [_x(), _y()]), ts)[1])(
            [_npu(4, 6), _npu(4, 6)]
        ),
        True,
    ),
    (
        # more npu arguments than the compiled path searches in order: it indexes them
        "foreach over many tensors, each met twice",
        lambda: (lambda ts: torch._foreach_mul(ts, ts[::-1]))([_npu(3, seed=i) for i in range(40)]),
        True,
    ),
    ("a plain input converted for good", _converted_for_good, True),
    ("random in place", lambda: _npu(5, 5).uniform_().bernoulli_(0.3), True),
    ("resize_", lambda: _npu(2).resize_(3, 4).fill_(1.5), True),
]


#: cases whose ops the compiled path runs but never launches itself, and why
NOT_LEARNED = {
    "out= resized": "the kernel resized its out= argument: Python follows the host view",
}


@needs_native
@pytest.mark.parametrize("direct", [True, False], ids=["boxed kernel", "through run()"])
@pytest.mark.parametrize(("name", "program", "compiled"), CASES, ids=[c[0] for c in CASES])
def test_same_values_and_device_records_on_both_paths(
    name: str, program: Callable[[], object], compiled: bool, direct: bool
) -> None:
    """Each program gives bitwise the same values and the same tasks (name, type, duration,
    shapes, dtypes, formats) and memory events on the compiled path as on the Python path
    (after a first run that brings the caching allocator to the same state for both), whether
    the compiled boxed kernel runs the plain ops itself or hands them to the Python fallback,
    which asks ``run()``."""
    _device_records(program, use_native=False)
    python_value, python_records, python_ran = _device_records(program, use_native=False)
    # twice: the first run teaches the compiled path the launches the second one does itself
    # (runs of earlier tests may have taught it some already)
    launched: list[int] = []
    for _ in range(2):
        native_value, native_records, native_ran = _device_records(program, True, launched, direct)
        assert python_ran == 0
        assert native_ran > 0 if compiled else native_ran == 0
        _same(python_value, native_value)
        assert native_records == python_records
        assert any(r[0] == "task" for r in native_records)
    assert launched[1] > 0 if compiled and name not in NOT_LEARNED else launched[1] == 0


@needs_native
def test_backward_and_an_optimizer_step_agree() -> None:
    """A forward, backward and AdamW step: same gradients, parameters and device records."""

    def train() -> list[torch.Tensor]:
        model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.GELU(), torch.nn.Linear(8, 2))
        model.to("npu")
        opt = torch.optim.AdamW(model.parameters(), lr=0.1)
        for _ in range(2):
            model(_x()).square().mean().backward()
            opt.step()
            opt.zero_grad()
        return [p.detach() for p in model.parameters()]

    python_value, python_records, _ = _device_records(train, use_native=False)
    native_value, native_records, ran = _device_records(train, use_native=True)
    assert ran > 20
    _same(python_value, native_value)
    assert native_records == python_records


def _error(fn: Callable[[], object], use_native: bool) -> str:
    state = runtime.STATE
    assert state is not None
    saved = state.native
    state.native = use_native
    try:
        with pytest.raises(RuntimeError) as caught:
            fn()
    finally:
        state.native = saved
    return str(caught.value)


@needs_native
@pytest.mark.parametrize(
    "program",
    [
        lambda: _x() @ _npu(5, 2),  # the CPU kernel refuses the shapes
        lambda: _x() + torch.ones(4, 6),  # a CPU tensor with dimensions beside an npu one
        lambda: _npu(4, 6).add_(_npu(3)),  # an in-place op that cannot broadcast
        lambda: _npu(4, 6).mul_(torch.ones(4, 6)),  # writes an npu tensor from a CPU one
    ],
    ids=["kernel error", "device mismatch", "in-place kernel error", "in-place mismatch"],
)
def test_errors_read_the_same_on_both_paths(program: Callable[[], object]) -> None:
    """An op the CPU kernel refuses, and mixed devices, raise the same error either way."""
    assert _error(program, True) == _error(program, False)


def _formats_program() -> list[torch.Tensor]:
    """A convolution (its weight converted to FRACTAL_Z, its output made in NC1HWC0), then
    elementwise ops, a reduction and an in-place op on those tensors."""
    conv = torch.nn.Conv2d(2, 4, 3).to("npu")
    out = conv(_npu(1, 2, 5, 5))
    weight = conv.weight.detach()
    shifted = out.relu() + 1
    shifted.mul_(0.5)
    return [shifted, weight * 2, weight.sum(), out.mean(), (weight * 3).sum(dim=(1, 2, 3))]


@needs_native
def test_private_formats_agree_on_both_paths() -> None:
    """Tensors held in private formats go through the compiled path too: the same TransData
    tasks, output formats, device memory and values as on the Python path."""
    from msprof_py.adapter.tensors import storage_format

    _device_records(_formats_program, use_native=False)
    python_value, python_records, _ = _device_records(_formats_program, use_native=False)
    native_value, native_records, ran = _device_records(_formats_program, use_native=True)
    assert ran >= 6
    _same(python_value, native_value)
    assert native_records == python_records
    assert any(r[0] == "task" and r[2] == "TransData" for r in native_records)
    assert any(f != "ND" for r in native_records if r[0] == "task" for f in r[-1])
    assert storage_format(_formats_program()[0]) is not None


@needs_native
def test_launches_on_private_formats_are_learned_with_their_formats() -> None:
    """An op on tensors held in a private format, making its outputs in it, is learned like
    any other, the inputs' formats in its key: run again, the compiled path launches it with
    the same tasks, padded device memory and output formats as the Python path. An op that
    reads its inputs through a temporary TransData (a reduction on NC1HWC0) is learned with
    that TransData launched before its own kernel; one that converted a plain input for good
    (a new module's weight to FRACTAL_Z) with that conversion (its key holds the input's format:
    a call that finds it converted is another key)."""
    from msprof_py.adapter.tensors import storage_format

    _device_records(_formats_program, use_native=True)  # seen once: learned
    python_value, python_records, _ = _device_records(_formats_program, use_native=False)
    learned: list[int] = []
    native_value, native_records, ran = _device_records(
        _formats_program, use_native=True, learned=learned
    )
    _same(python_value, native_value)
    assert native_records == python_records
    # learned: relu, + 1 and mul_ on NC1HWC0, weight * 2 and * 3 on FRACTAL_Z, the three
    # reductions, whose inputs are read through a temporary ND copy, and the convolution, whose
    # weight (a new module's) is converted to FRACTAL_Z for good first
    assert (ran, learned[0]) == (9, 9)
    tasks = [r for r in native_records if r[0] == "task"]
    reductions = [i for i, r in enumerate(tasks) if "Reduce" in r[2]]
    assert len(reductions) == 3
    for index in reductions:  # each right after the TransData that feeds it
        assert tasks[index - 1][2] == "TransData"
    shifted = _formats_program()[0]
    assert storage_format(shifted) == ("NC1HWC0", tuple(shifted.shape))


def _conv_program(device: str = "npu") -> list[torch.Tensor]:
    """Forward and backward through convolutions of every kind the CPU runs: with and without
    bias, strided and padded, grouped, dilated, transposed; the first one's input needs no
    gradient (its backward's output mask asks for no input gradient)."""
    torch.manual_seed(3)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3, padding=1, bias=False),
        torch.nn.ReLU(),
        torch.nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2),
        torch.nn.Conv2d(6, 6, 3, padding=2, dilation=2),
        torch.nn.ConvTranspose2d(6, 2, 2, stride=2),
    ).to(device)
    out = model(_npu(2, 3, 6, 6, seed=4).to(device))
    out.square().mean().backward()
    return [out.detach(), *(p.grad for p in model.parameters())]


@needs_native
def test_convolutions_take_the_compiled_path_and_agree() -> None:
    """Convolutions have no CPU kernel of their own (convolution_overrideable): the compiled
    path calls the CPU's aten.convolution and aten.convolution_backward (with the bias sizes
    the backward takes) and learns their launches, private output formats included: the same
    values, gradients, tasks and device memory as the Python path, and as CPU eager."""
    _device_records(_conv_program, use_native=False)
    python_value, python_records, _ = _device_records(_conv_program, use_native=False)
    launched: list[int] = []
    for _ in range(2):  # the first run learns, the second launches without Python
        native_value, native_records, ran = _device_records(_conv_program, True, launched)
        _same(python_value, native_value)
        assert native_records == python_records
        assert ran >= 8  # four forward and four backward convolutions, and the rest
    assert launched[1] > launched[0] >= 0
    conv_tasks = [r for r in native_records if r[0] == "task" and r[2].startswith("Conv")]
    assert len(conv_tasks) >= 8
    for npu_value, cpu_value in zip(native_value, _conv_program("cpu"), strict=True):
        assert torch.equal(npu_value, cpu_value)


@needs_native
def test_a_learned_convolution_follows_allow_internal_format() -> None:
    """A convolution's output format depends on ``torch.npu.config.allow_internal_format``,
    which no launch key holds: changing the setting forgets the learned launches, so a
    convolution learned with private formats makes ND outputs once they are off, and the
    private format again once they are back on."""
    from msprof_py.adapter.tensors import storage_format

    conv = torch.nn.Conv2d(2, 4, 3).to("npu")
    x = _npu(1, 2, 5, 5)

    def output_format() -> object:
        with torch.no_grad():
            out = conv(x)
        return None if storage_format(out) is None else storage_format(out)[0]

    assert torch.npu.config.allow_internal_format
    try:
        for _ in range(3):  # planned, learned, then launched by the compiled path
            assert output_format() == "NC1HWC0"
        torch.npu.config.allow_internal_format = False
        for _ in range(3):
            assert output_format() is None
        torch.npu.config.allow_internal_format = True
        _, python_frames, counted = _watched(output_format)
        assert counted[:2] == (1, 0) and "finish_call" in python_frames  # relearned
        assert output_format() == "NC1HWC0"
    finally:
        torch.npu.config.allow_internal_format = True


@needs_native
def test_a_wrapped_number_is_part_of_a_learned_launchs_key() -> None:
    """``x % 7`` once learned does not stand for ``x % 12345``: the wrapped int is one of the
    op's compile-cache attributes, so the other value is a key of its own (a tiling), as on
    the Python path."""
    state = runtime.STATE
    assert state is not None
    x = _ints()
    for _ in range(3):
        x % 7  # learned after its first run in the compiled kernel
    before = set(state.compiled.keys)
    assert torch.equal((x % 12345).cpu(), x.cpu() % 12345)
    added = set(state.compiled.keys) - before
    assert [key[1] for key in added if key[0][0] == "remainder"] == [(12345,)]


def _watched(fn: Callable[[], object]) -> tuple[object, list[str], tuple[int, ...]]:
    """``fn()``, the functions of ``backend.py`` Python entered while it ran, and what it
    added to each of the compiled module's ``counts()``."""
    frames: list[str] = []

    def profile(frame: object, event: str, arg: object) -> None:
        if event == "call" and frame.f_code.co_filename.endswith("backend.py"):  # type: ignore[attr-defined]
            frames.append(frame.f_code.co_name)  # type: ignore[attr-defined]

    before = backend.NATIVE.counts()  # type: ignore[union-attr]
    sys.setprofile(profile)
    try:
        result = fn()
    finally:
        sys.setprofile(None)
    after = backend.NATIVE.counts()  # type: ignore[union-attr]
    return result, frames, tuple(a - b for a, b in zip(after, before, strict=True))


def _adapter_frames(fn: Callable[[], object]) -> tuple[object, list[str]]:
    """``fn()`` and the functions of msprof_py's Python it entered meanwhile."""
    frames: list[str] = []

    def profile(frame: object, event: str, arg: object) -> None:
        if event == "call" and "msprof_py" in frame.f_code.co_filename:  # type: ignore[attr-defined]
            frames.append(frame.f_code.co_name)  # type: ignore[attr-defined]

    sys.setprofile(profile)
    try:
        result = fn()
    finally:
        sys.setprofile(None)
    return result, frames


@needs_native
def test_npu_storages_show_their_device_memory_as_data_ptr_and_nbytes() -> None:
    """As on torch_npu, an npu tensor's ``data_ptr()`` is the address of its device memory
    (distinct for live storages, a view's offset into its base's) and its storage's
    ``nbytes()`` its bytes, on both paths (libraries tell storages apart by them)."""
    state = runtime.STATE
    assert state is not None
    for use_native in (True, False):
        state.native = use_native
        try:
            x = _npu(4, 6)
            made = [x, x * 2, torch.empty(3, device="npu"), x.t().contiguous()]
        finally:
            state.native = True
        addresses = [t.data_ptr() for t in made]
        assert 0 not in addresses and len(set(addresses)) == len(made)
        held = tensors.memory_of(x)
        assert x.data_ptr() == held.address
        assert x[1].data_ptr() == x.data_ptr() + 6 * x.element_size()
        assert [t.untyped_storage().nbytes() for t in made] == [96, 96, 12, 96]


@needs_native
def test_an_npu_storage_resizes_its_values_and_device_memory() -> None:
    """``untyped_storage().resize_()``, as FSDP frees a parameter's storage and grows it back:
    the first bytes kept as CPU keeps them, the device memory released at 0 bytes and held
    again for the new size, the tensor usable again once refilled."""
    torch.npu.synchronize()
    values = torch.arange(4096, dtype=torch.float32)
    param = values.to("npu")
    storage = param.untyped_storage()
    before = torch.npu.memory_allocated()
    storage.resize_(0)
    assert storage.nbytes() == 0 and tensors.memory_of(param) is None
    assert torch.npu.memory_allocated() < before  # its block went back to the caching allocator
    storage.resize_(4096 * 4)
    assert storage.nbytes() == 4096 * 4 and torch.npu.memory_allocated() == before
    assert param.data_ptr() == tensors.memory_of(param).address
    param.copy_(values.to("npu"))
    assert torch.equal((param * 2).cpu(), values * 2)
    grown = torch.arange(8, dtype=torch.float32).to("npu")
    grown.untyped_storage().resize_(16 * 4)  # grows: the first eight values kept
    assert grown.untyped_storage().nbytes() == 64
    assert torch.equal(grown.cpu(), torch.arange(8, dtype=torch.float32))
    whole = torch.empty(0, device="npu").set_(grown.untyped_storage())
    assert whole.shape == (16,) and torch.equal(whole[:8].cpu(), grown.cpu())


def _accumulating_adds(device: str) -> list[str]:
    """The adds autograd runs where two gradients of ``w`` meet."""
    w = torch.randn(4, 4, requires_grad=True).to(device)
    x = torch.randn(2, 4).to(device)
    loss = (x @ w).sum() + (x @ w).sum()
    with torch.profiler.profile() as prof:
        loss.backward()
    return [e.name for e in prof.events() if e.name in ("aten::add", "aten::add_")]


@needs_native
def test_gradients_that_meet_are_added_in_place_as_on_cpu() -> None:
    """No Python object is made for an npu storage, so autograd adds the gradients that meet
    into the first one in place, as on CPU eager and torch_npu (a storage's Python object
    counts as a holder, and the Python attributes the state used to live in made one for every
    storage: an out-of-place add and a buffer more), on both op paths; the state itself is
    only reachable through the module, never as attributes."""
    assert set(_accumulating_adds("cpu")) == {"aten::add_"}
    state = runtime.STATE
    assert state is not None
    for use_native in (True, False):
        state.native = use_native
        try:
            adds = _accumulating_adds("npu")
            made = _npu(3) * 2
        finally:
            state.native = True
        assert adds and set(adds) == {"aten::add_"}
        storage = made.untyped_storage()
        assert not hasattr(storage, "_npu") and not hasattr(storage, "_npu_mem")
        assert tensors.backing_of(made).nbytes() == 12 and tensors.memory_of(made) is not None


@needs_native
def test_a_plain_input_converted_for_good_is_learned() -> None:
    """An op that runs in any format converts a plain input to its other input's private
    format for good; the learned launch repeats that (task, format tag, padded memory) without
    Python for the next plain tensor, and leaves a non-contiguous one (which Python does not
    convert) to Python."""
    conv = torch.nn.Conv2d(2, 4, 3).to("npu")
    activation = conv(_npu(1, 2, 5, 5)).detach()
    for _ in range(2):  # its plan is made, then its launch learned
        activation + _npu(1, 4, 3, 3)
    plain = _npu(1, 4, 3, 3)
    padded = storage_bytes((1, 4, 3, 3), "float32", "NC1HWC0")
    total, python_frames, counted = _watched(lambda: activation + plain)
    assert python_frames == [] and counted[:2] == (1, 1)
    assert tensors.storage_format(plain) == ("NC1HWC0", (1, 4, 3, 3))
    held = tensors.memory_of(plain)
    assert runtime.state().npu.memory.block_size(held.address) >= padded
    assert torch.equal(total.cpu(), activation.cpu() + plain.cpu())
    strided = _npu(1, 4, 3, 6)[..., ::2]
    _, python_frames, _ = _watched(lambda: activation + strided)
    assert "finish_call" in python_frames and tensors.storage_format(strided) is None


@needs_native
def test_an_output_mask_is_part_of_a_learned_launchs_key() -> None:
    """native_batch_norm_backward's output mask (a list of bools, an attribute) is in the key:
    the same mask again is launched without Python, another mask is finished by Python first,
    and each gives the CPU kernel's gradients."""
    op = torch.ops.aten.native_batch_norm_backward.default
    x, grad = _npu(2, 3, 4, 4, seed=1), _npu(2, 3, 4, 4, seed=2)
    weight, mean, var = _npu(3, seed=3), _npu(3, seed=4), _npu(3, seed=5).abs()
    invstd = (var + 1e-5).rsqrt()

    def call(mask: list[bool]) -> tuple:
        return op(grad, x, weight, mean, var, mean, invstd, True, 1e-5, mask)

    everything, only_input = [True, True, True], [True, False, False]
    call(everything)  # its plan is made, then its launch learned
    call(everything)
    got, python_frames, counted = _watched(lambda: call(everything))
    assert python_frames == [] and counted[:2] == (1, 1)
    expected = op(
        *[
            a.cpu() if isinstance(a, torch.Tensor) else a
            for a in (grad, x, weight, mean, var, mean, invstd, True, 1e-5, everything)
        ]
    )
    for npu_value, cpu_value in zip(got, expected, strict=True):
        assert torch.equal(npu_value.cpu(), cpu_value)
    got, python_frames, _ = _watched(lambda: call(only_input))
    assert "finish_call" in python_frames  # a new key
    assert got[1] is None and got[2] is None
    assert torch.equal(got[0].cpu(), expected[0])


def _views(t: torch.Tensor) -> list[torch.Tensor]:
    return [t.view(-1), t.t(), t[1:, ::2], t.unsqueeze(0), t.expand(2, 4, 6), t.reshape(6, 4)]


@needs_native
def test_views_run_in_the_boxed_kernel_as_in_the_python_fallback() -> None:
    """A view op runs its Meta kernel on the npu tensor in the compiled kernel, with no Python
    frame, and gives what the Python fallback gives: the same sizes, strides and offsets over
    the same storage (writing through the view writes the base); its errors read the same."""
    t = _x()
    _views(t)  # each op's first call makes its plan in Python
    direct, python_frames, counted = _watched(lambda: _views(t))
    assert python_frames == []
    assert counted[2] >= len(direct) and counted[0] == 0  # run in the kernel, no host half
    backend.NATIVE.set_direct(False)  # type: ignore[union-attr]
    try:
        through_python = _views(t)
        python_error = _error(lambda: t.view(5, 5), True)
    finally:
        backend.NATIVE.set_direct(True)  # type: ignore[union-attr]
    for a, b in zip(direct, through_python, strict=True):
        assert (a.device, a.shape, a.stride(), a.storage_offset()) == (
            b.device,
            b.shape,
            b.stride(),
            b.storage_offset(),
        )
        assert a.untyped_storage()._cdata == t.untyped_storage()._cdata
    direct[0].mul_(0)  # through the first view
    assert int(torch.count_nonzero(t.cpu())) == 0
    assert _error(lambda: t.view(5, 5), True) == python_error


def test_plans_decide_which_ops_may_take_the_compiled_path() -> None:
    """Plain ops (fresh outputs, or written in-place and out= arguments) may; views,
    value-reading ops and ops with their own host call never do."""
    aten = torch.ops.aten
    plain = [aten.add.Tensor, aten.mm.default, aten.cat.default, aten.max.dim, aten.add_.Tensor]
    plain += [aten.add.out, aten._foreach_add_.List]
    never = [aten.view.default, aten._local_scalar_dense.default, aten.transpose.int]
    # no CPU kernels of their own: the compiled path calls the CPU's convolutions instead
    convolutions = [aten.convolution_overrideable.default]
    convolutions += [aten.convolution_backward_overrideable.default]
    assert all(backend._plain(backend.plan_of(op)) for op in plain)
    assert not any(backend._plain(backend.plan_of(op)) for op in never)
    if backend.NATIVE is not None:
        assert all(backend.plan_of(op).native >= 0 for op in plain + convolutions)
    assert all(backend.plan_of(op).native == -1 for op in never)


def test_a_missing_stale_or_disabled_build_selects_the_python_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No module, a module built from another source, and MSPROF_NATIVE=0 each leave the
    Python path, with the reason."""
    monkeypatch.delenv("MSPROF_NATIVE", raising=False)
    module, reason = native._import(tmp_path)
    assert module is None and reason.startswith("not built")
    (tmp_path / (native.MODULE_NAME + ".so")).write_bytes(b"not a module")
    (tmp_path / "build.json").write_text(json.dumps({"digest": "another source"}))
    module, reason = native._import(tmp_path)
    assert module is None and "stale" in reason
    (tmp_path / "build.json").write_text(json.dumps({"digest": native.source_digest()}))
    module, reason = native._import(tmp_path)
    assert module is None and "does not load" in reason
    monkeypatch.setenv("MSPROF_NATIVE", "0")
    module, reason = native._import(tmp_path)
    assert module is None and "MSPROF_NATIVE=0" in reason


def _parity_run(out: Path, *args: str, **env: str) -> dict:
    proc = subprocess.run(
        [sys.executable, str(HERE / "native_parity.py"), str(out), *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _accumulations_merged(host_ops: dict[str, int]) -> dict[str, int]:
    """Host-op counts with in-place and out-of-place adds counted together, the Add kernels'
    tiling (once per new shape and op) left out."""
    merged = {k: v for k, v in host_ops.items() if k != "tiling Add"}
    merged["aten::add"] = merged.get("aten::add", 0) + merged.pop("aten::add_", 0)
    return merged


def test_a_recorded_training_program_is_the_same_profile_on_both_paths(tmp_path: Path) -> None:
    """A CNN and transformer layer trained three steps (AMP from the second, GradScaler,
    gradient clipping, AdamW) and recorded: the same losses, parameters and profile tables
    whichever path runs the ops. Without a build (an empty build folder) the Python path runs
    with storages' state as Python objects, which torch counts as holders of the storage:
    autograd adds the gradients that meet out of place there and in place with the build (as
    CPU eager and torch_npu do); the rest is the same."""
    default = _parity_run(tmp_path / "default")
    assert default["profile"]["rows"]["tasks"] > 100
    unbuilt = _parity_run(tmp_path / "unbuilt", MSPROF_NATIVE_DIR=str(tmp_path / "no-build"))
    assert unbuilt["path"].startswith("Python (")  # not built (or MSPROF_NATIVE=0 set here)
    assert (unbuilt["losses"], unbuilt["params"]) == (default["losses"], default["params"])
    assert _accumulations_merged(unbuilt["host_ops"]) == _accumulations_merged(default["host_ops"])
    if backend.NATIVE is None:
        assert default == {**unbuilt, "path": default["path"]}
        return
    assert default["path"].startswith("compiled")
    in_place = default["host_ops"].get("aten::add_", 0) - unbuilt["host_ops"].get("aten::add_", 0)
    rows = unbuilt["profile"]["rows"], default["profile"]["rows"]
    assert in_place > 0 and rows[0]["memory"] > rows[1]["memory"]  # no buffer for the sums
    python = _parity_run(tmp_path / "python", "python")
    assert {k: v for k, v in default.items() if k != "path"} == {
        k: v for k, v in python.items() if k != "path"
    }


@needs_native
def test_a_learned_launch_out_of_device_memory_raises_torchs_error(
    npu: SimulatedNpu, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The compiled path's own launch asks the caching allocator for the output's memory: a
    failure is torch's out-of-memory error, word for word the Python path's, and holds nothing."""
    gc.collect()  # earlier tests' garbage (modules hold cycles) freed now, not during the call
    x = torch.zeros(16 * 2**20, device="npu")  # 64 MiB
    for _ in range(2):  # the second multiplication is launched by the compiled path
        x * 2
    reserved: list[int] = []
    real_reserve = tensors.reserve
    monkeypatch.setattr(tensors, "reserve", lambda n, *a: reserved.append(n) or real_reserve(n, *a))
    torch.npu.empty_cache()
    # the device's memory held but for less than the 64 MiB output, whatever earlier tests
    # left where (a free range may be cut in two by a segment still in use)
    hog: list[object] = []
    size = torch.npu.mem_get_info()[0] - 32 * 2**20
    while size >= 2**20 and torch.npu.mem_get_info()[0] >= 48 * 2**20:
        try:
            hog.append(npu.memory.hold(size, 0, "hog"))
        except NpuOutOfMemoryError:
            size //= 2
    before = torch.npu.memory_allocated()
    errors = []
    try:
        for fast in (True, False):
            backend.NATIVE.set_fast(fast)  # type: ignore[union-attr]
            with pytest.raises(torch.OutOfMemoryError) as info:
                x * 2
            errors.append(str(info.value))
            assert torch.npu.memory_allocated() == before
    finally:
        backend.NATIVE.set_fast(True)  # type: ignore[union-attr]
        del hog
    assert reserved == [64 * 2**20]  # only the Python path's run reserved in Python
    assert errors[0] == errors[1] and "Tried to allocate 64.00 MiB" in errors[0]


_SCHEMA = (
    "convention(Tensor x, int a=1, float b=2.0, *, ScalarType? dtype=None, Layout? layout=None,"
    " MemoryFormat? memory_format=None, int[] dims=[], bool flag=False) -> Tensor"
)
#: calls of the test op: the boxed kernel must hand a Python kernel what torch hands it
_CONVENTION_CALLS: list[tuple[tuple, dict]] = [
    ((), {}),
    ((1,), {}),
    ((5,), {}),
    ((1, 2.0), {}),
    ((1, 3.5), {}),
    ((), {"dtype": torch.float16}),
    ((7,), {"layout": torch.strided, "flag": True}),
    ((), {"memory_format": torch.channels_last}),
    ((), {"dims": [0, 1]}),
    ((2, 2.0), {"dims": [], "flag": False}),
]


@needs_native
def test_the_boxed_kernel_hands_python_kernels_what_torch_hands_them() -> None:
    """The arguments the compiled kernel passes to the Python fallback follow torch's boxed
    convention exactly: trailing positional defaults left out, keyword-only arguments by name
    unless defaulted, dtypes, layouts and memory formats as torch's objects. Checked against
    the (args, kwargs) torch itself hands a Python kernel of an op with every such argument."""
    library = torch.library.Library("msprof_native_test", "DEF")
    library.define(_SCHEMA)
    seen: list[tuple[tuple, dict]] = []

    def kernel(*args: object, **kwargs: object) -> torch.Tensor:
        seen.append((args[1:], kwargs))
        return torch.zeros(1)

    library.impl("convention", kernel, "CPU")
    x = torch.ones(2)
    op = torch.ops.msprof_native_test.convention.default
    for args, kwargs in _CONVENTION_CALLS:
        seen.clear()
        op(x, *args, **kwargs)
        (theirs,) = seen
        ours_args, ours_kwargs = backend.NATIVE.boxed_arguments(  # type: ignore[union-attr]
            "msprof_native_test::convention", "", (x, *args), kwargs
        )
        assert ours_args[0] is x
        assert (tuple(ours_args[1:]), ours_kwargs) == theirs, (args, kwargs)
    library._destroy()


@needs_native
def test_a_plain_op_runs_without_python_once_its_launch_is_learned() -> None:
    """With nothing listening, the compiled kernel runs a plain op's host half itself, and
    once its launch is learned, the launch too: the Python fallback is not called."""
    x = _x()
    x * 3  # seen once by Python (its plan registers it), then learned
    x * 3
    y, python_frames, counted = _watched(lambda: x * 3)
    assert python_frames == []
    assert counted[:2] == (1, 1)
    assert torch.equal(y.cpu(), x.cpu() * 3)
    wider = torch.cat([x, x])
    # new shapes: Python finishes after the compiled host half, and learns
    _, python_frames, _ = _watched(lambda: wider * 3)
    assert "finish_call" in python_frames and "fallback" not in python_frames


@needs_native
def test_a_convolution_without_bias_and_a_reduction_on_nc1hwc0_run_without_python() -> None:
    """A convolution without bias (torch boxes its absent ``Tensor?`` bias as an undefined
    tensor, not None) and a mean over its NC1HWC0 output (read through a temporary ND copy)
    run in the compiled kernel once learned, host half and launch (the TransData included)."""
    conv = torch.nn.Conv2d(2, 4, 3, bias=False).to("npu")
    x = _npu(1, 2, 5, 5)
    with torch.no_grad():
        for _ in range(2):  # seen by Python, then learned
            conv(x).mean()
        out, python_frames, counted = _watched(lambda: conv(x))
        assert python_frames == []
        assert counted[1:3] == (1, 1)  # launched, run directly
        mean, python_frames, counted = _watched(lambda: out.mean())
        assert python_frames == []
        assert counted[1:3] == (1, 1)
    assert torch.allclose(mean.cpu(), torch.conv2d(x.cpu(), conv.weight.cpu()).mean())


def _factories_program() -> list[torch.Tensor]:
    """Factories of every kind the compiled path makes or hands back: default and explicit
    dtypes, zero elements, a 0-d tensor, odd strides, channels-last (Python's), zeros."""
    made = [
        torch.empty(3, 4, device="npu"),
        torch.empty(0, 5, device="npu", dtype=torch.int64),
        torch.empty((), device="npu", dtype=torch.float16),
        torch.empty_strided((2, 3), (1, 2), device="npu"),
        torch.empty_strided((4, 2), (0, 1), device="npu", dtype=torch.bfloat16),
        torch.empty(2, 3, 4, 5, device="npu", memory_format=torch.channels_last),
    ]
    # sizes and strides; not the storages' nbytes: an npu storage's bytes are its host
    # backing's, and the npu storage reports 0, or (the Python path's odd strides) the bytes
    # its strides span
    return [torch.zeros(6, device="npu")] + [torch.tensor([*t.shape, *t.stride()]) for t in made]


@needs_native
def test_factories_are_made_without_python_as_on_the_python_path() -> None:
    """``torch.empty`` and ``torch.empty_strided`` on npu are made by the compiled kernel:
    the same sizes, strides and device-memory records as the Python kernels
    make, with no Python frame; an out-of-memory request fails the same way on both."""
    _device_records(_factories_program, use_native=False)  # the allocator's segments made
    python_value, python_records, _ = _device_records(_factories_program, use_native=False)
    native_value, native_records, _ = _device_records(_factories_program, use_native=True)
    _same(python_value, native_value)
    assert native_records == python_records
    assert [r[4] for r in native_records if r[0] == "memory"][:2] == ["aten::empty"] * 2
    _, adapter_frames = _adapter_frames(
        lambda: (torch.empty_strided((5, 2), (2, 1), device="npu"), torch.empty(7, device="npu"))
    )
    assert adapter_frames == []
    errors = []
    state = runtime.STATE
    assert state is not None
    for use_native in (False, True):
        state.native = use_native
        try:
            with pytest.raises(torch.OutOfMemoryError) as caught:
                torch.empty(2**40, device="npu")
        finally:
            state.native = True
        errors.append(str(caught.value))
    assert errors[0] == errors[1]


def _casts_program() -> list[torch.Tensor]:
    """Casts on the device of every kind: a weight held in FRACTAL_Z and an NC1HWC0 activation
    (their formats kept), plain tensors to narrower, wider and integer dtypes, a 0-d tensor,
    ``.to(device, dtype)``; and those the compiled cast leaves to Python: a strided source, a
    view of an NC1HWC0 storage (read through a TransData), a cast to the host."""
    conv = torch.nn.Conv2d(2, 4, 3).to("npu")
    out = conv(_npu(1, 2, 5, 5))
    weight = conv.weight.detach()
    x = _x()
    return [
        weight.half(),
        weight.half().float(),
        out.half(),
        x.half(),
        x.double(),
        x.to(torch.int32),
        torch.tensor(2.5).to("npu").half(),
        x.to("npu", torch.bfloat16),
        x.t().half(),
        out[:, :2].half(),
        x.to("cpu", torch.float16),
    ]


@needs_native
def test_casts_on_the_device_run_without_python_once_learned() -> None:
    """An npu -> npu cast is run by the compiled kernel once Python has run it once: the same
    values, private formats, tasks (a Cast under aten::copy_) and device-memory records as on
    the Python path, and no Python frame; casts it does not cover agree too (Python's)."""
    from msprof_py.adapter.tensors import storage_format

    _device_records(_casts_program, use_native=False)  # the allocator's segments made
    python_value, python_records, _ = _device_records(_casts_program, use_native=False)
    learned: list[int] = []
    for _ in range(2):  # the first run teaches the casts the second runs itself
        native_value, native_records, _ = _device_records(_casts_program, True, learned)
        _same(python_value, native_value)
        assert native_records == python_records
    assert learned[1] >= 8  # the eight casts it covers (and the convolution)
    assert any(r[0] == "task" and r[2] == "Cast" and r[1] == "aten::copy_" for r in python_records)
    casts = _casts_program()
    assert storage_format(casts[0]) == ("FRACTAL_Z", (4, 2, 3, 3))
    assert storage_format(casts[2]) == ("NC1HWC0", (1, 4, 3, 3))
    weight = torch.nn.Conv2d(2, 4, 3).to("npu").weight.detach()
    torch.conv2d(_npu(1, 2, 5, 5), weight)  # the weight converted to FRACTAL_Z
    weight.half()  # learned (or already known)
    half, adapter_frames = _adapter_frames(weight.half)
    assert adapter_frames == []
    assert isinstance(half, torch.Tensor)
    assert torch.equal(half.cpu(), weight.cpu().half())
    assert storage_format(half) == storage_format(weight)


@needs_native
def test_a_recorded_cast_is_the_same_host_op_on_both_paths(tmp_path: Path) -> None:
    """Recorded, a cast the compiled kernel runs writes the host op the Python path writes:
    ``aten::copy_`` with the source's and result's shapes and dtypes."""
    import msprof_py

    x = _x()
    rows = {}
    for use_native in (False, True):
        state = runtime.STATE
        assert state is not None
        counted = backend.NATIVE.counts()  # type: ignore[union-attr]
        state.native = use_native
        try:
            with msprof_py.record(tmp_path / str(use_native)) as rec:
                for _ in range(2):  # learned in the session's compile cache, then run compiled
                    x.half()
                torch.npu.synchronize()
        finally:
            state.native = True
        recorded = backend.NATIVE.counts()[3] - counted[3]  # type: ignore[union-attr]
        assert recorded == (1 if use_native else 0)
        events = rec.load().host_events
        copies = events[events["name"].astype(str).str.contains("copy")]
        rows[use_native] = [
            (r.name, r.input_shapes, r.input_dtypes, r.kind, r.thread, r.step, r.parent_id)
            for r in copies.itertuples()
        ]
    assert rows[True] == rows[False]
    ops = [row[:3] for row in rows[True] if row[3] == "op"]
    assert ops == [("aten::copy_", "4,6;4,6", "float32;float16")] * 2
    assert len(rows[True]) == 4  # and each one's launch


def _copies_program() -> list[torch.Tensor]:
    """Copies between npu tensors by a kernel: a transpose made contiguous, a slice written,
    a copy between dtypes, a broadcast; and those the compiled copy leaves to Python: a plain
    copy (a DMA task) and a copy out of an NC1HWC0 tensor (a TransData first)."""
    x = _x()
    target = _npu(4, 6, seed=3)
    target[:, :2] = x[:, 4:]
    wide = torch.empty(6, 4, device="npu")
    conv_out = torch.nn.functional.conv2d(_npu(1, 2, 5, 5), _npu(4, 2, 3, 3))
    return [
        x.t().contiguous(),
        target,
        torch.empty(4, 6, dtype=torch.float16, device="npu").copy_(x),
        torch.empty(3, 4, 6, device="npu").copy_(x),
        wide.copy_(_y().view(6, 4)),
        torch.empty(1, 4, 3, 3, device="npu").copy_(conv_out),
    ]


@needs_native
def test_copies_between_npu_tensors_run_without_python_once_learned() -> None:
    """``dst.copy_(src)`` between npu tensors by a kernel (ViewCopy, Cast) is run by the
    compiled kernel once Python has run it once: the same values, tasks and memory records as
    on the Python path, and no Python frame."""
    _device_records(_copies_program, use_native=False)
    python_value, python_records, _ = _device_records(_copies_program, use_native=False)
    learned: list[int] = []
    for _ in range(2):
        native_value, native_records, _ = _device_records(_copies_program, True, learned)
        _same(python_value, native_value)
        assert native_records == python_records
    assert learned[1] >= 4
    op_types = {r[2] for r in python_records if r[0] == "task" and r[1] == "aten::copy_"}
    assert {"ViewCopy", "Cast"} <= op_types
    x = _x()
    x.t().contiguous()  # learned (or already known)
    made, adapter_frames = _adapter_frames(lambda: x.t().contiguous())
    assert adapter_frames == []
    assert isinstance(made, torch.Tensor)
    assert torch.equal(made.cpu(), x.cpu().t().contiguous())


@needs_native
def test_a_foreach_ops_scalars_are_in_its_key_only_as_ints() -> None:
    """A foreach op's ``Scalar[]`` (Adam's bias corrections, a new float each step) keeps a
    learned launch when its floats change, as the Python path's compile key leaves floats out;
    a list of ints is an attribute: other ints are a key of their own."""
    state = runtime.STATE
    assert state is not None
    tensors_ = [_npu(4, 6, seed=5), _npu(3, seed=6)]
    for scale in (0.5, 0.25):  # seen by Python, then learned
        torch._foreach_div_(tensors_, [scale, 2 * scale])
    values = [t.cpu() for t in tensors_]
    _, python_frames, counted = _watched(lambda: torch._foreach_div_(tensors_, [0.125, 4.0]))
    assert python_frames == []
    assert counted[1] == 1  # launched by the compiled path
    for got, before, scale in zip(tensors_, values, (0.125, 4.0), strict=True):
        assert torch.equal(got.cpu(), before / scale)
    floats = [_npu(2, 3, seed=7), _npu(5, seed=8)]  # ints beside float tensors: the fast route
    for _ in range(2):
        torch._foreach_add(floats, [1, 2])
    before_keys = set(state.compiled.keys)
    _, python_frames, _ = _watched(lambda: torch._foreach_add(floats, [3, 4]))
    added = set(state.compiled.keys) - before_keys
    assert "finish_call" in python_frames  # other ints: Python finishes and learns
    assert [key[1] for key in added] == [((3, 4),)]


def _views_made_and_kept(fn: Callable[[], object]) -> tuple[object, int, int]:
    """``fn()`` and how many host views the compiled path made for it, and how many it found
    kept from before (``counts()``'s last two)."""
    before = backend.NATIVE.counts()  # type: ignore[union-attr]
    result = fn()
    after = backend.NATIVE.counts()  # type: ignore[union-attr]
    return result, after[4] - before[4], after[5] - before[5]


@needs_native
def test_a_tensors_host_view_is_kept_while_it_still_matches_the_tensor() -> None:
    """An op's result keeps the CPU tensor it was computed as for its host view, and an input
    keeps the host view made for it: the next op on the same tensor makes none. A view of it
    gets its own (the tensor's is kept beside it). Strides changed in place on the kept view
    keep it, the tensor made to match; a change done elsewhere (the Python path) and another
    storage each make a new one; every value, an ``out=`` the kernel grows included, stays
    what CPU eager computes."""
    base = torch.randn(4, 6)
    x = base.to("npu")
    y = x * 2  # y's host view: the CPU result itself
    z, made, kept = _views_made_and_kept(lambda: y + y)
    assert (made, kept) == (0, 1)  # y twice in one call: one view
    _, made, kept = _views_made_and_kept(lambda: y * 3)
    assert (made, kept) == (0, 1)
    transposed = y.t()
    w, made, kept = _views_made_and_kept(lambda: transposed * 1)
    assert (made, kept) == (1, 0)
    _, made, kept = _views_made_and_kept(lambda: (transposed - 1, y - 1))
    assert (made, kept) == (0, 2)  # both kept: the tensor's and its transpose's
    assert torch.equal(w.cpu(), (base * 2).t()) and torch.equal(z.cpu(), base * 2 + base * 2)

    # t_ runs on the kept view and the tensor is made to match it: both transposed
    _, made, kept = _views_made_and_kept(y.t_)
    moved, made_after, _ = _views_made_and_kept(lambda: y + 0)
    assert (made, kept, made_after) == (0, 1, 0)
    assert torch.equal(moved.cpu(), (base * 2).t())
    state = runtime.STATE
    assert state is not None
    state.native = False  # the Python path transposes a view of its own: the kept one is stale
    try:
        y.t_()
    finally:
        state.native = True
    back, made, _ = _views_made_and_kept(lambda: y + 0)
    assert made == 1 and torch.equal(back.cpu(), base * 2)

    out = torch.empty(0, device="npu")
    out * 1  # out's view kept, empty
    torch.add(x, 1, out=out)  # the kernel grows the kept view; the tensor is made to match
    grown, made, kept = _views_made_and_kept(lambda: out * 1)
    assert made + kept == 1 and torch.equal(grown.cpu(), base + 1)

    target = torch.zeros(4, 6, device="npu")
    target * 1
    target.set_(x)  # another storage altogether
    pointed, made, _ = _views_made_and_kept(lambda: target * 1)
    assert made == 1 and torch.equal(pointed.cpu(), base)
    x.add_(1)  # written through its kept view: target reads the same bytes
    assert torch.equal(target.cpu(), base + 1) and torch.equal(x.cpu(), base + 1)


def _counted_call(calls: list[int], fn: Callable[[], int]) -> int:
    calls.append(1)
    return fn()


@needs_native
def test_host_op_rows_are_the_same_through_the_sinks_c_calls_and_through_python(
    tmp_path: Path,
) -> None:
    """The compiled path writes a recorded op's host row through the row sink's C calls
    (``row_api``: the sink reads its recorder's host clock and thread itself; an engine's
    ``HostClock`` without a call, another clock by calling it) when the sink has the clock;
    without it every op takes Python's path, the recorder's ``op_begin`` and the sink's
    methods: the same ``host_events`` every way (times counted from each recording's first op,
    autograd sequence numbers from its first)."""
    import msprof_py

    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU()).to("npu")
    x = _x()

    def program() -> None:
        for _ in range(3):
            (model(x) * 2).add_(1).sum().backward()
        torch.npu.synchronize()

    program()  # learned: the recorded runs launch alike
    rows = {}
    for way in ("host clock", "a Python clock", "Python's path"):
        counted = backend.NATIVE.counts()  # type: ignore[union-attr]
        reads: list[int] = []
        with msprof_py.record(tmp_path / way) as rec:
            sink = rec.session.recorder.direct_sink
            assert sink is not None and type(sink.clock).__name__ == "HostClock"
            if way == "a Python clock":
                sink.clock = functools.partial(_counted_call, reads, sink.clock)
            elif way == "Python's path":
                del sink.clock  # the sink's C calls need it: the compiled path records nothing
            program()
        recorded = backend.NATIVE.counts()[3] - counted[3]  # type: ignore[union-attr]
        assert recorded == 0 if way == "Python's path" else recorded >= 15
        # the C calls read the sink's clock twice per op the compiled path recorded
        assert len(reads) == (2 * recorded if way == "a Python clock" else 0)
        events = rec.load().host_events
        ops = events[events["kind"].astype(str) == "op"]
        origin = int(ops["start_ns"].min())
        first = int(ops.loc[ops["sequence"] >= 0, "sequence"].min())
        rows[way] = [
            (r.event_id, r.name, r.start_ns - origin, r.end_ns - origin, r.thread, r.step,
             r.input_shapes, r.input_dtypes, r.module, r.sequence - first if r.sequence >= 0
             else -1, r.module_path, r.stack)
            for r in ops.itertuples()
        ]  # fmt: skip
    assert rows["host clock"] == rows["a Python clock"] == rows["Python's path"]
    assert any(row[8] == "Sequential/Linear" and row[10] == "0" for row in rows["Python's path"])


@needs_native
def test_argument_texts_stay_right_when_many_shapes_share_the_front_cache(tmp_path: Path) -> None:
    """The compiled path keeps each recorded op's shapes and dtypes texts in a 256-slot
    front cache by the arguments' dtypes and sizes: 600 shapes (slots reused, each shape met
    twice, dtypes mixed) give the texts Python's path writes for them."""
    import msprof_py

    shapes = [(n % 7 + 1, n // 7 + 1) for n in range(600)]
    tensors = [
        torch.ones(s, dtype=torch.float32 if i % 3 else torch.float64).to("npu")
        for i, s in enumerate(shapes)
    ]

    def program() -> None:
        for _ in range(2):
            for t in tensors:
                t.add(1)

    program()
    texts = {}
    for way in ("compiled", "Python's path"):
        with msprof_py.record(tmp_path / way) as rec:
            if way == "Python's path":
                del rec.session.recorder.direct_sink.clock  # every op through Python
            program()
        events = rec.load().host_events
        adds = events[
            (events["kind"].astype(str) == "op") & (events["name"].astype(str) == "aten::add")
        ]
        shown = adds["input_shapes"].astype(str), adds["input_dtypes"].astype(str)
        texts[way] = list(zip(*shown, strict=True))
    expected = [
        (f"{a},{b}", "float32" if i % 3 else "float64") for i, (a, b) in enumerate(shapes)
    ] * 2
    assert texts["compiled"] == texts["Python's path"] == expected
