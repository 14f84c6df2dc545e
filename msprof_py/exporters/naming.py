"""How the profile's names and kinds map to the names Ascend tools use.

One place for the conventions every Ascend export shares:

* **kernel names** (``Name`` / ``Op Name`` columns, Ascend Hardware events): a task launched by
  a framework op (``aten::add``) is named after the aclnn call that would run it
  (``aclnnAdd``, from the CANN op type, as :mod:`msprof_py.acl.op` names its kernels); tasks
  the runtime names itself keep their name (``TransData``, ``aclnnMatmul``). Copies are
  ``MEMCPY_ASYNC``, event tasks ``EVENT_RECORD``/``EVENT_WAIT`` (CANN's task names), and a
  collective is ``hcom_allreduce__<n>`` (``n`` counts collectives of the rank, so the same
  collective has the same name on every rank, as cluster analysis needs).
* **task types** on Ascend Hardware events (``args["Task Type"]``): compute kernels keep the
  profile's AI_CORE / AI_VECTOR_CORE / MIX_AIC / AI_CPU; host<->device copies ride PCIe
  (``PCIE_DMA_SQE``), device copies and memsets the SDMA engine (``SDMA_SQE``), event tasks are
  ``EVENT_RECORD_SQE`` / ``EVENT_WAIT_SQE`` and collectives ``COMMUNICATION``.
* **CANN API names** of host launches and syncs (``AscendCL@...`` events, api_statistic):
  ``aclnn<OpType>`` for kernels, ``aclrtMemcpyAsync`` / ``aclrtMemsetAsync`` for copies,
  ``aclrtSynchronizeStream`` for a host wait on one stream (torch_npu implements blocking
  copies and ``.item()`` as an async copy plus a stream sync), ``HcclAllReduce`` ... for
  collectives. Host waits that are no API call (a full task queue) have no CANN event.
* **call stacks** (``--with-stack``) as torch_npu writes them (``Call stack`` in trace_view.json
  args, ``Call Stack`` in operator_details.csv): innermost frame first, ``;\r\n`` between
  frames (the profile stores them outermost first, ``;`` between).
* **data types** as CANN prints them: ``FLOAT``, ``FLOAT16``, ``DT_BF16``, ``INT64`` ...
* **file names** made from recorded values (a rank, a host name) go through
  :func:`file_component`, so a value such as ``../x`` never writes outside the output folder.
* **CSV cells** that a spreadsheet would run as a formula (``=``, ``+``, ``-``, ``@``, TAB, CR
  first) are neutralised with a leading ``'``, as OWASP's CSV-injection guidance says
  (:func:`neutral_cell`); NUL bytes are dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

import numpy as np
import pandas as pd

from msprof_py.profile.cells import FORMULA_STARTS, PLAIN_NUMBER, file_component, neutral_cell

#: CANN's data type names (op_summary ``Input Data Types``) for the profile's torch dtype names
CANN_DTYPES: dict[str, str] = {
    "float32": "FLOAT",
    "float": "FLOAT",
    "float16": "FLOAT16",
    "half": "FLOAT16",
    "bfloat16": "DT_BF16",
    "float64": "DOUBLE",
    "double": "DOUBLE",
    "int64": "INT64",
    "long": "INT64",
    "int32": "INT32",
    "int": "INT32",
    "int16": "INT16",
    "int8": "INT8",
    "uint8": "UINT8",
    "uint16": "UINT16",
    "uint32": "UINT32",
    "uint64": "UINT64",
    "bool": "BOOL",
    "complex64": "COMPLEX64",
    "complex128": "COMPLEX128",
}

COMPUTE_TASK_TYPES = ("AI_CORE", "AI_VECTOR_CORE", "MIX_AIC", "MIX_AIV", "AI_CPU")
#: task types that run on AI Cores (operator_details "With AICore" columns)
AI_CORE_TASK_TYPES = ("AI_CORE", "AI_VECTOR_CORE", "MIX_AIC", "MIX_AIV")
COMMUNICATION = "COMMUNICATION"

_COLLECTIVE_API = {
    "allreduce": "HcclAllReduce",
    "allgather": "HcclAllGather",
    "reducescatter": "HcclReduceScatter",
    "broadcast": "HcclBroadcast",
}
_SIMPLE_KIND_API = {
    "memcpy": "aclrtMemcpyAsync",
    "memset": "aclrtMemsetAsync",
    "event_record": "aclrtRecordEvent",
    "event_wait": "aclrtStreamWaitEvent",
}
_KIND_TASK_NAME = {
    "memcpy": "MEMCPY_ASYNC",
    "memset": "MEMSET_ASYNC",
    "event_record": "EVENT_RECORD",
    "event_wait": "EVENT_WAIT",
}


__all__ = ["FORMULA_STARTS", "PLAIN_NUMBER", "file_component", "neutral_cell"]


def _by_category(values: pd.Series, fn: Callable[[Any], Any]) -> np.ndarray:
    """Apply ``fn`` once per distinct value (vectorised over millions of rows)."""
    codes, uniques = pd.factorize(values, use_na_sentinel=False)
    mapped = np.array([fn(u) for u in uniques], dtype=object)
    return mapped[codes] if len(uniques) else np.array([], dtype=object)


def call_stacks(ops: pd.DataFrame) -> np.ndarray:
    """The ``Call stack`` text of each op (see the module doc); empty without stacks."""
    if "stack" not in ops.columns:
        return np.full(len(ops), "", dtype=object)
    stacks = ops["stack"].astype(object).fillna("").astype(str)
    return _by_category(stacks, lambda s: ";\r\n".join(reversed(s.split(";"))) if s else "")


def cann_dtypes(dtypes: pd.Series) -> np.ndarray:
    """``"float32;int64"`` -> ``"FLOAT;INT64"`` (empty stays empty)."""

    def convert(text: str) -> str:
        if not text:
            return ""
        return ";".join(CANN_DTYPES.get(d, d.upper()) for d in str(text).split(";"))

    return _by_category(dtypes.fillna(""), convert)


def collective_seq(tasks: pd.DataFrame) -> np.ndarray:
    """Per-rank index (0, 1, ...) of each collective task in submission order, -1 otherwise."""
    is_coll = (tasks["kind"] == "collective").to_numpy()
    seq = np.full(len(tasks), -1, dtype=np.int64)
    order = np.argsort(tasks["task_id"].to_numpy(), kind="stable")
    ranked = order[is_coll[order]]
    seq[ranked] = np.arange(len(ranked))
    return seq


def kernel_names(tasks: pd.DataFrame, coll_seq: np.ndarray | None = None) -> np.ndarray:
    """Ascend kernel names of ``tasks`` (see module docs)."""
    kind = tasks["kind"].to_numpy(dtype=object)
    name = tasks["name"].to_numpy(dtype=object)
    op_type = tasks["op_type"].to_numpy(dtype=object)
    framework = pd.Series(name).str.contains("::", regex=False).to_numpy()
    out = np.where(framework, "aclnn" + op_type.astype(str), name).astype(object)
    for k, task_name in _KIND_TASK_NAME.items():
        out[kind == k] = task_name
    coll = kind == "collective"
    if coll.any():
        seq = collective_seq(tasks) if coll_seq is None else coll_seq
        out[coll] = [f"{n}_{s}" for n, s in zip(name[coll], seq[coll], strict=True)]
    return out


def collective_types(tasks: pd.DataFrame) -> np.ndarray:
    """``Type`` of collective tasks: the base name (``hcom_allreduce_``), else the op type."""
    coll = (tasks["kind"] == "collective").to_numpy()
    return np.where(coll, tasks["name"].to_numpy(dtype=object), tasks["op_type"].to_numpy(object))


def hardware_task_types(tasks: pd.DataFrame) -> np.ndarray:
    """``Task Type`` of each task on the Ascend Hardware timeline (see module docs)."""
    kind = tasks["kind"].to_numpy(dtype=object)
    out = tasks["task_type"].to_numpy(dtype=object).copy()
    copy_kind = tasks["copy_kind"].to_numpy(dtype=object)
    pcie = (kind == "memcpy") & np.isin(copy_kind, ["HOST_TO_DEVICE", "DEVICE_TO_HOST"])
    out[(kind == "memcpy") & ~pcie] = "SDMA_SQE"
    out[pcie] = "PCIE_DMA_SQE"
    out[kind == "memset"] = "SDMA_SQE"
    out[kind == "event_record"] = "EVENT_RECORD_SQE"
    out[kind == "event_wait"] = "EVENT_WAIT_SQE"
    out[kind == "collective"] = COMMUNICATION
    return out


def summary_task_types(tasks: pd.DataFrame) -> np.ndarray:
    """``Task Type`` / ``Accelerator Core`` of op_summary rows (kernels and collectives)."""
    kind = tasks["kind"].to_numpy(dtype=object)
    return np.where(kind == "collective", COMMUNICATION, tasks["task_type"].to_numpy(object))


def launch_api_names(tasks: pd.DataFrame) -> np.ndarray:
    """CANN API name of the host call that launched each task (see module docs)."""
    kind = tasks["kind"].to_numpy(dtype=object)
    name = tasks["name"].to_numpy(dtype=object)
    op_type = tasks["op_type"].to_numpy(dtype=object)
    acl = pd.Series(name).str.startswith("acl").to_numpy()
    out = np.where(acl, name, "aclnn" + op_type.astype(str)).astype(object)
    for k, api in _SIMPLE_KIND_API.items():
        out[kind == k] = api
    coll = kind == "collective"
    if coll.any():
        ops = tasks["collective"].to_numpy(dtype=object)[coll]
        out[coll] = [_COLLECTIVE_API.get(str(o), f"Hccl{str(o).title()}") for o in ops]
    return out


def api_level(api: np.ndarray) -> np.ndarray:
    """msprof level of a CANN API (``acl``, or ``hccl`` for the Hccl* collectives)."""
    return np.where(pd.Series(api, dtype=object).str.startswith("Hccl").to_numpy(), "hccl", "acl")


#: the CANN API of an online op compile (jit_compile=True): what msprof-analyze's Operator
#: Dispatch check counts (``AscendCL@aclopCompileAndExecute``)
OP_COMPILE_API = "aclopCompileAndExecute"


def sync_api_names(syncs: pd.DataFrame, op_types: Collection[str] = ()) -> np.ndarray:
    """CANN API of host waits and API calls: their own ``acl*`` name, a stream sync (a wait on
    one stream), ``aclopCompileAndExecute`` for an online op compile (``compile <OpType>`` with
    ``OpType`` in ``op_types``, the kernel op types of the profile; a graph's compile is no op
    compile), or None (no API: a full task queue, a step mark ...). Only the aclop calls that
    compile are events: a call whose kernel is built costs its launch, as any launch."""
    name = syncs["name"].to_numpy(dtype=object)
    stream = np.where((syncs["kind"] == "sync").to_numpy(), syncs["stream_id"].to_numpy(), -1)
    names = pd.Series(name, dtype=object)
    acl = names.str.startswith("acl").to_numpy()
    queue_full = names.str.endswith("queue full").to_numpy()
    out = np.full(len(syncs), None, dtype=object)
    out[(stream >= 0) & ~queue_full] = "aclrtSynchronizeStream"
    out[acl] = name[acl]
    if len(op_types):
        compiled = names.str.startswith("compile ") & names.str[8:].isin(list(op_types))
        out[compiled.to_numpy() & (syncs["kind"] == "api").to_numpy()] = OP_COMPILE_API
    return out
