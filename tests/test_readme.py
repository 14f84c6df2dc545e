"""The README's device example runs and prints what its comments say."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def _example(marker: str) -> tuple[str, list[str]]:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    example = next(b for b in blocks if marker in b)
    expected = [
        line.split("  # ", 1)[1].split(": ")[0].strip()
        for line in example.splitlines()
        if line.startswith("print(") and "  # " in line
    ]
    return example, expected


@pytest.mark.parametrize("marker", ["SimulatedNpu(", "msprof_py.adapter.install()"])
def test_examples_print_the_documented_values(marker: str) -> None:
    example, expected = _example(marker)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(example, "README.md", "exec"), {})
    assert out.getvalue().split("\n")[: len(expected)] == expected
