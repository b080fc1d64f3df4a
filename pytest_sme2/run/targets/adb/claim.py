"""One device of one adb server for this process alone: a file lock per server and serial, so each pytest-xdist
worker gets its own phone and no two sessions run on one device at once."""

from __future__ import annotations

import fcntl
import os
import re
import tempfile
import time
from pathlib import Path
from typing import IO, Callable

from pytest_sme2.errors import RunnerError
from pytest_sme2.system.safe_files import open_no_follow, private_folder


class DeviceClaim:
    """An exclusive, process-lifetime lock on one device of one adb server (fcntl, so it dies with the process)."""

    def __init__(self, server: tuple[str, int], serial: str, handle: IO[str]):
        self.server, self.serial, self._handle = server, serial, handle

    @staticmethod
    def path(server: tuple[str, int], serial: str) -> Path:
        """The claim's lock file, in a folder of this user's own under the temp folder: a shared /tmp
        lets anyone create a shared claims folder first and plant links where we would write."""
        name = re.sub(r"[^A-Za-z0-9._-]+", "_", f"{server[0]}_{server[1]}_{serial}")
        return Path(tempfile.gettempdir()) / f"pytest-sme2-adb-claims-{os.getuid()}" / f"{name}.lock"

    @classmethod
    def try_claim(cls, server: tuple[str, int], serial: str) -> "DeviceClaim | None":
        path = cls.path(server, serial)
        private_folder(path.parent)
        handle = os.fdopen(open_no_follow(path, os.O_RDWR | os.O_CREAT, 0o600), "r+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            return None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()} worker {os.environ.get('PYTEST_XDIST_WORKER', '-')}\n")
        handle.flush()
        return cls(server, serial, handle)

    def release(self) -> None:
        if not self._handle.closed:
            fcntl.flock(self._handle, fcntl.LOCK_UN)
            self._handle.close()


def claim_device(
    server: tuple[str, int], states: Callable[[], dict[str, str]], serial: str | None, timeout_s: float
) -> DeviceClaim:
    """Claim ``serial`` (else ANDROID_SERIAL, else any ready device) of the adb server at ``server``, waiting up to
    ``timeout_s`` for one no other worker holds; ``states`` lists the server's devices and their states."""
    wanted = serial or os.environ.get("ANDROID_SERIAL") or None
    deadline = time.monotonic() + timeout_s
    address = f"{server[0]}:{server[1]}"
    while True:
        listed = states()
        if wanted is not None:
            if wanted not in listed:
                seen = ", ".join(f"{s} ({st})" for s, st in sorted(listed.items())) or "none"
                raise RunnerError(
                    f"device {wanted} is not attached to the adb server at {address}; " f"`adb devices` shows: {seen}"
                )
            if listed[wanted] != "device":
                raise RunnerError(
                    f"device {wanted} is {listed[wanted]}, not ready; reconnect it or authorise "
                    "this computer on the phone"
                )
            candidates = [wanted]
        else:
            candidates = sorted(s for s, state in listed.items() if state == "device")
            if not candidates:
                raise RunnerError(
                    f"no Android device is ready at the adb server {address} (`adb devices` shows: "
                    f"{', '.join(f'{s} ({st})' for s, st in sorted(listed.items())) or 'none'}); "
                    "connect one and enable USB debugging"
                )
        for candidate in candidates:
            claim = DeviceClaim.try_claim(server, candidate)
            if claim is not None:
                return claim
        if time.monotonic() >= deadline:
            raise RunnerError(
                f"every ready device ({', '.join(candidates)}) at {address} is claimed by another pytest worker or "
                f"session for {timeout_s:g} s; run with at most as many xdist workers as "
                "devices (-n), or raise --sme2-adb-claim-timeout"
            )
        time.sleep(0.2)
