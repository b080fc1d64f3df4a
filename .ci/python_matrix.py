"""Every Python that ``requires-python`` admits loads the plugin: a pytest session there, with pytest-sme2 installed.

Why: pytest loads every installed plugin at start-up, so one import that a Python lacks (``tomllib`` before
3.11) stops every pytest run in that environment, whatever it tests. CI runs one Python; this runs a
session on each other interpreter it finds (pyenv's, or ``python3.X`` on PATH, or those named in
``$PYTHONS``), one per minor version that the built wheel's ``Requires-Python`` admits.

Cheap by design, so it can run in CI: each venv gets the wheel without its dependencies, then only those
the plugin needs to load (``LOAD_REQUIREMENTS``, at the versions the wheel asks for). torch and executorch
are several GB per Python and are imported only when a test uses a model, so a plugin that imported them at
load would fail here by name, as would any other requirement imported at load that is not listed. Each
venv's session checks the plugin is registered and torch was not imported. A smoke session with torch
(export, a counted run, a gate) is a separate, slower check.

    python .ci/python_matrix.py            # the interpreters found; exit 1 if any fails or none is found
    PYTHONS="/usr/bin/python3.12" python .ci/python_matrix.py
"""

from __future__ import annotations

import email.parser
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from built_wheel import build_wheel
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

# What `import pytest_sme2.plugin` imports of the wheel's requirements (tomli only where Python lacks tomllib).
LOAD_REQUIREMENTS = ("pytest", "numpy", "pandas", "tomli")
SESSION_TEST = """\
import sys


def test_the_plugin_is_loaded_without_torch(pytestconfig):
    assert pytestconfig.pluginmanager.has_plugin("sme2")
    assert "torch" not in sys.modules, "the plugin imported torch when pytest loaded it"
"""


def _candidates() -> list[Path]:
    """Interpreters to try: $PYTHONS if set, else pyenv's versions and python3.X on PATH."""
    if os.environ.get("PYTHONS"):
        return [Path(p) for p in os.environ["PYTHONS"].split()]
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    found = [Path(p) for p in sorted(glob.glob(str(pyenv / "versions" / "*" / "bin" / "python3")))]
    found += [Path(w) for m in range(8, 20) if (w := shutil.which(f"python3.{m}"))]
    return found


def _version(python: Path) -> str | None:
    """The interpreter's major.minor, or None when it does not run."""
    try:
        out = subprocess.run(
            [str(python), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as z:
        (name,) = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        return email.parser.Parser().parsestr(z.read(name).decode())


def _load_requirements(metadata: email.message.Message) -> list[str]:
    """The wheel's own specifiers (markers included) for the requirements the plugin imports at load."""
    wanted = [
        text
        for text in metadata.get_all("Requires-Dist", [])
        if Requirement(text).name in LOAD_REQUIREMENTS and "extra ==" not in text
    ]
    missing = set(LOAD_REQUIREMENTS) - {Requirement(text).name for text in wanted}
    if missing:
        raise SystemExit(
            f"python_matrix: LOAD_REQUIREMENTS names {sorted(missing)}, which pyproject.toml does not "
            f"require; fix LOAD_REQUIREMENTS in {Path(__file__).name} to match the dependencies"
        )
    return wanted


def _check(python: Path, version: str, wheel: Path, requirements: list[str], work: Path) -> str | None:
    """None when a pytest session in a fresh venv on ``python`` loads the plugin; else what failed."""
    venv = work / f"venv{version}"
    bin_python = venv / "bin" / "python"
    steps = [
        [str(python), "-m", "venv", str(venv)],
        [str(bin_python), "-m", "pip", "install", "--quiet", "--no-compile", "--no-deps", str(wheel)],
        [str(bin_python), "-m", "pip", "install", "--quiet", "--no-compile", *requirements],
        [str(bin_python), "-m", "pytest", "-q", "-p", "no:cacheprovider", str(work / "session")],
    ]
    for step in steps:
        out = subprocess.run(step, capture_output=True, text=True, cwd=work / "session")
        if out.returncode != 0:
            return f"`{' '.join(step)}` exited {out.returncode}:\n{out.stdout[-3000:]}{out.stderr[-3000:]}"
    return None


def _smoke(python: Path) -> str | None:
    """The wheel smoke session (.ci/wheel_smoke.py: export, a counted run, a gated verdict) run by ``python``, whose
    venv then gets that Python's own torch and executorch; None when it passed, else its output's tail."""
    done = subprocess.run(
        [str(python), str(Path(__file__).with_name("wheel_smoke.py"))], capture_output=True, text=True
    )
    return None if done.returncode == 0 else (done.stdout + done.stderr)[-3000:]


def main(argv: list[str] | None = None) -> int:
    smoke = "--smoke" in (sys.argv[1:] if argv is None else argv)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="python-matrix-") as tmp:
        work = Path(tmp)
        wheel = build_wheel(work)
        metadata = _metadata(wheel)
        admitted = SpecifierSet(metadata.get("Requires-Python", ""))
        requirements = _load_requirements(metadata)
        (work / "session").mkdir()
        (work / "session" / "test_loads.py").write_text(SESSION_TEST)
        chosen: dict[str, Path] = {}
        for python in _candidates():
            version = _version(python)
            if version and version not in chosen and version in admitted:
                chosen[version] = python
        if not chosen:
            print(
                f"python_matrix: no interpreter that Requires-Python {admitted} admits was found; install one "
                "with pyenv, or name them: PYTHONS='/path/to/python3.10 ...'"
            )
            return 1
        failed = []
        for version, python in sorted(chosen.items(), key=lambda item: tuple(map(int, item[0].split(".")))):
            problem = _smoke(python) if smoke else _check(python, version, wheel, requirements, work)
            done = "smoke session passed" if smoke else "plugin loads"
            print(f"Python {version} ({python}): {done if problem is None else 'FAILED'}")
            if problem is not None:
                print(re.sub(r"^", "    ", problem, flags=re.M))
                failed.append(version)
    what = "pass the wheel smoke session" if smoke else "load the plugin"
    print(
        f"python_matrix: {len(chosen) - len(failed)} of {len(chosen)} Pythons that Requires-Python {admitted} "
        f"admits {what} ({time.monotonic() - started:.0f} s)"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
