"""The dynamic-shape rule: kernels built for new shapes inside the analysed steps."""

from __future__ import annotations

from msprof_py.analyzers import dynamic
from msprof_py.analyzers.findings import Finding, RuleSpec, Skip
from msprof_py.analyzers.rules_compute import RuleContext, need_tasks, us

_JIT_FIX = (
    "Use the prebuilt binary kernels: put torch_npu.npu.set_compile_mode(jit_compile=False) "
    "at the start of the script (msprof-analyze's advisor suggests it together with "
    "torch_npu.npu.config.allow_internal_format = False); a new shape then costs host tiling "
    "only. Or pad the varying dimension (sequence length, batch) to a few fixed sizes - 3 or "
    "4 buckets, as GE's dynamic gears recommend - so every shape is compiled once in warm-up; "
    "padding costs the FLOPs of the padded rows."
)
_BINARY_FIX = (
    "Pad the varying dimension (sequence length, batch) to a few fixed sizes - 3 or 4 "
    "buckets, as GE's dynamic gears recommend - so the host tiles each shape once in "
    "warm-up; an LSTM stepped cell by cell can run as one fused torch_npu.npu_lstm "
    "(DynamicRNN) over the padded sequence."
)


def dynamic_shapes(ctx: RuleContext, spec: RuleSpec) -> Finding:
    """Kernels are compiled (jit) or tiled (binary) for new shapes every step."""
    data = ctx.data
    need_tasks(data)
    if not (data.all_host["kind"] == "api").any():
        raise Skip("no runtime API host spans recorded (compile and tiling spans)")
    spans = dynamic.build_spans(data)
    table = dynamic.builds(data)
    n = data.n_steps
    steps_with_builds = int(spans["step"].nunique()) if len(spans) else 0
    count = int(table["count"].sum()) if len(table) else 0
    host_ns = float(table["host_ns"].sum()) if len(table) else 0.0
    share = data.share(host_ns)
    varying = dynamic.shapes_per_op(data)
    values = {
        "builds_per_step": count / n,
        "time_us": us(host_ns / n),
        "share": share,
        "varying_ops": len(varying),
        "dynamic_share": dynamic.dynamic_share(data),
        "steps_with_builds": steps_with_builds,
    }
    th = spec.thresholds
    if (
        count / n < th["min_builds_per_step"]
        or share < th["min_share"]
        or steps_with_builds < th["min_steps"]
    ):
        return spec.ok(data.rank, values)
    jit = bool((table["kind"] == "compile").any())
    top = ", ".join(f"{r.op_type} ({r.new_shapes} new)" for r in varying.head(3).itertuples())
    values |= {
        "mode": "online compiles, jit_compile=True" if jit else "host tiling of binary kernels",
        "top": top or "none recorded",
        "fix": _JIT_FIX if jit else _BINARY_FIX,
    }
    evidence = {
        "builds": table.head(10).to_dict("records"),
        "shapes_per_op": varying.head(10).to_dict("records"),
    }
    return spec.fire(values, share, values["time_us"], data.rank, evidence)
