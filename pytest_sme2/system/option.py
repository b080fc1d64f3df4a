"""One setting of pytest-sme2: its option, ini key, type, default, bounds, help and the cell of its docs row.

The type lives here, below every stage, because settings are declared where their concept lives: the general
ones in the plugin's table (``plugin/options.py``), each target's own in its target's module, contributed to
that one table through the target registry (``run/targets/registry.py``). Nothing here reads a value; the
plugin's table does, through pytest.
"""

from __future__ import annotations

import dataclasses
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
    ``renamed_from``: the setting's earlier names (``processes`` for ``replicas``): their option and ini key are
    still registered and read when the new spelling is not given, with a warning naming the new one, so what
    users typed keeps working after a rename.
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
    renamed_from: tuple[str, ...] = ()  # earlier names, still accepted (deprecated)

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
    def renamed(self) -> tuple[Option, ...]:
        """The setting under each earlier name: the same option in every way but its name and help, which says
        what to use instead (so it is registered, typed and bounded exactly like the new spelling)."""
        return tuple(
            dataclasses.replace(
                self,
                name=old,
                help=f"deprecated spelling of {self.flag_text}",
                ini_help=f"deprecated spelling of {self.ini_key}",
                switch=None if (self.switch or "").startswith("--") else self.switch,
                renamed_from=(),
            )
            for old in self.renamed_from
        )

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
