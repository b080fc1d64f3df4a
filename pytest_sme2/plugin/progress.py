"""Progress of long runs: which model and variant is exporting or running.

Exports take seconds to minutes and emulated runs seconds each, so a silent
pytest looks hung. Each step is announced when it starts and when it ends,
always in ``progress.log`` in the session folder (``tail -f
.sme2/artifacts/session-*/progress.log``; under xdist the only place, since
pytest shows no worker output), and on the terminal in the way that leaves
pytest's own lines intact:

- ``-v`` and more: whole lines, written past pytest's output capture (as
  pytest's live logging does); pytest then repeats the test id before its
  result word, as it does after live log lines.
- default verbosity on a terminal: one transient status after the result
  letters of the current line, erased before pytest writes the next letter,
  so ``test_x.py ..F.`` stays one line.
- default verbosity into a file or pipe (CI logs), ``-q``, xdist workers:
  nothing on the terminal (a status line cannot be erased there, and a line
  would split the letters); ``-v`` shows it.

Timed runs are reported as "run i/N" by targets that can: the host target's
child process sends a line after a run (outside the timed region, at most
twice a second); ``-v`` shows about four lines per variant, the status all,
progress.log all. Other targets report per variant (start and end).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from pytest_sme2.errors import StorageError
from pytest_sme2.system.safe_files import append_lines

LOG_NAME = "progress.log"
_KEY = pytest.StashKey["Progress"]()


class Progress:
    def __init__(self, config: pytest.Config, session_dir: Callable[[], Path | None]):
        self._config = config
        self._session_dir = session_dir  # the session folder, once the plugin has configured one
        workerinput = getattr(config, "workerinput", None)
        self._worker = workerinput.get("workerid") if workerinput else None
        self._status_width = 0  # characters of the transient status now after the cursor

    def _log_path(self) -> Path | None:
        folder = self._session_dir()
        return folder / LOG_NAME if folder is not None else None

    def say(self, text: str, terminal: bool = True) -> None:
        """Log ``text``; on the terminal as a line (``-v``, when ``terminal``) or as the transient status."""
        path = self._log_path()
        if path is not None:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                who = self._worker or f"pid {os.getpid()}"
                append_lines(path, [f"{time.strftime('%H:%M:%S')} [{who}] {text}"], sync=False)
            except (OSError, StorageError):
                pass  # progress is a courtesy; a full disk fails the artifacts, not the test
        reporter = self._reporter()
        if reporter is None:
            return
        if self._config.get_verbosity() >= 1:
            if terminal:
                with self._uncaptured():
                    reporter.write_line(text)
        elif self._config.get_verbosity() == 0 and reporter.isatty and os.environ.get("TERM") != "dumb":
            self._show_status(text)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Erase the transient status before pytest writes the result letter to the line it sits on."""
        if self._status_width:
            with self._uncaptured():
                _write_raw("\x1b[K")
            self._status_width = 0

    def _reporter(self) -> Any:
        if self._worker is not None:
            return None
        return self._config.pluginmanager.get_plugin("terminalreporter")

    def _show_status(self, text: str) -> None:
        """Write `` text`` after the current line's letters and put the cursor back where pytest left it.

        Written to the real stdout past capture, never through pytest's TerminalWriter, whose idea of
        the current line's width (used to right-align ``[ 50%]``) must not change."""
        writer = self._config.get_terminal_writer()
        room = writer.fullwidth - writer.width_of_current_line - 2
        shown = f" {text}"[:room] if room >= 12 else ""
        with self._uncaptured():
            _write_raw("\x1b[K" + shown + (f"\x1b[{len(shown)}D" if shown else ""))
        self._status_width = len(shown)

    def _uncaptured(self) -> contextlib.AbstractContextManager[Any]:
        """pytest's output capture off while writing (the way its live logging writes during a test)."""
        capman = self._config.pluginmanager.get_plugin("capturemanager")
        return capman.global_and_fixture_disabled() if capman is not None else contextlib.nullcontext()


def _write_raw(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def install(config: pytest.Config, session_dir: Callable[[], Path | None]) -> None:
    """Announce steps in this pytest process; ``session_dir`` says where progress.log goes (None: nowhere yet)."""
    progress = Progress(config, session_dir)
    config.stash[_KEY] = progress
    config.pluginmanager.register(progress, "sme2-progress")


def _progress(config: pytest.Config) -> Progress | None:
    return config.stash.get(_KEY, None)


def sayer(config: pytest.Config) -> Callable[[str], None]:
    """What a session uses to say what it waits for (a device cooling down): a progress line, or nothing."""
    progress = _progress(config)
    return (lambda text: None) if progress is None else progress.say


class Outcome:
    """The end line of a step, which the step may change once it knows how it ended, and its seconds where the
    step's work keeps its own measure (an export's ``export_seconds``; None: the step's own clock)."""

    def __init__(self, done: str) -> None:
        self.done = done
        self.seconds: float | None = None


@contextlib.contextmanager
def _step(config: pytest.Config, what: str, start: str, done: str) -> Iterator[Outcome]:
    """Say ``start`` now, then ``done`` (or the outcome's own text, or that it failed) with the seconds it took."""
    outcome = Outcome(done)
    progress = _progress(config)
    if progress is None:
        yield outcome
        return
    started = time.perf_counter()
    progress.say(f"sme2: {start} ...")
    try:
        yield outcome
    except BaseException as error:
        # Ctrl-C (or pytest's exit, or a signal pytest turns into one) ended the step: it did not fail.
        ended = (
            "was interrupted" if isinstance(error, (KeyboardInterrupt, SystemExit, pytest.exit.Exception)) else "failed"
        )
        progress.say(f"sme2: {what} {ended} after {time.perf_counter() - started:.1f} s")
        raise
    took = time.perf_counter() - started if outcome.seconds is None else outcome.seconds
    progress.say(f"sme2: {outcome.done} in {took:.1f} s")


class ExportStep:
    """An announced export: :meth:`ended` says whether the program came from the cache, and its key."""

    def __init__(self, name: str, outcome: Outcome) -> None:
        self._name = name
        self._outcome = outcome

    def ended(self, exported: Any) -> Any:
        """Set the end line from the ExportedModel (a hit must not read like a fresh export) and return it; a fresh
        export's seconds are its own ``export_seconds``, the one measure export.json and its repr() give too."""
        how = "from cache" if exported.from_cache else "exported"
        self._outcome.done = f"{self._name} {how} (key {exported.cache_key})"
        if not exported.from_cache:
            self._outcome.seconds = exported.export_seconds
        return exported


@contextlib.contextmanager
def exporting(config: pytest.Config, model: str, recipe_label: str) -> Iterator[ExportStep]:
    """Announce an export (or export-cache lookup) and how it ended: ``sme2: NAME from cache (key K) in 0.2 s``
    (the step's time: the trace that computes the key and the lookup) or ``sme2: NAME exported (key K) in 12.0 s``
    (the export's ``export_seconds``)."""
    name = f"{model} {recipe_label}"
    with _step(config, f"export of {name}", f"exporting {name}", f"{name} ready") as outcome:
        yield ExportStep(name, outcome)


class RunStep:
    """An announced run: :meth:`ended` says which of its counted runs came from the result cache, and their keys."""

    def __init__(self, outcome: Outcome | None, what: str) -> None:
        self._outcome = outcome
        self._what = what

    def ended(self, measured: Any) -> Any:
        """A cached answer must not read like a fresh emulation (issue 65: an LLM re-run said "done: 1/1 runs" of
        phases the result cache answered): say how many came from it, with their keys, and return ``measured``.

        ``measured``: a Profile, a sequence of them (compare_variants' pair) or an LlmProfile (its ``profiles``,
        a phase each); each Profile is one counted run as the session's result-cache line counts them."""
        if isinstance(measured, (tuple, list)):
            profiles = list(measured)
        else:
            profiles = list(getattr(measured, "profiles", (measured,)))
        caches = [(getattr(p, "metadata", None) or {}).get("result_cache") or {} for p in profiles]
        keys = [str(c.get("key")) for c in caches if c.get("cached")]
        if self._outcome is not None and keys:
            fresh = len(profiles) - len(keys)
            runs = "counted run" if len(keys) == 1 else "counted runs"
            key = f"key {keys[0]}" if len(keys) == 1 else f"keys {', '.join(keys)}"
            self._outcome.done = f"{self._what}: {len(keys)} {runs} answered from the result cache ({key}), " + (
                f"{fresh} emulated" if fresh else "none emulated"
            )
        return measured


def running(config: pytest.Config, runner: Any, pte: Any) -> contextlib.AbstractContextManager[RunStep]:
    """Announce a variant's warmup + timed runs, each timed run where the target reports it, and the end."""
    spec = runner.spec
    what = f"{getattr(pte, 'label', Path(str(pte)).name)} [{runner.label}]"
    # More than one process (a baseline update, or what sme2_replicas = auto found a check needs) multiplies
    # the time: say so, so a long test on a noisy machine is not a mystery.
    each = f" in each of {runner.replicas} fresh processes" if runner.replicas > 1 else ""
    return _with_run_progress(
        config,
        runner.session.target,
        what,
        _step(
            config,
            what,
            f"running {what}: {spec.warmup} warmup + {spec.runs} timed runs{each}",
            f"{what} done: {spec.runs}/{spec.runs} runs{each}",
        ),
        (runner,),
    )


def comparing(config: pytest.Config, first: Any, second: Any, pte: Any) -> contextlib.AbstractContextManager[RunStep]:
    """Announce compare_variants' two variants, side by side where the target makes them so, and the end."""
    label = getattr(pte, "label", Path(str(pte)).name)
    what = f"{label} [{first.label}] and [{second.label}]"
    how = "side by side" if first.session.target.side_by_side > 1 else "alternating"
    return _with_run_progress(
        config,
        first.session.target,
        what,
        _step(config, what, f"running {what} {how}", f"{what} done"),
        (first, second),
    )


@contextlib.contextmanager
def _with_run_progress(
    config: pytest.Config,
    target: Any,
    what: str,
    step: contextlib.AbstractContextManager[Outcome],
    runners: tuple[Any, ...],
) -> Iterator[RunStep]:
    """While ``step`` runs, a target that reports timed runs (``target.progress``, the host target) says
    "run i/N": every run in progress.log, about four per variant on the terminal. A counted run says its
    instructions so far, and of how many its session expects (``Sme2Session.expected_instructions``)."""
    progress = _progress(config)
    if progress is None or not hasattr(target, "progress"):
        with step as outcome:
            yield RunStep(outcome, what)
        return

    shown = [0]
    counted = getattr(target, "progress_unit", None) == "instructions"  # the emulated target's counted runs

    def on_run(done: int, total: int, variant: str | None = None) -> None:
        if counted:  # instructions counted so far (emulated: no time), each report a line of progress.log
            side = f" ({variant})" if variant else ""  # which of two counted side by side
            expecting = getattr(getattr(runners[0], "session", None), "expected_instructions", None) or {}
            expected = expecting.get(variant or runners[0].spec.sme2_label)
            of = f" of about {expected / 1e6:,.0f} M expected ({done / expected:.0%})" if expected else ""
            progress.say(
                f"sme2: running {what}{side}: {done / 1e6:,.0f} M guest instructions counted{of}", terminal=True
            )
            return
        milestone = done < total and done - shown[0] >= max(1, total // 4)
        if milestone:
            shown[0] = done
        progress.say(f"sme2: running {what} run {done}/{total}", terminal=milestone)

    target.progress = on_run
    try:
        with step as outcome:
            yield RunStep(outcome, what)
    finally:
        target.progress = None
