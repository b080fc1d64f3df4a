"""Skips for tests that need what only some executorch versions have (pytest_sme2/system/version_pairs.py).

On executorch 1.4.1 (a tested pair that exports but profiles nothing) these tests skip, each reason naming the
version and what has the missing piece, rather than fail on a layout or a binding that version lacks."""

from __future__ import annotations

import pytest

from pytest_sme2.run.native.build import executorch_release, runtime_problem
from pytest_sme2.system.version_pairs import pair_for


def _runtime_problem() -> str | None:
    try:
        return runtime_problem()
    except Exception:  # no executorch at all: the tests that need it say so themselves
        return None


def _release() -> str | None:
    try:
        return executorch_release()
    except Exception:
        return None


_NO_RUNTIME = _runtime_problem()
# The runner's libraries: lib/libexecutorch*.so of the wheel (the native and aarch64 runners link them, and tests
# that read libexecutorch_backend_xnnpack.so find XNNPACK there).
needs_runtime_libraries = pytest.mark.skipif(_NO_RUNTIME is not None, reason=f"{_NO_RUNTIME}")
_RELEASE = _release()
# The host target's profiles: the Python binding's ETDump (host_worker._no_etdump says why 1.4.1's writes none).
needs_binding_etdump = pytest.mark.skipif(
    _RELEASE is not None and not pair_for(_RELEASE).profiles,
    reason=(
        f"executorch {_RELEASE}'s Python binding is built without the event tracer and writes no ETDump; "
        "executorch 1.5.1's has it"
    ),
)
