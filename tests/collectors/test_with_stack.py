"""``msprof --with-stack``: Python stacks per host op, the module tree of a recorded nested
model, and ``msprof analyze --folded-stacks`` (recorded stacks, or module paths without)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import msprof_py
from msprof_py.analyzers import analyze
from msprof_py.analyzers.flame import write_folded

MSPROF = [sys.executable, "-m", "msprof_py.cli_entry"]

MODEL = """
import torch


class Attn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x):
        return torch.relu(self.proj(x))  # ATTN LINE


class Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = Attn()
        self.mlp = torch.nn.Linear(8, 8)

    def forward(self, x):
        return self.mlp(self.attn(x))


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([Layer() for _ in range(2)])
        self.head = torch.nn.Linear(8, 2)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def train(steps=3):
    net = Net().to("npu")
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    x = torch.randn(4, 8, device="npu")
    for _ in range(steps):
        opt.zero_grad()
        loss = net(x).sum()  # TRAIN LINE
        loss.backward()
        opt.step()


if __name__ == "__main__":
    train()
"""


def _line(marker: str) -> int:
    return next(i for i, text in enumerate(MODEL.splitlines(), 1) if marker in text)


def _folded(path: Path) -> list[tuple[list[str], float]]:
    out = []
    for line in path.read_text().splitlines():
        frames, value = line.rsplit(" ", 1)
        out.append((frames.split(";"), float(value)))
    return out


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One msprof --with-stack run of the nested model; its run folder."""
    cwd = tmp_path_factory.mktemp("with_stack")
    (cwd / "model.py").write_text(textwrap.dedent(MODEL))
    run = subprocess.run(
        [
            *MSPROF,
            "--with-stack",
            "--export=none",
            "--no-report",
            "--output=out",
            "python",
            "model.py",
        ],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    (folder,) = sorted((cwd / "out").glob("msprof_*"))
    return folder


def test_stacks_hold_the_users_frames_and_no_msprof_or_torch_frames(recorded: Path) -> None:
    profile = msprof_py.load(recorded)
    assert profile.meta[0]["with_stack"] is True
    ops = profile.host_events[profile.host_events["kind"] == "op"]
    relu = ops[ops["name"] == "aten::relu"]
    (stack,) = set(relu["stack"])
    frames = stack.split(";")
    assert frames[-1] == f"model.py:{_line('ATTN LINE')}(Attn.forward)"
    assert f"model.py:{_line('TRAIN LINE')}(train)" in frames
    assert frames[0].startswith("model.py:") and frames[0].endswith("(<module>)")
    every = {f for s in set(ops["stack"]) for f in s.split(";") if f}
    assert every
    assert not [f for f in every if "msprof_py" in f or "/torch/" in f]


def test_recorded_module_tree_has_instance_paths_and_adds_up(recorded: Path) -> None:
    a = analyze(recorded)
    tree = a.modules["tree"]
    assert list(tree["module"]) == [
        "",
        "layers",
        "layers.0",
        "layers.0.attn",
        "layers.0.attn.proj",
        "layers.0.mlp",
        "layers.1",
        "layers.1.attn",
        "layers.1.attn.proj",
        "layers.1.mlp",
        "head",
    ]
    assert set(tree["module"]) - {""} == {n for n, _ in _net_modules()}
    root = tree.iloc[0]
    assert tree["self_ns"].sum() == pytest.approx(root["total_ns"])
    assert root["total_backward_ns"] > 0
    for path in ("layers.0.mlp", "layers.1.attn.proj", "head"):
        row = tree.set_index("module").loc[path]
        assert row["self_forward_ns"] > 0 and row["self_backward_ns"] > 0
    # layer 0's proj computes no input gradient (x needs none): less backward than layer 1's
    by = tree.set_index("module")["self_backward_ns"]
    assert by["layers.0.attn.proj"] < by["layers.1.attn.proj"]


def _net_modules() -> list[tuple[str, object]]:
    namespace: dict = {}
    exec(textwrap.dedent(MODEL).replace('if __name__ == "__main__":', "if False:"), namespace)
    return [(n, m) for n, m in namespace["Net"]().named_modules() if n]


def test_folded_stacks_parse_and_sum_to_the_op_device_time(recorded: Path, tmp_path) -> None:
    out = tmp_path / "out.folded"
    a = analyze(recorded)
    assert write_folded(a, out)[1] == "stacks"
    lines = _folded(out)
    (s,) = a.modules["summary"]
    steps = len(a.profile["steps_analysed"])
    assert sum(v for _, v in lines) == pytest.approx(s["device_ns_per_step"] * steps / 1e3)
    attn = f"model.py:{_line('ATTN LINE')}(Attn.forward)"
    leaves = {frames[-1] for frames, _ in lines if attn in frames}
    assert {"aten::relu", "aten::addmm", "aten::threshold_backward (backward)"} <= leaves


def test_without_stacks_frames_are_module_paths(tmp_path: Path) -> None:
    namespace: dict = {}
    exec(textwrap.dedent(MODEL).replace('if __name__ == "__main__":', "if False:"), namespace)
    with msprof_py.record(tmp_path / "prof") as rec:
        namespace["train"](steps=2)
    a = rec.analyze()
    assert rec.load().meta[0]["with_stack"] is False
    flame = a.modules["flame"]
    assert set(flame["source"]) == {"modules"}
    assert "Net;layers;1;attn;proj;aten::addmm" in set(flame["frames"])
    out = tmp_path / "m.folded"
    result = subprocess.run(
        [*MSPROF, "analyze", str(rec.run_dir), "--folded-stacks", str(out), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "frames are module paths" in result.stderr
    assert all(frames[0] == "Net" for frames, _ in _folded(out))


def test_the_ascend_export_carries_the_stacks_as_torch_npu_writes_them(
    recorded: Path, tmp_path: Path
) -> None:
    """trace_view.json ``Call stack`` args and operator_details.csv ``Call Stack``: innermost
    frame first, ``;\\r\\n`` between frames."""
    import csv
    import json
    import shutil

    from msprof_py.exporters import export_run

    run = tmp_path / recorded.name
    shutil.copytree(recorded, run)
    rank = next(run.glob("*_ascend_pt"))
    export_run(rank)
    out = rank / "ASCEND_PROFILER_OUTPUT"
    stored = {
        (r.name, int(r.start_ns)): r.stack
        for r in msprof_py.load(run).host_events.itertuples()
        if r.kind == "op" and r.stack
    }
    want = {";\r\n".join(reversed(s.split(";"))) for s in stored.values()}
    events = json.loads((out / "trace_view.json").read_text())
    got = {e["args"]["Call stack"] for e in events if "Call stack" in e.get("args", {})}
    assert got == want and any(";\r\n" in s for s in got)
    assert all(s.split(";\r\n")[0].startswith("model.py:") for s in got)  # innermost first
    with open(out / "operator_details.csv", newline="", encoding="utf-8") as f:
        cells = {row["Call Stack"] for row in csv.DictReader(f)} - {""}
    assert cells and cells <= want


def test_the_report_shows_each_ops_call_site(recorded: Path) -> None:
    """The page's span store gives host-op spans their innermost user frame (the click panel's
    "Call site"); ops without a stack (autograd thread) have none."""
    from msprof_py.report.timeline import timeline

    profile = msprof_py.load(recorded)
    *_, store = timeline(profile)
    names = store["names"]
    lanes = [lane for lane in store["lanes"] if lane and "c" in lane]
    assert lanes, "no lane carries call sites"
    sites = {names[c] for lane in lanes for c in lane["c"]}
    assert any(s.startswith("model.py:") and s.endswith("(Attn.forward)") for s in sites), sites
    ops = profile.host_events[profile.host_events["kind"] == "op"]
    want = {s.rsplit(";", 1)[-1] for s in ops["stack"] if s}
    assert sites - {""} == want
