"""Helpers for fault-injection tests (tests/system/test_interrupt.py and friends) and the fault sweep
(benchmarks/fault_sweep.py): inner pytest projects run as real subprocesses, the processes they start
(found with ``ps``), and whether anything still writes into a folder.

A test helper, not shipped.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Iterable

REPO = Path(__file__).resolve().parent.parent
# Dropping these capabilities makes root obey file modes, so permission faults can be injected as root.
UNPRIVILEGED = ("setpriv", "--inh-caps=-all", "--bounding-set=-dac_override,-dac_read_search,-fowner", "--")


def write_project(root: Path, test_source: str, ini: dict[str, str], models: dict[str, str] | None = None) -> Path:
    """A pytest project: ``pytest.ini`` with ``ini``, ``test_inner.py`` and optional model modules."""
    root.mkdir(parents=True, exist_ok=True)
    lines = ["[pytest]", "filterwarnings = ignore", *(f"{key} = {value}" for key, value in ini.items())]
    if models:
        (root / "models").mkdir(exist_ok=True)
        for name, source in models.items():
            (root / "models" / f"{name}.py").write_text(source)
        lines.append("sme2_model_dirs = models " + str(REPO / "models"))
    else:
        lines.append(f"sme2_model_dirs = {REPO / 'models'}")
    (root / "pytest.ini").write_text("\n".join(lines) + "\n")
    (root / "test_inner.py").write_text(textwrap.dedent(test_source))
    return root


def pytest_command(*args: str, prefix: Iterable[str] = ()) -> list[str]:
    return [*prefix, sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args]


def environment() -> dict[str, str]:
    """This checkout's pytest_sme2 first on the path, as for the outer tests."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env.pop("PYTEST_ADDOPTS", None)
    env.pop("PYTEST_XDIST_WORKER", None)
    return env


# The signals the interrupt tests send, each of which ends a pytest started from a terminal.
SENT_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _signals_default() -> None:
    """In the child before exec: the signals the tests send back to their defaults, as in a pytest started from a
    terminal. One started from a background job of a non-interactive shell (`make test &`) inherits SIGINT
    ignored, and one under `nohup` SIGHUP ignored (a rehearsal of CI under nohup failed the SIGHUP test so):
    the inner pytest would never see the signal the test sends."""
    for sig in SENT_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)


def start_pytest(project: Path, *args: str, prefix: Iterable[str] = ()) -> subprocess.Popen:
    """An inner pytest in its own session (like a job started from a shell), output in ``project/out.txt``."""
    out = open(project / "out.txt", "wb")
    try:
        process = subprocess.Popen(
            pytest_command(*args, prefix=prefix),
            cwd=project,
            env=environment(),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_signals_default,
        )
    finally:
        out.close()
    process.output_path = project / "out.txt"  # type: ignore[attr-defined]  # for interrupt()'s diagnosis
    return process


def run_pytest(project: Path, *args: str, prefix: Iterable[str] = (), timeout: float = 900) -> tuple[int, str]:
    """Run an inner pytest to the end: (exit code, output)."""
    result = subprocess.run(
        pytest_command(*args, prefix=prefix),
        cwd=project,
        env=environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=timeout,
    )
    return result.returncode, result.stdout.decode(errors="replace")


def ps() -> list[tuple[int, int, str]]:
    """Every process as (pid, parent pid, command line), from ``ps``."""
    lines = subprocess.run(["ps", "-ww", "-eo", "pid=,ppid=,args="], capture_output=True, text=True, check=True).stdout
    out = []
    for line in lines.splitlines():
        parts = line.split(None, 2)
        if len(parts) >= 2:
            out.append((int(parts[0]), int(parts[1]), parts[2] if len(parts) > 2 else ""))
    return out


def descendants(pid: int) -> dict[int, str]:
    """The processes below ``pid`` (children, their children, ...), with their command lines."""
    table = ps()
    found: dict[int, str] = {}
    frontier = {pid}
    while frontier:
        children = {p: args for p, parent, args in table if parent in frontier and p not in found}
        found.update(children)
        frontier = set(children)
    return found


def cwd_of(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return None


def processes_touching(folder: Path) -> dict[int, str]:
    """Live processes whose command line names ``folder`` or whose working directory is inside it."""
    folder_text = str(folder)
    return {
        pid: args
        for pid, _, args in ps()
        if pid != os.getpid() and (folder_text in args or (cwd_of(pid) or "").startswith(folder_text))
    }


def alive(pids: Iterable[int]) -> dict[int, str]:
    """Which of ``pids`` still run (zombies count as gone), with their command lines."""
    table = {pid: args for pid, _, args in ps()}
    out = {}
    for pid in pids:
        if pid in table:
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if state != "Z":
                out[pid] = table[pid]
    return out


def wait_for(predicate, timeout: float, interval: float = 0.2):  # noqa: ANN001,ANN201 - small test helper
    """Poll ``predicate`` until it returns something truthy (returned) or ``timeout`` passes (None)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    return None


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    """(size, mtime) of every file under ``folder``."""
    out = {}
    for path in folder.rglob("*"):
        try:
            info = path.lstat()
        except OSError:
            continue
        if path.is_file():
            out[str(path)] = (info.st_size, info.st_mtime_ns)
    return out


def interrupt(process: subprocess.Popen, sig: int = signal.SIGINT, timeout: float = 120) -> int:
    """Send ``sig`` to the inner pytest (only to it, as ``kill -INT PID`` does) and wait for it to exit.

    If it has not ended within ``timeout``, SIGABRT makes pytest's faulthandler print every thread's stack
    into its output, and the failure shows where it hung (seen once in CI beside heavy load)."""
    process.send_signal(sig)
    try:
        return process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGABRT)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
        path = getattr(process, "output_path", None)
        output = path.read_text(errors="replace")[-6000:] if path is not None else "(output not kept)"
        raise AssertionError(
            f"pytest did not end within {timeout} s of signal {sig}; its output, with the "
            f"stack of every thread at SIGABRT:\n{output}"
        ) from None
