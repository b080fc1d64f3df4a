"""The run-count defaults the user reads (docs/options.md, the README, `pytest --help`, session.py) are the ones
the code uses.

Issue 13, case 10: the README and session.py said 20 timed runs while RunSpec used 40. The numbers
here are read from the code (RunSpec, EmulatedTarget), never copied into the test. The options
table lives in docs/options.md; the run-settings paragraph in the README.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import REPO
from pytest_sme2.run.targets import RunSpec
from pytest_sme2.run.targets.emulated import EmulatedTarget

README = (REPO / "README.md").read_text(encoding="utf-8")
OPTIONS = (REPO / "docs" / "options.md").read_text(encoding="utf-8")


def _option_row(option: str) -> str:
    row = next((line for line in OPTIONS.splitlines() if line.startswith(f"| `{option}`")), None)
    assert row is not None, f"docs/options.md's options table has no row for {option}"
    return row


@pytest.mark.parametrize(
    "option, hardware, emulated",
    [
        ("--sme2-runs", RunSpec.runs, EmulatedTarget.default_runs),
        ("--sme2-warmup", RunSpec.warmup, EmulatedTarget.default_warmup),
    ],
)
def test_options_table_states_the_code_defaults(option: str, hardware: int, emulated: int) -> None:
    default = _option_row(option).rsplit("|", 2)[1].strip()
    assert default == f"{hardware} (emulated: {emulated})", f"docs/options.md row of {option}: {default!r}"


def test_the_options_table_is_written_once() -> None:
    """The README links to docs/options.md rather than keeping a second table that could drift."""
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    holding = [
        path.name
        for path in pages
        if any(line.startswith("| `--sme2-runs`") for line in path.read_text(encoding="utf-8").splitlines())
    ]
    assert holding == ["options.md"], holding


def test_run_settings_paragraph_states_the_code_defaults() -> None:
    paragraph = README[README.index("Run settings are taken, first match wins") :][:600]
    paragraph = " ".join(paragraph.split())
    assert f"the defaults ({RunSpec.runs} runs, {RunSpec.warmup} warmup runs" in paragraph
    runs = f"{EmulatedTarget.default_runs} run" + ("s" if EmulatedTarget.default_runs != 1 else "")
    warmup = "no warmup" if EmulatedTarget.default_warmup == 0 else f"{EmulatedTarget.default_warmup} warmup run"
    assert f"emulated target {runs} and {warmup}" in paragraph, paragraph


def test_help_states_the_code_defaults(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--help")
    text = " ".join(result.stdout.str().split())
    runs = re.search(r"--sme2-runs=SME2_RUNS (.*?)--sme2-", text).group(1)
    assert f"default {RunSpec.runs};" in runs and f"{EmulatedTarget.default_runs} on the emulated target" in runs
    warmup = re.search(r"--sme2-warmup=SME2_WARMUP (.*?)--sme2-", text).group(1)
    assert (
        f"default {RunSpec.warmup};" in warmup and f"{EmulatedTarget.default_warmup} on the emulated target" in warmup
    )


def test_session_settings_comment_names_no_stale_number() -> None:
    source = (REPO / "pytest_sme2" / "measure" / "session.py").read_text(encoding="utf-8")
    line = next(line for line in source.splitlines() if line.strip().startswith("runs: int | None"))
    numbers = [int(n) for n in re.findall(r"\b\d+\b", line.split("#", 1)[1])]
    assert all(n == RunSpec.runs for n in numbers), f"session.py says {line.strip()!r}; RunSpec.runs is {RunSpec.runs}"


# ------------------------------------------------ the one configuration table (pytest_sme2/plugin/options.py)
from pytest_sme2.measure.session import Settings  # noqa: E402
from pytest_sme2.plugin import options as option_table  # noqa: E402


@pytest.mark.parametrize("section", [option_table.RUN, option_table.GATE, option_table.REPORT])
def test_docs_options_tables_are_the_option_table(section: str) -> None:
    """docs/options.md is rendered from the table: edit options.py, then paste markdown_table(section)."""
    assert option_table.markdown_table(section) in OPTIONS, (
        f"docs/options.md's {section} table differs from pytest_sme2/plugin/options.py; render it with "
        f"python -c 'from pytest_sme2.plugin.options import markdown_table; print(markdown_table({section!r}))'"
    )


def test_each_targets_options_are_its_table_in_docs_targets() -> None:
    """A target's own options are listed in its section of docs/targets.md, rendered from its module's options."""
    from pytest_sme2.run.targets.registry import target_classes

    page = (REPO / "docs" / "targets.md").read_text(encoding="utf-8")
    with_options = [name for name, target in target_classes().items() if target.options]
    assert {"emulated", "adb"} <= set(with_options)
    for name in with_options:
        section = page[page.index(f"## `{name}`") :]
        end = section.find("\n## ", 1)
        section = section if end < 0 else section[:end]
        assert option_table.target_table(name) in section, (
            f"docs/targets.md's section of {name} lacks its options table; render it with python -c 'from "
            f"pytest_sme2.plugin.options import target_table; print(target_table({name!r}))'"
        )


def test_every_option_and_ini_key_is_in_help_with_the_tables_text(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--help")
    text = " ".join(result.stdout.str().split())
    for option in option_table.OPTIONS:
        if option.option:
            assert option.flag_text in text and " ".join(option.help.split()) in text, option.name
        if option.ini:
            assert (
                f"{option.ini_key} " in text and " ".join((option.ini_help or option.help).split()) in text
            ), option.name


def test_settings_defaults_are_the_tables() -> None:
    """session.Settings keeps its own defaults for use without pytest; they must be the table's."""
    defaults = Settings()
    table = option_table.BY_NAME
    assert defaults.max_rounds == table["max_rounds"].default
    assert defaults.threads == table["threads"].default
    assert defaults.timeout_s == table["timeout"].default
    assert defaults.replicas == defaults.check_replicas == table["replicas"].default
    assert defaults.cache_dir == Path(table["cache_dir"].default)
    assert defaults.latency_reference is table["latency_reference"].default
    assert defaults.target == table["target"].default


def test_marker_arguments_come_from_the_table(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--markers")
    text = result.stdout.str()
    baseline = next(line for line in text.splitlines() if line.startswith("@pytest.mark.baseline("))
    for field in option_table.TOLERANCE_KEYS:
        assert f"{field}=None" in baseline
    assert option_table.marker_arguments("perf") == ("runs", "max_rounds", "warmup", "threads", "timeout")
