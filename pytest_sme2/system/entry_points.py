"""Entry points another distribution registers (the targets', the gate checks'), read with importlib.metadata:
one way to name the distribution behind one and to load it, so both registries word their errors alike."""

from __future__ import annotations

from importlib import metadata
from typing import Any

from pytest_sme2.errors import UsageError


def distribution_of(entry: metadata.EntryPoint) -> str:
    """The name of the distribution that registered ``entry``."""
    dist = getattr(entry, "dist", None)
    return dist.metadata["Name"] if dist is not None else "an unknown distribution"


def load(entry: metadata.EntryPoint, where: str) -> Any:
    """What ``entry`` names; one that cannot be loaded is a UsageError beginning with ``where``."""
    try:
        return entry.load()
    except Exception as exc:
        raise UsageError(
            f"{where} cannot be loaded: {type(exc).__name__}: {exc}; fix or uninstall that distribution"
        ) from exc
