"""The torch_npu profiler layout of one rank's ``*_ascend_pt`` folder, next to ``msprof_raw/``.

Written files::

    {hostname}_{pid}_{stamp}_ascend_pt/
      profiler_info.json | profiler_info_{rank}.json   (one card | a rank of several)
      profiler_metadata.json                            {"ENV_VARIABLES": {...}}
      ASCEND_PROFILER_OUTPUT/
        trace_view.json  kernel_details.csv  operator_details.csv  op_statistic.csv
        step_trace_time.csv  api_statistic.csv  communication.json  communication_matrix.json
        memory_record.csv  operator_memory.csv  npu_module_mem.csv   (with memory records)
        fusion_result.json                          (graph mode: what the graph passes did)
      PROF_*/                                           the CANN folder (cann_prof)

No ``*.db`` file is written (a ``ascend_pytorch_profiler*.db`` switches msprof-analyze to its
database mode). Existing output is never overwritten: when any of these already exists,
:func:`export_ascend_pt` raises :class:`ExportExistsError` before writing anything.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from msprof_py.exporters import csv_tables, naming
from msprof_py.exporters.cann_prof import msprof_json_path, output_dir, write_prof_dir
from msprof_py.exporters.communication import (
    communication_json,
    communication_matrix,
    write_json,
    write_json_text,
)
from msprof_py.exporters.errors import ExportError
from msprof_py.exporters.frames import ExportData
from msprof_py.exporters.fusion_result import FILE as FUSION_FILE
from msprof_py.exporters.fusion_result import write_fusion_result
from msprof_py.exporters.trace_view import write_timelines
from msprof_py.profile import Profile, load
from msprof_py.profile.atomic import create_atomically

OUTPUT_DIR = "ASCEND_PROFILER_OUTPUT"
METADATA_FILE = "profiler_metadata.json"


class ExportExistsError(ExportError, FileExistsError):
    """The run folder already holds an export (exports never overwrite)."""


def profiler_info_name(data: ExportData) -> str:
    """``profiler_info.json`` for a single card, ``profiler_info_{rank}.json`` for a rank of a
    distributed run (msprof-analyze's cluster mode reads the rank from that name)."""
    rank = naming.file_component(data.info.rank)
    return f"profiler_info_{rank}.json" if data.info.multi_rank else "profiler_info.json"


def profiler_info(data: ExportData) -> dict[str, Any]:
    """``profiler_info*.json``: what was collected and when, as torch_npu describes it."""
    info = data.info
    meta = info.meta
    profile = data.profile
    return {
        "config": {
            "common_config": {
                "activities": ["ProfilerActivity.CPU", "ProfilerActivity.NPU"],
                "record_shapes": True,
                "profile_memory": not profile.memory.empty,
                "with_stack": bool(meta.get("with_stack", False)),
                "with_flops": False,
                "with_modules": False,
            },
            "experimental_config": {
                "_profiler_level": "Level1",
                "_aic_metrics": "ACL_AICORE_NONE",
                "_l2_cache": False,
                "_data_simplification": True,
                "_export_type": ["text"],
            },
        },
        "start_info": {"collectionTimeBegin": str(info.base_ns)},
        "end_info": {"collectionTimeEnd": str(_end_ns(data))},
        "rank_id": info.rank,
        "world_size": info.world_size,
        "device": meta.get("device", ""),
        "soc_version": meta.get("soc_version", ""),
        "msprof_py_version": (meta.get("versions") or {}).get("msprof_py", ""),
        "torch_version": (meta.get("versions") or {}).get("torch", ""),
    }


def _end_ns(data: ExportData) -> int:
    meta = data.info.meta
    end = max(int(meta.get("host_end_ns", 0) or 0), int(meta.get("device_end_ns", 0) or 0))
    return data.info.base_ns + end


def profiler_metadata(data: ExportData) -> dict[str, Any]:
    """``profiler_metadata.json``: the recorded environment variables."""
    env = data.info.meta.get("env") or {}
    return {"ENV_VARIABLES": {str(k): str(v) for k, v in sorted(env.items())}}


def planned_paths(run_dir: Path, data: ExportData) -> list[Path]:
    """Top-level paths an export creates in ``run_dir``."""
    return [
        run_dir / profiler_info_name(data),
        run_dir / METADATA_FILE,
        run_dir / OUTPUT_DIR,
        run_dir / data.info.prof_dir_name,
    ]


def export_ascend_pt(run_dir: Path, profile: Profile | None = None) -> None:
    """Write the torch_npu layout of one rank's run folder (see module docs)."""
    run_dir = Path(run_dir)
    profile = load(run_dir) if profile is None else profile
    data = ExportData(profile)
    existing = [p for p in planned_paths(run_dir, data) if p.exists()]
    existing += [p for p in run_dir.glob("profiler_info*.json") if p not in existing]
    if existing:
        names = ", ".join(sorted(p.name for p in existing))
        raise ExportExistsError(f"{run_dir}: already exported ({names}); exports never overwrite")
    out = run_dir / OUTPUT_DIR
    out.mkdir()
    output_dir(data, run_dir).mkdir(parents=True)
    write_timelines(data, out / "trace_view.json", msprof_json_path(data, run_dir))
    csv_tables.write_csv(csv_tables.kernel_details(data), out / "kernel_details.csv")
    csv_tables.write_csv(csv_tables.operator_details(data), out / "operator_details.csv")
    csv_tables.write_csv(csv_tables.op_statistic(data), out / "op_statistic.csv")
    csv_tables.write_csv(csv_tables.step_trace_time(data), out / "step_trace_time.csv")
    csv_tables.write_csv(csv_tables.api_statistic(data), out / "api_statistic.csv")
    write_json_text(communication_json(data), out / "communication.json")
    write_json(communication_matrix(data), out / "communication_matrix.json")
    if not profile.memory.empty:
        csv_tables.write_csv(csv_tables.memory_record(data), out / "memory_record.csv")
        csv_tables.write_csv(csv_tables.operator_memory(data), out / "operator_memory.csv")
        csv_tables.write_csv(csv_tables.npu_module_mem(data), out / "npu_module_mem.csv")
    write_fusion_result(profile, out / FUSION_FILE)  # graph mode only
    write_prof_dir(data, run_dir)
    with create_atomically(run_dir / METADATA_FILE, "x", encoding="utf-8") as f:
        json.dump(profiler_metadata(data), f, indent=1)
    # the info file last: cluster tools take a folder with it for a complete rank
    with create_atomically(run_dir / profiler_info_name(data), "x", encoding="utf-8") as f:
        json.dump(profiler_info(data), f, indent=1)
