"""One setting of pytest-sme2: its option, ini key, type, default, bounds, help and the cell of its docs row.

The type lives here, below every stage, because settings are declared where their concept lives: the general
ones in the plugin's table (``plugin/options.py``), each target's own in its target's module, contributed to
that one table through the target registry (``run/targets/registry.py``). Nothing here reads a value; the
plugin's table does, through pytest.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

RUN, GATE, REPORT = "run", "gate", "report"  # the sections of docs/options.md


@dataclass(frozen=True)
class Option:
    """One setting. ``name`` is its key without the ``sme2_`` prefix (ini ``sme2_<name>``); ``section`` is the table
    of docs/options.md it is listed in (RUN, GATE or REPORT: "run", "gate", "report").

    kind: ``int``, ``float``, ``text``, ``path`` (relative to the rootdir), ``bool`` (ini true/false),
    ``paths``/``linelist`` (ini lists), ``flag`` (an option without a value). ``switch``: the option that
    sets a bool ini key from the command line: ``"--sme2-no-x"`` (a flag that turns it off) or a choice
    of on/off. ``low``/``high``/``strict`` bound numbers; ``what`` says the valid range in errors;
    ``check`` refuses a value the bounds cannot describe (given the value and where it was set, it raises a
    UsageError naming that place). ``doctor``: also an argument of ``pytest-sme2 doctor --sme2-target``,
    for the settings that decide whether a target can be reached at all (an adb server's address).
    """

    name: str
    help: str
    section: str
    kind: str = "text"
    default: Any = None  # None: no value (the target's default, or nothing)
    doc_default: str = ""  # the "default" cell of docs/options.md
    option: bool = True  # a --sme2-<name> option
    ini: bool = True  # an ini key sme2_<name>
    ini_help: str | None = None
    switch: str | None = None  # "--sme2-no-<name>", or "on/off" for a choice that overrides a bool ini key
    choices: tuple[str, ...] | None = None
    parse: Callable[[str], Any] | None = None  # argparse type of the option (raise ArgumentTypeError)
    low: float | None = None
    high: float | None = None
    strict: bool = False  # the value must be above ``low``
    what: str = ""
    marker: str | None = None  # the marker argument that overrides it per test, e.g. "perf(runs=...)"
    specials: tuple[str, ...] = ()  # words a number setting also takes, e.g. "auto"
    check: Callable[[Any, str], Any] | None = None  # (value, where it was set) -> value, or a UsageError
    doctor: bool = False  # also an argument of `pytest-sme2 doctor --sme2-target`

    @property
    def ini_key(self) -> str:
        return f"sme2_{self.name}"

    @property
    def dest(self) -> str:
        """pytest's name of the option's value (``config.getoption``)."""
        return self.flag_text.lstrip("-").replace("-", "_")

    @property
    def flag_text(self) -> str:
        """The option as the user types it."""
        return self.switch if self.switch and self.switch.startswith("--") else f"--sme2-{self.name.replace('_', '-')}"

    @property
    def ini_default(self) -> Any:
        if self.kind in ("paths", "linelist"):
            return []
        if self.kind == "bool":
            return bool(self.default)
        return (
            ""
            if self.default is None
            else (f"{self.default:g}" if isinstance(self.default, float) else str(self.default))
        )
