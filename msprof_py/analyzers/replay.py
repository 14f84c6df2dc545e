"""Replay the recorded launches and syncs with some tasks removed or re-costed: the step
time a change would give, with the host, the launch pipeline and the device in series where
they were in series and side by side where they overlapped.

The replay follows the simulator's dispatch model (:mod:`msprof_py.device.engine`): the host
thread runs its leaf records in order (launches, syncs, API calls) and keeps the time between
them (its own work); a launch's record is its host part (stage 1), and the task reaches the
device after the launch pipeline's stage 2, which takes one launch at a time
(``arrival = max(host end, previous arrival) + stage 2``, stage 2 read off the record); a task
starts when it has arrived and its stream's previous task has ended (plus any wait the
recording shows beyond those, kept as is); a sync that waited resumes the host at the
replayed end (or arrival) of the task it waited for, plus its own return cost. A removed task
costs neither host, pipeline nor device time, and the next task on its stream follows the
one before it. A task sunk in a compiled graph reaches the device as the host passes its
place (its launch and dispatch cost nothing); one the graph runs beside its chain (side work
on a stream of its own) starts as it arrives and holds up no other task. Each task's stream
predecessor is the task whose end its recorded
``wait_ns`` points at (the stream id is not loaded).

The first replayed step is the one before the analysed steps (so that the analysed steps
start from a replayed state), and at most :data:`MAX_STEPS` analysed steps are replayed: a
change's gain per step is their mean. The gain is the difference of two replays (as recorded
and with the change), so what the replay does not model (resource contention between
streams, full queues) cancels out.

A rule whose change the replay expresses records it (:func:`record`) as it estimates its
gain; :func:`joint_gain_ns` replays the recorded changes of several findings together, once:
the re-costed combined gain: removing one change's tasks can take another's saving off the
critical path (the joint gain is then less than the sum of the single gains) or put it on
(more).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from msprof_py.analyzers.context import RankData
from msprof_py.analyzers.ops import WORK_KINDS

#: the analysed steps replayed at most (the gain is a mean per step)
MAX_STEPS = 8
#: host record kinds replayed (ops and annotations only enclose them)
LEAF_KINDS = ("launch", "sync", "api", "python")


@dataclass(frozen=True)
class Change:
    """A change the replay can express: ``drop`` (task ids removed, with their launches),
    ``durations`` (new task durations in ns, indexed by task id) and ``sunk`` (task ids that
    keep their device time but run in a compiled graph sunk to the device: their launch
    records, and the host time before each since the previous record, the op's dispatch,
    cost nothing; each reaches the device as the host passes its place in the program).
    ``side`` (sunk task ids) are the graph's independent side work, which its stream plan
    puts on streams of their own: each starts as it reaches the device and holds up no
    other task."""

    drop: frozenset[int] = frozenset()
    durations: pd.Series = field(default_factory=lambda: pd.Series(dtype="float64"))
    sunk: frozenset[int] = frozenset()
    side: frozenset[int] = frozenset()


def _ids(values: Any) -> frozenset[int]:
    return frozenset(int(x) for x in np.asarray(list(values), np.int64))


def change(
    drop: Any = (), durations: pd.Series | None = None, sunk: Any = (), side: Any = ()
) -> Change:
    """A :class:`Change` from task ids, an optional duration series, sunk task ids and the
    sunk ones run beside the rest."""
    new = pd.Series(dtype="float64") if durations is None else durations.astype("float64")
    sunk_ids = _ids(sunk)
    return Change(_ids(drop), new, sunk_ids, _ids(side) & sunk_ids)


def combine(changes: list[Change]) -> Change:
    """The changes applied together: every task any of them removes is removed; a task that
    several re-cost takes the shortest duration (each change's saving kept)."""
    drop = frozenset().union(*(c.drop for c in changes)) if changes else frozenset()
    parts = [c.durations for c in changes if len(c.durations)]
    durations = pd.concat(parts).groupby(level=0).min() if parts else pd.Series(dtype="float64")
    durations = durations[~durations.index.isin(list(drop))]
    sunk = frozenset().union(*(c.sunk for c in changes)) if changes else frozenset()
    side = frozenset().union(*(c.side for c in changes)) if changes else frozenset()
    return Change(drop, durations, sunk - drop, side - drop)


def record(
    data: RankData,
    rule: str,
    drop: Any = (),
    durations: pd.Series | None = None,
    sunk: Any = (),
    side: Any = (),
) -> float:
    """Keep ``rule``'s change for :func:`joint_gain_ns` and return its replayed gain (ns per
    step, as :func:`gain_ns`)."""
    kept = data.cache.setdefault("replay_changes", {})[rule] = change(drop, durations, sunk, side)
    gain = data.cache.setdefault("replay_gains", {})[rule] = gain_ns(
        data, kept.drop, durations, kept.sunk, kept.side
    )
    return gain


def recorded(data: RankData) -> dict[str, Change]:
    """The changes the rules recorded on ``data`` (rule -> change)."""
    return dict(data.cache.get("replay_changes", {}))


def joint_gain_ns(data: RankData, rules: list[str]) -> float:
    """Mean step time saved (ns per step) with the recorded changes of ``rules`` applied
    together, replayed once (0.0 when none of them recorded one)."""
    kept = recorded(data)
    changes = [kept[r] for r in rules if r in kept]
    if not changes:
        return 0.0
    if len(changes) == 1:  # one change: the gain record() replayed for it
        (rule,) = [r for r in rules if r in kept]
        return data.cache["replay_gains"][rule]
    both = combine(changes)
    return gain_ns(data, both.drop, both.durations, both.sunk, both.side)


def _window(data: RankData) -> tuple[list[int], int | None]:
    """The analysed steps replayed, and the step before them (None when there is none)."""
    ids = sorted(int(s) for s in data.steps["step"])[:MAX_STEPS]
    every = data.all_tasks["step"]
    before = every[every < ids[0]] if ids else every.iloc[:0]
    return ids, (int(before.max()) if len(before) else None)


def stage2_ns(ended: np.ndarray, arrived: np.ndarray, free: float = -np.inf) -> np.ndarray:
    """Each launch's stage 2 in the launch pipeline, read off the records (launches in
    order): its task's arrival less the later of its host launch's end (``ended``) and the
    arrival before (the pipeline takes one launch at a time; ``free``: when it was free
    before the first)."""
    before = np.concatenate([[free], arrived[:-1]]) if len(arrived) else arrived
    return np.clip(arrived - np.maximum(ended, before), 0, None)


def arrival_waits(data: RankData, start: np.ndarray, end: np.ndarray) -> np.ndarray | None:
    """Of each device gap [``start``, ``end``) (ns), the part the device waited for its next
    task to arrive (its recorded ``launch_ns``; the whole gap after the last task); the rest
    of the gap the task had arrived and waited for another stream, an event or resources.
    None for an imported profile, which records no device arrival (its ``launch_ns`` is the
    launch call's end, an estimate)."""
    if data.meta.get("source_format"):
        return None
    tasks = data.all_tasks
    work = tasks.loc[tasks["kind"].isin(WORK_KINDS), ["start_ns", "launch_ns"]]
    work = work.sort_values("start_ns", kind="stable")
    starts = work["start_ns"].to_numpy()
    nxt = np.searchsorted(starts, end, side="left")
    arrival = work["launch_ns"].to_numpy(np.float64)[np.clip(nxt, 0, max(0, starts.size - 1))]
    dur = (end - start).astype(np.float64)
    return np.where(nxt < starts.size, np.clip(arrival - start, 0, dur), dur)


class _Timeline:
    """The recorded rows of the replayed window, as arrays (built once per rank)."""

    def __init__(self, data: RankData) -> None:
        self.ids, prev = _window(data)
        self.prev = prev
        steps = [*self.ids] if prev is None else [prev, *self.ids]
        tasks = data.all_tasks
        cols = ["task_id", "step", "launch_ns", "start_ns", "end_ns", "wait_ns"]
        t = tasks.loc[tasks["step"].isin(steps), cols].sort_values("task_id", kind="stable")
        self.task_id = t["task_id"].to_numpy(np.int64)
        self.step = t["step"].to_numpy(np.int64)
        self.launch = t["launch_ns"].to_numpy(np.int64)
        self.start = t["start_ns"].to_numpy(np.int64)
        self.end = t["end_ns"].to_numpy(np.int64)
        wait = t["wait_ns"].to_numpy(np.int64)
        # stream predecessor: the latest earlier task ending where this one's stream was free
        self.pred = np.full(len(t), -1, np.int64)
        by_end: dict[int, int] = {}
        for i in range(len(t)):
            tail = int(self.start[i] - wait[i])
            self.pred[i] = by_end.get(tail, -1)
            by_end[int(self.end[i])] = i
        tail_rec = np.where(
            self.pred >= 0, self.end[np.clip(self.pred, 0, None)], self.start - wait
        )
        self.tail_rec = tail_rec
        # the wait beyond arrival and stream order (contention, cross-stream events): kept
        self.extra = np.clip(self.start - np.maximum(self.launch, tail_rec), 0, None)
        self.before_end = (
            float(tasks.loc[tasks["step"] < steps[0], "end_ns"].max())
            if (tasks["step"] < steps[0]).any()
            else float(t["launch_ns"].min() if len(t) else 0)
        )
        host = data.all_host
        lo = float(t["launch_ns"].min()) if len(t) else 0.0
        first = host.loc[host["step"].isin(steps[:1]), "start_ns"]
        lo = float(first.min()) if len(first) else lo
        hi_steps = host.loc[host["step"].isin(steps), "end_ns"]
        hi = float(hi_steps.max()) if len(hi_steps) else lo
        h = host.loc[
            host["kind"].astype(str).isin(LEAF_KINDS)
            & (host["start_ns"] >= lo)
            & (host["start_ns"] <= hi),
            ["kind", "name", "start_ns", "end_ns", "task_id"],
        ].sort_values(["start_ns", "end_ns"], kind="stable")
        self.kind = h["kind"].astype(str).to_numpy()
        self.name = h["name"].astype(str).to_numpy()
        self.h_start = h["start_ns"].to_numpy(np.int64)
        self.h_end = h["end_ns"].to_numpy(np.int64)
        n_t = len(self.task_id)
        pos = {int(tid): i for i, tid in enumerate(self.task_id)}
        self.h_task = np.array([pos.get(int(x), -1) for x in h["task_id"]], np.int64)
        # tasks launched by no record of their own (a graph's tasks): with the record before
        self.owner = np.full(len(t), -1, np.int64)
        linked = self.h_task[self.h_task >= 0]
        self.owner[linked] = linked
        last = -1
        for i in range(len(t)):
            last = i if self.owner[i] == i else last
            self.owner[i] = last
        self.sync_ns = data.spec.dispatch.sync_ns if data.spec is not None else 0
        early = tasks.loc[tasks["task_id"] < (self.task_id[0] if n_t else 0), "launch_ns"]
        # each launch's stage 2, read off the records in host order (0 for other records)
        is_launch = (self.kind == "launch") & (self.h_task >= 0)
        at = self.h_task[is_launch]
        self.stage2 = np.zeros(len(self.kind))
        self.stage2[is_launch] = stage2_ns(
            self.h_end[is_launch].astype(np.float64),
            self.launch[at].astype(np.float64),
            float(early.max()) if len(early) else 0.0,
        )
        self.stage2_free = float(early.max()) if len(early) else 0.0
        self.step_end_rec = self._step_ends(self.end)
        self._unchanged: np.ndarray | None = None

    def _step_ends(self, end: np.ndarray) -> np.ndarray:
        """Each replayed analysed step's end (the running maximum of its tasks' ends) and,
        first, the end of the step before."""
        running = self.before_end
        if self.prev is not None and (self.step == self.prev).any():
            running = max(running, float(end[self.step == self.prev].max()))
        out = [running]
        for s in self.ids:
            mask = self.step == s
            if mask.any():
                running = max(running, float(end[mask].max()))
            out.append(running)
        return np.asarray(out)

    def unchanged(self) -> np.ndarray:
        """The replayed step ends with no change (what every gain is measured against),
        replayed once."""
        if self._unchanged is None:
            durations = (self.end - self.start).astype(np.float64)
            self._unchanged = self.run(np.zeros(len(self.task_id), bool), durations)
        return self._unchanged

    def run(
        self,
        dropped: np.ndarray,
        duration: np.ndarray,
        sunk: np.ndarray | None = None,
        side: np.ndarray | None = None,
    ) -> np.ndarray:
        """Replayed step ends with ``dropped`` tasks removed, task durations ``duration``,
        ``sunk`` tasks launched by a compiled graph and ``side`` ones (sunk) run on streams
        of their own (all indexed like the window's tasks)."""
        n = len(self.task_id)
        if sunk is None:
            sunk = np.zeros(n, bool)
        if side is None:
            side = np.zeros(n, bool)
        end = self.end.astype(np.float64).copy()
        # a side task's own end; ``end`` holds where its old stream goes on from (as dropped)
        side_end = np.full(n, -np.inf)
        arrival = self.launch.astype(np.float64).copy()
        done = np.zeros(n, bool)
        host = float(self.h_start[0]) if len(self.h_start) else 0.0
        prev_end_rec = host
        stage2_free = self.stage2_free
        latest = self.before_end  # the latest replayed task end so far
        last_launched = -1

        def place(i: int) -> None:
            nonlocal latest
            p = int(self.pred[i])
            tail = end[p] if p >= 0 and done[p] else float(self.tail_rec[i])
            if dropped[i]:
                end[i] = tail  # the stream goes on from the task before
            elif side[i]:  # on a stream of its own; its old stream goes on as if dropped
                end[i] = tail
                side_end[i] = arrival[i] + float(duration[i])
                latest = max(latest, side_end[i])
            else:
                start = max(arrival[i], tail) + float(self.extra[i])
                end[i] = start + float(duration[i])
                latest = max(latest, end[i])
            done[i] = True

        for k in range(len(self.kind)):
            gap = float(self.h_start[k]) - prev_end_rec
            own = float(self.h_end[k] - self.h_start[k])
            prev_end_rec = float(self.h_end[k])
            i = int(self.h_task[k])
            kind = self.kind[k]
            in_graph = kind == "launch" and i >= 0 and sunk[i] and not dropped[i]
            if not in_graph:  # a sunk launch's dispatch runs in the graph, not on the host
                host += max(0.0, gap)
            if kind == "launch" and i >= 0:
                if in_graph:
                    arrival[i] = host
                elif not dropped[i]:
                    host += own
                    arrival[i] = stage2_free = max(host, stage2_free) + float(self.stage2[k])
                # the launch's graph tasks (no record of their own) follow it
                j = i
                while j < n and self.owner[j] == i:
                    if j != i:
                        arrival[j] = arrival[i] + float(self.launch[j] - self.launch[i])
                    place(j)
                    j += 1
                last_launched = i
            elif kind == "sync":
                ended = np.maximum(end, side_end)
                host = max(host, self._sync_target(k, ended, arrival, latest, last_launched))
                host += min(own, float(self.sync_ns))
            else:
                host += own
        return self._step_ends(np.maximum(end, side_end))

    def _sync_target(
        self, k: int, end: np.ndarray, arrival: np.ndarray, latest: float, last: int
    ) -> float:
        """The replayed time sync record ``k`` waits for."""
        target = float(self.h_end[k]) - self.sync_ns
        if target > self.h_start[k]:  # it waited: for the task that ended (or arrived) then
            hit = np.flatnonzero(self.end == target)
            if len(hit):
                return float(end[hit[-1]])
            hit = np.flatnonzero(self.launch == target)
            if len(hit):
                return float(arrival[hit[-1]])
        if self.name[k].endswith("(wait)") and last >= 0:
            return float(end[last])
        return latest


def _timeline(data: RankData) -> _Timeline | None:
    cached = data.cache.get("replay", False)
    if cached is not False:
        return cached
    ok = len(data.steps) and len(data.all_tasks) and len(data.all_host)
    result = data.cache["replay"] = _Timeline(data) if ok else None
    return result


def gain_ns(
    data: RankData,
    drop: Any = (),
    durations: pd.Series | None = None,
    sunk: Any = (),
    side: Any = (),
) -> float:
    """Mean step time saved (ns per step) by removing the tasks ``drop`` (task ids), giving
    tasks the durations ``durations`` (indexed by task id) and running the tasks ``sunk``
    in a compiled graph, ``side`` of them beside the rest (:class:`Change`), replayed (0.0
    without host records to replay)."""
    tl = _timeline(data)
    if tl is None or not len(tl.ids):
        return 0.0
    dropped = np.isin(tl.task_id, np.asarray(list(drop), np.int64))
    base = (tl.end - tl.start).astype(np.float64)
    changed = base.copy()
    if durations is not None and len(durations):
        new = durations.reindex(tl.task_id).to_numpy(np.float64)
        changed = np.where(np.isnan(new), base, new)
    in_graph = np.isin(tl.task_id, np.asarray(list(sunk), np.int64))
    beside = in_graph & np.isin(tl.task_id, np.asarray(list(side), np.int64))
    before = tl.unchanged()
    after = tl.run(dropped, changed, in_graph, beside)
    k = len(tl.ids)
    return float((before[-1] - before[0]) - (after[-1] - after[0])) / k


def check_ns(data: RankData) -> tuple[float, float]:
    """(recorded, replayed) mean step time of the replayed steps, with no change: the
    replay's own error (tests and diagnostics)."""
    tl = _timeline(data)
    if tl is None or not len(tl.ids):
        return 0.0, 0.0
    replayed = tl.unchanged()
    k = len(tl.ids)
    return float(tl.step_end_rec[-1] - tl.step_end_rec[0]) / k, float(
        replayed[-1] - replayed[0]
    ) / k
