"""The INT8 rule: dynamic-quantized modules that run on the host, between copies.

``torch.ao.quantization.quantize_dynamic`` makes ``quantized::linear_dynamic`` ops that have no
NPU kernel: the adapter runs them on the host (CPU quantized kernels) with a device-to-host
copy of the activation before and a host-to-device copy of the result after
(:mod:`msprof_py.adapter.host_fallback`). The rule finds those host ops (``quantized::*``),
the copies they launched and their host compute span (``<op> (host)``), and re-costs each as
what the device would take for it in int8: an ``AscendQuant`` of the activation plus an int8
``QuantBatchMatmulV3`` (``msprof_py.quant``'s path), from the recorded shapes (the activation
from the op's input shapes, the output width from the bytes copied back as float32).
"""

from __future__ import annotations

import math

import pandas as pd

from msprof_py.analyzers.findings import Finding, RuleSpec, Skip
from msprof_py.analyzers.rules_compute import RuleContext, us
from msprof_py.device import costmodel

__all__ = ["quantized_on_host"]

PREFIX = "quantized::"


def _first_shape(text: str) -> tuple[int, ...]:
    first = str(text).split(";", 1)[0]
    return tuple(int(x) for x in first.split(",") if x.strip().lstrip("-").isdigit())


def _int8_device_ns(spec: object, shape: tuple[int, ...], out_bytes: int) -> float:
    """AscendQuant + int8 matmul of an (m, k) activation giving ``out_bytes`` of float32."""
    if len(shape) < 1 or not out_bytes:
        return 0.0
    k = shape[-1]
    m = max(1, math.prod(shape[:-1]))
    n = max(1, out_bytes // (4 * m))
    quant = costmodel.vector_cost(
        spec, elements=m * k, dtype="float32", bytes_moved=m * k * 5, ops_per_element=3
    )
    mm = costmodel.matmul_cost(spec, m, n, k, dtype="int8", out_dtype="float16")
    return float(quant.duration_ns + mm.duration_ns)


def quantized_on_host(ctx: RuleContext, spec: RuleSpec) -> Finding:
    """Time in host-run quantized ops (their copies, waits and CPU compute)."""
    data = ctx.data
    host = data.host
    if not (host["kind"] == "op").any():
        raise Skip("no host ops recorded (the quantized ops are host ops)")
    ops = host[(host["kind"] == "op") & host["name"].astype(str).str.startswith(PREFIX)]
    if ops.empty:
        return spec.ok(data.rank, {"quantized_host_ops": 0})
    n = data.n_steps
    op_ns = (ops["end_ns"] - ops["start_ns"]).astype(float)
    total = float(op_ns.sum())
    share = data.share(total)
    tasks = data.tasks
    copies = tasks[(tasks["kind"] == "memcpy") & tasks["host_op_id"].isin(ops["event_id"])]
    copy_ns = float((copies["end_ns"] - copies["start_ns"]).sum())
    compute = host[(host["kind"] == "python") & host["name"].astype(str).str.endswith(" (host)")]
    compute = compute[compute["name"].astype(str).str.startswith(PREFIX)]
    compute_ns = float((compute["end_ns"] - compute["start_ns"]).sum())
    back = copies[copies["copy_kind"] == "HOST_TO_DEVICE"].groupby("host_op_id")["bytes"].sum()
    device_ns = 0.0
    if data.spec is not None:
        for row in ops.itertuples():
            out_bytes = int(back.get(row.event_id, 0))
            device_ns += _int8_device_ns(data.spec, _first_shape(row.input_shapes), out_bytes)
    gain = max(0.0, total - device_ns)
    frame = pd.DataFrame(
        {
            "name": ops["name"].astype(str),
            "module": ops["module"].astype(str),
            "shape": ops["input_shapes"].astype(str),
            "ns": op_ns,
        }
    )
    groups = frame.groupby(["module", "name", "shape"], sort=False)["ns"].agg(["count", "sum"])
    groups = groups.sort_values("sum", ascending=False)
    top_key = groups.index[0]
    values = {
        "count_per_step": len(ops) / n,
        "time_us": us(total / n),
        "share": share,
        "copies_per_step": len(copies) / n,
        "copy_us": us(copy_ns / n),
        "host_us": us(compute_ns / n),
        "top": f"{top_key[1]} in {top_key[0] or 'the top level'} (input {top_key[2]})",
        "device_us": us(device_ns / n),
    }
    if share < spec.thresholds["min_share"]:
        return spec.ok(data.rank, values)
    evidence = {
        "ops": [
            {
                "module": module,
                "op": name,
                "input_shapes": shape,
                "per_step": row["count"] / n,
                "us_per_step": us(row["sum"] / n),
            }
            for (module, name, shape), row in groups.head(5).iterrows()
        ],
        "copy_bytes_per_step": float(copies["bytes"].sum()) / n,
        "copy_us_per_step": us(copy_ns / n),
        "host_compute_us_per_step": us(compute_ns / n),
        "int8_on_device_us_per_step": us(device_ns / n),
    }
    return spec.fire(values, share, us(gain / n), data.rank, evidence)
