"""Run settings are checked once, at start-up, and errors name where the value was set (issue 13, case 7).

``--sme2-runs=0`` used to start the session and then fail every test; an ini
value's error named the command-line flag. Each case here is a real inner
pytest run: one usage error (exit 4) before any test, no traceback.
"""

from __future__ import annotations

import pytest

TEST = """
import pytest

@pytest.mark.model("tiny")
def test_tiny(exported_pte, runner, etdump_profile):
    etdump_profile(exported_pte, runner())
"""


@pytest.mark.parametrize(
    ("args", "ini", "message"),
    [
        (["--sme2-runs=0"], None, "--sme2-runs=0 is invalid: it must be a whole number >= 1"),
        ([], "sme2_runs = 0", "ini sme2_runs = 0 (in {ini} or -o) is invalid: it must be a whole number >= 1"),
        (["-o", "sme2_runs=0"], None, "ini sme2_runs = 0 (in {ini} or -o) is invalid"),
        ([], "sme2_warmup = -1", "ini sme2_warmup = -1 (in {ini} or -o) is invalid: it must be a whole number >= 0"),
        ([], "sme2_threads = two", "ini sme2_threads = two (in {ini} or -o) is not a whole number"),
        (["--sme2-threads=0"], None, "--sme2-threads=0 is invalid: it must be a whole number from 1 to 1024"),
        (["--sme2-max-rounds=0"], None, "--sme2-max-rounds=0 is invalid: it must be a whole number >= 1"),
        (["--sme2-timeout=0"], None, "--sme2-timeout=0.0 is invalid: it must be a number of seconds > 0"),
        (["--sme2-timeout=nan"], None, "--sme2-timeout=nan is invalid: it must be a number of seconds > 0"),
        (
            [],
            "sme2_timeout = -5",
            "ini sme2_timeout = -5 (in {ini} or -o) is invalid: it must be a number of seconds > 0",
        ),
        (
            [],
            "sme2_emulated_svl = 100",
            "ini sme2_emulated_svl = 100 (in {ini} or -o) is not an SME streaming vector length",
        ),
        # issue 23: no upper bound let 1e300 overflow select() and 100000 threads exhaust memory
        (
            ["--sme2-timeout=1e300"],
            None,
            "--sme2-timeout=1e+300 is invalid: it must be a number of seconds > 0 and at most " "86400 (one day",
        ),
        (
            [],
            "sme2_timeout = 90000",
            "ini sme2_timeout = 90000 (in {ini} or -o) is invalid: it must be a number of seconds "
            "> 0 and at most 86400",
        ),
        (
            ["--sme2-threads=100000"],
            None,
            "--sme2-threads=100000 is invalid: it must be a whole number from 1 to 1024 (",
        ),
        (
            [],
            "sme2_threads = 5000",
            "ini sme2_threads = 5000 (in {ini} or -o) is invalid: it must be a whole number from 1 " "to 1024",
        ),
    ],
    ids=[
        "runs-option",
        "runs-ini",
        "runs-override",
        "warmup-ini",
        "threads-text",
        "threads-option",
        "max-rounds",
        "timeout-zero",
        "timeout-nan",
        "timeout-ini",
        "svl-ini",
        "timeout-huge",
        "timeout-huge-ini",
        "threads-huge",
        "threads-huge-ini",
    ],
)
def test_a_bad_run_setting_is_one_usage_error_naming_its_source(
    sme2_project: pytest.Pytester, args: list[str], ini: str | None, message: str
) -> None:
    inifile = sme2_project.path / "tox.ini"
    if ini is not None:  # replace the project's own line for that key, or add one
        key = ini.split("=")[0].strip()
        lines = [line for line in inifile.read_text().splitlines() if line.split("=")[0].strip() != key]
        inifile.write_text("\n".join([*lines, ini]) + "\n")
    sme2_project.makepyfile(test_settings=TEST)
    result = sme2_project.runpytest_inprocess(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    text = result.stdout.str() + result.stderr.str()
    assert message.format(ini=inifile) in text and "Traceback" not in text
    assert "passed" not in text and "failed" not in text  # no test ran


def test_a_run_that_hits_its_timeout_says_where_the_timeout_was_set(sme2_project: pytest.Pytester) -> None:
    sme2_project.makepyfile(
        test_settings="""
        import pytest

        @pytest.mark.perf(runs=10000000, warmup=0)
        @pytest.mark.model("tiny")
        def test_slow(exported_pte, runner, etdump_profile):
            etdump_profile(exported_pte, runner())

        @pytest.mark.perf(runs=10000000, warmup=0, timeout=1.5)
        @pytest.mark.model("tiny")
        def test_marked(exported_pte, runner, etdump_profile):
            etdump_profile(exported_pte, runner())
        """
    )
    result = sme2_project.runpytest_inprocess("--sme2-timeout=1")
    result.assert_outcomes(failed=2)
    text = result.stdout.str()
    assert "timed out after 1 s (set by --sme2-timeout=1.0)" in text
    assert "timed out after 1.5 s (set by @pytest.mark.perf(timeout=1.5))" in text


def test_run_settings_given_in_the_test_are_checked_with_the_same_bounds(sme2_project: pytest.Pytester) -> None:
    """runner(timeout=inf) passed a finiteness check that only options had, and select() raised OverflowError."""
    sme2_project.makepyfile(
        test_settings="""
        import pytest

        @pytest.mark.model("tiny")
        def test_infinite(exported_pte, runner, etdump_profile):
            etdump_profile(exported_pte, runner(timeout=float("inf")))

        @pytest.mark.perf(timeout=1e300)
        @pytest.mark.model("tiny")
        def test_marked(exported_pte, runner, etdump_profile):
            etdump_profile(exported_pte, runner())

        @pytest.mark.model("tiny")
        def test_text(exported_pte, runner, etdump_profile):
            etdump_profile(exported_pte, runner(timeout="60"))

        @pytest.mark.perf(threads=100000)
        @pytest.mark.model("tiny")
        def test_threads(exported_pte, runner, etdump_profile):
            etdump_profile(exported_pte, runner())
        """
    )
    result = sme2_project.runpytest_inprocess()
    result.assert_outcomes(failed=4)
    text = result.stdout.str()
    assert "runner(timeout=inf) is invalid: it must be a number of seconds > 0 and at most 86400" in text
    assert "@pytest.mark.perf(timeout=1e+300) is invalid: it must be a number of seconds > 0 and at most 86400" in text
    assert "runner(timeout='60') is invalid: it must be a number of seconds > 0" in text
    assert "threads=100000 is invalid: threads must be an integer from 1 to 1024" in text
    assert "OverflowError" not in text and "Traceback" not in text


def test_a_misspelt_ini_key_is_named_where_its_models_are_missing(
    pytester: pytest.Pytester, shared_export_cache
) -> None:  # noqa: ANN001
    """A user's trial: ``sme2_model = ...`` (for sme2_models) gave "unknown model 'mynet'. Registered models:
    (none)"; the cause was only in pytest's warnings summary. The error names the key and the one meant."""
    from conftest import TINY_MODEL

    (pytester.path / "mynet.py").write_text(TINY_MODEL)
    pytester.makeini(
        f"[pytest]\nsme2_target = host\nsme2_cache_dir = {shared_export_cache}\n"
        "sme2_model =\n    mynet = mynet.py\nsme2_runss = 3\n"
    )
    pytester.makepyfile(test_it=TEST.replace('"tiny"', '"mynet"'))
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            "*unknown model 'mynet'. Registered models: (none).*Note: pytest-sme2 has no ini "
            "setting sme2_model (did you mean sme2_models?), sme2_runss (did you mean "
            "sme2_runs?); its settings: docs/options.md*"
        ]
    )
