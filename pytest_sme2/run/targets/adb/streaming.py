"""A device command's stdout and stderr written into local files as they arrive, over adb's shell v2 protocol
(raw socket frames: kind, length, data), so a device lost mid-run still leaves its partial log; a run that does
not reach its exit status is killed on the device."""

from __future__ import annotations

import signal
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from pytest_sme2.errors import RunnerError
from pytest_sme2.run.targets.adb.connection import AdbConnection
from pytest_sme2.run.targets.base import RunSpec
from pytest_sme2.run.targets.native_runner import tail

_STDOUT, _STDERR, _EXIT = 1, 2, 3  # shell v2 frame kinds


def signal_note(code: int) -> str:
    """adbd reports a process killed by signal N as exit status 128+N."""
    if 128 < code < 128 + 65:
        try:
            return f" (killed by {signal.Signals(code - 128).name})"
        except ValueError:
            return f" (killed by signal {code - 128})"
    return ""


class _Lost(Exception):
    """The shell stream ended before the runner's exit status arrived."""


@dataclass(frozen=True)
class DeviceCommand:
    """One runner command on the device, as stream runs and names it: the shell ``command``, how messages show
    it (``shown``, the adb line), the device folder its run writes (killed there when it does not finish), the
    local log its messages point to and the device as they name it (``described``)."""

    command: str
    shown: str
    run_dir: str
    log: Path
    described: str


def stream(connection: AdbConnection, run: DeviceCommand, out: IO[bytes], err: IO[bytes], spec: RunSpec) -> int:
    """Run over shell,v2, writing stdout/stderr as they arrive; the exit status, or a RunnerError."""
    import adbutils

    shown, log = run.shown, run.log
    deadline = time.monotonic() + spec.timeout_s
    try:
        transport = connection.device.open_transport(timeout=60)
        transport.send_command(f"shell,v2:{run.command}")
        transport.check_okay()
    except (adbutils.AdbError, OSError, EOFError) as exc:
        raise connection.error(f"starting `{shown}`", exc, log) from None
    sock = transport.conn
    finished = False
    try:
        while True:
            header = _read(sock, 5, deadline)
            kind, length = header[0], int.from_bytes(header[1:5], "little")
            data = _read(sock, length, deadline) if length else b""
            if kind == _STDOUT:
                out.write(data)
                out.flush()
            elif kind == _STDERR:
                err.write(data)
                err.flush()
            elif kind == _EXIT:
                finished = True
                return data[0] if data else 255
    except socket.timeout:
        raise RunnerError(
            f"`{shown}` {spec.timed_out()} on {run.described} and was killed; raise "
            f"it there if the model is that slow. Log: {log}\n{tail(log)}"
        ) from None
    except (_Lost, OSError) as exc:
        err.write(f"\npytest-sme2: the adb stream ended before the runner's exit status ({exc})\n".encode())
        err.flush()
        raise connection.error(f"the run of `{shown}`", exc, log) from None
    finally:
        # A timeout, Ctrl-C or any exception before the exit status: the runner must not go on
        # on the device. adbd ends a shell whose socket closes; the kill is for devices that do not.
        transport.close()
        if not finished:
            connection.kill(run.run_dir)


def _read(sock: socket.socket, n: int, deadline: float) -> bytes:
    data = b""
    while len(data) < n:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise socket.timeout()
        sock.settimeout(remaining)
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise _Lost("connection closed")
        data += chunk
    return data
