"""Device settings a session changes, recorded on the device itself so that a later session puts them back.

Why: a setting such as Android's fixed performance mode outlives the process that set it. Closing the target
and the supervisor's handlers (SIGTERM, SIGHUP) turn it off, but nothing runs after SIGKILL, a host crash or a
pulled cable: the device keeps the setting, and the next session's runs, and the fingerprint its baselines are
filed under, would be taken under a setting nobody asked for, without a word. So before changing a setting a
session writes a marker file on the device naming what it changes, the value before and who changed it; it
removes the marker once the setting is back. A session that claims the device (no live session of this machine
holds it then) and finds a marker restores every setting it names first, and says so. What a fingerprint and
the reports record is read back from the device's marker after that, never taken from the command line.

The marker is text from a device: only its known lines are read, and it is shown through one_line.
"""

from __future__ import annotations

import os
import shlex
import socket
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from pytest_sme2.errors import RunnerError
from pytest_sme2.system.plain_text import one_line

MARKER_NAME = "pytest-sme2-settings"
FIXED_PERFORMANCE_MODE = "fixed_performance_mode"
# Each setting the plugin may change: the value it had before any session changed it. Android has no getter for
# the fixed performance mode, which starts off at every boot and is on only when someone asked for it.
PRIOR = {FIXED_PERFORMANCE_MODE: "false"}
_MARKER_LIMIT = 4096  # bytes of a marker read; ours are a few lines


@dataclass(frozen=True)
class Marker:
    """What a session changed on a device (setting -> value set) and who changed it."""

    changed: dict[str, str] = field(default_factory=dict)
    owner: str = "an unknown session"

    def text(self) -> str:
        lines = [f"set {name}={value}" for name, value in sorted(self.changed.items())]
        lines += [f"prior {name}={PRIOR[name]}" for name in sorted(self.changed)]
        return "\n".join([*lines, f"owner {self.owner}"]) + "\n"

    @classmethod
    def parse(cls, text: str) -> "Marker | None":
        """The marker in ``text`` (None when there is none): only ``set`` lines of settings we know are read."""
        changed, owner = {}, "an unknown session"
        for line in text[:_MARKER_LIMIT].splitlines():
            kind, _, rest = line.partition(" ")
            name, sep, value = rest.partition("=")
            if kind == "set" and sep and name in PRIOR and value in ("true", "false"):
                changed[name] = value
            elif kind == "owner" and rest:
                owner = one_line(rest)[:200]
        return cls(changed, owner) if text.strip() else None


def owner_now() -> str:
    """Who is changing a setting now: this process, this machine and the time, for the next session to name."""
    return f"pid {os.getpid()} on host {socket.gethostname()} at {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}"


class DeviceSettings:
    """The marker of one device (at ``folder``/MARKER_NAME), read and written through ``shell`` (a command on the
    device -> its result with returncode and stdout), and the settings it restores with ``apply``."""

    def __init__(
        self, folder: str, shell: Callable[[str], Any], apply: Callable[[str, str], None], device: str
    ) -> None:
        self.path = f"{folder.rstrip('/')}/{MARKER_NAME}"
        self._shell, self._apply, self._device = shell, apply, device

    def read(self) -> Marker | None:
        done = self._shell(f"cat {shlex.quote(self.path)} 2>/dev/null")
        return Marker.parse(done.stdout or "") if done.returncode == 0 else None

    def record(self, setting: str, value: str) -> None:
        """Write the marker saying ``setting`` is being set to ``value``, before it is set; read back. A marker
        that cannot be written is a RunnerError, and the setting is then left as it is."""
        marker = Marker({**(self._current_changes()), setting: value}, owner_now())
        quoted = shlex.quote(self.path)
        done = self._shell(f"printf '%s' {shlex.quote(marker.text())} > {quoted}.tmp && mv -f {quoted}.tmp {quoted}")
        if done.returncode != 0 or self.read() != marker:
            said = ((done.stdout or "") + (getattr(done, "stderr", "") or "")).strip()
            raise RunnerError(
                f"cannot record the {setting.replace('_', ' ')} on the device {self._device} "
                f"(marker {self.path}: {one_line(said)[-200:] or f'exit {done.returncode}'}), so it "
                "is not changed: a session killed later could not be undone by the next one. Make "
                "--sme2-adb-dir writable on the device, or leave the option off"
            )

    def clear(self) -> None:
        """Remove the marker once every setting it names is back."""
        self._shell(f"rm -f {shlex.quote(self.path)}")

    def restore(self) -> str | None:
        """Put back every setting a marker names (an earlier session died with them changed), remove the marker,
        and say what was done; None when there was no marker."""
        marker = self.read()
        if marker is None:
            return None
        restored = []
        for name, value in sorted(marker.changed.items()):
            if value != PRIOR[name]:
                self._apply(name, PRIOR[name])
                restored.append(
                    f"{name.replace('_', ' ')} was left {'on' if value == 'true' else value} by an "
                    f"earlier session ({marker.owner}); this session turned it off"
                )
        self.clear()
        return "; ".join(restored) or f"a marker of an earlier session ({marker.owner}) named no setting to restore"

    def _current_changes(self) -> dict[str, str]:
        marker = self.read()
        return dict(marker.changed) if marker is not None else {}
