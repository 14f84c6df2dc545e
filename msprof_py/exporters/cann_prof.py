"""The CANN (msprof) output folder ``PROF_{6 digits}_{17-digit ts}_{id}/`` of one rank.

Layout, as msprof exports it::

    PROF_000001_20261130082525917_00022069ABCDEFGH/
      device_{N}/info.json.{N}            DeviceInfo: id, ai_core_num, aiv_num, frequencies
      mindstudio_profiler_output/
        msprof_{ts}.json                  the CANN timeline (bare array, no framework layer)
        op_summary_{ts}.csv  op_statistic_{ts}.csv  api_statistic_{ts}.csv
        task_time_{ts}.csv   step_trace_{ts}.csv
        communication_statistic_{ts}.csv  (with collectives)
        npu_module_mem_{ts}.csv           (with memory records; KB)

``{ts}`` is the run's end time ``YYYYmmddHHMMSS``; the folder's id is derived from the run so
the export is reproducible.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from msprof_py.exporters import csv_tables
from msprof_py.exporters.frames import ExportData
from msprof_py.exporters.runinfo import ai_cpu_cores, us
from msprof_py.profile.atomic import create_atomically

COMMUNICATION_STATISTIC_HEADER = [
    "Device_id",
    "OP Type",
    "Count",
    "Total Time(us)",
    "Min Time(us)",
    "Avg Time(us)",
    "Max Time(us)",
    "Ratio(%)",
]


def device_info(data: ExportData) -> dict[str, Any]:
    """``info.json.{N}``: the device's figures as the run recorded them."""
    meta = data.info.meta
    freq = meta.get("aic_frequency_mhz")
    device: dict[str, Any] = {"id": data.info.device_id}
    if meta.get("ai_core_num") is not None:
        device["ai_core_num"] = int(meta["ai_core_num"])
    if meta.get("aiv_num") is not None:
        device["aiv_num"] = int(meta["aiv_num"])
    cpu = ai_cpu_cores(meta)
    if cpu is not None:
        device["ai_cpu_core_num"] = cpu
    if freq is not None:
        device["aic_frequency"] = f"{float(freq):g}"
        device["aiv_frequency"] = f"{float(freq):g}"
    return {
        "jobInfo": "NA",
        "hostname": data.info.hostname,
        "pid": str(data.info.pid),
        "rank_id": data.info.rank,
        "devices": str(data.info.device_id),
        "soc_version": meta.get("soc_version", ""),
        "DeviceInfo": [device],
    }


def communication_statistic(data: ExportData) -> pd.DataFrame:
    """``communication_statistic``: collectives by op type, largest total first."""
    t = data.tasks
    c = t[t["kind"] == "collective"]
    if c.empty:
        return pd.DataFrame(columns=COMMUNICATION_STATISTIC_HEADER)
    g = c.assign(dur=us(c["dur_ns"])).groupby("name")["dur"]
    stats = g.agg(["count", "sum", "min", "mean", "max"]).reset_index()
    stats = stats.sort_values(["sum", "name"], ascending=[False, True], kind="stable")
    total = stats["sum"].sum()
    return pd.DataFrame(
        {
            "Device_id": data.info.device_id,
            "OP Type": stats["name"].to_numpy(),
            "Count": stats["count"].to_numpy(),
            "Total Time(us)": np.round(stats["sum"].to_numpy(), 3),
            "Min Time(us)": np.round(stats["min"].to_numpy(), 3),
            "Avg Time(us)": np.round(stats["mean"].to_numpy(), 3),
            "Max Time(us)": np.round(stats["max"].to_numpy(), 3),
            "Ratio(%)": np.round(100.0 * stats["sum"].to_numpy() / total, 3),
        },
        columns=COMMUNICATION_STATISTIC_HEADER,
    )


def output_dir(data: ExportData, parent: Path) -> Path:
    """``PROF_*/mindstudio_profiler_output`` under ``parent``."""
    return parent / data.info.prof_dir_name / "mindstudio_profiler_output"


def msprof_json_path(data: ExportData, parent: Path) -> Path:
    """Where the CANN timeline ``msprof_{ts}.json`` of the folder goes."""
    return output_dir(data, parent) / f"msprof_{data.info.stamp14}.json"


def write_prof_dir(data: ExportData, parent: Path) -> Path:
    """Write the ``PROF_*`` folder under ``parent`` (all but ``msprof_{ts}.json``, which
    :func:`msprof_py.exporters.trace_view.write_timelines` writes); returns the folder."""
    info = data.info
    prof = parent / info.prof_dir_name
    device_dir = prof / f"device_{info.device_id}"
    out = output_dir(data, parent)
    device_dir.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    with create_atomically(device_dir / f"info.json.{info.device_id}", "x", encoding="utf-8") as f:
        json.dump(device_info(data), f, indent=1)
    ts = info.stamp14
    csv_tables.write_csv(csv_tables.op_summary(data), out / f"op_summary_{ts}.csv")
    csv_tables.write_csv(csv_tables.op_statistic(data), out / f"op_statistic_{ts}.csv")
    csv_tables.write_csv(csv_tables.api_statistic(data), out / f"api_statistic_{ts}.csv")
    csv_tables.write_csv(csv_tables.task_time(data), out / f"task_time_{ts}.csv")
    csv_tables.write_csv(csv_tables.step_trace(data), out / f"step_trace_{ts}.csv")
    if (data.tasks["kind"] == "collective").any():
        csv_tables.write_csv(
            communication_statistic(data), out / f"communication_statistic_{ts}.csv"
        )
    if not data.profile.memory.empty:
        csv_tables.write_csv(
            csv_tables.npu_module_mem(data, cann=True), out / f"npu_module_mem_{ts}.csv"
        )
    return prof
