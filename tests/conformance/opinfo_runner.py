"""Run PyTorch's own OpInfo database on the npu backend and compare it with CPU, bitwise.

For one OpInfo and one dtype, every sample input runs forward on CPU and on npu (the sample is
moved over with its structure and memory layout: tensors in the input, args, kwargs and nested
lists keep their sizes, strides and storage offsets), and the results are compared bitwise:
same type, dtype, shape and values, NaN at the same positions, for every element of tuple and
list outputs. For ops with ``supports_autograd`` the float32 samples also run backward: the
gradient of the sum of the (differentiable) outputs with respect to every input that requires
grad, through the OpInfo's own ``gradcheck_wrapper`` and ``output_process_fn_grad``. Ops with
an in-place variant (``x.add_``) and with ``out=`` run those too, in their first dtype. After
every call the inputs are compared as well (an op may write them).

Random ops draw from one generator: ``torch.npu.manual_seed`` seeds the CPU default generator
(see ``msprof_py/adapter/npu_module.py``), and the npu backend runs each op's CPU kernel on host
views, so seeding before each side gives both the same numbers.

Each (op, dtype, direction) gets a :class:`Verdict`: ``pass``, ``mismatch`` (with the max abs
difference and the first differing index), ``error`` (one line) or ``skipped`` (with a reason).
Known, reasoned differences live in ``known_differences.yaml`` next to this module.
"""

from __future__ import annotations

import math
import traceback
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import Any

import torch
import yaml

from msprof_py.adapter.tensors import host_view

HERE = Path(__file__).resolve().parent
KNOWN_DIFFERENCES = HERE / "known_differences.yaml"

#: the dtypes checked forward: float32 and the low-precision dtypes autocast produces
FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
#: for ops with none of FLOAT_DTYPES on CPU (bitwise ops, index builders ...): the first of these
FALLBACK_DTYPES = (torch.int64, torch.int32, torch.bool, torch.uint8, torch.complex64)
#: ops whose values are undefined (uninitialised memory): only metadata is compared
UNDEFINED_VALUES = frozenset(
    {"empty", "empty_like", "empty_strided", "empty_permuted", "new_empty", "new_empty_strided"}
)
VERDICTS = ("pass", "mismatch", "error", "skipped")
SEED = 1234
_ERROR_WIDTH = 240


@dataclass(slots=True)
class Verdict:
    """The outcome of one op, dtype and direction over all its sample inputs."""

    op: str
    dtype: str
    direction: str  # "forward", "backward", "inplace" or "out"
    status: str  # one of VERDICTS
    detail: str = ""
    samples: int = 0
    #: the reason from known_differences.yaml when this case is a listed difference
    known: str = ""
    #: the listed difference may also pass
    flaky: bool = False

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)

    @property
    def key(self) -> str:
        """``op/dtype/direction``, the name of this case."""
        return f"{self.op}/{self.dtype}/{self.direction}"


# ---- the database ------------------------------------------------------------------------


@cache
def op_db() -> dict[str, Any]:
    """Every OpInfo of ``common_methods_invocations.op_db`` by its full name."""
    from torch.testing._internal.common_methods_invocations import op_db as database

    return {info.full_name: info for info in database}


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.float32`` -> ``"float32"``."""
    return str(dtype).removeprefix("torch.")


def forward_dtypes(info: Any) -> tuple[torch.dtype, ...]:
    """The dtypes an op is checked forward in (see FLOAT_DTYPES and FALLBACK_DTYPES)."""
    supported = info.supported_dtypes("cpu")
    if any(d in supported for d in FLOAT_DTYPES):
        return FLOAT_DTYPES
    for dtype in FALLBACK_DTYPES:
        if dtype in supported:
            return (dtype,)
    return (torch.float32,)  # reported as skipped


@dataclass(frozen=True, slots=True)
class KnownDifference:
    """One entry of known_differences.yaml."""

    reason: str
    #: the case may also pass (a difference that depends on memory alignment ...)
    flaky: bool = False


@cache
def known_differences() -> dict[str, KnownDifference]:
    """``op/dtype/direction`` -> entry, from known_differences.yaml (``*`` matches any)."""
    data = yaml.safe_load(KNOWN_DIFFERENCES.read_text(encoding="utf-8")) or {}
    table: dict[str, KnownDifference] = {}
    for entry in data.get("differences", []):
        key = f"{entry['op']}/{entry.get('dtype', '*')}/{entry.get('direction', '*')}"
        table[key] = KnownDifference(str(entry["reason"]).strip(), bool(entry.get("flaky")))
    return table


def known_entry(op: str, dtype: str, direction: str) -> KnownDifference | None:
    """The listed difference for this case, or None."""
    table = known_differences()
    for d in (dtype, "*"):
        for k in (direction, "*"):
            entry = table.get(f"{op}/{d}/{k}")
            if entry is not None:
                return entry
    return None


def known_reason(op: str, dtype: str, direction: str) -> str:
    """The listed reason for this case, or ``""``."""
    entry = known_entry(op, dtype, direction)
    return entry.reason if entry is not None else ""


# ---- moving samples ----------------------------------------------------------------------


def tree_map(fn: Callable[[Any], Any], value: Any) -> Any:
    """Apply ``fn`` to every leaf of nested tuples, lists and dicts (keeping their types)."""
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, tuple) and not isinstance(value, torch.Size):
        mapped = [tree_map(fn, v) for v in value]
        return type(value)(*mapped) if hasattr(value, "_fields") else tuple(mapped)
    if isinstance(value, list):
        return [tree_map(fn, v) for v in value]
    if isinstance(value, dict):
        return {k: tree_map(fn, v) for k, v in value.items()}
    return fn(value)


def leaves(value: Any) -> Iterator[Any]:
    """Every leaf of nested tuples, lists and dicts, in order."""
    if isinstance(value, (tuple, list)) and not isinstance(value, torch.Size):
        for v in value:
            yield from leaves(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from leaves(v)
    else:
        yield value


class _HostCopier:
    """CPU copies of the tensors of one sample, with their layout and their relations.

    Each storage is copied whole, once: overlapping (expanded) and offset views keep their
    layout, tensors that share memory still share it. A leaf that is a view of a tensor
    requiring grad (OpInfo makes some) stays such a view of the copied base, so autograd sees
    the same graph. Conjugate and negative bits are kept.
    """

    def __init__(self) -> None:
        self.storages: dict[int, torch.Tensor] = {}
        self.tensors: dict[int, torch.Tensor] = {}

    def tensor(self, t: torch.Tensor) -> torch.Tensor:
        found = self.tensors.get(id(t))
        if found is None:
            found = self.tensors[id(t)] = self._copy(t)
        return found

    def _flat(self, t: torch.Tensor) -> torch.Tensor:
        source = host_view(t) if t.device.type == "npu" else t
        storage = source.untyped_storage()
        key = t.untyped_storage()._cdata
        flat = self.storages.get(key)
        if flat is None or flat.dtype != t.dtype:
            count = storage.nbytes() // t.element_size()
            flat = torch.empty(0, dtype=t.dtype).set_(storage, 0, (count,), (1,)).clone()
            self.storages.setdefault(key, flat)
        return flat

    def _copy(self, t: torch.Tensor) -> torch.Tensor:
        base = t._base
        root = None
        if t.is_leaf and base is not None and base.requires_grad:
            root = self.tensor(base)
            if root.is_complex() and not t.is_complex():  # a .real or .imag view
                root = torch.view_as_real(root)
            if root.dtype != t.dtype:
                root = None
        if root is not None:
            with torch.no_grad():
                copy = root.as_strided(t.size(), t.stride(), t.storage_offset())
        else:
            copy = self._flat(t).as_strided(t.size(), t.stride(), t.storage_offset())
            if t.is_conj():
                copy = copy.conj()
            if t.is_neg():
                copy = copy._neg_view()
        if t.requires_grad and not copy.requires_grad:
            # a view of the copied base stays one; anything else becomes a leaf of its own
            # (detach: sharing the storage, but not a view, so later views are views of it)
            copy = copy.requires_grad_(True) if base is not None else copy.detach().requires_grad_()
        return copy

    def value(self, value: Any) -> Any:
        """The CPU counterpart of one leaf of a sample."""
        if isinstance(value, torch.Tensor):
            if value.layout != torch.strided:
                raise Unsupported(f"{value.layout} input")
            return self.tensor(value)
        if isinstance(value, torch.device) and value.type == "npu":
            return torch.device("cpu")
        if isinstance(value, str) and value.startswith("npu"):
            return "cpu"
        if isinstance(value, torch.Generator):
            raise Unsupported("explicit torch.Generator argument")
        return value


def _is_npu(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return value.device.type == "npu"
    if isinstance(value, torch.device):
        return value.type == "npu"
    return isinstance(value, str) and value.startswith("npu")


def _asks_for_cpu(npu_side: Any) -> bool:
    """True when the npu side of a sample names the CPU device or holds a CPU tensor."""
    for leaf in leaves(npu_side):
        if isinstance(leaf, torch.Tensor) and leaf.device.type == "cpu" and leaf.dim() > 0:
            return True
        if isinstance(leaf, torch.device) and leaf.type == "cpu":
            return True
        if isinstance(leaf, str) and leaf == "cpu":
            return True
    return False


def sample_sides(sample: Any) -> tuple[tuple[Any, tuple, dict], tuple[Any, tuple, dict]]:
    """((input, args, kwargs) on CPU, the same on npu) for a sample made for device npu.

    The CPU side is a copy with the same structure and memory layout: npu tensors become CPU
    tensors, tensors the sample made on CPU on purpose (index lists of ``tensor_split`` ...) are
    copied, ``"npu"`` devices become ``"cpu"``. Raises :class:`Unsupported` for a sample with
    nothing on npu (it would run on CPU twice and test nothing).
    """
    npu = (sample.input, tuple(sample.args), dict(sample.kwargs))
    if not any(_is_npu(leaf) for leaf in leaves(npu)):
        raise Unsupported("nothing on npu (a sample without npu tensors or device)")
    return tree_map(_HostCopier().value, npu), npu


class Unsupported(Exception):
    """The sample cannot be run on npu for a reason outside the backend (skipped)."""


# ---- comparison --------------------------------------------------------------------------

_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(_BITS[t.element_size()])


def differing(expected: torch.Tensor, actual: torch.Tensor) -> torch.Tensor:
    """Bool mask of positions whose values differ (bitwise; NaN equals NaN)."""
    if expected.is_complex():
        e, a = torch.view_as_real(expected), torch.view_as_real(actual)
        return differing(e, a).any(-1)
    if expected.is_floating_point():
        same = (_bits(expected) == _bits(actual)) | (expected.isnan() & actual.isnan())
        return ~same
    return expected != actual


def compare_tensors(
    expected: torch.Tensor, actual: torch.Tensor, where: str, cpu_ok: bool = False
) -> str | None:
    """``None`` when equal, else one line saying how they differ.

    ``actual`` must be on npu unless ``cpu_ok`` (the sample asked for a CPU result).
    """
    if actual.device.type != "npu" and not cpu_ok:
        return f"{where}: on {actual.device}, expected npu"
    if expected.layout != torch.strided or actual.layout != torch.strided:
        if expected.layout != actual.layout:
            return f"{where}: layout {actual.layout}, expected {expected.layout}"
        expected, actual = expected.to_dense(), actual.to_dense()
    actual = actual.detach().cpu()
    expected = expected.detach()
    if actual.dtype != expected.dtype:
        return f"{where}: dtype {dtype_name(actual.dtype)}, expected {dtype_name(expected.dtype)}"
    if actual.shape != expected.shape:
        return f"{where}: shape {tuple(actual.shape)}, expected {tuple(expected.shape)}"
    expected, actual = expected.resolve_conj().resolve_neg(), actual.resolve_conj().resolve_neg()
    if expected.dtype in (torch.complex32,):
        expected, actual = expected.to(torch.complex64), actual.to(torch.complex64)
    if expected.is_quantized:
        expected, actual = expected.int_repr(), actual.int_repr()
    mask = differing(expected, actual)
    if not bool(mask.any()):
        return None
    first = tuple(int(i) for i in mask.nonzero()[0].tolist())
    count = int(mask.sum())
    if expected.dtype == torch.bool:
        diff = 1.0
    else:
        e = expected[mask].to(torch.complex128 if expected.is_complex() else torch.float64)
        a = actual[mask].to(e.dtype)
        gaps = (e - a).abs()
        finite = gaps[~gaps.isnan()]
        diff = float(finite.max()) if finite.numel() else math.nan
    nans = " (NaN positions differ)" if math.isnan(diff) else ""
    return (
        f"{where}: {count}/{mask.numel()} values differ, max abs diff {diff:.3g}{nans}, "
        f"first at {list(first)} (npu {_item(actual, first)}, cpu {_item(expected, first)})"
    )


def _item(t: torch.Tensor, index: tuple[int, ...]) -> Any:
    return t[index].item() if index or t.dim() == 0 else t.item()


def compare(
    expected: Any,
    actual: Any,
    where: str = "out",
    metadata_only: bool = False,
    cpu_ok: bool = False,
) -> str | None:
    """Compare nested results; ``None`` when equal, else one line about the first difference.

    ``metadata_only`` compares tensors' dtype and shape only (ops whose values are undefined);
    ``cpu_ok`` accepts CPU tensors in ``actual`` (the sample asked for CPU results).
    """
    if isinstance(expected, torch.Tensor):
        if not isinstance(actual, torch.Tensor):
            return f"{where}: {type(actual).__name__}, expected a tensor"
        if metadata_only:
            if actual.dtype != expected.dtype or actual.shape != expected.shape:
                got = f"{dtype_name(actual.dtype)}{tuple(actual.shape)}"
                return (
                    f"{where}: {got}, expected {dtype_name(expected.dtype)}{tuple(expected.shape)}"
                )
            return None
        return compare_tensors(expected, actual, where, cpu_ok)
    if isinstance(expected, (tuple, list)) and not isinstance(expected, torch.Size):
        if not isinstance(actual, (tuple, list)) or len(actual) != len(expected):
            return f"{where}: {_describe(actual)}, expected {_describe(expected)}"
        for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
            found = compare(e, a, f"{where}[{i}]", metadata_only, cpu_ok)
            if found:
                return found
        return None
    if isinstance(expected, dict):
        if not isinstance(actual, dict) or set(actual) != set(expected):
            return f"{where}: {_describe(actual)}, expected {_describe(expected)}"
        for k in expected:
            found = compare(expected[k], actual[k], f"{where}[{k!r}]", metadata_only, cpu_ok)
            if found:
                return found
        return None
    if isinstance(expected, (torch.device, str)) and _same_device(expected, actual):
        return None
    if isinstance(expected, float) and isinstance(actual, float) and math.isnan(expected):
        return None if math.isnan(actual) else f"{where}: {actual!r}, expected nan"
    if type(actual) is not type(expected) or actual != expected:
        return f"{where}: {actual!r}, expected {expected!r}"
    return None


def _same_device(expected: Any, actual: Any) -> bool:
    """Equal, or a CPU device (or device string) and its npu counterpart."""
    if type(expected) is not type(actual):
        return False
    return expected == actual or (str(expected) == "cpu" and str(actual).startswith("npu"))


def _describe(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        return f"{type(value).__name__} of {len(value)}"
    return type(value).__name__


def one_line(exc: BaseException) -> str:
    """``Type: first line of the message``, shortened; with the innermost msprof_py frame for
    errors raised in the backend's own Python code (KeyError ...)."""
    text = str(exc).strip().splitlines()
    line = f"{type(exc).__name__}: {text[0] if text else ''}".strip()
    line = line if len(line) <= _ERROR_WIDTH else line[: _ERROR_WIDTH - 3] + "..."
    where = [
        f"{Path(frame.filename).name}:{frame.lineno} in {frame.name}"
        for frame in traceback.extract_tb(exc.__traceback__)
        if "msprof_py" in frame.filename
    ]
    if where and not isinstance(exc, (RuntimeError, NotImplementedError)):
        line += f" (at {where[-1]})"
    return line


# ---- running -----------------------------------------------------------------------------


@dataclass(slots=True)
class _Outcome:
    status: str  # pass / mismatch / error / skipped
    detail: str = ""


def _call(fn: Callable[..., Any], inp: Any, args: tuple, kwargs: dict) -> Any:
    _seed()
    return fn(inp, *args, **kwargs)


def _forward_sample(info: Any, sample: Any, inplace: bool = False) -> _Outcome:
    """One sample forward (or through the op's in-place variant): the results and then the
    inputs (which an op may write) must match."""
    fn = info.inplace_variant if inplace else info.op
    try:
        (cpu_inp, cpu_args, cpu_kwargs), (npu_inp, npu_args, npu_kwargs) = sample_sides(sample)
    except Unsupported as exc:
        return _Outcome("skipped", str(exc))
    if inplace and not isinstance(cpu_inp, torch.Tensor):
        return _Outcome("skipped", "the in-place variant needs a tensor input")
    try:
        expected = _call(fn, cpu_inp, cpu_args, cpu_kwargs)
    except Exception as exc:
        return _both_raise(fn, npu_inp, npu_args, npu_kwargs, exc)
    try:
        actual = _call(fn, npu_inp, npu_args, npu_kwargs)
    except Exception as exc:
        return _Outcome("error", one_line(exc))
    cpu_ok = _asks_for_cpu((npu_inp, npu_args, npu_kwargs))
    metadata_only = info.name in UNDEFINED_VALUES
    found = compare(expected, actual, metadata_only=metadata_only, cpu_ok=cpu_ok) or compare(
        (cpu_inp, cpu_args, cpu_kwargs), (npu_inp, npu_args, npu_kwargs), "inputs", cpu_ok=True
    )
    return _Outcome("mismatch", found) if found else _Outcome("pass")


def _inplace_sample(info: Any, sample: Any) -> _Outcome:
    return _forward_sample(info, sample, inplace=True)


def _empty_like(value: Any, device: str) -> Any:
    """Uninitialised tensors shaped like the tensors in ``value`` (an ``out=`` argument)."""
    if isinstance(value, torch.Tensor):
        return torch.empty(value.shape, dtype=value.dtype, device=device)
    if isinstance(value, (tuple, list)) and all(isinstance(v, torch.Tensor) for v in value):
        return type(value)(_empty_like(v, device) for v in value)
    raise Unsupported("the op's result cannot be an out= argument")


def _out_sample(info: Any, sample: Any) -> _Outcome:
    """One sample with ``out=`` tensors: the returned values and the out tensors must match."""
    try:
        (cpu_inp, cpu_args, cpu_kwargs), (npu_inp, npu_args, npu_kwargs) = sample_sides(sample)
        shape_of = _call(info.op, *sample_on_host(cpu_inp, cpu_args, cpu_kwargs))
        cpu_out, npu_out = _empty_like(shape_of, "cpu"), _empty_like(shape_of, "npu")
    except Unsupported as exc:
        return _Outcome("skipped", str(exc))
    except Exception:
        return _Outcome("skipped", "the sample fails on CPU")
    cpu_kwargs, npu_kwargs = {**cpu_kwargs, "out": cpu_out}, {**npu_kwargs, "out": npu_out}
    try:
        expected = _call(info.op, cpu_inp, cpu_args, cpu_kwargs)
    except Exception as exc:
        return _both_raise(info.op, npu_inp, npu_args, npu_kwargs, exc)
    try:
        actual = _call(info.op, npu_inp, npu_args, npu_kwargs)
    except Exception as exc:
        return _Outcome("error", one_line(exc))
    metadata_only = info.name in UNDEFINED_VALUES
    found = compare(expected, actual, metadata_only=metadata_only) or compare(
        cpu_out, npu_out, "out=", metadata_only=metadata_only
    )
    return _Outcome("mismatch", found) if found else _Outcome("pass")


def sample_on_host(inp: Any, args: tuple, kwargs: dict) -> tuple[Any, tuple, dict]:
    """A copy of a CPU-side sample (for a trial call that must not touch the real one)."""
    return tree_map(_HostCopier().value, (inp, args, kwargs))


def _both_raise(
    fn: Callable[..., Any], inp: Any, args: tuple, kwargs: dict, exc: Exception
) -> _Outcome:
    """CPU raised: npu must raise too (the same exception type)."""
    try:
        _call(fn, inp, args, kwargs)
    except Exception as npu_exc:
        if type(npu_exc) is type(exc) or isinstance(npu_exc, type(exc)):
            return _Outcome("pass")
        return _Outcome("mismatch", f"npu raised {one_line(npu_exc)}; cpu raised {one_line(exc)}")
    return _Outcome("mismatch", f"npu returned; cpu raised {one_line(exc)}")


def _grad_inputs(inp: Any, args: tuple, kwargs: dict) -> list[torch.Tensor]:
    found = []
    for leaf in leaves((inp, args, kwargs)):
        if isinstance(leaf, torch.Tensor) and leaf.requires_grad:
            found.append(leaf)
    return found


def _loss(outputs: Any) -> torch.Tensor | None:
    total = None
    for leaf in leaves(outputs):
        if (
            isinstance(leaf, torch.Tensor)
            and leaf.requires_grad
            and (leaf.is_floating_point() or leaf.is_complex())
        ):
            part = (torch.view_as_real(leaf) if leaf.is_complex() else leaf).sum()
            total = part if total is None else total + part
    return total


def _gradients(info: Any, sample: Any, inp: Any, args: tuple, kwargs: dict) -> Any:
    """The gradients of the sum of the op's outputs w.r.t. its inputs (None if none exist)."""
    wrt = _grad_inputs(inp, args, kwargs)
    if not wrt:
        return None
    _seed()
    out = info.gradcheck_wrapper(info.op, inp, *args, **kwargs)
    out = sample.output_process_fn_grad(out)
    loss = _loss(out)
    if loss is None:
        return None
    return torch.autograd.grad(loss, wrt, allow_unused=True)


def _backward_sample(info: Any, sample: Any) -> _Outcome:
    try:
        (cpu_inp, cpu_args, cpu_kwargs), (npu_inp, npu_args, npu_kwargs) = sample_sides(sample)
    except Unsupported as exc:
        return _Outcome("skipped", str(exc))
    try:
        expected = _gradients(info, sample, cpu_inp, cpu_args, cpu_kwargs)
    except Exception as exc:
        try:
            _gradients(info, sample, npu_inp, npu_args, npu_kwargs)
        except Exception:
            return _Outcome("pass")
        return _Outcome("mismatch", f"npu gave gradients; cpu raised {one_line(exc)}")
    if expected is None:
        return _Outcome("skipped", "no differentiable output")
    try:
        actual = _gradients(info, sample, npu_inp, npu_args, npu_kwargs)
    except Exception as exc:
        return _Outcome("error", one_line(exc))
    found = compare(tuple(expected), tuple(actual) if actual is not None else None, "grad")
    return _Outcome("mismatch", found) if found else _Outcome("pass")


_RUNS = {
    "forward": _forward_sample,
    "backward": _backward_sample,
    "inplace": _inplace_sample,
    "out": _out_sample,
}


def _seed() -> None:
    """Seed the generator npu and CPU share (what ``torch.manual_seed`` does here, 30x cheaper:
    that one also walks every device module)."""
    torch.default_generator.manual_seed(SEED)


def _samples(info: Any, dtype: torch.dtype, requires_grad: bool, tracked: bool) -> Iterable[Any]:
    """The op's samples made on npu. ``tracked``: through ``OpInfo.sample_inputs`` (it seeds
    before each sample and walks the call stack for test names, 50 ms per call under pytest);
    else straight from its ``sample_inputs_func``."""
    _seed()
    if tracked:
        return info.sample_inputs("npu", dtype, requires_grad=requires_grad)
    return info.sample_inputs_func(info, "npu", dtype, requires_grad)


def run_case(
    info: Any,
    dtype: torch.dtype,
    direction: str,
    max_samples: int | None = None,
    tracked: bool = True,
) -> Verdict:
    """Run every sample of ``info`` in ``dtype`` (the first ``max_samples``; ``tracked``: see
    :func:`_samples`) in ``direction`` on npu and CPU."""
    name = info.full_name
    verdict = Verdict(name, dtype_name(dtype), direction, "pass")
    entry = known_entry(name, verdict.dtype, direction)
    if entry is not None:
        verdict.known, verdict.flaky = entry.reason, entry.flaky
    if dtype not in info.supported_dtypes("cpu"):
        return _skip(verdict, f"no CPU support for {verdict.dtype}")
    if direction == "backward":
        if not info.supports_autograd:
            return _skip(verdict, "the op does not support autograd")
        if dtype not in info.supported_backward_dtypes("cpu"):
            return _skip(verdict, f"no CPU backward for {verdict.dtype}")
    if direction == "inplace" and info.inplace_variant is None:
        return _skip(verdict, "the op has no in-place variant")
    if direction == "out" and not info.supports_out:
        return _skip(verdict, "the op has no out= variant")
    run = _RUNS[direction]
    skipped: list[str] = []
    try:
        samples = _samples(info, dtype, direction == "backward", tracked)
        for index, sample in enumerate(samples):
            if max_samples is not None and index >= max_samples:
                break
            outcome = run(info, sample)
            if outcome.status == "skipped":
                skipped.append(outcome.detail)
                continue
            verdict.samples += 1
            if outcome.status != "pass":
                verdict.status = outcome.status
                verdict.detail = f"sample {index}: {outcome.detail}"
                return verdict
    except Exception as exc:  # the sample generator itself failed
        verdict.status = "error"
        verdict.detail = f"sample inputs: {one_line(exc)}"
        return verdict
    if verdict.samples == 0:
        return _skip(verdict, skipped[0] if skipped else "no sample inputs")
    return verdict


def _skip(verdict: Verdict, reason: str) -> Verdict:
    verdict.status = "skipped"
    verdict.detail = reason
    return verdict


def backward_dtype(info: Any) -> torch.dtype:
    """float32, or complex64 for ops differentiable only in complex dtypes (view_as_real)."""
    backward = info.supported_backward_dtypes("cpu") if info.supports_autograd else ()
    if torch.float32 not in backward and torch.complex64 in backward:
        return torch.complex64
    return torch.float32


def cases(info: Any) -> list[tuple[torch.dtype, str]]:
    """The (dtype, direction) cases of one op: forward per dtype, backward in float32, and in
    the first forward dtype the in-place variant (``x.add_``) and ``out=`` where the op has
    them."""
    dtypes = forward_dtypes(info)
    found = [(dtype, "forward") for dtype in dtypes]
    found.append((backward_dtype(info), "backward"))
    if info.inplace_variant is not None:
        found.append((dtypes[0], "inplace"))
    if info.supports_out:
        found.append((dtypes[0], "out"))
    return found


def run_op(info: Any, max_samples: int | None = None, tracked: bool = True) -> list[Verdict]:
    """Every case of one op."""
    return [
        run_case(info, dtype, direction, max_samples, tracked) for dtype, direction in cases(info)
    ]


def unexpected(verdicts: Iterable[Verdict | dict[str, Any]]) -> list[str]:
    """One line per failing case (mismatch or error) that known_differences.yaml does not list."""
    lines = []
    for v in verdicts:
        record = v.as_dict() if isinstance(v, Verdict) else v
        if record["status"] in ("mismatch", "error") and not record["known"]:
            key = f"{record['op']}/{record['dtype']}/{record['direction']}"
            lines.append(f"{key}: {record['status']}: {record['detail']}")
    return lines


def stale(verdicts: Iterable[Verdict | dict[str, Any]]) -> list[str]:
    """Listed differences (not flaky) whose every case now passes or is skipped."""
    outcomes: dict[str, list[str]] = {}
    for v in verdicts:
        record = v.as_dict() if isinstance(v, Verdict) else v
        if record["known"] and not record.get("flaky"):
            key = f"{record['op']}/{record['dtype']}/{record['direction']}"
            outcomes.setdefault(record["known"], []).append(f"{key}={record['status']}")
    return [
        f"{cases}: {reason[:80]}"
        for reason, cases in outcomes.items()
        if not any(c.endswith(("=mismatch", "=error")) for c in cases)
        and any(c.endswith("=pass") for c in cases)
    ]
