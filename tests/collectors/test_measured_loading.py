"""Measured host time (``host_time="measured"``): a data-loading range spans the real time in
it on the timeline, and the profiler's own hooks are left out of the script's Python time."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPT = """
import sys, time, torch, msprof_py, msprof_py.adapter
from torch.utils.data import DataLoader, Dataset

msprof_py.adapter.install(host_time="measured")

class Sleepy(Dataset):
    def __len__(self):
        return 8
    def __getitem__(self, i):
        time.sleep(0.004)
        return torch.full((8,), float(i)), torch.tensor(i % 4)

model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))
model = model.to("npu")
opt = torch.optim.SGD(model.parameters(), lr=0.1)
with msprof_py.record(sys.argv[1]) as rec:
    for x, y in DataLoader(Sleepy(), batch_size=2):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x.to("npu")), y.to("npu")).backward()
        opt.step()
profile = rec.load()
h = profile.host_events
ranges = h[h["name"].astype(str).str.contains("DataLoader") & (h["step"] < 4)]
finding = rec.analyze().finding("slow_dataloader")
print(json.dumps({
    "lengths": (ranges["end_ns"] - ranges["start_ns"]).tolist(),
    "hooks_ns": profile.meta[0].get("profiler_hooks_ns"),
    "status": finding.status,
    "gain_basis": finding.gain_basis,
}))
"""


@pytest.mark.slow
def test_measured_host_time_gives_loading_ranges_their_real_length(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("import json\n" + textwrap.dedent(SCRIPT))
    result = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    got = json.loads(result.stdout.strip().splitlines()[-1])
    # two items of 4 ms per batch: each __next__ holds at least 8 ms of real time
    assert len(got["lengths"]) == 4 and min(got["lengths"]) >= 8_000_000, got["lengths"]
    assert got["hooks_ns"] > 0  # the module hooks' time, left out of the Python time
    assert got["status"] == "fired"
    assert "cannot be measured apart" in got["gain_basis"]
