"""A profile's fingerprint (table digests, row counts, gate figures), to compare recordings
made in different interpreters. ``python fingerprint.py OUT THREADS`` records the small
profile of ``conftest.record_small`` with ``THREADS`` torch threads and prints its fingerprint."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path


def fingerprint(run: Path) -> dict:
    """Digests of every table (``host_events`` without ``thread``: an OS thread id, different
    in every process), row counts and the gate figures of every rank."""
    import msprof_py
    from msprof_py.gates.gate import rank_figures

    profile = msprof_py.load(run)
    digests = {}
    for name, table in profile.tables.items():
        if name == "host_events":
            table = table.drop(columns="thread")
        digests[name] = hashlib.sha256(table.to_csv(index=False).encode()).hexdigest()
    figs, _ = rank_figures(run)
    return {
        "tables": digests,
        "rows": {k: len(v) for k, v in profile.tables.items()},
        "figures": {str(r): f.to_dict() for r, f in figs.items()},
    }


if __name__ == "__main__":
    import torch
    from conftest import record_small

    torch.set_num_threads(int(sys.argv[2]))
    print(json.dumps(fingerprint(record_small(Path(sys.argv[1]))), sort_keys=True))
