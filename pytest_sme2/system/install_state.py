"""Whether `make install` has anything to do: this checkout installed, editable, with every requirement met.

The Makefile runs this file by path (``python pytest_sme2/system/install_state.py``) before anything is
installed, so it imports only the standard library, ``packaging`` (which pip and pytest bring) and its
sibling ``toml_reader.py``, never the package around it. Two pip runs that find everything in place cost
about 20 s on a 2-core machine; this check costs a fraction of a second, so a second ``make perf`` or
``make test`` with nothing changed does not pay for them. It answers "up to date" only when all of these hold,
and otherwise names the first that does not (pip then runs as before):

- torch is the pinned CPU build the Makefile installs (``TORCH_PIN`` there, passed as ``--torch``);
- pytest-sme2 is installed editable from this very folder (pip's ``direct_url.json``);
- the installed pytest-sme2's version, requirements and entry points are those of this folder's
  ``pyproject.toml`` (read from the file, so an edited dependency list is noticed);
- every such requirement is installed at a version its specifier admits.
"""

from __future__ import annotations

import argparse
import json
import sys
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlparse

try:
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
    from packaging.version import Version
except ModuleNotFoundError:  # a fresh Python: nothing of ours installed yet
    print("install: packaging is not installed (nothing is yet); installing")
    sys.exit(1)

try:
    from toml_reader import tomllib  # the sibling module: run by path, this file's folder is first on sys.path
except ModuleNotFoundError:  # Python 3.10 before pytest-sme2's requirements (tomli) are installed: pip decides
    tomllib = None

DISTRIBUTION = "pytest-sme2"


def _requirements(pyproject: dict, extras: list[str]) -> list[Requirement]:
    project = pyproject["project"]
    texts = list(project.get("dependencies", []))
    for extra in extras:
        optional = project.get("optional-dependencies", {})
        if extra not in optional:
            raise SystemExit(f"install_state: pyproject.toml has no extra {extra!r}")
        texts += optional[extra]
    return [Requirement(text) for text in texts]


def _editable_folder(dist: metadata.Distribution) -> Path | None:
    text = dist.read_text("direct_url.json")
    if not text:
        return None
    data = json.loads(text)
    if not data.get("dir_info", {}).get("editable"):
        return None
    url = urlparse(data.get("url", ""))
    return Path(unquote(url.path)) if url.scheme == "file" else None


def stale_reason(root: Path, extras: list[str], torch_pin: str) -> str | None:
    """Why an install is needed, or None when everything in the module docstring holds."""
    try:
        torch = metadata.version("torch")
    except metadata.PackageNotFoundError:
        return "torch is not installed"
    if Version(torch).base_version != Version(torch_pin).base_version:
        return f"torch {torch} is installed, the Makefile pins {torch_pin}"
    try:
        dist = metadata.distribution(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return f"{DISTRIBUTION} is not installed"
    folder = _editable_folder(dist)
    if folder is None or not folder.exists() or not folder.samefile(root):
        return f"{DISTRIBUTION} is not installed editable from {root}"
    if tomllib is None:
        return "no TOML reader to read pyproject.toml with (Python 3.10 needs tomli, not installed yet)"
    pyproject = tomllib.loads((root / "pyproject.toml").read_text())
    version = pyproject["project"]["version"]
    if Version(dist.version) != Version(version):
        return f"{DISTRIBUTION} {dist.version} is installed, {root / 'pyproject.toml'} says {version}"
    wanted = _requirements(pyproject, extras)
    installed = {str(Requirement(text)) for text in dist.requires or [] if "extra ==" not in text}
    plain = {str(req) for req in _requirements(pyproject, [])}
    if installed != plain:
        return f"the dependencies in {root / 'pyproject.toml'} changed since {DISTRIBUTION} was installed"
    declared = {("console_scripts", name, value) for name, value in pyproject["project"].get("scripts", {}).items()}
    declared |= {
        (group, name, value)
        for group, points in pyproject["project"].get("entry-points", {}).items()
        for name, value in points.items()
    }
    if {(point.group, point.name, point.value) for point in dist.entry_points} != declared:
        return f"the entry points in {root / 'pyproject.toml'} changed since {DISTRIBUTION} was installed"
    for req in wanted:
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        try:
            have = metadata.version(canonicalize_name(req.name))
        except metadata.PackageNotFoundError:
            return f"{req.name} ({req}) is not installed"
        if req.specifier and not req.specifier.contains(have, prereleases=True):
            return f"{req.name} {have} is installed, pyproject.toml asks for {req}"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[2])
    parser.add_argument("--extra", action="append", default=[], help="an extra of pyproject.toml to require")
    parser.add_argument("--torch", required=True, help="the torch version the Makefile pins")
    args = parser.parse_args(argv)
    reason = stale_reason(args.root.resolve(), args.extra, args.torch)
    if reason is None:
        print(
            f"install: up to date ({DISTRIBUTION} editable from {args.root.resolve()}, torch {args.torch}, "
            "every requirement met); nothing to install"
        )
        return 0
    print(f"install: {reason}; installing")
    return 1


if __name__ == "__main__":
    sys.exit(main())
