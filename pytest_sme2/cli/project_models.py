"""The models the user's own project registers, read from its pytest configuration as pytest would find it.

Why: ``cache verify`` audits a cache that may come from elsewhere (a CI cache, a group folder). Re-deriving an
entry from a path or module its export.json names ran whatever that cache pointed at (issue 64: an ``evil.py``
dropped in the entry folder was imported). The only model sources it may run are the ones the user's project
registers: ``sme2_model_dirs`` and ``sme2_models`` of the pytest configuration file found from the folder the
command runs in, by pytest's own rules (the first of ``pytest.ini``, ``.pytest.ini``, ``pyproject.toml`` with
``[tool.pytest.ini_options]``, ``tox.ini`` with ``[pytest]``, ``setup.cfg`` with ``[tool:pytest]``, from that
folder up). Models registered in a conftest.py (``register_model``) are not seen here: list them in
``sme2_models`` for verify to re-derive them.
"""

from __future__ import annotations

import configparser
import shlex
from pathlib import Path
from typing import Any

from pytest_sme2.errors import UsageError
from pytest_sme2.export import reference_program
from pytest_sme2.model.registry import ModelRegistry
from pytest_sme2.system.regular_files import PROJECT_CONFIG, read_text
from pytest_sme2.system.toml_reader import tomllib

_INI_SECTIONS = {"pytest.ini": "pytest", ".pytest.ini": "pytest", "tox.ini": "pytest", "setup.cfg": "tool:pytest"}


def configuration(start: Path) -> tuple[Path, dict[str, Any]] | None:
    """The pytest configuration file that applies in ``start`` and its ini settings, or None when none does."""
    for folder in (start.resolve(), *start.resolve().parents):
        for name in ("pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg"):
            path = folder / name
            if not path.is_file():
                continue
            text = read_text(path, PROJECT_CONFIG)
            if name == "pyproject.toml":
                try:
                    tool = tomllib.loads(text).get("tool", {}).get("pytest", {})
                except tomllib.TOMLDecodeError as exc:
                    raise UsageError(f"{path} is not valid TOML ({exc}); fix it as pytest would need") from None
                if "ini_options" in tool:
                    return path, dict(tool["ini_options"])
                continue
            parser = configparser.ConfigParser(interpolation=None)
            try:
                parser.read_string(text, str(path))
            except configparser.Error as exc:
                raise UsageError(f"{path} does not parse ({exc}); fix it as pytest would need") from None
            if parser.has_section(_INI_SECTIONS[name]):
                return path, dict(parser.items(_INI_SECTIONS[name]))
            if name in ("pytest.ini", ".pytest.ini"):
                return path, {}  # pytest takes it even without its section
    return None


def _lines(value: Any, split: bool) -> list[str]:
    if isinstance(value, list):
        return [str(v).strip() for v in value if str(v).strip()]
    text = str(value or "")
    return shlex.split(text) if split else [line.strip() for line in text.splitlines() if line.strip()]


def project_registry(start: Path) -> tuple[ModelRegistry, Path | None]:
    """The models registered by the project's pytest configuration found from ``start``, and that file (None:
    no configuration, so only pytest-sme2's own reference program can be re-derived), as the plugin registers
    them for a session."""
    found = configuration(start)
    registry = ModelRegistry()
    # pytest-sme2's own reference program (every timed session exports it), from this package: not a writer's code
    registry.register(reference_program.NAME, reference_program)
    if found is None:
        return registry, None
    path, ini = found
    root = path.parent
    for directory in _lines(ini.get("sme2_model_dirs"), split=True):
        registry.register_dir(root / directory)
    for line in _lines(ini.get("sme2_models"), split=False):
        name, sep, target = line.partition("=")
        if not sep:
            raise UsageError(f"sme2_models line {line!r} in {path} is not 'name = module.path' or 'name = file.py'")
        target = target.strip()
        if target.endswith(".py") and not Path(target).is_absolute():
            target = str(root / target)
        registry.register(name.strip(), target)
    registry.root = root
    return registry, path
