"""Hand-built profiles for the report tests: a synthetic training step, repeated with numpy up to
any number of device tasks (a million in about a second), and helpers to open a report in
headless Chromium with the network blocked."""

from __future__ import annotations

import base64
import json
import time
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from msprof_py.profile import TABLES, Profile
from msprof_py.profile.schema import default_row

CHROMIUM = "/usr/bin/chromium"
US = 1_000

#: one step: (name, op_type, task_type, stream, duration in us, flops, bytes, input shapes)
STEP_OPS = [
    ("aten::mm", "MatMul", "AI_CORE", 0, 12, 2 * 256**3, 3 * 256 * 256 * 2, "256,256;256,256"),
    ("aten::add", "Add", "AI_VECTOR_CORE", 0, 3, 256 * 256, 3 * 256 * 256 * 2, "256,256;256,256"),
    ("aten::relu", "Relu", "AI_VECTOR_CORE", 0, 2, 256 * 256, 2 * 256 * 256 * 2, "256,256"),
    ("aten::convolution", "Conv2D", "AI_CORE", 0, 20, 2 * 8 * 64 * 64 * 9 * 32 * 32, 10**6, ""),
    ("aten::copy_", "MEMCPY_H2D", "DMA", 1, 6, 0, 256 * 256 * 2, "256,256"),
]
KERNELS_PER_STEP = 200  # the ops above in turn
HOST_US = 4  # host time per op: the host runs ahead of the device


def _frame(name: str, columns: dict[str, Any], n: int) -> pd.DataFrame:
    row = default_row(name)
    data = {c: columns[c] if c in columns else np.full(n, row[c]) for c in TABLES[name].names}
    df = pd.DataFrame(data)
    for column in TABLES[name].columns:  # the schema's integer widths
        if pa.types.is_int32(column.type):
            df[column.name] = df[column.name].astype(np.int32)
    df.insert(0, "rank", 0)
    return df


def synthetic_profile(path: Path, tasks: int) -> Profile:
    """A one-rank profile of at least ``tasks`` device tasks on two streams (kernels on stream 0,
    host-to-device copies on stream 1), one host op (and its launch) per task, two memory
    events per step and the step table; built with numpy, no Python loop per row."""
    ops = [STEP_OPS[i % len(STEP_OPS)] for i in range(KERNELS_PER_STEP)]
    per_step = len(ops)
    steps = -(-tasks // per_step)
    n = steps * per_step
    stream = np.array([o[3] for o in ops], dtype=np.int32)
    dur = np.array([o[4] for o in ops], dtype=np.int64) * US
    # device: each stream runs its tasks back to back, from 10 us after the step starts
    offset = np.zeros(per_step, dtype=np.int64)
    for s in (0, 1):
        mine = stream == s
        offset[mine] = np.cumsum(dur[mine]) - dur[mine]
    period = int(max(offset.max() + dur.max(), per_step * HOST_US * US)) + 50 * US
    k = np.repeat(np.arange(steps, dtype=np.int64), per_step)
    j = np.tile(np.arange(per_step, dtype=np.int64), steps)
    host_start = k * period + j * HOST_US * US
    start = k * period + 10 * US + offset[j]
    end = start + dur[j]

    def col(i: int) -> np.ndarray:
        return np.array([o[i] for o in ops], dtype=object)[j]

    name, op_type, task_type, shapes = col(0), col(1), col(2), col(7)
    copy = op_type == "MEMCPY_H2D"
    task_cols = {
        "task_id": np.arange(n, dtype=np.int64),
        "stream_id": stream[j],
        "kind": np.where(copy, "memcpy", "kernel").astype(object),
        "task_type": task_type,
        "name": name,
        "op_type": op_type,
        "block_dim": np.where(copy, 1, 20),
        "launch_ns": host_start + 3 * US,
        "start_ns": start,
        "end_ns": end,
        "flops": np.array([o[5] for o in ops], dtype=float)[j],
        "bytes": np.array([o[6] for o in ops], dtype=np.int64)[j],
        "input_shapes": shapes,
        "input_dtypes": np.full(n, "float16", dtype=object),
        "input_formats": np.full(n, "ND", dtype=object),
        "output_shapes": np.full(n, "256,256", dtype=object),
        "output_dtypes": np.full(n, "float16", dtype=object),
        "output_formats": np.full(n, "ND", dtype=object),
        "copy_kind": np.where(copy, "HOST_TO_DEVICE", "").astype(object),
        "host_op_id": 2 * np.arange(n, dtype=np.int64),
        "step": k,
    }
    host_op = {
        "event_id": 2 * np.arange(n, dtype=np.int64),
        "kind": np.full(n, "op", dtype=object),
        "name": name,
        "start_ns": host_start,
        "end_ns": host_start + (HOST_US - 1) * US,
        "thread": np.ones(n, dtype=np.int64),
        "stream_id": np.full(n, -1),
        "step": k,
        "input_shapes": shapes,
        "input_dtypes": np.full(n, "float16", dtype=object),
        "module": np.full(n, "Model/Block", dtype=object),
    }
    launch = {
        "event_id": 2 * np.arange(n, dtype=np.int64) + 1,
        "kind": np.full(n, "launch", dtype=object),
        "name": np.full(n, "aclopCompileAndExecute", dtype=object),
        "start_ns": host_start + 2 * US,
        "end_ns": host_start + 3 * US,
        "thread": np.ones(n, dtype=np.int64),
        "stream_id": stream[j],
        "task_id": np.arange(n, dtype=np.int64),
        "parent_id": 2 * np.arange(n, dtype=np.int64),
        "step": k,
    }
    host = pd.concat([_frame("host_events", host_op, n), _frame("host_events", launch, n)])
    host = host.sort_values("event_id", kind="stable").reset_index(drop=True)
    ks = np.arange(steps, dtype=np.int64)
    size = 256 * 256 * 2
    mem = {
        "time_ns": np.ravel(np.column_stack([ks * period + US, ks * period + period - US])),
        "action": np.tile(np.array(["malloc", "free"], dtype=object), steps),
        "address": np.full(2 * steps, 4096),
        "size": np.full(2 * steps, size),
        "allocated": np.tile([size, 0], steps),
        "reserved": np.full(2 * steps, 2 * 2**20),
        "active": np.tile([size, 0], steps),
        "tag": np.full(2 * steps, "aten::empty", dtype=object),
        "step": np.repeat(ks, 2),
    }
    step_cols = {
        "step": ks,
        "start_ns": ks * period,
        "end_ns": (ks + 1) * period,
        "source": np.full(steps, "optimizer", dtype=object),
    }
    tables = {
        "tasks": _frame("tasks", task_cols, n),
        "host_events": host,
        "memory": _frame("memory", mem, 2 * steps),
        "steps": _frame("steps", step_cols, steps),
    }
    return Profile(path, one_rank_meta(f"python synthetic.py --tasks {tasks}"), tables)


def one_rank_meta(command: str) -> dict[int, dict]:
    """The metadata of a hand-made single-rank profile on the default device."""
    return {
        0: {
            "command": command,
            "device": "ascend910b",
            "numerics": "cpu",
            "host_time": "modeled",
            "status": "completed",
            "rank": 0,
            "world_size": 1,
        }
    }


def typed_array(spec: Any) -> np.ndarray:
    """A data array of the report: a base64 typed array (``{"dtype", "bdata"}``, zlib'd when
    ``z`` is set) decoded, or a plain list as an array."""
    if not isinstance(spec, dict):
        return np.asarray(spec)
    raw = base64.b64decode(spec["bdata"])
    if spec.get("z"):
        raw = zlib.decompress(raw)
    return np.frombuffer(raw, dtype="<" + spec["dtype"])


def _label(page: Any) -> str | None:
    """The timeline's hover label, if one shows within 5 s."""
    label = page.locator("#fig-timeline .hoverlayer .hovertext")
    try:
        label.first.wait_for(timeout=5_000)
    except Exception:
        return None
    return label.first.text_content()


def offline_page(browser: Any, errors: list[str]) -> Any:
    """A 1,400 x 1,000 page that loads only file:// URLs (the network blocked) and collects
    console and page errors into ``errors``."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.route(
        "**/*",
        lambda route: (
            route.continue_() if route.request.url.startswith("file://") else route.abort()
        ),
    )
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    return page


def open_report(
    report: Path,
    timeout_ms: int = 60_000,
    hover: tuple[float, float] | None = None,
    screenshot: Path | None = None,
    hover_span: tuple[str, float, float] | None = None,
    click_op_link: bool = False,
) -> dict[str, Any]:
    """Open ``report`` in headless Chromium (network blocked) until the timeline is drawn.

    Returns ``errors`` (console errors and page errors), ``load_ms`` (the navigation's
    ``loadEventEnd``: the page parsed and every figure's first draw done), ``wall_s`` (from
    ``goto`` until the timeline's SVG exists), ``notes`` (the level-of-detail notes shown),
    ``page`` facts read in the browser (the timeline's traces, WebGL canvases and lanes, the
    sections shown, the figures drawn), and ``hover``: the hover label shown after moving the
    mouse to ``hover`` = (fraction across, fraction down) of the timeline's plot area; with
    ``hover_span`` = (lane, start us, end us): the timeline zoomed to three times the span, the
    mouse an eighth of the span in from its start (far from its middle), ``span_hover`` is
    the label shown there. ``click_op_link``: the first op link of the recommendations is
    clicked; ``op_link`` is its (start, end) and ``op_range`` the timeline's x range after.
    """
    from playwright.sync_api import sync_playwright

    errors: list[str] = []
    args = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]
    args.append("--disable-background-networking")
    out: dict[str, Any] = {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=args)
        try:
            page = offline_page(browser, errors)
            t0 = time.perf_counter()
            page.goto(report.as_uri(), timeout=timeout_ms, wait_until="load")
            page.wait_for_selector("#fig-timeline .main-svg", timeout=timeout_ms)
            out["wall_s"] = time.perf_counter() - t0
            nav = json.loads(
                page.evaluate(
                    "JSON.stringify(performance.getEntriesByType('navigation')[0].toJSON())"
                )
            )
            out["load_ms"] = float(nav["loadEventEnd"])
            # the labels' first draw (after load): hover and clicks after it
            page.wait_for_function(
                "() => window.msprofTimeline && window.msprofTimeline.drawn", timeout=timeout_ms
            )
            out["notes"] = page.locator("#timeline p.note").all_inner_texts()
            out["page"] = page.evaluate(
                """() => {
                  const gd = document.getElementById('fig-timeline');
                  const shown = (el) => el.offsetParent !== null;
                  return {traces: gd.data.length, gl: gd.querySelectorAll('canvas').length,
                          lanes: gd.layout.yaxis.ticktext,
                          sections: [...document.querySelectorAll('section')]
                            .filter(shown).map((s) => s.id),
                          figures: [...document.querySelectorAll('.fig')]
                            .filter((f) => f.querySelector('.main-svg')).map((f) => f.id)};
                }"""
            )
            if hover is not None:
                page.locator("#fig-timeline").scroll_into_view_if_needed()
                box = page.locator("#fig-timeline .nsewdrag").first.bounding_box()
                assert box is not None
                x, y = box["x"] + box["width"] * hover[0], box["y"] + box["height"] * hover[1]
                page.mouse.move(x - 5, y)
                page.mouse.move(x, y, steps=3)
                out["hover"] = _label(page)
            if hover_span is not None:
                lane, s, e = hover_span
                d = e - s
                page.locator("#fig-timeline").scroll_into_view_if_needed()
                page.evaluate(
                    "([a, b]) => Plotly.relayout('fig-timeline', "
                    "{'xaxis.range': [a, b], 'xaxis2.range': [a, b]})",
                    [s - d, e + d],
                )
                px, py = page.evaluate(
                    """([x, lane]) => {
                      const gd = document.getElementById('fig-timeline');
                      const r = gd.getBoundingClientRect();
                      const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
                      const y = gd.layout.yaxis.ticktext.indexOf(lane);
                      return [r.left + xa._offset + xa.l2p(x), r.top + ya._offset + ya.l2p(y)];
                    }""",
                    [s + d / 8, lane],
                )
                page.mouse.move(px - 3, py)
                page.mouse.move(px, py, steps=3)
                out["span_hover"] = _label(page)
            if click_op_link:
                link = page.locator("a.op-link").first
                out["op_link"] = (
                    float(link.get_attribute("data-start") or "nan"),
                    float(link.get_attribute("data-end") or "nan"),
                )
                link.click()
                page.wait_for_timeout(300)
                out["op_range"] = page.evaluate(
                    "() => document.getElementById('fig-timeline')._fullLayout.xaxis.range"
                )
            if screenshot is not None:
                page.screenshot(path=str(screenshot), full_page=False)
        finally:
            browser.close()
    out["errors"] = errors
    return out
