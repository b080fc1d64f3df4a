"""The adb target: the native runner on an Android device, through adbutils, one module per job.

``target.py`` is the Target and the registry's entry; ``options.py`` its names and settings; ``claim.py`` one
device per process (a file lock per adb server and serial); ``connection.py`` shell, push and pull with errors
naming the device; ``facts.py`` what the device is; ``files.py`` what a run pushes and pulls and the command that
starts the runner; ``streaming.py`` the run's output over shell v2 as it comes; ``performance_mode.py`` Android's
fixed performance mode for a session; ``simpleperf.py`` kernel sampling on the device; ``doctor.py`` its lines of
``pytest-sme2 doctor``. Every word of a device shell command goes through ``shlex.quote``; serials are checked
against adb's serial alphabet.
"""

from pytest_sme2.run.targets.adb.claim import DeviceClaim
from pytest_sme2.run.targets.adb.facts import DeviceFacts
from pytest_sme2.run.targets.adb.options import (
    DEFAULT_DEVICE_DIR,
    AdbOptions,
    adb_server_address,
    is_adb_target,
    parse_adb_target,
)
from pytest_sme2.run.targets.adb.target import AdbTarget

__all__ = [
    "AdbOptions",
    "AdbTarget",
    "DEFAULT_DEVICE_DIR",
    "DeviceClaim",
    "DeviceFacts",
    "adb_server_address",
    "is_adb_target",
    "parse_adb_target",
]
