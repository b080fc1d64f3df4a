"""Android's fixed performance mode (Android 11+: ``cmd power set-fixed-performance-mode-enabled``) for one
session: the CPU and GPU clocks stay at fixed levels, so runs do not ride the governor's ramps. What a killed
session left changed is restored first, from the marker it recorded on the device (run/device_settings.py)."""

from __future__ import annotations

from pytest_sme2.errors import RunnerError, UsageError
from pytest_sme2.run.device_settings import FIXED_PERFORMANCE_MODE, DeviceSettings
from pytest_sme2.run.targets.adb.connection import AdbConnection
from pytest_sme2.run.targets.adb.facts import DeviceFacts


class PerformanceMode:
    """The device's fixed performance mode as this session leaves it. ``active``: on for this session (what the
    fingerprint records, and what ``leave`` turns off)."""

    def __init__(self, connection: AdbConnection, facts: DeviceFacts, device_dir: str):
        self._connection, self._facts = connection, facts
        self.active = False
        self._settings = DeviceSettings(device_dir, connection.shell, self._apply_setting, facts.described)

    def restore(self) -> str | None:
        """Undo what an earlier session that died left changed; what was restored, or None."""
        return self._settings.restore()

    def _set(self, enabled: bool) -> None:
        command = f"cmd power set-fixed-performance-mode-enabled {'true' if enabled else 'false'}"
        done = self._connection.shell(command)
        said = ((done.stdout or "") + (done.stderr or "")).strip()
        if done.returncode != 0 or "Unknown command" in said or "Exception" in said:
            raise RunnerError(
                f"`adb -s {self._facts.serial} shell {command}` failed on {self._facts.described} "
                f"(exit {done.returncode}): {said[-300:] or 'no output'}"
            )

    def _apply_setting(self, name: str, value: str) -> None:
        """Set a device setting a marker names (device_settings.py) to ``value``."""
        if name == FIXED_PERFORMANCE_MODE:
            self._set(value == "true")

    def on_device(self) -> bool:
        """Whether the device's marker says the fixed performance mode is on now (Android has no getter for it)."""
        marker = self._settings.read()
        return marker is not None and marker.changed.get(FIXED_PERFORMANCE_MODE) == "true"

    def enter(self) -> None:
        """On for the session. The device's marker records it first (device_settings.py: the next session turns it
        off if this one is SIGKILLed); turned off again by ``leave``, and by supervised.end_all when the session is
        killed (SIGTERM, SIGHUP)."""
        if not self._facts.sdk.isdigit() or int(self._facts.sdk) < 30:
            raise UsageError(
                f"--sme2-adb-performance-mode needs Android 11 (SDK 30) or later; {self._facts.described} "
                f"reports SDK {self._facts.sdk}: leave the option off"
            )
        from pytest_sme2.system import supervised

        self._settings.record(FIXED_PERFORMANCE_MODE, "true")
        self.active = True  # from here on, leave and failures turn it off
        self._set(True)
        supervised.on_end(id(self), self._turn_off)

    def _turn_off(self) -> None:
        self._set(False)
        self._settings.clear()

    def leave(self) -> None:
        if not self.active:
            return
        from pytest_sme2.system import supervised

        self._turn_off()  # if this fails, supervised.end_all tries again at exit
        supervised.forget_end(id(self))
        self.active = False
