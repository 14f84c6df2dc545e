"""Imported first by every Python process ``msprof`` launches (via ``PYTHONPATH``).

It starts a recording session from the configuration the launcher put in the environment, then
runs the ``sitecustomize`` this one shadows, if there is one. A torchrun agent records nothing
(its workers do), and neither does any process that never uses the npu device.
"""

import os
import sys


def _start() -> None:
    config = os.environ.get("MSPROF_PY_CONFIG")
    if not config:
        return
    program = os.path.basename(sys.argv[0]) if sys.argv else ""
    if program in ("torchrun", "torch.distributed.run"):
        return
    try:
        from msprof_py.collectors.session import SessionConfig, start_session

        start_session(SessionConfig.from_json(config))
    except Exception as exc:  # never let profiling keep the user's program from running
        print(f"msprof: recording disabled in this process: {exc}", file=sys.stderr)


def _chain() -> None:
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    path = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


_start()
_chain()
