"""The state of the device a chunk ran on: CPU governors and frequencies, temperatures, thermal status,
battery.

Phones are noisy in ways a VM is not: a hot phone lowers its cores' frequency cap, and every run taken then is
slower for a reason that is not the program. ExecuTorch dropped its device-farm perf jobs over exactly this
(pytorch/executorch #15433). So the adb and local targets read this state before and after every chunk; a
chunk taken while the device throttled is counted as disturbed, like a stall (Profile.clean), and the
baseline fingerprint holds the governor of the cores used.

One shell script reads it all, the same on Android (toybox) and Linux: every word of it is a fixed path, so
nothing the device says is ever run. Throttling is judged from what a device shows whatever its load: the
frequency cap (``scaling_max_freq``, which thermal drivers lower) against its value at the session's first
reading, and Android's thermal status (``dumpsys thermalservice``) at or above "moderate". The current
frequency is recorded but not judged: between runs an idle core clocks down by design.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable

# Prints key=value lines; files that do not exist are skipped, and the absence is noted by the parser.
STATE_SCRIPT = (
    "for c in /sys/devices/system/cpu/cpu[0-9]*; do n=${c##*/cpu}; "
    "for f in scaling_governor scaling_cur_freq scaling_max_freq cpuinfo_max_freq; do "
    '[ -r $c/cpufreq/$f ] && echo "cpu$n.$f=$(cat $c/cpufreq/$f 2>/dev/null)"; done; done; '
    "for z in /sys/class/thermal/thermal_zone[0-9]*; do n=${z##*thermal_zone}; "
    '[ -r $z/type ] && echo "zone$n.type=$(cat $z/type 2>/dev/null)"; '
    '[ -r $z/temp ] && echo "zone$n.temp=$(cat $z/temp 2>/dev/null)"; done; '
    'b=/sys/class/power_supply/battery; [ -r $b/temp ] && echo "battery.temp=$(cat $b/temp 2>/dev/null)"; '
    '[ -r $b/status ] && echo "battery.status=$(cat $b/status 2>/dev/null)"; '
    "command -v dumpsys >/dev/null 2>&1 && dumpsys thermalservice 2>/dev/null | "
    "sed -n 's/^ *Thermal Status: *\\([0-9]\\).*/thermal.status=\\1/p' | head -n 1; true"
)
# Android's PowerManager thermal status values (THERMAL_STATUS_*).
THERMAL_STATUS = ("none", "light", "moderate", "severe", "critical", "emergency", "shutdown")
MODERATE = 2
# A cap this far below its first reading is throttling (caps move in whole frequency steps, 5% or more).
CAP_DROP = 0.95


@dataclass(frozen=True)
class CoreState:
    governor: str | None
    cur_khz: int | None
    max_khz: int | None  # scaling_max_freq: the cap now (thermal drivers lower it)
    hw_max_khz: int | None  # cpuinfo_max_freq: the core's own maximum


@dataclass(frozen=True)
class DeviceState:
    cores: dict[int, CoreState] = field(default_factory=dict)
    zones: dict[str, float] = field(default_factory=dict)  # thermal zone type -> degrees C
    thermal_status: int | None = None  # Android's thermal status 0-6; None where not reported
    battery_temp_c: float | None = None
    battery_status: str | None = None  # Charging, Discharging, Full, Not charging

    @classmethod
    def parse(cls, text: str) -> "DeviceState":
        values: dict[str, str] = {}
        for line in text.splitlines():
            key, sep, value = line.strip().partition("=")
            if sep and re.fullmatch(r"[a-z]+\d*\.[a-z_]+", key):
                values[key] = value.strip()
        cores: dict[int, CoreState] = {}
        for number in sorted({int(k[3:].split(".")[0]) for k in values if k.startswith("cpu")}):

            def read(name: str, n: int = number) -> str | None:
                return values.get(f"cpu{n}.{name}") or None

            cores[number] = CoreState(
                read("scaling_governor"),
                _int(read("scaling_cur_freq")),
                _int(read("scaling_max_freq")),
                _int(read("cpuinfo_max_freq")),
            )
        zones: dict[str, float] = {}
        for key in sorted(
            (k for k in values if k.startswith("zone") and k.endswith(".temp")),
            key=lambda k: int(re.sub(r"\D", "", k.split(".")[0]) or 0),
        ):
            temp = _int(values[key])
            if temp is None:
                continue
            name = values.get(key.replace(".temp", ".type")) or key.split(".")[0]
            while name in zones:
                name += "'"
            zones[name] = temp / 1000 if abs(temp) > 200 else float(temp)  # millidegrees on every kernel we know
        battery = _int(values.get("battery.temp"))
        return cls(
            cores,
            zones,
            _int(values.get("thermal.status")),
            None if battery is None else battery / 10,  # tenths of a degree (power_supply ABI)
            values.get("battery.status") or None,
        )

    @property
    def hottest_c(self) -> float | None:
        return max(self.zones.values()) if self.zones else None

    def governor(self, cores: Iterable[int] | None = None) -> str | None:
        """The governor of ``cores`` (all when None): one name, "mixed", or None when not readable."""
        names = {
            self.cores[c].governor
            for c in (self.cores if cores is None else cores)
            if c in self.cores and self.cores[c].governor
        }
        return None if not names else names.pop() if len(names) == 1 else "mixed"

    def throttling(self, steady: "DeviceState", cores: Iterable[int] | None = None) -> str | None:
        """Why this state is throttled against ``steady`` (the session's first reading), or None."""
        reasons = []
        if self.thermal_status is not None and self.thermal_status >= MODERATE:
            name = THERMAL_STATUS[min(self.thermal_status, len(THERMAL_STATUS) - 1)]
            reasons.append(f"thermal status {name} ({self.thermal_status})")
        for number in sorted(self.cores if cores is None else cores):
            now, then = self.cores.get(number), steady.cores.get(number)
            if now and then and now.max_khz and then.max_khz and now.max_khz < then.max_khz * CAP_DROP:
                reasons.append(f"cpu{number} capped at {now.max_khz / 1e6:.2f} GHz (was {then.max_khz / 1e6:.2f})")
        return "; ".join(reasons) or None

    def hot(self, threshold_c: float) -> str | None:
        """Why the device is too hot to start timed runs (cooldown), or None."""
        if self.thermal_status is not None and self.thermal_status >= MODERATE:
            return f"thermal status {THERMAL_STATUS[min(self.thermal_status, 6)]}"
        hottest = self.hottest_c
        if hottest is not None and hottest > threshold_c:
            zone = max(self.zones, key=lambda z: self.zones[z])
            return f"{zone} at {hottest:.1f} C (above {threshold_c:g} C)"
        return None

    def missing(self) -> list[str]:
        """What could not be read, to say so in reports rather than imply a cool, unthrottled device."""
        gaps = []
        if not self.cores or all(c.max_khz is None for c in self.cores.values()):
            gaps.append("CPU frequencies (no readable cpufreq)")
        if not self.zones:
            gaps.append("temperatures (no readable thermal zone)")
        return gaps

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["cores"] = {str(k): v for k, v in data["cores"].items()}
        data["hottest_c"] = self.hottest_c
        data["missing"] = self.missing()
        return data


def read_local_state() -> DeviceState:
    """This machine's state, read by the same script a device runs."""
    import subprocess

    try:
        done = subprocess.run(["/bin/sh", "-c", STATE_SCRIPT], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return DeviceState()
    return DeviceState.parse(done.stdout)


def cores_of_mask(mask: str | None) -> list[int] | None:
    """The CPUs of a taskset mask (hex, ``f0`` -> [4, 5, 6, 7]); None: no mask, every core."""
    if not mask:
        return None
    value = int(mask, 16)
    return [bit for bit in range(value.bit_length()) if value >> bit & 1]


def _int(text: str | None) -> int | None:
    try:
        return int(str(text).strip()) if text is not None else None
    except ValueError:
        return None


@dataclass(frozen=True)
class Clock:
    """The clock a wait runs by: ``sleep`` passes the time that ``now`` reads (seconds, monotonic).

    They travel together because one must see what the other does: a test passes a fake pair, sleep
    advancing the time now returns, so a wait of minutes runs at once.
    """

    sleep: Callable[[float], None]
    now: Callable[[], float]


def wait_for_cooldown(
    read: Callable[[], DeviceState],
    threshold_c: float,
    max_wait_s: float,
    say: Callable[[str], None],
    clock: Clock,
    poll_s: float = 5.0,
    first: DeviceState | None = None,
) -> tuple[DeviceState, float, str | None]:
    """Wait until the device is below ``threshold_c`` and under moderate thermal status, at most ``max_wait_s``.

    Returns the last state, the seconds waited, and why it is still hot (None: cooled down). Each poll is said.
    ``first``: a state just read (no second read for it).
    """
    started = clock.now()
    state = first if first is not None else read()
    reason = state.hot(threshold_c)
    while reason is not None and clock.now() - started < max_wait_s:
        say(f"sme2: cooling down: {reason}; waited {clock.now() - started:.0f} of {max_wait_s:g} s")
        clock.sleep(min(poll_s, max(0.0, max_wait_s - (clock.now() - started))))
        state = read()
        reason = state.hot(threshold_c)
    return state, clock.now() - started, reason
