"""The adb target's names (``adb``, ``adb:SERIAL``) and settings: its options, declared here and contributed to
the one option table through the target registry, and ``AdbOptions``, what they say once checked."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_sme2.errors import UsageError
from pytest_sme2.run.targets.base import DEFAULT_TIMEOUT_S, TargetSettings
from pytest_sme2.system.option import RUN, Option

ADB = "adb"
DEFAULT_DEVICE_DIR = "/data/local/tmp"
DEFAULT_SERVER = ("127.0.0.1", 5037)
SERIAL = re.compile(r"[A-Za-z0-9._:@+\-]+")
_AFFINITY = re.compile(r"(0x)?[0-9A-Fa-f]+")


def parse_adb_target(value: str) -> str | None:
    """``adb`` -> None (any free device, or ANDROID_SERIAL), ``adb:SERIAL`` -> SERIAL; else a UsageError."""
    if value == ADB:
        return None
    if value.startswith(ADB + ":"):
        serial = value[len(ADB) + 1 :]
        if SERIAL.fullmatch(serial):
            return serial
        raise UsageError(
            f"--sme2-target={value!r}: {serial!r} is not a device serial (letters, digits and . _ : @ + - only, "
            "as `adb devices` prints them); use --sme2-target=adb:SERIAL or --sme2-target=adb"
        )
    raise UsageError(f"--sme2-target={value!r} is not an adb target; use --sme2-target=adb or adb:SERIAL")


def is_adb_target(value: str) -> bool:
    return value == ADB or value.startswith(ADB + ":")


def adb_server_address(configured: str | None = None, environ: dict[str, str] | None = None) -> tuple[str, int]:
    """Where the adb server listens: --sme2-adb-server, else ADB_SERVER_SOCKET / ANDROID_ADB_SERVER_HOST|PORT as
    adb reads them."""
    env = os.environ if environ is None else environ
    text, origin = configured, "--sme2-adb-server / sme2_adb_server"
    if not text and env.get("ADB_SERVER_SOCKET"):
        text, origin = env["ADB_SERVER_SOCKET"], "ADB_SERVER_SOCKET"
        if not text.startswith("tcp:"):
            raise UsageError(f"ADB_SERVER_SOCKET={text!r} is not supported; use tcp:HOST:PORT or tcp:PORT")
        text = text[len("tcp:") :]
    if not text:
        host = env.get("ANDROID_ADB_SERVER_HOST") or DEFAULT_SERVER[0]
        port_text = env.get("ANDROID_ADB_SERVER_PORT") or str(DEFAULT_SERVER[1])
        text, origin = f"{host}:{port_text}", "ANDROID_ADB_SERVER_HOST/PORT"
    host, sep, port_text = text.rpartition(":")
    if not sep:
        host, port_text = DEFAULT_SERVER[0], text
    try:
        port = int(port_text)
        if not 0 < port < 65536:
            raise ValueError
    except ValueError:
        raise UsageError(f"adb server address {text!r} (from {origin}) is not HOST:PORT with a port 1-65535") from None
    return host or DEFAULT_SERVER[0], port


@dataclass(frozen=True)
class AdbOptions:
    """The adb target's settings, from --sme2-target=adb[:SERIAL] and the --sme2-adb-* options."""

    serial: str | None = None
    server: str | None = None
    affinity: str | None = None
    device_dir: str = DEFAULT_DEVICE_DIR
    mask_library: Path | None = None
    claim_timeout_s: float = DEFAULT_TIMEOUT_S  # as long as one run may take: a claimed device frees by then
    performance_mode: bool = False  # Android 11+ fixed performance mode for the session (--sme2-adb-performance-mode)

    def __post_init__(self) -> None:
        if self.serial is not None and not SERIAL.fullmatch(self.serial):
            raise UsageError(f"serial {self.serial!r} is not a device serial (letters, digits and . _ : @ + -)")
        if self.affinity is not None and not (_AFFINITY.fullmatch(self.affinity) and int(self.affinity, 16)):
            raise UsageError(
                f"--sme2-adb-affinity={self.affinity!r} is not a CPU mask; give a non-zero hex mask as taskset takes "
                "it, e.g. f0 for CPUs 4-7"
            )
        if not self.device_dir.startswith("/"):
            raise UsageError(f"--sme2-adb-dir={self.device_dir!r} must be an absolute path on the device")
        if not self.claim_timeout_s >= 0:
            raise UsageError(f"--sme2-adb-claim-timeout={self.claim_timeout_s!r} must be >= 0 seconds")

    @classmethod
    def of(cls, name: str, settings: TargetSettings) -> "AdbOptions":
        """The options of ``--sme2-target=name`` (adb or adb:SERIAL) with the --sme2-adb-* values of ``settings``;
        an unset value keeps its default."""

        def given(option: Option) -> Any:
            return settings.value(option)

        mask = given(MASK_LIBRARY)
        claim_timeout = given(CLAIM_TIMEOUT)
        return cls(
            serial=parse_adb_target(name),
            server=given(SERVER) or None,
            affinity=given(AFFINITY) or None,
            device_dir=given(DEVICE_DIR) or DEFAULT_DEVICE_DIR,
            mask_library=Path(mask) if mask else None,
            performance_mode=bool(given(PERFORMANCE_MODE)),
            claim_timeout_s=cls.claim_timeout_s if claim_timeout is None else claim_timeout,
        )


SERVER = Option(
    "adb_server",
    "adb target: adb server HOST:PORT (default: ADB_SERVER_SOCKET, ANDROID_ADB_SERVER_PORT, " "5037)",
    RUN,
    doc_default="adb server from the environment",
    doctor=True,
)
AFFINITY = Option(
    "adb_affinity",
    "adb target: CPU affinity mask for the runner, in hex as taskset takes it (e.g. f0)",
    RUN,
    doc_default="no affinity",
)
DEVICE_DIR = Option(
    "adb_dir",
    f"adb target: device folder for per-session files (default {DEFAULT_DEVICE_DIR})",
    RUN,
    doc_default=f"`{DEFAULT_DEVICE_DIR}`",
)
MASK_LIBRARY = Option(
    "adb_mask_library",
    "adb target: libsme2_mask.so built for the device, for SME2 off with one " "runner build",
    RUN,
    kind="path",
    doc_default="none",
    doctor=True,
)
PERFORMANCE_MODE = Option(
    "adb_performance_mode",
    "adb target: turn on Android's fixed performance mode (Android 11+) "
    "for the session and off again at its end, also when it is interrupted",
    RUN,
    kind="bool",
    default=False,
    switch="--sme2-adb-performance-mode",
    ini_help="adb target: fixed performance mode for the session",
    doc_default="off",
)
CLAIM_TIMEOUT = Option(
    "adb_claim_timeout",
    f"adb target: seconds to wait for a device no other worker has claimed "
    f"(default {AdbOptions.claim_timeout_s:g})",
    RUN,
    kind="float",
    low=0,
    what="a number of seconds >= 0",
    doc_default=f"{AdbOptions.claim_timeout_s:g} s",
)
OPTIONS = (SERVER, AFFINITY, DEVICE_DIR, MASK_LIBRARY, PERFORMANCE_MODE, CLAIM_TIMEOUT)
