"""A renamed setting still works in its old spelling (issue 67: processes -> replicas): the option and the ini key
are read, validated and reported like the new ones, with a warning naming the new spelling; the new spelling wins
when both are given. The Python names renamed with them (RunSpec(processes=), Profile.process_sizes,
Runner.profile(top_up=)) warn too."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from pytest_sme2.errors import Sme2DeprecationWarning, UsageError
from pytest_sme2.plugin import options
from pytest_sme2.run.targets import RunSpec


class _Config:
    """What options.value and options.source read of pytest's Config: given options and ini values."""

    def __init__(self, given: dict[str, Any] | None = None, ini: dict[str, Any] | None = None) -> None:
        self.given, self.ini, self.inipath = given or {}, ini or {}, None
        self.defaults = {o.ini_key: o.ini_default for named in options.OPTIONS for o in (named, *named.renamed)}

    def getoption(self, dest: str) -> Any:
        return self.given.get(dest)

    def getini(self, key: str) -> Any:
        return self.ini.get(key, self.defaults[key])


@pytest.mark.parametrize(
    ("config", "replicas", "source"),
    [
        (_Config(given={"sme2_processes": "4"}), 4, "--sme2-processes=4"),
        (_Config(ini={"sme2_processes": "3"}), 3, "ini sme2_processes = 3 (-o)"),
        # the default written out reads as the default, as for any ini key: nothing to warn about
        (
            _Config(ini={"sme2_processes": "auto"}),
            "auto",
            "the default (--sme2-replicas or ini sme2_replicas changes it)",
        ),
        (_Config(given={"sme2_processes": "4", "sme2_replicas": "2"}), 2, "--sme2-replicas=2"),  # the new one wins
        (_Config(), "auto", "the default (--sme2-replicas or ini sme2_replicas changes it)"),
    ],
    ids=["old-option", "old-ini", "old-ini-auto", "both", "neither"],
)
def test_the_old_spelling_of_a_renamed_setting_is_read_when_the_new_one_is_not_given(
    config: _Config, replicas: Any, source: str
) -> None:
    assert options.value(config, "replicas") == replicas
    assert options.source(config, "replicas") == source


def test_an_old_spelling_is_validated_and_its_error_names_it_as_written() -> None:
    with pytest.raises(UsageError, match=r"^--sme2-baseline-processes=2 is invalid: it must be a whole number >= 3"):
        options.value(_Config(given={"sme2_baseline_processes": "2"}), "baseline_replicas")


def test_each_old_spelling_in_use_gets_a_warning_naming_the_new_one() -> None:
    config = _Config(given={"sme2_baseline_processes": "5"}, ini={"sme2_processes": "2"})
    assert options.renamed_in_use(config) == [
        "--sme2-baseline-processes=5 is deprecated: use --sme2-baseline-replicas (same meaning; the old spelling "
        "still works)",
        "ini sme2_processes = 2 is deprecated: use ini sme2_replicas (same meaning; the old spelling still works)",
    ]
    assert options.renamed_in_use(_Config(given={"sme2_replicas": "2"})) == []


def test_the_help_and_the_docs_name_the_old_spelling_as_deprecated() -> None:
    [old] = options.BY_NAME["replicas"].renamed
    assert old.flag_text == "--sme2-processes" and old.ini_key == "sme2_processes"
    assert (
        old.help == "deprecated spelling of --sme2-replicas" and old.ini_help == "deprecated spelling of sme2_replicas"
    )
    row = next(line for line in options.markdown_table("gate").splitlines() if "`--sme2-replicas`" in line)
    assert "(deprecated: `--sme2-processes`)" in row and "(deprecated: `sme2_processes`)" in row


def test_old_spellings_in_a_session_run_with_a_warning_each(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nsme2_target = host\nsme2_processes = 2\n")
    pytester.makepyfile(test_nothing="def test_nothing():\n    pass\n")
    result = pytester.runpytest_inprocess("--sme2-baseline-processes=4", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "*--sme2-baseline-processes=4 is deprecated: use --sme2-baseline-replicas*",
            "*ini sme2_processes = 2 is deprecated: use ini sme2_replicas*",
        ],
        consecutive=False,
    )


def test_renamed_python_names_still_work_and_warn() -> None:
    with pytest.warns(Sme2DeprecationWarning, match=r"RunSpec\(processes=\) is deprecated: use RunSpec\(replicas=\)"):
        spec = RunSpec(processes=3)  # type: ignore[call-arg]
    assert spec == RunSpec(replicas=3)
    with pytest.warns(Sme2DeprecationWarning, match=r"RunSpec\.processes is deprecated: use RunSpec\.replicas"):
        assert spec.processes == 3
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert spec.as_dict()["replicas"] == 3 and "processes" not in spec.as_dict()  # no warning: not a field
