"""Strings from files and test ids, escaped for the markdown they are written into.

Why: session folders travel as CI artifacts and ``pytest-sme2 report`` rebuilds summary.md from
whatever summary.json says; test ids are whatever a parametrization made. A ``target.name`` of
``x`;touch /tmp/PWNED;#`` or a test id with ``<img onerror=...>`` must reach a job summary as the
characters they are, never as markup, a link or the end of a code span. Markdown renderers
(GitHub's job summaries) pass raw HTML and links through, so every string that did not come from
our own format strings goes through :func:`text` or :func:`code`, which escape with markdown's backslash
(never an HTML entity, which a reader of the file sees as ``&gt;``). HTML pages use ``html.escape``
(report/html.py).
"""

from __future__ import annotations

import re
from typing import Any

# Markup in GitHub-flavoured markdown that text must not start: code spans, table cells, escapes,
# and inline links and images (``[x](javascript:...)``: escaping the ``(`` after ``]`` is enough, so
# ``[95% CI]`` stays readable). Raw HTML and ``<autolinks>`` go with ``<``; an entity or character reference
# (``&lt;``, ``&#60;``) with its ``&``; a blockquote with a ``>`` that starts the text. Each is escaped with a
# backslash, markdown's own escape, never an HTML entity: summary.md is read as a file too, where ``-&gt;``
# showed for ``->`` (issue 65). Any other ``>`` or ``&`` is no markup and stays as it is. `_` and `*` only change
# emphasis (and GFM ignores intraword `_`); reference links need a definition line we never write.
_SPECIAL = re.compile(r"([\\`|<]|(?<=\])\(|&(?=#?\w+;)|^\s*>)")


class Markdown(str):
    """Markdown we built ourselves (a code span, bold numbers): written as it is."""


def text(value: Any) -> Markdown:
    """``value`` as plain text in markdown: markup characters escaped, on one line."""
    if isinstance(value, Markdown):
        return value
    flat = " ".join(str(value).split("\n"))
    return Markdown(_SPECIAL.sub(lambda m: m.group(0)[:-1] + "\\" + m.group(0)[-1], flat))


def code(value: Any) -> Markdown:
    """``value`` as an inline code span that no backtick inside it can end early (CommonMark's rule:
    a fence longer than any run of backticks in the text), on one line; ``|`` escaped for tables."""
    flat = " ".join(str(value).split("\n")).replace("|", "\\|")
    runs = [len(run) for run in re.findall(r"`+", flat)]
    fence = "`" * (max(runs, default=0) + 1)
    pad = " " if flat.startswith("`") or flat.endswith("`") else ""
    return Markdown(f"{fence}{pad}{flat}{pad}{fence}")
