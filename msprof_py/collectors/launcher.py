"""Running ``--application`` as a child process under the recording bootstrap.

The child dies with msprof: on Linux it asks the kernel (``prctl(PR_SET_PDEATHSIG)``) for a
SIGTERM when msprof dies, however it dies (SIGKILL, the OOM killer), so it never trains on as an
orphan. SIGTERM, not SIGKILL: the recording session flushes the profile on SIGTERM (status
``terminated``), and torchrun passes it on to its workers, so what was recorded stays loadable.

A recorded child tells msprof when its profile is complete and it is exiting
(:data:`PROFILE_DONE`): the interpreter's teardown that follows (a few tenths of a second once
torch is loaded) need not delay the analysis, which can start beside it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from msprof_py.collectors.config import CONFIG_ENV, PROFILE_DONE, SessionConfig

BOOTSTRAP_DIR = Path(__file__).resolve().parent / "bootstrap"
PACKAGE_ROOT = Path(__file__).resolve().parents[2]


#: prctl(2) option: the signal this process gets when its parent dies
PR_SET_PDEATHSIG = 1


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:  # the C library is loaded already: its symbols, without find_library's ldconfig run
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def die_with_parent(parent: int, libc: ctypes.CDLL | None, signum: int = signal.SIGTERM) -> None:
    """In a freshly forked child (a ``preexec_fn``): get ``signum`` when the parent dies; if
    it died already (before this ran), take the signal now."""
    if libc is None:
        return
    libc.prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0)
    if os.getppid() != parent:
        os.kill(os.getpid(), signum)


class LaunchError(RuntimeError):
    """The application could not be started (message says why)."""


def resolve_command(argv: list[str]) -> list[str]:
    """Run ``python``/``python3``/``torchrun`` with this interpreter's environment."""
    if not argv:
        raise LaunchError('no application given (use --application="python train.py")')
    first = argv[0]
    if first in ("python", "python3") or first.startswith("python3."):
        return [sys.executable, *argv[1:]]
    if first == "torchrun":
        return [sys.executable, "-m", "torch.distributed.run", *argv[1:]]
    return argv


def check_script(argv: list[str]) -> None:
    """Fail early with a clear message when the Python script to run does not exist."""
    if (len(argv) >= 2 and Path(argv[0]).name.startswith("python")) or argv[0] == "torchrun":
        for arg in argv[1:]:
            if arg == "-m" or arg == "-c":
                return
            if arg.startswith("-"):
                continue
            if arg.endswith(".py") and not Path(arg).is_file():
                raise LaunchError(f"script not found: {arg}")
            return


def split_application(application: str) -> list[str]:
    """``--application="python train.py --lr 0.1"`` as an argument list."""
    try:
        return shlex.split(application)
    except ValueError as exc:
        raise LaunchError(f"cannot parse --application: {exc}") from None


@contextlib.contextmanager
def profile_done_notices() -> Iterator[int | None]:
    """While the block runs, :data:`PROFILE_DONE` is caught rather than fatal; yields the pid
    for ``SessionConfig.notify_pid`` (None where notices cannot be waited for: not the main
    thread, no ``sigtimedwait``)."""
    if not hasattr(signal, "sigtimedwait"):
        yield None
        return
    try:
        previous = signal.signal(PROFILE_DONE, _ignore_notice)
    except ValueError:  # not the main thread
        yield None
        return
    try:
        yield os.getpid()
    finally:
        signal.signal(PROFILE_DONE, previous)


def _ignore_notice(signum: int, frame: object) -> None:
    """A notice that came outside :func:`wait` (or from no child of ours): nothing to do."""


def start(argv: list[str], config: SessionConfig) -> subprocess.Popen:
    """Start the application with recording on (:func:`wait` waits for it)."""
    check_script(argv)
    command = resolve_command(argv)
    env = dict(os.environ)
    path = [str(BOOTSTRAP_DIR), str(PACKAGE_ROOT)]
    if env.get("PYTHONPATH"):
        path.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(path)
    env[CONFIG_ENV] = config.to_json()
    if config.deterministic:
        env["PYTHONHASHSEED"] = "0"
    parent, libc = os.getpid(), _libc()
    try:
        child = subprocess.Popen(command, env=env, preexec_fn=lambda: die_with_parent(parent, libc))
    except OSError as exc:
        raise LaunchError(f"cannot start {command[0]}: {exc.strerror}") from None
    return child


#: ``siginfo.si_code`` of a signal the kernel raised itself (the terminal's Ctrl-C)
SI_KERNEL = 0x80
FORWARDED = (signal.SIGINT, signal.SIGTERM)


def wait(child: subprocess.Popen, until_done: bool = False) -> int | None:
    """Wait for ``child`` (:func:`start` started it), passing on SIGINT and SIGTERM sent to
    msprof (as torchrun does for its workers): ``kill -INT <msprof>``, ``timeout -s INT`` or a
    supervisor end the run the way Ctrl-C does. A Ctrl-C from the terminal already reached the
    child (same process group), so it is not sent twice. Returns the exit code (128+N for
    signal N), or None when ``until_done`` and the child sent :data:`PROFILE_DONE` (it is then
    still exiting)."""
    if not hasattr(signal, "sigtimedwait"):  # no siginfo: forward SIGTERM, leave SIGINT
        return _wait_with_handlers(child)
    watched = {*FORWARDED, signal.SIGCHLD, PROFILE_DONE}
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, watched)
    try:
        while child.poll() is None:
            info = signal.sigtimedwait(watched, 0.5)
            if info is None or info.si_signo == signal.SIGCHLD:
                continue
            if info.si_signo == PROFILE_DONE:
                if until_done and info.si_pid == child.pid:
                    return None
                continue
            if info.si_signo == signal.SIGINT and info.si_code == SI_KERNEL:
                continue  # the terminal's Ctrl-C: the child got it too
            with contextlib.suppress(ProcessLookupError):
                child.send_signal(info.si_signo)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    code = child.returncode
    return 128 - code if code < 0 else code


def _wait_with_handlers(child: subprocess.Popen) -> int:
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    forward = signal.signal(signal.SIGTERM, lambda signum, frame: child.send_signal(signum))
    try:
        code = child.wait()
    finally:
        signal.signal(signal.SIGINT, previous)
        signal.signal(signal.SIGTERM, forward)
    return 128 - code if code < 0 else code
