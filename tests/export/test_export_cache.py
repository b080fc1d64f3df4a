"""The export cache: after a killed export no staging folder stays behind forever (issue 13, case 9); the
cache never serves a program that does not match the model's code, weights and inputs (issue 22)."""

from __future__ import annotations

import importlib
import json
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Iterator

import pytest

import pytest_sme2.export.export as export_module
from conftest import REPO, TINY_MODEL
from pytest_sme2 import Recipe
from pytest_sme2.export.export import EXPORT_CODE_SUFFIXES, ExportedModel, cache_key, export
from pytest_sme2.model.registry import ModelRegistry
from pytest_sme2.system import digests
from pytest_sme2.system.digests import tree_digest


def _registry(tmp_path: Path, name: str, text: str) -> ModelRegistry:
    source = tmp_path / f"{name}.py"
    source.write_text(text)
    registry = ModelRegistry()
    registry.register(name, str(source))
    return registry


def test_a_sigkilled_exports_staging_folder_is_removed_by_the_next_export(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    # The export that gets killed: it must have made its staging folder first, so it blocks after that
    # (stage 2 runs the eager model for its reference outputs inside the staging step: its forward sleeps
    # there, never while torch.export traces it in stage 1).
    (tmp_path / "slow.py").write_text(
        TINY_MODEL
        + textwrap.dedent("""
        class _Slow(torch.nn.Module):
            def __init__(self, inner):
                super().__init__()
                self.inner = inner

            def forward(self, x):
                if not torch.compiler.is_exporting():
                    import time; time.sleep(600)
                return self.inner(x)

        _eager = get_eager_model

        def get_eager_model():
            return _Slow(_eager())
        """)
    )
    script = textwrap.dedent(f"""
        from pathlib import Path
        from pytest_sme2 import Recipe
        from pytest_sme2.export.export import export
        from pytest_sme2.model.registry import ModelRegistry
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


# Issue 22: the cache key is the traced program's content. A model split over a package (model.py imports
# blocks.py and data.py, and loads weights.pt when it exists), edited between exports the way a user would.
BLOCKS = """
import torch

class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, {kernel}, padding={padding})

    def forward(self, x):
        return torch.relu(self.conv(x)){extra}
"""
DATA = "VALUE = {value}\nCALIBRATION = {calibration}\n"
PACKAGE_MODEL = """
from pathlib import Path

import torch

from .blocks import Block
from mynet.data import CALIBRATION, VALUE

WEIGHTS = Path(__file__).with_name("weights.pt")

def get_eager_model():
    torch.manual_seed(0)
    net = Block()
    if WEIGHTS.exists():
        net.load_state_dict(torch.load(WEIGHTS))
    return net.eval()

def get_example_inputs():
    return (torch.full((1, 3, 16, 16), VALUE),)

def get_calibration_inputs():
    return [(torch.full((1, 3, 16, 16), value),) for value in CALIBRATION]
"""


def _write_blocks(root: Path, kernel: int = 3, extra: str = "") -> None:
    (root / "mynet" / "blocks.py").write_text(BLOCKS.format(kernel=kernel, padding=kernel // 2, extra=extra))


def _write_data(root: Path, value: float = 1.0, calibration: tuple[float, ...] = (0.5, 1.5)) -> None:
    (root / "mynet" / "data.py").write_text(DATA.format(value=value, calibration=list(calibration)))


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A project folder holding the package ``mynet``; its modules are forgotten after each export and after
    the test, so that every export sees the files as they are (as a new session would)."""
    root = tmp_path / "project"
    (root / "mynet").mkdir(parents=True)
    (root / "mynet" / "__init__.py").write_text("")
    (root / "mynet" / "model.py").write_text(PACKAGE_MODEL)
    _write_blocks(root)
    _write_data(root)
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # a same-size edit within a second must not hit a .pyc
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield root
    _forget_package()


def _forget_package() -> None:
    for name in [n for n in sys.modules if n == "mynet" or n.startswith("mynet.")]:
        del sys.modules[name]
    importlib.invalidate_caches()


def _export_package(root: Path, cache: Path, dtype: str = "fp32") -> ExportedModel:
    """Export the package's model as a new session would: fresh registry, modules imported anew."""
    _forget_package()
    registry = ModelRegistry()
    registry.register("net", str(root / "mynet" / "model.py"))
    return export(registry.get("net"), Recipe(dtype=dtype), cache)


def _portable_ops(exported: ExportedModel) -> set[str]:
    return {op["op_type"] for op in exported.delegation["ops"] if op["non_delegated"]}


def test_an_edit_in_an_imported_module_is_re_exported(package: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = _export_package(package, cache)
    assert not first.from_cache and _portable_ops(first) == set()
    _write_blocks(package, extra=".cumsum(dim=1)")  # only mynet/blocks.py changes; model.py is untouched
    cumsum = _export_package(package, cache)
    assert not cumsum.from_cache and cumsum.cache_key != first.cache_key
    assert any("cumsum" in op for op in _portable_ops(cumsum))
    _write_blocks(package, kernel=5)  # 3x3 -> 5x5: same operators, bigger weights
    wider = _export_package(package, cache)
    assert not wider.from_cache and wider.cache_key not in (first.cache_key, cumsum.cache_key)
    assert wider.path.stat().st_size >= first.path.stat().st_size + 8 * 3 * (25 - 9) * 4


def test_a_changed_weights_file_is_re_exported(package: Path, tmp_path: Path) -> None:
    import torch

    cache = tmp_path / "cache"
    weights = package / "mynet" / "weights.pt"
    conv = torch.nn.Conv2d(3, 8, 3, padding=1)
    torch.save({"conv." + k: v for k, v in conv.state_dict().items()}, weights)
    first = _export_package(package, cache)
    assert not first.from_cache
    torch.save({"conv." + k: v * 2 for k, v in conv.state_dict().items()}, weights)  # same shapes, new values
    second = _export_package(package, cache)
    assert not second.from_cache and second.cache_key != first.cache_key
    assert second.path.read_bytes() != first.path.read_bytes()


def test_changed_example_input_values_are_re_exported(package: Path, tmp_path: Path) -> None:
    import torch

    cache = tmp_path / "cache"
    first = _export_package(package, cache)
    _write_data(package, value=2.0)  # same shape and dtype, other values
    second = _export_package(package, cache)
    assert not second.from_cache and second.cache_key != first.cache_key
    assert torch.load(second.inputs_path)[0].flatten()[0].item() == 2.0


def test_changed_calibration_values_change_the_int8_key_only(package: Path) -> None:
    registry_keys = []
    for calibration in ((0.5, 1.5), (0.5, 3.0)):
        _write_data(package, calibration=calibration)
        _forget_package()
        registry = ModelRegistry()
        registry.register("net", str(package / "mynet" / "model.py"))
        model = registry.get("net")
        registry_keys.append(
            (cache_key(model, Recipe("int8")), cache_key(model, Recipe("int8", "dynamic")), cache_key(model, Recipe()))
        )
    (static_a, dynamic_a, fp32_a), (static_b, dynamic_b, fp32_b) = registry_keys
    assert static_a != static_b  # the quantizer observes the calibration values
    assert dynamic_a == dynamic_b and fp32_a == fp32_b  # they never see them


def test_the_export_code_and_torchao_are_in_the_key(
    package: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pytest-sme2 upgrade or an edit that lowers differently (partitioner, quantizer, the files written
    beside the program) misses the cache: the export folder's source is an ingredient of every key; so is
    torchao's version, whose pt2e flow quantizes int8 programs."""
    tree = shutil.copytree(
        REPO / "pytest_sme2" / "export", tmp_path / "export", ignore=shutil.ignore_patterns("__pycache__")
    )
    before = tree_digest(tree, EXPORT_CODE_SUFFIXES)
    lowering = tree / "export.py"
    lowering.write_bytes(lowering.read_bytes() + b" ")  # one byte
    digests._tree_digest.cache_clear()
    assert tree_digest(tree, EXPORT_CODE_SUFFIXES) != before
    assert export_module.export_code_digest() == tree_digest(REPO / "pytest_sme2" / "export", (".py",))

    cache = tmp_path / "cache"
    first = _export_package(package, cache)
    with monkeypatch.context() as patched:  # not monkeypatch.undo(): that would undo the package fixture's too
        patched.setattr(export_module, "export_code_digest", lambda: "another lowering")
        changed = _export_package(package, cache)
    assert not changed.from_cache and changed.cache_key != first.cache_key
    with monkeypatch.context() as patched:  # torchao quantizes int8 programs: its version is an ingredient too
        patched.setattr(export_module, "installed_version", lambda name: "0.0-another" if name == "torchao" else "?")
        other_torchao = _export_package(package, cache)
    assert not other_torchao.from_cache and other_torchao.cache_key not in (first.cache_key, changed.cache_key)
    again = _export_package(package, cache)
    assert again.from_cache and again.cache_key == first.cache_key
    meta = json.loads((first.directory / "export.json").read_text())
    assert meta["export_code"] == export_module.export_code_digest()
    assert meta["torchao"] == export_module.installed_version("torchao") != "not installed"


@pytest.mark.parametrize(
    "change",
    [
        {"program": "another traced program"},
        {"recipe": {"dtype": "fp16"}},
        {"recipe": {"quant": "dynamic"}},
        {"recipe": {"partitioner": "none"}},
        {"versions": {"format": -1}},
        {"versions": {"export_code": "another lowering"}},
        {"versions": {"torch": "2.13.1"}},
        {"versions": {"executorch": "1.5.2"}},
        {"versions": {"torchao": "0.18.1"}},
    ],
    ids=lambda change: "-".join(f"{k}.{'.'.join(v)}" if isinstance(v, dict) else k for k, v in change.items()),
)
def test_each_ingredient_changes_the_key(change: dict) -> None:
    """Every ingredient of an export key, one at a time: the program digest, each recipe field, and each of the
    versions (the format number, pytest-sme2's export code, torch, executorch, torchao)."""
    from dataclasses import asdict

    from pytest_sme2.export.export_key import cache_key as key_of

    base = {"program": "0" * 64, "recipe": asdict(Recipe()), "versions": export_module.versions()}
    assert set(base["versions"]) == {"format", "export_code", "torch", "executorch", "torchao"}
    changed = {
        name: ({**value, **change[name]} if isinstance(value, dict) else change[name]) if name in change else value
        for name, value in base.items()
    }
    assert changed != base
    assert all(set(v) <= set(base[k]) for k, v in change.items() if isinstance(v, dict))  # replaced, not added
    assert key_of(changed["program"], changed["recipe"], changed["versions"]) != key_of(
        base["program"], base["recipe"], base["versions"]
    )


def test_edit_then_revert_gets_the_original_program_back(package: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    original = _export_package(package, cache)
    original_bytes = original.path.read_bytes()
    _write_blocks(package, extra=".cumsum(dim=1)")
    edited = _export_package(package, cache)
    assert any("cumsum" in op for op in _portable_ops(edited)) and edited.directory != original.directory
    _write_blocks(package)  # the revert
    reverted = _export_package(package, cache)
    assert reverted.from_cache and reverted.cache_key == original.cache_key
    assert reverted.directory == original.directory
    assert reverted.path.read_bytes() == original_bytes  # the original program, not the cumsum one
    assert _portable_ops(reverted) == set()
    meta = json.loads((reverted.directory / "export.json").read_text())
    assert meta["cache_key"] == reverted.cache_key and meta["program_digest"] == reverted.program_digest


def test_an_unchanged_model_is_a_hit_in_a_fresh_process(
    package: Path, tmp_path: Path, exported_toy_cnn: ExportedModel
) -> None:
    """Keys carry nothing of the process that computed them: the package model and the bundled toy_cnn (both
    exported in this process) are hits in another one."""
    cache = tmp_path / "cache"
    here = _export_package(package, cache)
    script = textwrap.dedent(f"""
        import json
        from pathlib import Path
        from pytest_sme2 import Recipe
        from pytest_sme2.export.export import export
        from pytest_sme2.model.registry import ModelRegistry
        registry = ModelRegistry()
        registry.register("net", {str(package / "mynet" / "model.py")!r})
        registry.register_dir(Path({str(REPO / "models")!r}))
        net = export(registry.get("net"), Recipe(), Path({str(cache)!r}))
        toy = export(registry.get("toy_cnn"), Recipe(), Path({str(exported_toy_cnn.directory.parent)!r}))
        print("RESULT", json.dumps([[net.from_cache, net.cache_key], [toy.from_cache, toy.cache_key]]))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.split("RESULT ", 1)[1])
    assert result == [[True, here.cache_key], [True, exported_toy_cnn.cache_key]]


def _tiny_project(pytester: pytest.Pytester, cache: Path, body: str) -> None:
    """A project of one model (the tiny one) exported on the host target into ``cache``, and one test whose body
    is ``body`` using ``exported_pte``."""
    models = pytester.mkdir("models")
    (models / "tiny.py").write_text(TINY_MODEL)
    pytester.makeini(
        f"[pytest]\nsme2_model_dirs = models\nsme2_target = host\nsme2_cache_dir = {cache}\n"
        "filterwarnings = ignore\n"
    )
    pytester.makepyfile(
        f"""
        import pytest

        @pytest.mark.model("tiny")
        def test_export(exported_pte):
            {body}
        """
    )


def test_the_progress_line_says_from_cache_with_the_key(pytester: pytest.Pytester, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    _tiny_project(pytester, cache, "pass")
    first = pytester.runpytest_inprocess("-v")
    first.assert_outcomes(passed=1)
    (entry,) = cache.glob("tiny-fp32-xnnpack-*")
    key = entry.name.rsplit("-", 1)[1]
    first.stdout.fnmatch_lines([f"sme2: tiny fp32-xnnpack exported (key {key}) in *"])
    second = pytester.runpytest_inprocess("-v")
    second.assert_outcomes(passed=1)
    second.stdout.fnmatch_lines([f"sme2: tiny fp32-xnnpack from cache (key {key}) in *"])
    assert "exported (key" not in second.stdout.str() and "ready in" not in second.stdout.str()


def test_the_progress_line_and_the_entry_give_one_export_duration(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 65: one export read 177.9 s in one place and 195.5 s in another: the progress line timed the whole
    step, export.json's ``export_seconds`` (and ``repr(exported_pte)``) left out the cache key, lookups and the
    entry's file digests. Digests made slow here (as a large program's are) must be in both, or in neither."""
    real = digests.file_sha256
    slow = 0.4

    def slow_digest(path: Path) -> str:
        time.sleep(slow)
        return real(path)

    monkeypatch.setattr(export_module, "file_sha256", slow_digest)
    cache = tmp_path / "cache"
    _tiny_project(pytester, cache, 'print("REPR", repr(exported_pte))')
    first = pytester.runpytest_inprocess("-v", "-s")
    first.assert_outcomes(passed=1)
    (entry,) = cache.glob("tiny-fp32-xnnpack-*")
    recorded = json.loads((entry / "export.json").read_text())["export_seconds"]
    assert recorded >= slow * len(export_module.CHECKED_FILES)  # the digests are part of the export's time
    text = first.stdout.str()
    said = re.search(r"sme2: tiny fp32-xnnpack exported (?:in ([0-9.]+) s )?\(key \w+\)(?: in ([0-9.]+) s)?", text)
    assert said is not None, text
    assert float(said.group(1) or said.group(2)) == pytest.approx(recorded, abs=0.05)
    assert f"exported in {recorded:.1f} s" in text.split("REPR", 1)[1]  # repr(exported_pte): the same number


@pytest.mark.parametrize("which", ["tiny", "reference"])
def test_a_full_disk_during_an_export_names_the_cache_folder_the_model_and_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, which: str
) -> None:
    """Issue 64 (weak): a full disk during an export was an ExportError naming the errno and a source line of
    ExecuTorch's serializer, not the folder or the fix, and it blamed pytest-sme2's own reference program, which
    the user never asked for, as if it were theirs."""
    import errno

    from pytest_sme2.errors import StorageError
    from pytest_sme2.export import reference_program

    def full(model: object, recipe: Recipe, traced: object, staging: Path) -> None:
        with export_module._reporting(model, recipe):  # type: ignore[arg-type]
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(export_module, "_lower_into", full)
    registry = ModelRegistry()
    if which == "tiny":
        (tmp_path / "tiny.py").write_text(TINY_MODEL)
        registry.register("tiny", str(tmp_path / "tiny.py"))
        name, said = "tiny", "model 'tiny'"
    else:
        registry.register(reference_program.NAME, reference_program)
        name, said = reference_program.NAME, "pytest-sme2's reference program (exported once per cache"
    with pytest.raises(StorageError) as info:
        export(registry.get(name), Recipe(), tmp_path / "cache")
    message = str(info.value)
    assert message.startswith(f"no space left on the device while exporting {said}")
    assert f"into the export cache {tmp_path / 'cache'}: free space there, or point --sme2-cache-dir" in message
    assert not list((tmp_path / "cache").glob(".staging-*"))
