"""The suite's xdist grouping works: a module-scoped fixture is built once per file, not once per worker.

tests/conftest.py groups a file's tests that use a module-scoped fixture of that file (it reads pytest's
private fixture info), and pytest-xdist applies groups only under ``--dist loadgroup`` and only with a
pytest whose node ids it can rewrite (pytest 9.2 broke that silently). Both would fail quietly, with the
suite only getting slower; this file fails instead.
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def built_once_per_file() -> int:
    return 1


def test_a_test_using_a_module_fixture_of_its_file_is_grouped_by_its_file(
    request: pytest.FixtureRequest, built_once_per_file: int
) -> None:
    module = request.node.nodeid.split("::")[0].split("@")[0]
    marker = request.node.get_closest_marker("xdist_group")
    assert marker is not None and marker.args == (module,)
    if hasattr(request.config, "workerinput") and request.config.getoption("dist", None) == "loadgroup":
        assert request.node.nodeid.endswith(f"@{module}")  # xdist applied the group (it renames grouped tests)


def test_a_test_without_one_is_not_grouped(request: pytest.FixtureRequest) -> None:
    assert request.node.get_closest_marker("xdist_group") is None
