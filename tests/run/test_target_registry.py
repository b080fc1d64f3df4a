"""Targets are classes registered by name through entry points, so another distribution can add one.

A tiny third-party distribution (a module and its dist-info, as pip would install it) registers a ``relay``
target with an option of its own; these tests put it on the path and use it the ways a user would: by name in a
pytest session with its option, in ``pytest --help``, in ``pytest-sme2 doctor``. The relay runs programs on the
host target and adds its option's value to the target's facts, so the session's profile shows both came through.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Iterator

import pytest
from helpers_dist import install
from helpers_versions import needs_binding_etdump

from pytest_sme2.errors import UsageError
from pytest_sme2.run.targets import registry
from pytest_sme2.run.targets.base import TargetSettings

RELAY_MODULE = '''
from dataclasses import replace

from pytest_sme2 import DoctorLine, Option, RegisteredTarget, UsageError
from pytest_sme2.run.targets.host import HostTarget  # what it relays to: pytest-sme2's own, private to it

LABEL = Option("relay_label", "relay target: the bench label its runs carry", "run", doc_default="none")


class RelayTarget(RegisteredTarget):
    """Runs programs on the host target; its facts carry the bench label."""

    names = ("relay",)
    options = (LABEL,)

    @classmethod
    def check(cls, name, settings):
        if not settings.value(LABEL):
            raise UsageError("the relay target needs its bench label: pass --sme2-relay-label=NAME")

    @classmethod
    def create(cls, name, settings):
        return cls(HostTarget(settings.log_dir), settings.value(LABEL))

    @classmethod
    def doctor(cls):
        return [DoctorLine("relay bench", "info", "relays to this machine's host target")]

    def __init__(self, inner, label):
        self._inner, self._label = inner, label

    @property
    def info(self):
        inner = self._inner.info
        return replace(inner, name="relay", details={**inner.details, "relay_label": self._label})

    def unsupported(self, sme2):
        return self._inner.unsupported(sme2)

    def kernel_sampler(self, period_ns):
        return self._inner.kernel_sampler(period_ns)

    def device_state(self):
        return self._inner.device_state()

    def run(self, pte, inputs, spec, out_dir, reference=None):
        return replace(self._inner.run(pte, inputs, spec, out_dir, reference), target=self.info)

    def close(self):
        self._inner.close()
'''


@pytest.fixture
def relay_site(tmp_path: Path) -> Path:
    return install(
        tmp_path / "site",
        "sme2-relay-target",
        "sme2_relay",
        RELAY_MODULE,
        "[pytest_sme2.targets]\nrelay = sme2_relay:RelayTarget\n",
    )


@pytest.fixture
def on_path(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Path], None]]:
    """Put a folder on this process's path and read the registry again; read again afterwards, without it."""

    def add(site: Path) -> None:
        monkeypatch.syspath_prepend(str(site))
        registry.target_classes.cache_clear()

    yield add
    monkeypatch.undo()
    registry.target_classes.cache_clear()


def test_a_third_party_target_is_registered_with_its_option_and_doctor_lines(relay_site: Path, on_path) -> None:
    from pytest_sme2.cli.doctor import run_checks

    on_path(relay_site)
    # by name, whatever order the installers wrote them in (setuptools sorts them; this dist-info does not)
    assert registry.target_names() == ("adb", "adb:SERIAL", "auto", "emulated", "host", "local", "relay")
    assert [option.name for option in registry.target_options()][-1] == "relay_label"
    assert registry.target_class("relay").__module__ == "sme2_relay"
    with pytest.raises(UsageError, match="needs its bench label"):
        registry.check_choice("relay", TargetSettings(Path("logs")))
    with pytest.raises(UsageError, match="'relay:x' is not a relay target; write it relay"):
        registry.target_class("relay:x")
    lines = {check.name: check for check in run_checks()}
    assert lines["relay bench"].detail == "relays to this machine's host target"
    assert "default target (auto)" in lines and "adb devices" in lines


@pytest.mark.parametrize(
    ("entry_points", "says"),
    [
        (
            "[pytest_sme2.targets]\nhost = sme2_other:Other\n",
            "the target name 'host' is registered twice (entry point group pytest_sme2.targets), by pytest-sme2 and by "
            "sme2-other-target; uninstall one of them",
        ),
        (
            "[pytest_sme2.targets]\nother = sme2_other:missing\n",
            "target 'other' (sme2_other:missing, entry point group pytest_sme2.targets of sme2-other-target) "
            "cannot be loaded",
        ),
        (
            "[pytest_sme2.targets]\nother = sme2_other:NotATarget\n",
            "is <class 'sme2_other.NotATarget'>, not a subclass of " "pytest_sme2.run.targets.base.RegisteredTarget",
        ),
        (
            "[pytest_sme2.targets]\nother = sme2_other:Other\n",
            "its class names itself ('host',); the entry point's name " "must be the first of its names",
        ),
    ],
)
def test_a_bad_registration_is_an_error_naming_the_distribution(
    tmp_path: Path, on_path, entry_points: str, says: str
) -> None:
    source = (
        "from pytest_sme2 import RegisteredTarget\n"
        "class Other(RegisteredTarget):\n    names = ('host',)\nclass NotATarget:\n    pass\n"
    )
    on_path(install(tmp_path / "site", "sme2-other-target", "sme2_other", source, entry_points))
    with pytest.raises(UsageError) as raised:
        registry.target_names()
    assert says in str(raised.value)


@needs_binding_etdump
def test_a_session_chooses_the_third_party_target_by_name_with_its_own_option(
    sme2_project: pytest.Pytester, relay_site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pytest process of its own, as a user starts it: the relay's distribution on its path."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(relay_site), os.environ.get("PYTHONPATH")])))
    sme2_project.makepyfile(
        test_relay="""
        import pytest

        @pytest.mark.model("tiny")
        def test_tiny_on_the_relay(exported_pte, runner, etdump_profile):
            profile = etdump_profile(exported_pte, runner())
            assert profile.metadata["target"]["name"] == "relay"
            assert profile.metadata["target"]["details"]["relay_label"] == "bench-7"
            assert profile.metadata["target"]["fingerprint"].startswith("relay-")
        """
    )
    helped = sme2_project.runpytest_subprocess("--help")
    text = " ".join(helped.stdout.str().split())
    assert "--sme2-relay-label=SME2_RELAY_LABEL relay target: the bench label its runs carry" in text
    assert "sme2_relay_label (string): relay target: the bench label its runs carry" in text
    assert "where programs run: adb, adb:SERIAL, auto, emulated, host, local, relay" in text

    refused = sme2_project.runpytest_subprocess("--sme2-target=relay", "--sme2-no-baselines")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    assert "the relay target needs its bench label: pass --sme2-relay-label=NAME" in refused.stderr.str()

    result = sme2_project.runpytest_subprocess(
        "--sme2-target=relay", "--sme2-relay-label=bench-7", "--sme2-no-baselines", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=1)


def test_an_install_older_than_the_checkout_is_one_usage_error_naming_the_command(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pytest-sme2's metadata without its targets' entry points (installed before they were added): pytest stops
    with the command that fixes it, not a traceback, and so does pytest-sme2's own command."""
    import subprocess
    import sys

    stale = install(
        tmp_path / "stale", "pytest-sme2", "unused_module", "", "[pytest11]\nsme2 = pytest_sme2.plugin\n"
    )  # first on the path: it is the distribution read
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(stale), os.environ.get("PYTHONPATH")])))
    result = pytester.runpytest_subprocess("--co")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    text = result.stderr.str()
    assert "ERROR: no pytest-sme2 targets are registered" in text and "make install" in text
    assert "Traceback" not in text
    command = subprocess.run(
        [sys.executable, "-m", "pytest_sme2.cli", "doctor"], capture_output=True, text=True, timeout=120
    )
    assert command.returncode == 2 and "install it again (`make install`" in command.stderr
    assert "Traceback" not in command.stderr
