"""Export error reporting: torch's trace log stays out of pytest's captured log."""

from __future__ import annotations

import pytest

from pytest_sme2 import ExportError, Recipe


def test_torch_trace_records_never_reach_the_root_logger_during_an_export(caplog: pytest.LogCaptureFixture) -> None:
    """Even if something sets the torch.__trace logger propagating mid-export (seen once in CI: pytest printed
    its DEBUG records under a failing test), the records go to the export's error detail, not to pytest's log."""
    import logging
    import types

    from pytest_sme2.export.export import _reporting
    from pytest_sme2.model.registry import Model

    trace = logging.getLogger("torch.__trace")
    before = trace.propagate
    model = Model(name="m", module=types.ModuleType("m"), source_path=None)
    with caplog.at_level(logging.DEBUG):
        with pytest.raises(ExportError) as info:
            with _reporting(model, Recipe()):
                trace.propagate = True
                trace.debug("a trace record")
                raise ValueError("broken")
    assert "a trace record" not in caplog.text
    assert "a trace record" in info.value.detail
    assert trace.propagate is before


def test_torch_s_own_trace_handler_still_gets_the_records_during_an_export() -> None:
    """TORCH_TRACE users keep their trace file: the logger's own handlers are still called."""
    import logging
    import types

    from pytest_sme2.export.export import _reporting
    from pytest_sme2.model.registry import Model

    seen: list[str] = []

    class Own(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    trace = logging.getLogger("torch.__trace")
    own = Own(logging.DEBUG)
    trace.addHandler(own)
    try:
        with _reporting(Model(name="m", module=types.ModuleType("m"), source_path=None), Recipe()):
            trace.debug("for the trace file")
    finally:
        trace.removeHandler(own)
    assert seen == ["for the trace file"]


def test_pytests_capture_handler_on_the_trace_logger_gets_nothing() -> None:
    """pytest 9.2 attaches its capture handler to every non-propagating logger (torch.__trace is one) at
    each test phase; the filter must not hand it the records (CI with pytest 9.2 printed them again)."""
    import logging
    import types

    from _pytest.logging import LogCaptureHandler

    from pytest_sme2.export.export import _reporting
    from pytest_sme2.model.registry import Model

    trace = logging.getLogger("torch.__trace")
    captured = LogCaptureHandler()
    trace.addHandler(captured)
    try:
        with pytest.raises(ExportError) as info:
            with _reporting(Model(name="m", module=types.ModuleType("m"), source_path=None), Recipe()):
                trace.debug("a trace record")
                raise ValueError("broken")
    finally:
        trace.removeHandler(captured)
    assert captured.records == [] and "a trace record" in info.value.detail


def test_empty_trace_records_do_not_crowd_the_error_detail() -> None:
    """torch writes many trace records with no text (a KV-cache model's failed export left 248 lines, mostly
    empty ``DEBUG torch.__trace:`` ones): the detail keeps the records that say something."""
    import logging
    import types

    from pytest_sme2.export.export import _reporting
    from pytest_sme2.model.registry import Model

    trace = logging.getLogger("torch.__trace")
    with pytest.raises(ExportError) as info:
        with _reporting(Model(name="m", module=types.ModuleType("m"), source_path=None), Recipe()):
            for _ in range(300):
                trace.debug("")
            trace.debug("the telling record")
            raise ValueError("broken")
    lines = [line for line in info.value.detail.splitlines() if line.startswith("DEBUG torch.__trace")]
    assert lines == ["DEBUG torch.__trace: the telling record"]


def test_executorch_s_symbol_warnings_stay_out_of_the_captured_log(caplog: pytest.LogCaptureFixture) -> None:
    """A dynamic-shape program's ETRecord makes ExecuTorch warn per symbol ("Symbol u97 did not appear in the graph
    that was deserialized"): dozens of lines under every failing test that exported an LLM. Its errors still show."""
    import logging
    import types

    from pytest_sme2.export.export import _reporting
    from pytest_sme2.model.registry import Model

    serde = logging.getLogger("executorch.exir.serde.export_serialize")
    before = serde.level
    with caplog.at_level(logging.WARNING):
        with _reporting(Model(name="m", module=types.ModuleType("m"), source_path=None), Recipe()):
            serde.warning("Symbol u97 did not appear in the graph that was deserialized")
            serde.error("a real serialization error")
    assert "Symbol u97" not in caplog.text and "a real serialization error" in caplog.text
    assert serde.level == before
