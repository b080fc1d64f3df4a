"""The wheel of this checkout, as a user would get it: built from a copy of what the wheel is made of.

Why a copy: building in the checkout leaves build/ and an egg-info behind, and a copy of only pyproject.toml,
README.md and the package proves the wheel needs nothing else from the checkout.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[1]


def build_wheel(out: Path) -> Path:
    """Build the wheel into ``out`` (a folder that exists) and return its path."""
    source = out / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    shutil.copytree(ROOT / "pytest_sme2", source / "pytest_sme2", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(out), str(source)], check=True
    )
    (wheel,) = out.glob("pytest_sme2-*.whl")
    return wheel


@contextlib.contextmanager
def scratch_folder(prefix: str, keep: bool, script: str) -> Iterator[Path]:
    """A temp folder for a CI script's venvs and projects: removed afterwards, or (``keep``, the scripts' --keep)
    kept and said where."""
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield tmp
    finally:
        if keep:
            print(f"{script}: kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
