"""The claimed device over adbutils: shell commands, pushes and pulls, and errors that name the device by serial
and say when it went away. Never starts an adb server (adbutils would, on a refused connection)."""

from __future__ import annotations

import shlex
import socket
from pathlib import Path
from typing import Any, Callable

from pytest_sme2.errors import RunnerError

FACTS_TIMEOUT_S = 30.0  # a shell command that reads or sets something small
CLEANUP_TIMEOUT_S = 15.0


def require_server(server: tuple[str, int]) -> None:
    """adbutils would start an adb server on a refused connection; say what is missing instead."""
    try:
        socket.create_connection(server, timeout=3).close()
    except OSError as exc:
        host, port = server
        raise RunnerError(
            f"no adb server answers at {host}:{port} ({exc}); start it with `adb start-server`, or point "
            "--sme2-adb-server / ANDROID_ADB_SERVER_PORT / ADB_SERVER_SOCKET at the one you use"
        ) from None


class AdbConnection:
    """One adb server and, once claimed, one of its devices. ``on_lost`` is called when a failure turns out to be
    the device going away (whatever was pushed must be pushed again after a reconnect)."""

    def __init__(self, server: tuple[str, int]):
        import adbutils

        self.server = server
        require_server(server)
        self.client = adbutils.AdbClient(host=server[0], port=server[1], socket_timeout=60)
        self.serial = ""
        self.device: Any = None
        self.on_lost: Callable[[], None] = lambda: None

    def attach(self, serial: str) -> None:
        self.serial = serial
        self.device = self.client.device(serial)

    def states(self) -> dict[str, str]:
        import adbutils

        try:
            return {info.serial: info.state for info in self.client.list()}
        except (adbutils.AdbError, OSError) as exc:
            raise RunnerError(f"the adb server at {self.server[0]}:{self.server[1]} failed to list devices: {exc}")

    def error(self, what: str, exc: BaseException, log: Path | None = None) -> RunnerError:
        """An adb failure, named by serial; says when the device went away."""
        try:
            state = self.states().get(self.serial, "not attached")
        except RunnerError as listing:
            state = f"unknown ({listing})"
        kept = f"; partial log kept at {log}" if log is not None else ""
        if state != "device":
            self.on_lost()
            return RunnerError(
                f"device {self.serial} went {state} during {what}{kept}; "
                f"check the cable or `adb -s {self.serial} reconnect` (adb said: {exc})"
            )
        return RunnerError(f"adb failed on device {self.serial} during {what}{kept}: {type(exc).__name__}: {exc}")

    def shell(self, command: str, timeout: float = FACTS_TIMEOUT_S) -> Any:
        import adbutils

        try:
            return self.device.shell2(command, timeout=timeout, v2=True)
        except (adbutils.AdbError, OSError, EOFError) as exc:
            raise self.error(f"`{command}`", exc) from None

    def push(self, local: Path, remote: str, mode: int = 0o644) -> None:
        import adbutils

        try:
            self.device.sync.push(local, remote, mode=mode)
        except (adbutils.AdbError, OSError, EOFError) as exc:
            raise self.error(f"pushing {local} to {remote}", exc) from None

    def pull_if_present(self, remote: str, local: Path, log: Path) -> bool:
        """Pull ``remote`` to ``local`` if it exists on the device; whether it did."""
        import adbutils

        try:
            present = self.device.sync.stat(remote).mtime is not None
            if present:
                self.device.sync.pull_file(remote, local)
        except (adbutils.AdbError, OSError, EOFError) as exc:
            raise self.error(f"pulling {remote}", exc, log) from None
        return present

    def kill(self, run_dir: str) -> None:
        """Kill the runner of a run that did not finish (its pid is in the run folder)."""
        import adbutils

        try:
            self.device.shell2(
                f"kill -9 $(cat {shlex.quote(run_dir + '/runner.pid')}) 2>/dev/null", timeout=CLEANUP_TIMEOUT_S, v2=True
            )
        except (adbutils.AdbError, OSError, EOFError):
            pass

    def remove(self, remote: str) -> None:
        """``rm -rf`` a folder on the device, quietly: a lost device keeps its folder (the next session uses a new
        one), and a gone adb server is not started again to remove it."""
        import adbutils

        try:
            socket.create_connection(self.server, timeout=3).close()
        except OSError:
            return
        try:
            self.device.shell2(f"rm -rf {shlex.quote(remote)}", timeout=CLEANUP_TIMEOUT_S, v2=True)
        except (adbutils.AdbError, OSError, EOFError):
            pass
