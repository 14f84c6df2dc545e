"""The Python PrivateUse1 backend: every ATen op on an npu tensor runs here.

One boxed fallback handles all ops: view ops are redispatched to the Meta kernels, which build
the alias on the npu tensor without touching data; every other op runs on the host views of its
npu inputs (real values on CPU, or meta tensors with numerics "none"), its outputs are adopted
as npu tensors, and the kernels it amounts to are launched on the simulated device on the
current stream (after any TransData its formats need). A few ops have explicit kernels:
factories, copies, ``.item()`` and the convolutions (whose CompositeExplicitAutograd defaults
would refuse to run).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from msprof_py.adapter import (
    fast_numerics,
    foreach,
    formats,
    host_fallback,
    l2_reuse,
    native,
    runtime,
    shapes_only,
)
from msprof_py.adapter.compile_cache import attribute_slots, attributes_at
from msprof_py.adapter.errors import NumericsNoneError, unsupported_op
from msprof_py.adapter.meta_cache import MetaCache
from msprof_py.adapter.opcost import PlannedKernel, TensorInfo, dtype_name, op_tasks
from msprof_py.adapter.runtime import AdapterState, CapturedKernel
from msprof_py.adapter.tensors import (
    adopt,
    attach_memory,
    hold_device_bytes,
    host_view,
    is_npu_device,
    resync,
    set_storage_format,
    storage_format,
    use_compiled_state,
)
from msprof_py.device import costmodel
from msprof_py.device.formats import storage_bytes

_META_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.Meta)
_META = torch.device("meta")
#: how torch says an op has no Meta kernel
_NO_META_KERNEL = "no fake impl or Meta kernel"
_HOST_DEVICE = {False: torch.device("cpu"), True: torch.device("meta")}
#: ops that may take CPU index tensors alongside npu tensors, as on CUDA
_CPU_INDEX_OK = frozenset({"index", "index_put", "index_put_", "_index_put_impl_"})
#: ops whose cost depends on their ``groups`` argument (index 8)
_GROUPED = frozenset({"convolution_overrideable", "convolution_backward_overrideable"})
#: the compiled per-op path, or None where only the Python path runs
NATIVE = native.load()
use_compiled_state(NATIVE)
MISMATCH = (
    "Expected all tensors to be on the same device, but found at least two devices, npu:0 and cpu!"
)


@dataclass(slots=True)
class OpPlan:
    """What the fallback needs to know about one op overload, computed once."""

    op: torch._ops.OpOverload
    base: str
    name: str
    view: bool
    #: (positional index, name) of arguments the op writes
    writes: tuple[tuple[int, str], ...]
    #: for each return: the index into ``writes`` it aliases, or None for a fresh tensor
    returns_alias: tuple[int | None, ...]
    returns_value: bool
    #: positions of Tensor arguments (the boxed call hands wrapped numbers over as Python
    #: scalars) the op cannot take a number for
    tensor_args: tuple[int, ...] = ()
    host_call: Callable[..., Any] | None = None
    #: shapes-only replacement for a slow meta kernel (see :mod:`msprof_py.adapter.meta_shapes`)
    meta_call: Callable[..., Any] | None = None
    # what the op's name implies for formats and costs, looked up once instead of per call
    #: the op may take CPU index tensors alongside npu tensors
    cpu_index_ok: bool = False
    #: the op runs in any format (see :func:`formats.is_agnostic`)
    agnostic: bool = False
    #: the op reads FRACTAL_NZ operands directly
    nz_ok: bool = False
    #: input index -> format the (convolution) kernel needs; empty for other ops
    conv_inputs: dict[int, str] = field(default_factory=dict)
    #: formats of a convolution's outputs; empty for other ops
    conv_outputs: Sequence[str] = ()
    #: the op's ``groups`` argument (index 8) enters its cost
    has_groups: bool = False
    #: a multi-tensor (``_foreach_*``) op: formats per list index, one kernel per chunk
    foreach: bool = False
    #: no NPU kernel exists: the op runs on the host between copies (:mod:`host_fallback`)
    host_only: bool = False
    #: with numerics "fast", computed widened to float32 (:mod:`fast_numerics`)
    widened: bool = False
    #: positions of arguments that may be compile-cache attributes
    #: (:func:`compile_cache.attribute_slots`)
    attr_slots: tuple[int, ...] = ()
    #: the op's id in the compiled per-op path (:mod:`msprof_py.adapter.native`), -1 when it
    #: always takes the Python path
    native: int = -1


_PLANS: dict[torch._ops.OpOverload, OpPlan] = {}


def plan_of(op: torch._ops.OpOverload) -> OpPlan:
    """The cached :class:`OpPlan` of ``op``."""
    plan = _PLANS.get(op)
    if plan is None:
        plan = _PLANS[op] = _make_plan(op)
    return plan


def _make_plan(op: torch._ops.OpOverload) -> OpPlan:
    schema = op._schema
    base = schema.name.split("::", 1)[-1]
    writes = tuple(
        (i, a.name)
        for i, a in enumerate(schema.arguments)
        if a.alias_info is not None and a.alias_info.is_write
    )
    view = any(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns)
    aliases: list[int | None] = []
    for ret in schema.returns:
        found = None
        if ret.alias_info is not None and ret.alias_info.is_write:
            for k, (i, _) in enumerate(writes):
                arg_alias = schema.arguments[i].alias_info
                if arg_alias is not None and arg_alias.before_set == ret.alias_info.before_set:
                    found = k
                    break
        aliases.append(found)
    returns_value = any(
        not isinstance(r.type, (torch.TensorType, torch.ListType, torch.OptionalType))
        for r in schema.returns
    )
    # ops torch lets take numbers for tensors (add, sub, mul, div ...) wrap a Python number
    # themselves, exactly as the caller did; others get it rebuilt as a 0-dim tensor
    wraps_numbers = torch._C._should_allow_numbers_as_tensors(base.split(".", 1)[0])
    tensor_args = tuple(
        i
        for i, a in enumerate(schema.arguments)
        if isinstance(a.type, torch.TensorType) and not wraps_numbers
    )
    host_only = host_fallback.is_host_only(schema.name)
    plan = OpPlan(
        op,
        base,
        schema.name if host_only else f"aten::{base}",
        view,
        writes,
        tuple(aliases),
        returns_value,
        tensor_args,
        cpu_index_ok=base in _CPU_INDEX_OK,
        agnostic=formats.is_agnostic(base),
        nz_ok=base in formats.NZ_MATMULS,
        conv_inputs=formats.conv_input_formats(base, len(schema.arguments)),
        conv_outputs=formats.conv_output_formats(base),
        has_groups=base in _GROUPED,
        foreach=foreach.is_foreach(base),
        host_only=host_only,
        widened=fast_numerics.upcasts(base, bool(writes)),
        attr_slots=attribute_slots(schema),
    )
    if NATIVE is not None and _plain(plan):
        plan.native = NATIVE.register_op(
            schema.name,
            schema.overload_name,
            wraps_numbers,
            [i for i, _ in writes],
            [-1 if alias is None else writes[alias][0] for alias in aliases],
            list(plan.attr_slots),
            plan.name,
        )
        if plan.native >= 0 and plan.widened:
            NATIVE.set_widened(plan.native)  # numerics "fast": computed widened there too
    elif NATIVE is not None and view:
        NATIVE.register_view(schema.name, schema.overload_name, plan.name)
    return plan


def check_native() -> None:
    """Self-test the compiled per-op path once the npu device is registered; on a mismatch
    every op takes the Python path (``msprof_py.adapter.native.status()`` says why)."""
    global NATIVE
    if NATIVE is not None:
        problem = native.self_test(NATIVE)
        if problem is not None:
            native.disable(f"self-test failed: {problem}")
            NATIVE = None
            use_compiled_state(None)


def _plain(plan: OpPlan) -> bool:
    """The op may take the compiled path: it computes fresh tensors, or writes its in-place or
    out= arguments, by its own CPU kernel, with nothing the Python path adds but format
    conversions and output formats (no view, host-only run, value synced back, replaced host
    call). A ``meta_call`` does not matter: shapes only never takes the compiled path."""
    return not (plan.view or plan.returns_value or plan.host_only or plan.host_call is not None)


def replace_host_call(
    op: torch._ops.OpOverload,
    call: Callable[..., Any],
    native_host: tuple[str, str, bool] | None = None,
) -> None:
    """Run ``call`` instead of ``op``'s CPU kernel on the host views. With ``native_host``
    (name, overload, bias_sizes) the compiled path calls that CPU op the same way (see
    ``set_host_op`` in ``hot_path.cpp``); without, the op always takes the Python path."""
    plan = plan_of(op)
    plan.host_call = call
    if plan.native >= 0 and NATIVE is not None:
        if native_host is not None and NATIVE.set_host_op(plan.native, *native_host):
            return
        NATIVE.drop_op(plan.native)  # the compiled kernel no longer runs it either
    plan.native = -1


def forget_learned_launches() -> None:
    """Forget the compiled path's learned launches (a setting they depend on changed:
    ``allow_internal_format`` decides a convolution's output formats)."""
    if NATIVE is not None:
        NATIVE.forget_launches()


# ---- the fallback ------------------------------------------------------------------------


def fallback(op: torch._ops.OpOverload, *args: Any, **kwargs: Any) -> Any:
    """The boxed PrivateUse1 kernel for every op without an explicit one."""
    state = runtime.STATE
    assert state is not None
    plan = _PLANS.get(op) or plan_of(op)
    state.enter(plan.name, args)
    try:
        if plan.view:
            return op.redispatch(_META_KEYS, *args, **kwargs)
        if plan.host_only:
            return host_fallback.run(state, op, plan.name, args, kwargs)
        if plan.native >= 0 and state.native:  # numerics "fast": widened there too
            found = NATIVE.run(plan.native, args, kwargs, state)  # type: ignore[union-attr]
            if found.__class__ is list:  # launched in the compiled path (a learned launch)
                return found[0]
            if found is not None:
                return _finish_native(state, plan, found, args)
        return execute(state, plan, args, kwargs)
    finally:
        state.leave()


def finish_call(op: torch._ops.OpOverload, found: tuple, args: tuple) -> Any:
    """The compiled kernel ran ``op``'s host half for a launch it has not learned yet (see
    ``hot_path.cpp``): what the Python path does after it (``found`` as ``NATIVE.run`` gives
    it; ``args`` in torch's boxed convention)."""
    state = runtime.STATE
    assert state is not None
    plan = _PLANS.get(op) or plan_of(op)
    state.enter(plan.name, args)
    try:
        return _finish_native(state, plan, found, args)
    finally:
        state.leave()


def _finish_native(state: AdapterState, plan: OpPlan, found: tuple, args: tuple) -> Any:
    """What the Python path does after the compiled one ran the op on the host: inputs in
    private formats converted, written tensors the kernel resized following their host views,
    new outputs with device memory (and the format they are made in), then the launch. When
    the compiled path gave a key, it learns this launch: later calls with the same op, shapes,
    dtypes and attribute values do it themselves (see ``hot_path.cpp``)."""
    result, inputs, outputs, fresh, stale, formatted, key = found
    conversions = TRANSDATA_LAUNCHES[0]
    # a private format changes no host value: converting the inputs now (the Python path does
    # it before the host call) launches the same TransData tasks before the op's own
    conv = plan.conv_outputs
    temporaries: list[tuple | None] = []
    ref_format = (
        _prepare_formats(state, plan, args, inputs, temporaries) if formatted or conv else None
    )
    for target, view in stale:
        resync(target, view, state, plan.name)
    for out in fresh:
        attach_memory(out, state, plan.name)
    tags = None
    if ref_format is not None or conv:
        kept = [None if out is None else storage_format(out) for out in outputs]
        _tag_outputs(state, plan, outputs, ref_format)
        if key is not None:
            tags = _learned_tags(plan, outputs, fresh, kept)
            if tags is False:
                key = None
    planned = launch(state, plan, inputs, outputs, args)
    before = _learned_before(temporaries, inputs)
    if TRANSDATA_LAUNCHES[0] != conversions or before is None:
        key = None  # the next call may find its inputs converted: learn that one
    if key is not None and state.capture is None and state.npu.l2 is None:
        kernels = planned.kernels
        fields = planned.fields if kernels else ()  # nothing to record without kernels
        compiled = state.compiled
        NATIVE.learn(  # type: ignore[union-attr]
            key,
            tuple([(k.cost, k.op_type) for k in kernels]),
            fields,
            plan.name,
            compiled,
            compiled.epoch,
            tags,
            before,
        )
    return result


def _learned_before(
    temporaries: list[tuple | None], inputs: Sequence[torch.Tensor]
) -> tuple[tuple, ...] | None:
    """The TransData launches a learned launch does before its outputs' memory, from
    :func:`transdata`'s ``temporaries``, with each tensor converted for good given as its
    position among the call's npu ``inputs``; None when one is not to be learned."""
    before = []
    for entry in temporaries:
        if entry is None:
            return None
        if len(entry) == 6:  # a plain input converted for good: (..., tensor, tag)
            position = next((i for i, t in enumerate(inputs) if t is entry[4]), None)
            if position is None:
                return None
            entry = (*entry[:4], position, entry[5])
        before.append(entry)
    return tuple(before)


def _learned_tags(
    plan: OpPlan,
    outputs: list[torch.Tensor | None],
    fresh: list[torch.Tensor],
    kept: list[tuple[str, tuple[int, ...]] | None],
) -> tuple | bool | None:
    """What a learned launch does after :func:`_tag_outputs` tagged ``outputs`` (``kept``:
    their formats before): for each of ``fresh``, None or (its ``_npu_fmt``, padded bytes,
    memory tag); None when none was tagged; False when a written argument was (the compiled
    launch tags fresh outputs only)."""
    fresh_ids = {id(out) for out in fresh}
    for out, before in zip(outputs, kept, strict=True):
        if out is not None and id(out) not in fresh_ids and storage_format(out) != before:
            return False
    tags = []
    for out in fresh:
        fmt = storage_format(out)
        tags.append(
            None
            if fmt is None
            else (fmt, storage_bytes(fmt[1], dtype_name(out.dtype), fmt[0]), plan.base)
        )
    return tuple(tags) if any(tag is not None for tag in tags) else None


def whole_op_kernel(op: torch._ops.OpOverload) -> Callable[..., Any]:
    """A kernel registered directly for ``op`` (skips torch's empty + ``.out`` decomposition)."""

    def kernel(*args: Any, **kwargs: Any) -> Any:
        return fallback(op, *args, **kwargs)

    return kernel


class _Unwrapped:
    """Host views of an op's npu arguments, and the npu tensors they came from."""

    __slots__ = ("cpu_seen", "meta", "npu", "seen", "views")

    def __init__(self, meta: bool) -> None:
        self.meta = meta
        self.npu: list[torch.Tensor] = []
        self.views: list[torch.Tensor] = []
        #: id of an npu argument -> its host view (the npu tensors stay alive during the call)
        self.seen: dict[int, torch.Tensor] = {}
        self.cpu_seen = False

    def value(self, v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            if is_npu_device(v.device):
                # the same npu tensor twice (x.add_(x), logical_and.out(x, y, out=x)) gets the
                # same host view: CPU kernels check aliasing by identity (an in-place op must
                # not resize its input)
                view = self.seen.get(id(v))
                if view is None:
                    view = self.seen[id(v)] = host_view(v)
                self.npu.append(v)
                self.views.append(view)
                return view
            if v.dim() > 0:
                self.cpu_seen = True
            elif self.meta:  # a CPU scalar beside meta views: out= kernels refuse to mix them
                return v.to(_META)
            return v
        if isinstance(v, (list, tuple)) and v and isinstance(v[0], (torch.Tensor, type(None))):
            return type(v)(self.value(x) for x in v)
        if isinstance(v, torch.device) and v.type == "npu":
            return _HOST_DEVICE[self.meta]
        return v


_NUMBERS = (bool, int, float, complex)


def _rewrap_numbers(plan: OpPlan, args: tuple, meta: bool) -> tuple:
    """Turn Python numbers back into the 0-dim tensors the schema asks for (torch's boxed
    calling convention unwraps wrapped-number tensors such as the 7 in ``x % 7``); on the
    meta device beside meta views."""
    fixed = None
    count = len(args)
    for i in plan.tensor_args:
        if i < count and isinstance(args[i], _NUMBERS):
            if fixed is None:
                fixed = list(args)
            fixed[i] = torch.tensor(args[i], device=_META) if meta else torch.tensor(args[i])
    return args if fixed is None else tuple(fixed)


#: shapes only: meta results by op and argument metadata
META_RESULTS = MetaCache()


def _run_on_host(state: AdapterState, plan: OpPlan, args: tuple, kwargs: dict) -> Any:
    call = plan.host_call or plan.op
    if state.meta and plan.meta_call is not None and not kwargs:
        call = plan.meta_call
    try:
        if state.fast and plan.widened:
            return fast_numerics.call_widened(call, args, kwargs)
        if state.meta and (call is plan.op or call is plan.meta_call):
            return META_RESULTS.call(call, call, args, kwargs)
        return call(*args, **kwargs)
    except (NotImplementedError, RuntimeError) as exc:
        text = str(exc)
        if state.meta and "meta" in text.lower():
            if plan.writes and not plan.returns_alias and _NO_META_KERNEL in text:
                # an in-place op returning nothing (torch's fused SGD / Adagrad steps) keeps
                # its outputs' shapes: on shapes only there is nothing to compute
                return None
            raise NumericsNoneError(f"{plan.name} ({plan.op})") from None
        if isinstance(exc, NotImplementedError) and _NO_CPU_KERNEL in text:
            raise unsupported_op(_failed_op(text, plan.name)) from None
        raise


#: how the dispatcher says an op has no CPU kernel
_NO_CPU_KERNEL = "with arguments from the 'CPU' backend"


def _failed_op(text: str, default: str) -> str:
    """The op the dispatcher could not run (``aten::x`` in "Could not run 'aten::x' ...")."""
    _, sep, rest = text.partition("Could not run '")
    return rest.split("'", 1)[0] if sep else default


def execute(state: AdapterState, plan: OpPlan, args: tuple, kwargs: dict) -> Any:
    """Run a non-view op: host computation, device kernels, npu outputs."""
    unwrap = _Unwrapped(state.meta)
    value = unwrap.value
    host_args = tuple([value(a) for a in args])
    if plan.tensor_args:
        host_args = _rewrap_numbers(plan, host_args, state.meta)
    host_kwargs = {k: value(v) for k, v in kwargs.items()} if kwargs else {}
    if unwrap.cpu_seen and unwrap.npu and not plan.cpu_index_ok:
        raise RuntimeError(MISMATCH)
    if plan.returns_value:
        sync_for_value(state, plan.name)
    ref_format = _prepare_formats(state, plan, args, unwrap.npu)
    result = _run_on_host(state, plan, host_args, host_kwargs)

    # shapes only: an in-place op on known values updates them on the host (None: unknown now)
    known_written = (
        shapes_only.compute_known(plan.op, args, kwargs, is_npu_device, plan.writes)
        if state.meta and plan.writes
        else None
    )
    for i, name in plan.writes:  # out= and in-place ops may resize or re-point their output
        target = args[i] if i < len(args) else kwargs.get(name)
        view = host_args[i] if i < len(args) else host_kwargs.get(name)
        if isinstance(target, torch.Tensor) and is_npu_device(target.device):
            resync(target, view, state, plan.name)
        if state.meta:  # the device wrote it: values the host knew are gone, unless computed
            if known_written is None:
                shapes_only.forget(target)
            elif name == "out" and isinstance(known_written, torch.Tensor):
                shapes_only.write_known(target, known_written)

    outputs: list[torch.Tensor | None] = []
    wrapped = _wrap_result(state, plan, result, args, kwargs, outputs)
    if state.meta and not plan.writes and outputs:
        known = shapes_only.compute_known(plan.op, args, kwargs, is_npu_device)
        if known is not None:
            shapes_only.remember(outputs, known)
    if ref_format is not None or plan.conv_outputs:
        _tag_outputs(state, plan, outputs, ref_format)
    if not plan.returns_value:
        launch(state, plan, unwrap.npu, outputs, args)
    return wrapped


def _wrap_result(
    state: AdapterState,
    plan: OpPlan,
    result: Any,
    args: tuple,
    kwargs: dict,
    outputs: list[torch.Tensor | None],
) -> Any:
    if plan.returns_value or result is None:
        return result
    single = len(plan.returns_alias) == 1
    if single and plan.returns_alias[0] is None and isinstance(result, torch.Tensor):
        out = adopt(result, state, plan.name)  # the common case: one fresh tensor
        outputs.append(out)
        return out
    results = (result,) if single else result
    wrapped = []
    for k, value in enumerate(results):
        alias = plan.returns_alias[k] if k < len(plan.returns_alias) else None
        if alias is not None:
            i, name = plan.writes[alias]
            target = args[i] if i < len(args) else kwargs.get(name)
            wrapped.append(target)
            if isinstance(target, torch.Tensor):
                outputs.append(target)
            elif isinstance(target, (list, tuple)):
                outputs.extend(target)
        else:
            wrapped.append(_adopt_value(state, value, plan.name, outputs))
    return wrapped[0] if single else type(result)(wrapped) if isinstance(result, tuple) else wrapped


def _adopt_value(
    state: AdapterState, value: Any, tag: str, outputs: list[torch.Tensor | None]
) -> Any:
    if isinstance(value, torch.Tensor):
        out = adopt(value, state, tag)
        outputs.append(out)
        return out
    if isinstance(value, (list, tuple)):
        return type(value)(_adopt_value(state, v, tag, outputs) for v in value)
    outputs.append(None)
    return value


# ---- formats -----------------------------------------------------------------------------


#: TransData launches so far, in one cell, but the temporary ones an op's finish logs (a
#: launch that converted an input for good is not learned: the next call with the same key
#: may find it converted)
TRANSDATA_LAUNCHES = [0]


def transdata(
    state: AdapterState,
    t: torch.Tensor,
    dst: str,
    retag: bool = True,
    temporaries: list[tuple | None] | None = None,
) -> None:
    """Launch a TransData re-laying ``t``'s storage into ``dst``.

    With ``retag`` the storage keeps the new format (a conversion in place, as for conv weights
    and optimizer states); without, the converted copy is a temporary for one consumer and the
    tensor stays in its format, so the next consumer pays again (as on torch_npu).
    ``temporaries``, when given (an op's finish, which a learned launch repeats), gets each
    conversion in launch order: a temporary one as (cost, op type, name, record fields), a
    plain tensor converted for good into a private format as (cost, op type, name, record
    fields, ``t``, (its ``_npu_fmt``, padded device bytes, memory tag)), anything else as None
    (the learned key, which holds the inputs' formats and sizes but not a view's storage shape
    or whether a tensor is contiguous, does not determine it).
    """
    current = storage_format(t)
    src, shape = current if current is not None else (formats.ND, tuple(t.shape))
    if src == dst:
        return
    cost = costmodel.transdata_cost(state.npu.spec, shape, dtype_name(t.dtype), src, dst)
    ins, outs = ((shape, t.dtype, src),), ((shape, t.dtype, dst),)
    compile_kernel(state, "TransData", ins, outs)
    _submit(state, "TransData", "TransData", cost, ins, outs)
    padded = storage_bytes(shape, dtype_name(t.dtype), dst) if retag and dst != formats.ND else 0
    if temporaries is None:
        TRANSDATA_LAUNCHES[0] += 1
    elif not retag and shape == tuple(t.shape):
        temporaries.append((cost, "TransData", "TransData", _record_fields_of(ins, outs)))
    elif retag and current is None and dst != formats.ND and t.is_contiguous():
        tag = ((dst, shape), padded, "TransData")
        temporaries.append((cost, "TransData", "TransData", _record_fields_of(ins, outs), t, tag))
    else:
        temporaries.append(None)
    if retag:
        set_storage_format(t, dst, shape)
        if dst != formats.ND:  # the padded layout takes more device memory
            hold_device_bytes(t, padded, state, "TransData")


def _prepare_formats(
    state: AdapterState,
    plan: OpPlan,
    args: tuple,
    npu_inputs: list[torch.Tensor],
    temporaries: list[tuple | None] | None = None,
) -> str | tuple[str | None, ...] | None:
    """Convert inputs to the formats the op's kernel needs; return the format it works in
    (for a foreach op, one per list index; ``temporaries``: see :func:`transdata`)."""
    needs = plan.conv_inputs
    if needs and state.internal_format:
        for index, fmt in needs.items():
            t = args[index] if index < len(args) else None
            if (
                isinstance(t, torch.Tensor)
                and is_npu_device(t.device)
                and formats.private_allowed(t)
            ):
                transdata(state, t, fmt, temporaries=temporaries)
        return None
    lists = foreach.tensor_lists(args) if plan.foreach else None
    if lists:  # a foreach op: each list index is an elementwise op of its own
        refs = tuple(
            [
                _agnostic_formats(state, [items[i] for items in lists], temporaries)
                for i in range(len(lists[0]))
            ]
        )
        return refs if any(ref is not None for ref in refs) else None
    if plan.agnostic:
        return _agnostic_formats(state, npu_inputs, temporaries)
    nz_ok = plan.nz_ok
    for t in npu_inputs:
        fmt = storage_format(t)
        if fmt is not None and not (nz_ok and fmt[0] == formats.FRACTAL_NZ):
            transdata(state, t, formats.ND, retag=False, temporaries=temporaries)
    return None


def _agnostic_formats(
    state: AdapterState,
    npu_inputs: Sequence[torch.Tensor],
    temporaries: list[tuple | None] | None = None,
) -> str | None:
    """Inputs of an op that runs in any format: the format of the first one held in a
    private format (None if none is), the plain ones converted to it for good, views of a
    private-format storage converted to ND (``temporaries``: see :func:`transdata`)."""
    ref = None
    for t in npu_inputs:
        fmt = storage_format(t)
        if fmt is not None and fmt[1] == tuple(t.shape):
            ref = fmt[0]
            break
    if ref is None:
        return None
    for t in npu_inputs:
        fmt = storage_format(t)
        if fmt is None and formats.private_allowed(t) and t.is_contiguous():
            transdata(state, t, ref, temporaries=temporaries)
        elif fmt is not None and fmt[1] != tuple(t.shape):
            transdata(state, t, formats.ND, temporaries=temporaries)
    return ref


def _tag_outputs(
    state: AdapterState,
    plan: OpPlan,
    outputs: list[torch.Tensor | None],
    ref: str | tuple[str | None, ...] | None,
) -> None:
    """Give fresh outputs the format the op works in (``ref``: one, or one per output of a
    foreach op; a convolution's own)."""
    base = plan.base
    conv = plan.conv_outputs
    if conv and not state.internal_format:
        return  # allow_internal_format=False: convolutions produce ND
    if conv:
        tags: Sequence[str | None] = conv
    elif isinstance(ref, tuple):
        tags = ref if len(ref) == len(outputs) else ()
    else:
        tags = [ref] * len(outputs) if ref is not None else ()
    for out, fmt in zip(outputs, tags, strict=False):
        if out is None or fmt is None or fmt == formats.ND or not formats.private_allowed(out):
            continue
        if not conv and storage_format(out) is not None:
            continue
        shape = tuple(out.shape)
        set_storage_format(out, fmt, shape)
        hold_device_bytes(out, storage_bytes(shape, dtype_name(out.dtype), fmt), state, base)


# ---- device work -------------------------------------------------------------------------


_KernelKey = tuple


class _Planned:
    """The kernels of one (op, groups, input keys, output keys) and what a launch of them
    needs besides: the output keys of the present outputs, their task-record fields, and the
    attribute tuples already known to the compile cache of epoch ``epoch``."""

    __slots__ = ("epoch", "fields", "kernels", "present", "seen")

    def __init__(self, kernels: tuple[PlannedKernel, ...], present: tuple) -> None:
        self.kernels = kernels
        self.present = present
        self.fields: tuple[tuple, ...] | None = None
        self.epoch = 0
        self.seen: set[tuple] = set()


_KERNEL_CACHE: dict[_KernelKey, _Planned] = {}
_KERNEL_CACHE_LIMIT = 100_000


def _key(t: torch.Tensor) -> tuple[torch.Size, torch.dtype, str]:
    """(shape, dtype, format as stored) of an npu tensor: what its cost depends on."""
    fmt = storage_format(t)
    shape = t.shape
    if fmt is not None and fmt[1] == tuple(shape):
        return shape, t.dtype, fmt[0]
    return shape, t.dtype, formats.ND


def _info(key: tuple[torch.Size, torch.dtype, str]) -> TensorInfo:
    return TensorInfo(tuple(key[0]), key[1], key[2])


def _plan_kernels(
    state: AdapterState,
    plan: OpPlan,
    groups: int,
    per_list: int,
    cache_key: tuple,
    in_keys: tuple,
    out_keys: tuple,
) -> _Planned:
    """Plan and cache the kernels of one launch (``groups``: a convolution's, ``per_list``: a
    foreach op's tensors per list)."""
    in_info = [_info(k) for k in in_keys]
    out_info = [None if k is None else _info(k) for k in out_keys]
    kernels = tuple(op_tasks(state.npu.spec, plan.base, in_info, out_info, groups, per_list))
    present = out_keys if None not in out_keys else tuple([k for k in out_keys if k is not None])
    if len(_KERNEL_CACHE) >= _KERNEL_CACHE_LIMIT:
        _KERNEL_CACHE.clear()
    planned = _KERNEL_CACHE[cache_key] = _Planned(kernels, present)
    return planned


def launch(
    state: AdapterState,
    plan: OpPlan,
    inputs: list[torch.Tensor],
    outputs: list[torch.Tensor | None],
    args: tuple,
) -> _Planned:
    """Launch the kernels ``plan``'s op amounts to on the current stream; their cost-cache
    entry.

    Costs are cached by op and (shape, dtype, format) of every tensor: a training loop repeats
    the same ops on the same shapes, so after the first step each op costs one lookup. The
    compile cache is asked about key (costs key, attributes) once per cache epoch: afterwards
    the entry's own set of attribute tuples answers (a small tuple's hash, not the whole key's).
    """
    groups = int(args[8]) if plan.has_groups and len(args) > 8 else 1
    per_list = foreach.count(args) if plan.foreach else 0
    in_keys = tuple([_key(t) for t in inputs])
    out_keys = tuple([None if o is None else _key(o) for o in outputs])
    cache_key = (plan.base, groups, per_list, in_keys, out_keys)
    planned = _KERNEL_CACHE.get(cache_key)
    if planned is None:
        planned = _plan_kernels(state, plan, groups, per_list, cache_key, in_keys, out_keys)
    kernels = planned.kernels
    if not kernels:
        return planned
    if state.capture is None:
        attrs = attributes_at(args, plan.attr_slots) if plan.attr_slots else ()
        compiled = state.compiled
        if planned.epoch != compiled.epoch:
            planned.epoch = compiled.epoch
            planned.seen = set()
        if attrs not in planned.seen:
            compile_key = (cache_key, attrs)
            if compile_key not in compiled.keys:
                compiled.miss(state.npu.engine, compile_key, [k.op_type for k in kernels])
            planned.seen.add(attrs)
    l2 = state.npu.l2
    if l2 is not None and state.capture is None:
        hits = l2_reuse.traffic(l2, inputs, in_keys, outputs, out_keys)
        kernels = l2_reuse.apply(state.npu.spec, kernels, hits)
    present = planned.present
    if state.npu.bus.active and state.capture is None:
        fields = planned.fields
        if fields is None:
            fields = planned.fields = _record_fields_of(in_keys, present)
        for kernel in kernels:
            _submit(state, plan.name, kernel.op_type, kernel.cost, in_keys, present, fields)
        return planned
    for kernel in kernels:
        _submit(state, plan.name, kernel.op_type, kernel.cost, in_keys, present)
    return planned


def launch_custom(
    state: AdapterState,
    name: str,
    op_type: str,
    cost: costmodel.KernelCost,
    inputs: list[torch.Tensor] | tuple,
    outputs: list[torch.Tensor] | tuple,
) -> None:
    """Launch a kernel an adapter-implemented op (fused op, collective) costed itself."""
    if state.meta:  # the kernel writes its outputs: values the host knew are gone
        shapes_only.forget(outputs)
    ins, outs = tuple(_key(t) for t in inputs), tuple(_key(t) for t in outputs)
    compile_kernel(state, op_type, ins, outs)
    l2 = state.npu.l2
    if l2 is not None and state.capture is None:
        hits = l2_reuse.traffic(l2, inputs, ins, outputs, outs)
        cost = costmodel.with_l2_reads(state.npu.spec, cost, hits)
    _submit(state, name, op_type, cost, ins, outs)


def launch_shapes(
    state: AdapterState,
    name: str,
    op_type: str,
    cost: costmodel.KernelCost,
    inputs: Sequence[tuple[tuple[int, ...], torch.dtype]],
    outputs: Sequence[tuple[tuple[int, ...], torch.dtype]],
) -> None:
    """Launch a kernel described by the (shape, dtype) of the plain-layout tensors it reads
    and writes (kernels of a host op that are not one npu tensor each, such as time steps)."""
    nd = formats.ND
    ins = tuple((s, d, nd) for s, d in inputs)
    outs = tuple((s, d, nd) for s, d in outputs)
    compile_kernel(state, op_type, ins, outs)
    _submit(state, name, op_type, cost, ins, outs)


def compile_kernel(state: AdapterState, op_type: str, ins: tuple, outs: tuple) -> None:
    """Charge the host for building kernel ``op_type`` on a key it has not met yet."""
    if state.capture is None:
        key = (op_type, ins, outs)
        compiled = state.compiled
        if key not in compiled.keys:
            compiled.miss(state.npu.engine, key, (op_type,))


def _submit(
    state: AdapterState,
    name: str,
    op_type: str,
    cost: costmodel.KernelCost,
    ins: tuple,
    outs: tuple,
    fields: tuple[tuple, ...] | None = None,
) -> None:
    captured = state.capture
    if captured is not None:  # a graph is being captured: its launch places the kernel
        captured.append(CapturedKernel(name, op_type, cost, ins, outs))
        return
    engine = state.npu.engine
    if not state.npu.bus.active:
        engine.launch_kernel(state.stream, cost, name, op_type)
        return
    if fields is None:
        fields = _record_fields_of(ins, outs)
    engine.launch_kernel(state.stream, cost, name, op_type, fields, state.compiled.attrs)


#: (input keys, output keys) -> the shape, dtype and format fields of a task record
_RECORD_FIELDS: dict[tuple[tuple, tuple], tuple[tuple, ...]] = {}


def _record_fields_of(ins: tuple, outs: tuple) -> tuple[tuple, ...]:
    """The task record fields describing tensors ``ins`` and ``outs`` (cached, bounded)."""
    fields = _RECORD_FIELDS.get((ins, outs))
    if fields is not None:
        return fields
    fields = (
        tuple(tuple(s) for s, _, _ in ins),
        tuple(dtype_name(d) for _, d, _ in ins),
        tuple(f for _, _, f in ins),
        tuple(tuple(s) for s, _, _ in outs),
        tuple(dtype_name(d) for _, d, _ in outs),
        tuple(f for _, _, f in outs),
    )
    if len(_RECORD_FIELDS) >= _KERNEL_CACHE_LIMIT:
        _RECORD_FIELDS.clear()
    _RECORD_FIELDS[(ins, outs)] = fields
    return fields


def sync_for_value(state: AdapterState, name: str) -> None:
    """The host needs a value computed on the device: wait for the stream, copy it back."""
    if state.meta:
        raise NumericsNoneError(name)
    record_value_sync(state, name)


def record_value_sync(state: AdapterState, name: str) -> None:
    """The host waits for the stream and copies a value (8 bytes) back: a blocking D2H task."""
    from msprof_py.device import CopyKind

    engine = state.npu.engine
    engine.submit_memcpy(state.stream, CopyKind.D2H, 8, pinned=False, name=f"{name} (value)")
