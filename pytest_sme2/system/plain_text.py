"""Text from files as plain output: one line, and never a GitHub workflow command.

Why: baselines, summaries, caches and device files are written by others (a pull request can edit a baseline),
and their text reaches failure messages and the terminal summary. A line break in it would start a line of our
output that the file wrote; under GitHub Actions a line starting ``::`` (``::error ...``, ``::stop-commands::``)
is a command the runner obeys. Readers refuse such text where a file is read (gate/baseline_schema.py); the
writers here keep it harmless wherever it is printed.
"""

from __future__ import annotations

import re
from typing import Any

# Characters that end a line or drive a terminal: shown as escapes (\n, \x1b) in plain-text output.
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_COMMAND = re.compile(r"^([^\S\n]*)::", re.MULTILINE)


def one_line(value: Any) -> str:
    """``value`` (text from a file) as one line of plain text: a control character shows as its escape
    (``\\n``, ``\\x1b``), so it can neither start a line of our output nor move a terminal's cursor."""
    return CONTROL.sub(lambda m: repr(m.group())[1:-1], str(value))


def no_workflow_commands(text: str) -> str:
    """``text`` with every line that would start a GitHub workflow command (``::`` after blanks, which the runner
    skips) prefixed by a backslash: a failure message or summary line we print is never a command. The plugin's
    own annotations (report/github.py) are written past this, on purpose."""
    return _COMMAND.sub(r"\1\\::", text)


class CommandFreeWriter:
    """A terminal writer (pytest's terminal reporter) whose ``write_line`` goes through no_workflow_commands: the
    summaries print labels, verdicts and paths that came from files, and one guard covers every line of them."""

    def __init__(self, writer: Any) -> None:
        self._writer = writer

    def write_line(self, line: Any, **markup: Any) -> None:
        self._writer.write_line(no_workflow_commands(str(line)), **markup)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._writer, name)
