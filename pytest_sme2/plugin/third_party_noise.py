"""What torch, ExecuTorch and torchao say about their own internals while pytest-sme2 exports and runs, which a
user cannot act on: silenced by message (and the module that warns), never by category alone.

Why: a user's session (their own repository, no filterwarnings of theirs) printed 16-60 Deprecation and Future
warnings of these libraries' internals and torchao's "Failed to load ..._C_mxfp8..." lines (issue 65), where
pytest-sme2's own repository hid them with blanket ``ignore::DeprecationWarning`` lines of its pyproject.toml.
Everything else these libraries, and the user's own code, warn or log still shows; ``-W`` on the command line
(``-W default::DeprecationWarning``) and ``@pytest.mark.filterwarnings`` still win over these filters.
"""

from __future__ import annotations

import logging
import re
from typing import Callable

import pytest

# (category, start of the message, start of the warning module's name) as pytest's filterwarnings takes them:
# regular expressions, matched at the start (no ":" in a message: it separates the fields). Seen in a session
# exporting and running a model or an LLM (torch 2.13, ExecuTorch 1.5.1, torchao 0.18).
WARNINGS: tuple[tuple[str, str, str], ...] = (
    # ExecuTorch reads its schema and op tables with importlib.resources' legacy functions
    ("DeprecationWarning", r"read_text is deprecated", r"executorch\."),
    ("DeprecationWarning", r"read_binary is deprecated", r"executorch\."),
    ("DeprecationWarning", r"open_text is deprecated", r"importlib\.resources\._legacy\Z"),  # read_text's own call
    # torch's own modules still use it when ExecuTorch imports them
    ("DeprecationWarning", r"`torch\.jit\.script_method` is deprecated", r"torch\.jit\."),
    # torch's pytree LeafSpec, copied by torch.export's and ExecuTorch's passes
    ("FutureWarning", r"`isinstance\(treespec, LeafSpec\)` is deprecated", r"copyreg\Z"),
    # an LLM export (export_llama, dynamic shapes): torch's own graphs call it, ExecuTorch's ETRecord reader the others
    ("FutureWarning", r"_check_is_size will be removed in a future PyTorch release", r"torch\."),
    ("FutureWarning", r"add_var_to_val is deprecated", r"executorch\.exir\.serde\."),
    ("FutureWarning", r"var_to_val is deprecated", r"executorch\.exir\.serde\."),
)

# (logger, what its record's message starts with, as a regular expression).
LOG_LINES: tuple[tuple[str, str], ...] = (
    # torchao's optional kernels built for another Python or CUDA (_C_mxfp8, _C_cutlass_90a): unused on a CPU
    ("torchao", r"Failed to load \S*torchao[/\\]_C\w*[.\w-]*\.so\b"),
    ("torchao.kernel.intmm", r"Warning: Detected no triton"),
    # torchao's enums registered as pytree constants, which torch 2.13 deprecates (torch's own "W1202 ..." line)
    ("torch.utils._pytree", r"%s is an Enum subclass and is now natively supported by torch\.compile"),
    # one per symbolic size of a dynamic-shape program each time its ETRecord is read (an LLM's profiles read it
    # for their graph nodes): dozens of lines. export.py quiets this logger while it exports; this covers the reads
    ("executorch.exir.serde.export_serialize", r"Symbol \S+ did not appear in the graph that was deserialized"),
)


def filterwarnings_lines() -> list[str]:
    """The ``filterwarnings`` ini lines that ignore WARNINGS."""
    return [f"ignore:{message}:{category}:{module}" for category, message, module in WARNINGS]


class _Drop(logging.Filter):
    """Drops one logger's records whose message (its format string, before arguments) matches."""

    def __init__(self, pattern: str) -> None:
        super().__init__()
        self._pattern = re.compile(pattern)

    def filter(self, record: logging.LogRecord) -> bool:
        return not self._pattern.match(str(record.msg))


def install(config: pytest.Config) -> Callable[[], None]:
    """Add the warning filters after the project's own (so a project's ``filterwarnings = error`` does not turn
    these libraries' deprecations into export failures) and the log filters; returns what removes the latter."""
    for line in filterwarnings_lines():
        config.addinivalue_line("filterwarnings", line)
    added = [(logging.getLogger(name), _Drop(pattern)) for name, pattern in LOG_LINES]
    for logger, drop in added:
        logger.addFilter(drop)  # a logger's filters see the records logged to it, before any handler

    def remove() -> None:
        for logger, drop in added:
            logger.removeFilter(drop)

    return remove
