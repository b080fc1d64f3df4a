"""The export cache after a killed export (issue 13, case 9): no staging folder stays behind forever."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from pytest_sme2 import Recipe
from pytest_sme2.export import export
from pytest_sme2.registry import ModelRegistry

from conftest import TINY_MODEL


def _registry(tmp_path: Path, name: str, text: str) -> ModelRegistry:
    source = tmp_path / f"{name}.py"
    source.write_text(text)
    registry = ModelRegistry()
    registry.register(name, str(source))
    return registry


def test_a_sigkilled_exports_staging_folder_is_removed_by_the_next_export(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    # The export that gets killed: it must have made its staging folder first, so it blocks after that
    # (the eager model builds inside the staging step here: get_eager_model sleeps).
    (tmp_path / "slow.py").write_text(TINY_MODEL.replace("def get_eager_model():",
                                                         "def get_eager_model():\n    import time; time.sleep(600)\n"
                                                         "\ndef _original_eager_model():"))
    script = textwrap.dedent(f"""
        from pathlib import Path
        from pytest_sme2 import Recipe
        from pytest_sme2.export import export
        from pytest_sme2.registry import ModelRegistry
        registry = ModelRegistry()
        registry.register("slow", {str(tmp_path / "slow.py")!r})
        export(registry.get("slow"), Recipe(), Path({str(cache)!r}))
    """)
    victim = subprocess.Popen([sys.executable, "-c", script])
    deadline = time.monotonic() + 120
    while not list(cache.glob(".staging-*")) and time.monotonic() < deadline:
        time.sleep(0.2)
    [staging] = list(cache.glob(".staging-*"))
    assert staging.name.endswith(f"-{victim.pid}")
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    assert staging.is_dir()  # the killed export never cleaned up
    live = subprocess.Popen(["sleep", "60"])  # a staging folder of a process that is still exporting
    try:
        busy = cache / f".staging-other-entry-{live.pid}"
        busy.mkdir()
        exported = export(_registry(tmp_path, "tiny", TINY_MODEL).get("tiny"), Recipe(), cache)
        assert exported.path.exists()
        assert not staging.exists() and busy.is_dir()
    finally:
        live.kill()
        live.wait()
