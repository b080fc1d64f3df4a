"""How far a run counted inside the emulator has got: read from the counting plugin's progress file.

Why: a counted run of a real model takes minutes, and before this a progress line said "running ... 1 warmup + 1
timed runs" until the run ended or was killed, and the kill did not say how far it got. The plugin
(native/count_plugin.c) rewrites a small file with the block executions and guest instructions counted so far
(about once a second, also inside one long operator: count_plugin.c looks at an inline counter every 2^24
instructions); a thread here reads it while the run goes on and hands the
instructions to the target's progress callback, and a killed run's error says the last figure.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable

from pytest_sme2.system.regular_files import COUNT_PROGRESS, read_bytes

_EVERY_S = 2.0


def counted_so_far(path: Path) -> tuple[int, int] | None:
    """(block executions, guest instructions) the plugin last wrote, or None when it wrote none (yet)."""
    try:
        fields = read_bytes(path, COUNT_PROGRESS).split()
        return int(fields[0]), int(fields[1])
    except (OSError, ValueError, IndexError):
        return None
    except Exception:  # noqa: BLE001 - a UsageError for a file that is not the plugin's: no progress to show
        return None


class ProgressWatcher:
    """Calls ``report(instructions)`` whenever the plugin's count moved, until :meth:`stop`."""

    def __init__(self, path: Path, report: Callable[[int], None] | None):
        self._path, self._report = path, report
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        if report is not None:
            self._thread = threading.Thread(target=self._watch, name="sme2-count-progress", daemon=True)
            self._thread.start()

    def _watch(self) -> None:
        shown = -1
        while not self._stopped.wait(_EVERY_S):
            got = counted_so_far(self._path)
            if got is not None and got[1] != shown and self._report is not None:
                shown = got[1]
                try:
                    self._report(shown)
                except Exception:  # noqa: BLE001 - a progress line must never end the run
                    return

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


def how_far(path: Path) -> str:
    """The sentence a killed or failed counted run adds: what the plugin had counted when it stopped."""
    got = counted_so_far(path)
    if got is None:
        return "the counting plugin had not yet reported a count (it does about once a second)"
    return f"the counting plugin had counted {got[1]:,} guest instructions ({got[0]:,} blocks) when it stopped"
