"""The targets by name: classes registered in the entry point group ``pytest_sme2.targets``, read with
``importlib.metadata``, so a target another distribution installs is chosen with ``--sme2-target`` like a shipped
one. pytest-sme2's own (auto, host, local, emulated, adb) are registered the same way, in its pyproject.toml.

An entry point's name is the target's name (``--sme2-target=NAME``, or ``NAME:ARGUMENT`` where the class takes
one, as adb takes a serial); its value is a ``RegisteredTarget`` class (base.py). Targets are ordered by name, the
order of ``--sme2-target``'s help, the option table and doctor's lines: installers write entry points in an order
of their own (setuptools sorts them), so no other order would hold from one install to the next.
"""

from __future__ import annotations

import functools
from importlib import metadata
from typing import Any

from pytest_sme2.errors import UsageError
from pytest_sme2.run.targets.base import RegisteredTarget, Target, TargetSettings
from pytest_sme2.system.entry_points import distribution_of, load
from pytest_sme2.system.option import Option

GROUP = "pytest_sme2.targets"
DISTRIBUTION = "pytest-sme2"


def _own(name: str) -> bool:
    return name.lower().replace("_", "-") == DISTRIBUTION


def _load(entry: metadata.EntryPoint) -> type[RegisteredTarget]:
    where = f"target {entry.name!r} ({entry.value}, entry point group {GROUP} of {distribution_of(entry)})"
    loaded: Any = load(entry, where)
    if not (isinstance(loaded, type) and issubclass(loaded, RegisteredTarget)):
        raise UsageError(f"{where} is {loaded!r}, not a subclass of pytest_sme2.run.targets.base.RegisteredTarget")
    if not loaded.names or loaded.names[0] != entry.name:
        raise UsageError(
            f"{where}: its class names itself {loaded.names!r}; the entry point's name must be the first "
            "of its names"
        )
    return loaded


@functools.lru_cache(maxsize=None)
def target_classes() -> dict[str, type[RegisteredTarget]]:
    """Every registered target class by name, in name order. A name two distributions register, a class
    that cannot be loaded, or no registration of pytest-sme2's own at all (metadata older than the checkout) is a
    UsageError that names the distribution and the fix."""
    entries = sorted(metadata.entry_points(group=GROUP), key=lambda entry: entry.name)
    if not any(_own(distribution_of(entry)) for entry in entries):
        raise UsageError(
            f"no pytest-sme2 targets are registered (entry point group {GROUP}): the installed "
            "pytest-sme2's metadata is older than its code; install it again (`make install`, or "
            "pip install -e . in the checkout)"
        )
    classes: dict[str, type[RegisteredTarget]] = {}
    registered_by: dict[str, str] = {}
    for entry in entries:
        if entry.name in classes:
            first, second = sorted((registered_by[entry.name], distribution_of(entry)))
            raise UsageError(
                f"the target name {entry.name!r} is registered twice (entry point group {GROUP}), by "
                f"{first} and by {second}; uninstall one of them"
            )
        classes[entry.name] = _load(entry)
        registered_by[entry.name] = distribution_of(entry)
    return classes


def target_names() -> tuple[str, ...]:
    """How each target is written on the command line (``adb:SERIAL`` too), in registry order."""
    return tuple(name for target in target_classes().values() for name in target.names)


def target_options() -> tuple[Option, ...]:
    """The registered targets' own options, in registry order; an option name two targets declare is an error."""
    seen: dict[str, str] = {}
    out = []
    for name, target in target_classes().items():
        for option in target.options:
            if option.name in seen:
                raise UsageError(
                    f"the option --sme2-{option.name.replace('_', '-')} is declared by two targets, "
                    f"{seen[option.name]!r} and {name!r}; a target's options are its own"
                )
            seen[option.name] = name
            out.append(option)
    return tuple(out)


def target_class(name: str) -> type[RegisteredTarget]:
    """The class of ``--sme2-target=name`` (its part before ``:``), the name checked by it; else a UsageError
    listing the choices."""
    classes = target_classes()
    target = classes.get(name.split(":", 1)[0])
    if target is None:
        raise UsageError(f"--sme2-target={name!r} is not a known target; choose one of {', '.join(target_names())}")
    target.check_name(name)
    return target


def check_target_name(name: str) -> str:
    """``name`` if it is a --sme2-target value, else a UsageError listing the choices."""
    target_class(name)
    return name


def check_choice(name: str, settings: TargetSettings) -> None:
    """Everything about a target choice that can be wrong before any test runs, as a UsageError: the target's
    name and what its class checks (its settings, runner binaries it cannot run)."""
    target_class(name).check(name, settings)


def make_target(name: str, settings: TargetSettings) -> Target:
    """Build the target named by ``--sme2-target``."""
    return target_class(name).create(name, settings)
