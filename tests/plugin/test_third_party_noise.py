"""A user's session, without filterwarnings of its own, is not flooded by what torch, ExecuTorch and torchao say
about their own internals (issue 65: 16-60 Deprecation/Future warnings, torchao's "Failed to load ..._C_mxfp8"
lines), and still shows the user's own warnings and log lines."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from conftest import TINY_MODEL

USER_TEST = """
import logging
import warnings

import pytest

@pytest.mark.model("tiny")
def test_export(exported_pte):
    warnings.warn("my_helper is deprecated", DeprecationWarning)
    logging.getLogger("mine").warning("my own log line")
    assert False, "fails, so pytest shows the captured log and stderr of its setup"
"""


def test_a_users_session_shows_its_own_warnings_and_none_of_the_libraries_internals(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    models = pytester.mkdir("models")
    (models / "tiny.py").write_text(TINY_MODEL)
    pytester.makeini(
        textwrap.dedent(f"""
        [pytest]
        sme2_model_dirs = models
        sme2_target = host
        sme2_cache_dir = {tmp_path / "cache"}
        """)
    )  # no filterwarnings: a user's own repository
    pytester.makepyfile(test_user=USER_TEST)
    # a fresh process (torch and torchao not yet imported, as in a user's session) and a fresh export
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    out = result.stdout.str() + result.stderr.str()
    assert "my_helper is deprecated" in out and "my own log line" in out  # the user's own still show
    for noise in (
        "_C_mxfp8",
        "Failed to load",
        "Detected no triton",
        "is an Enum subclass",
        "read_text is deprecated",
        "read_binary is deprecated",
        "open_text is deprecated",
        "torch.jit.script_method",
        "isinstance(treespec, LeafSpec)",
    ):
        assert noise not in out, f"{noise!r} shown:\n{out[-6000:]}"
    # every warning shown is the user's own (or pytest's about this harness's plugin loading)
    shown = [line for line in out.splitlines() if re.search(r"\w+Warning: ", line)]
    others = [line for line in shown if "my_helper" not in line and ": Pytest" not in line]
    assert any("my_helper" in line for line in shown) and not others, others


def test_the_log_filters_drop_only_the_named_lines_and_go_with_the_session() -> None:
    """An LLM's profiles read its ETRecord after the export: ExecuTorch's "Symbol u0 did not appear in the graph that
    was deserialized", once per symbolic size, filled a failing test's captured log. Another line of the same
    logger still passes, and after the session (``remove``) the loggers hold only their own filters. (This outer
    session has the plugin's filters too: each added filter is asked directly.)"""
    import logging

    from pytest_sme2.plugin import third_party_noise

    lines: list[tuple[str, str]] = []
    config = type("Config", (), {"addinivalue_line": lambda self, name, line: lines.append((name, line))})()
    library = "/site-packages/torchao/_C_mxfp8.cpython-310-x86_64-linux-gnu.so"
    said = {
        "executorch.exir.serde.export_serialize": (
            "Symbol u7 did not appear in the graph that was deserialized",
            "could not deserialize node 3",
        ),
        "torchao": (f"Failed to load {library}: Could not load this library: {library}", "Failed to load model.pt"),
    }
    loggers = {name: logging.getLogger(name) for name in said}
    before = {name: list(logger.filters) for name, logger in loggers.items()}
    remove = third_party_noise.install(config)  # type: ignore[arg-type]
    try:
        for name, (noise, other) in said.items():
            [added] = [f for f in loggers[name].filters if f not in before[name]]

            def passes(message: str, added: logging.Filter = added, name: str = name) -> bool:
                return bool(added.filter(logging.LogRecord(name, logging.WARNING, __file__, 1, message, None, None)))

            assert not passes(noise) and passes(other), name
    finally:
        remove()
    assert {name: list(logger.filters) for name, logger in loggers.items()} == before
    assert lines and {name for name, _ in lines} == {"filterwarnings"}
    assert all(line.startswith("ignore:") and line.count(":") == 3 for _, line in lines), lines  # narrow: all fields
