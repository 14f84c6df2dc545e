"""The whole OpInfo database on npu vs CPU (slow: about 20 minutes on a 2-core machine).

It runs through tests/conformance/report.py's worker processes, so an op that crashes the
interpreter is reported as an error instead of ending the test run.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from opinfo_runner import op_db, unexpected
from report import run_all, summarize


@pytest.mark.slow
def test_whole_opinfo_database_matches_cpu(tmp_path: Path) -> None:
    records = run_all(list(op_db()), tmp_path, case_timeout=300, max_samples=None, fresh=True)
    (tmp_path / "summary.md").write_text(summarize(records, "pytest -m slow"), encoding="utf-8")
    assert len({r["op"] for r in records}) == len(op_db())
    failures = unexpected(records)
    assert not failures, "\n".join(failures)
