"""The one place a test's number of replicas is decided (each begun in a fresh process), when its test calls
``runner()``, before any run.

``--sme2-replicas N`` (ini ``sme2_replicas``) is taken as given. Under ``auto``, the test measures in as many
replicas as the checks of its stored baseline on this target need (gate.auto_replicas: the most any record
needs, kept in the record's quality when it was written with auto; 1 without a baseline, and the gate then says
why). The gate only answers what a stored baseline needs, through the question its hooks register here at
configure (``BASELINE_NEEDS``); it does not steer the run (issue 67): nothing it writes during a test reaches
RunSpec.
"""

from __future__ import annotations

from typing import Callable

import pytest

from pytest_sme2.run.targets.base import AUTO_REPLICAS

# The gate's hooks (baseline_hooks.baseline_replicas): how many replicas an item's stored baseline needs. Not
# registered when the plugin's gate is not loaded: auto then measures one replica, as with no baseline.
BASELINE_NEEDS = pytest.StashKey[Callable[[pytest.Item], int]]()


def replicas_for(item: pytest.Item, setting: int | str) -> int:
    """How many replicas ``item``'s runs are made in, for the ``sme2_replicas`` ``setting``."""
    if setting != AUTO_REPLICAS:
        return int(setting)
    needs = item.config.stash.get(BASELINE_NEEDS, None)
    return needs(item) if needs is not None else 1
