"""The glossary's words are the public API's (issue 67: one word per idea).

docs/design.md, "Names: one word, one concept", defines the words for repetition (run, chunk, round, replica,
process, session) and lists the retired ones. Every public name a user types, the names in pytest_sme2.__all__
with their public attributes and parameters, the fixtures, the marker keywords, the options and ini keys of the
option table, must use the glossary's words: a retired word appears only as a deprecated alias declared in
system/deprecated.py or in an option's ``renamed_from``, which still work and warn.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from _pytest.fixtures import getfixturemarker

import pytest_sme2
from pytest_sme2 import plugin
from pytest_sme2.plugin import options
from pytest_sme2.system.deprecated import RENAMED

DESIGN = Path(__file__).resolve().parents[1] / "docs" / "design.md"

# A retired word, as the words of an identifier (split at ``_``, ``-`` and case changes), and what replaced it.
RETIRED = {
    ("processes",): "replicas (the gate's sample unit) or chunks (runner processes a side's runs came from)",
    ("process", "sizes"): "replica_sizes",
    ("process", "shift"): "ReplicaShift",
    ("top", "up"): "extra_rounds (an extra round)",
    ("topup",): "extra_rounds (an extra round)",
    ("sampled", "round"): "sampled process",
    ("timed", "round"): "chunk",
}
REPETITION = ("run", "chunk", "round", "replica", "process", "session")


def words(name: str) -> tuple[str, ...]:
    """``ReplicaShift`` -> (replica, shift); ``--sme2-baseline-replicas`` -> (sme2, baseline, replicas)."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", name)
    return tuple(w.lower() for w in re.split(r"[\s_\-().=]+", spaced) if w)


def retired_in(name: str) -> str | None:
    """The retired word ``name`` uses, with its replacement; None when it uses none."""
    have = words(name)
    for retired, replacement in RETIRED.items():
        if any(have[i : i + len(retired)] == retired for i in range(len(have))):
            return f"{' '.join(retired)} (use {replacement})"
    return None


def _members(owner: str, obj: object) -> Iterator[str]:
    """``owner.attribute`` and ``owner(parameter=)`` for a public class or function."""
    if inspect.isclass(obj):
        fields = [f.name for f in dataclasses.fields(obj)] if dataclasses.is_dataclass(obj) else []
        for name in sorted({*fields, *(n for n in vars(obj) if not n.startswith("_"))}):
            yield f"{owner}.{name}"
            yield from _parameters(f"{owner}.{name}", getattr(obj, name, None))
        yield from _parameters(owner, obj)
    else:
        yield from _parameters(owner, obj)


def _parameters(owner: str, obj: object) -> Iterator[str]:
    if not callable(obj):
        return
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):
        return
    for parameter in signature.parameters.values():
        if parameter.name not in ("self", "cls") and parameter.kind not in (
            parameter.VAR_POSITIONAL,
            parameter.VAR_KEYWORD,
        ):
            yield f"{owner}({parameter.name}=)"


def public_names() -> list[str]:
    """Every name of the public API a user types."""
    names = []
    for name in pytest_sme2.__all__:
        names += [name, *_members(name, getattr(pytest_sme2, name))]
    names += [f"fixture {n}" for n, obj in vars(plugin).items() if getfixturemarker(obj) is not None]
    names += [f"marker {m.split('(', 1)[0].split(':', 1)[0]}" for m in plugin.MARKERS]
    names += [f"perf({a}=)" for a in options.marker_arguments("perf")]
    names += [f"baseline({a}=)" for a in options.marker_arguments("baseline")]
    for option in options.OPTIONS:
        names += [option.flag_text] if option.option else []
        names += [option.ini_key] if option.ini else []
    return names


def deprecated_aliases() -> set[str]:
    """The old spellings that still work: system/deprecated.py's and the option table's."""
    settings = {s for o in options.OPTIONS for old in o.renamed for s in (old.flag_text, old.ini_key)}
    return {*RENAMED, *settings}


def test_the_public_api_uses_no_retired_word_except_as_a_deprecated_alias() -> None:
    aliases = deprecated_aliases()
    wrong = [f"{n}: {retired_in(n)}" for n in public_names() if retired_in(n) and n not in aliases]
    assert not wrong, "retired glossary words in the public API (docs/design.md, Names):\n" + "\n".join(wrong)


def test_every_deprecated_alias_is_a_retired_word_that_still_works_and_is_listed_in_the_glossary() -> None:
    text = DESIGN.read_text()
    retired_line = text[text.index("Retired words") :].split("\n\n", 1)[0]
    for alias in deprecated_aliases():
        assert retired_in(alias), f"{alias} is declared deprecated but uses no retired word: drop the alias"
    for old in ("processes", "process_sizes", "ProcessShift", "top_up", "sampled round", "timed round"):
        assert old in retired_line, f"docs/design.md's glossary does not list {old!r} as retired"


def test_the_glossary_defines_each_word_for_repetition_and_the_api_uses_them() -> None:
    text = DESIGN.read_text()
    glossary = text[text.index("## Names: one word, one concept") :]
    defined = {row.split("|")[1].strip() for row in glossary.splitlines() if row.startswith("| ")}
    assert set(REPETITION) <= defined, f"docs/design.md's glossary lacks {sorted(set(REPETITION) - defined)}"
    used = {w for name in public_names() for w in words(name)}
    for word in ("run", "chunk", "round", "replica", "session"):  # each the public name of its idea
        assert word in used or f"{word}s" in used, f"no public name uses the glossary's word {word!r}"


@pytest.mark.parametrize(
    ("name", "retired"),
    [
        ("Profile.process_sizes", True),
        ("--sme2-baseline-processes", True),
        ("RunSpec(top_up=)", True),
        ("ProcessShift", True),
        ("RunSpec.replicas", False),
        ("RunSpec.fresh_process", False),  # an operating-system process: the glossary's word
        ("Speedup.within_one_process", False),
    ],
)
def test_a_retired_word_is_found_in_any_spelling(name: str, retired: bool) -> None:
    assert (retired_in(name) is not None) is retired
