"""``pytest-sme2 init``: the two files it writes, what it refuses, and its next two commands run as printed."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import TINY_MODEL
from pytest_sme2.cli import main


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user's repository holding one model file, as the current folder."""
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "tiny.py").write_text(TINY_MODEL)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _next_commands(out: str) -> list[str]:
    return [line.strip() for line in out.splitlines() if line.startswith("  pytest ")]


def test_init_writes_the_registration_and_a_perf_test_and_says_the_next_two_commands(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["init", "models/tiny.py", "--dtype", "fp16"]) == 0
    out = capsys.readouterr().out
    assert _next_commands(out) == [
        "pytest perf_tests/test_tiny.py -m sme2 --sme2-update-baselines",
        "pytest perf_tests/test_tiny.py -m sme2",
    ]
    conftest = (project / "perf_tests" / "conftest.py").read_text()
    assert "register_model('tiny', Path(__file__).resolve().parent.parent / 'models/tiny.py')" in conftest
    test = (project / "perf_tests" / "test_tiny.py").read_text()
    assert "pytest.mark.model('tiny', dtype='fp16')" in test and "def test_tiny(" in test
    compile(conftest, "conftest.py", "exec")
    compile(test, "test_tiny.py", "exec")


def test_init_never_overwrites_and_names_the_file(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = project / "perf_tests"
    folder.mkdir()
    (folder / "conftest.py").write_text("# the user's own\n")
    assert main(["init", "models/tiny.py"]) == 2
    err = capsys.readouterr().err
    assert f"{folder / 'conftest.py'} already exists" in err and "wrote nothing" in err
    assert "pytest_sme2.register_model('tiny', Path(__file__).resolve().parent.parent / 'models/tiny.py')" in err
    assert (folder / "conftest.py").read_text() == "# the user's own\n"
    assert not (folder / "test_tiny.py").exists()


def test_a_module_that_is_not_a_model_is_refused_before_anything_is_written(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (project / "models" / "half.py").write_text("def get_eager_model():\n    return None\n")
    assert main(["init", "models/half.py"]) == 2
    assert "does not define get_example_inputs()" in capsys.readouterr().err
    assert main(["init", "models/absent.py"]) == 2
    assert "model file" in capsys.readouterr().err
    assert main(["init", "no_such_package.model"]) == 2
    assert "module no_such_package.model is not found" in capsys.readouterr().err
    assert not (project / "perf_tests").exists()


def test_a_module_name_in_the_project_is_registered_by_file_and_an_installed_one_by_name(
    project: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    (project / "mynet").mkdir()
    (project / "mynet" / "__init__.py").write_text("")
    (project / "mynet" / "model.py").write_text(TINY_MODEL)
    assert main(["init", "mynet.model", "--name", "mynet", "--tests-dir", "t1"]) == 0
    assert (
        "register_model('mynet', Path(__file__).resolve().parent.parent / 'mynet/model.py')"
        in (project / "t1" / "conftest.py").read_text()
    )
    installed = tmp_path_factory.mktemp("site")
    (installed / "shipped_net.py").write_text(TINY_MODEL)
    monkeypatch.syspath_prepend(str(installed))
    assert main(["init", "shipped_net", "--tests-dir", "t2"]) == 0
    assert "register_model('shipped_net', 'shipped_net')" in (project / "t2" / "conftest.py").read_text()


def test_the_printed_commands_record_then_gate_on_the_emulated_target(project: Path) -> None:
    """As a user would: init in a repository of their own, then the two commands exactly as printed."""
    from pytest_sme2.run import emulation_setup

    status = emulation_setup.status()
    if not status.ready:
        pytest.skip(f"emulated target not ready: {status.problem}")
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, *args], cwd=project, env=env, capture_output=True, text=True)

    init = run("-m", "pytest_sme2.cli", "init", "models/tiny.py")
    assert init.returncode == 0, init.stderr
    record, check = _next_commands(init.stdout)
    for command, counts in ((record, "1 written"), (check, "0 written")):
        words = shlex.split(command)
        assert words[0] == "pytest"
        session = run("-m", *words, "-p", "no:cacheprovider")
        assert session.returncode == 0, session.stdout[-3000:] + session.stderr[-3000:]
        assert f"1 baseline file(s) (counted instructions, emulated target): {counts}" in session.stdout
    (summary,) = sorted((project / ".sme2" / "artifacts").glob("session-*/summary.json"))[-1:]
    (test,) = json.loads(summary.read_text())["tests"]
    assert [p["instructions"]["per_inference"] > 0 for p in test["profiles"]] == [True, True]
    assert test["verdicts"] and {v["verdict"] for v in test["verdicts"]} == {"ok"}


def test_a_dangling_conftest_link_is_refused_naming_where_it_leads_and_nothing_is_written(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 64 (weak): init wrote through a dangling perf_tests/conftest.py link to a file outside the repository,
    naming the link, not where it wrote."""
    (project / "perf_tests").mkdir()
    target = project.parent / f"{project.name}-outside.py"
    (project / "perf_tests" / "conftest.py").symlink_to(target)
    assert main(["init", "models/tiny.py"]) == 2
    err = capsys.readouterr().err
    assert f"{project / 'perf_tests' / 'conftest.py'} (a link to {target}) already exists; init never overwrites" in err
    assert not target.exists() and not (project / "perf_tests" / "test_tiny.py").exists()


def test_a_tests_folder_linked_out_of_the_project_is_refused(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    elsewhere = project.parent / f"{project.name}-elsewhere"
    elsewhere.mkdir()
    (project / "perf_tests").symlink_to(elsewhere)
    assert main(["init", "models/tiny.py"]) == 2
    assert f"is a link to {elsewhere}, out of the project {project}" in capsys.readouterr().err
    assert not list(elsewhere.iterdir())


def test_the_printed_commands_are_shell_quoted(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--tests-dir 'a b;echo INJECTED'` printed `pytest a b;echo INJECTED/test_tiny.py`."""
    assert main(["init", "models/tiny.py", "--tests-dir", "a b;echo INJECTED"]) == 0
    first, _ = _next_commands(capsys.readouterr().out)
    assert first == "pytest 'a b;echo INJECTED/test_tiny.py' -m sme2 --sme2-update-baselines"
    assert shlex.split(first)[1] == "a b;echo INJECTED/test_tiny.py"


def test_a_name_that_is_no_python_identifier_still_writes_a_test_that_parses(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--name ²` wrote `def test_²(`, which does not parse, and exited 0."""
    assert main(["init", "models/tiny.py", "--name", "²"]) == 0
    [test] = (project / "perf_tests").glob("test_*.py")
    compile(test.read_text(), str(test), "exec")
    assert "pytest.mark.model('²'" in test.read_text()


def test_a_second_and_third_model_are_added_to_inits_own_conftest_and_run(project: Path) -> None:
    """Issue 65: init refused a second model because its own conftest.py existed, and wrote nothing. A conftest
    init wrote and nobody edited gets one registration line per model; the second model's printed command then
    records its baseline as the first's did (real export and counted runs on the emulated target)."""
    from pytest_sme2.run import emulation_setup

    (project / "models" / "second.py").write_text(TINY_MODEL)
    (project / "models" / "third.py").write_text(TINY_MODEL)
    assert main(["init", "models/tiny.py"]) == 0
    assert main(["init", "models/second.py"]) == 0
    assert main(["init", "models/third.py", "--dtype", "fp16"]) == 0
    conftest = (project / "perf_tests" / "conftest.py").read_text()
    for name in ("tiny", "second", "third"):
        assert f"register_model({name!r}, Path(__file__).resolve().parent.parent / 'models/{name}.py')" in conftest
        assert (project / "perf_tests" / f"test_{name}.py").is_file()
    compile(conftest, "conftest.py", "exec")
    assert main(["init", "models/second.py"]) == 2  # the same name again: its test file exists, nothing written
    assert conftest == (project / "perf_tests" / "conftest.py").read_text()

    status = emulation_setup.status()
    if not status.ready:
        pytest.skip(f"emulated target not ready: {status.problem}")
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    session = subprocess.run(
        [sys.executable, "-m", "pytest", "perf_tests/test_second.py", "-m", "sme2", "--sme2-update-baselines"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
    )
    assert session.returncode == 0, session.stdout[-3000:] + session.stderr[-3000:]
    assert "1 baseline file(s) (counted instructions, emulated target): 1 written" in session.stdout


def test_a_conftest_the_user_edited_is_never_added_to(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (project / "models" / "second.py").write_text(TINY_MODEL)
    assert main(["init", "models/tiny.py"]) == 0
    conftest = project / "perf_tests" / "conftest.py"
    edited = conftest.read_text() + "\nSETTING = 1\n"
    conftest.write_text(edited)
    assert main(["init", "models/second.py"]) == 2
    assert "already exists" in capsys.readouterr().err
    assert conftest.read_text() == edited and not (project / "perf_tests" / "test_second.py").exists()
