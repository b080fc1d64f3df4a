"""Counting inside the emulator (count_plugin.c on the qemu setup-emulation builds with plugins) against counting
from qemu-user 11.1's execution log: the same counts per event, instruction class and function, on real runs.

Real qemu (both), the real aarch64 runner and a real toy_cnn program, SME2 on and off. The whole perf suite's
variants are compared by benchmarks/counting_equality.py (docs/performance.md).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import REPO
from pytest_sme2 import Recipe
from pytest_sme2.errors import UsageError
from pytest_sme2.measure.session import Settings, Sme2Session
from pytest_sme2.run import emulation_setup
from pytest_sme2.run.targets import RunSpec
from pytest_sme2.run.targets.emulated import EmulatedOptions, EmulatedTarget

STATUS = emulation_setup.status()
needs_both = pytest.mark.skipif(
    not STATUS.ready or STATUS.plugin_header is None or STATUS.log_qemu is None,
    reason=f"needs both counting ways set up (`pytest-sme2 setup-emulation`): {STATUS.problem or ''} "
    f"{STATUS.counting_note() if STATUS.ready else ''}",
)


def _export(model: str, tmp_path_factory: pytest.TempPathFactory, cache: Path) -> Path:
    session = Sme2Session(Settings(target="emulated", cache_dir=cache, session_dir=tmp_path_factory.mktemp("s")))
    session.registry.register_dir(REPO / "models")
    return Path(session.export(model, Recipe()))


@pytest.fixture(scope="module")
def toy_pte(tmp_path_factory: pytest.TempPathFactory, shared_export_cache: Path) -> Path:
    return _export("toy_cnn", tmp_path_factory, shared_export_cache)


def _counts(way: str, pte: Path, sme2: bool, out: Path) -> tuple[dict, dict]:
    target = EmulatedTarget(out / "logs", status=STATUS, options=EmulatedOptions(counting=way))
    result = target.run(pte, None, RunSpec(sme2=sme2, runs=1, warmup=1), out)
    return json.loads(Path(result.evidence["instruction_counts"]).read_text()), result.evidence


@needs_both
@pytest.mark.parametrize("sme2", [True, False], ids=["sme2-on", "sme2-off"])
def test_the_plugin_counts_every_event_as_the_log_does(toy_pte: Path, tmp_path: Path, sme2: bool) -> None:
    log, log_evidence = _counts("log", toy_pte, sme2, tmp_path / "log")
    plugin, evidence = _counts("plugin", toy_pte, sme2, tmp_path / "plugin")
    assert evidence["counting"] == "plugin" and log_evidence["counting"] == "log"
    for part in ("warmup", "timed"):
        ours, theirs = plugin["files"][part], log["files"][part]
        assert sum(ours["instructions"]) > 1_000_000
        for key in ("instructions", "sme", "sve", "classes", "functions"):
            assert ours[key] == theirs[key], f"{part} {key}"
        # where events begin: the same distances between them (start-up before the first event is qemu's own)
        starts, log_starts = ours["starts"], theirs["starts"]
        assert [b - a for a, b in zip(starts, starts[1:])] == [b - a for a, b in zip(log_starts, log_starts[1:])]
    assert (sum(plugin["files"]["timed"]["sme"]) > 0) is sme2
    # nothing of the plugin's working files is left beside the counts
    left = {p.name for p in (tmp_path / "plugin").iterdir()}
    assert not left & {"segments.u64", "plugin-blocks.tsv", "markers.txt", "count-progress.txt"}, left


@needs_both
def test_an_unknown_counting_way_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="--sme2-counting=trace is not one of auto, plugin, log"):
        EmulatedTarget(tmp_path, status=STATUS, options=EmulatedOptions(counting="trace"))


def test_plugin_counting_without_the_plugin_qemu_names_the_setup_command(tmp_path: Path) -> None:
    if not STATUS.ready:
        pytest.skip(f"emulated target not ready: {STATUS.problem}")
    import dataclasses

    without = dataclasses.replace(STATUS, plugin_header=None, qemu=STATUS.log_qemu or STATUS.qemu)
    assert without.counting == "log"
    with pytest.raises(
        UsageError, match=r"--sme2-counting=plugin: counting from qemu's execution log .* setup-emulation"
    ):
        EmulatedTarget(tmp_path, status=without, options=EmulatedOptions(counting="plugin"))
    assert EmulatedTarget(tmp_path, status=without).counting == "log"


def test_doctor_says_which_way_counted_runs_count() -> None:
    if not STATUS.ready:
        pytest.skip(f"emulated target not ready: {STATUS.problem}")
    lines = {line.name: line for line in EmulatedTarget.doctor()}
    line = lines["emulated counting"]
    expected = "counting in the emulator" if STATUS.counting == "plugin" else "counting from qemu's execution log"
    assert line.detail.startswith(expected), line.detail


@pytest.fixture(scope="module")
def mobilenet_pte(tmp_path_factory: pytest.TempPathFactory, shared_export_cache: Path) -> Path:
    return _export("mobilenet_v3_small", tmp_path_factory, shared_export_cache)


@pytest.mark.skipif(not STATUS.ready or STATUS.plugin_header is None, reason="needs the plugin-capable qemu")
def test_a_counted_run_reports_its_count_while_it_runs_and_a_killed_one_says_how_far_it_got(
    mobilenet_pte: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_sme2.errors import RunnerError
    from pytest_sme2.run import count_progress

    # the watcher looks every 0.2 s (2 s in a session), so a run of a few seconds on a fast emulator still shows two
    # reports (the plugin writes about once a second): a qemu twice as fast failed len(seen) >= 2 at 2 s
    monkeypatch.setattr(count_progress, "_EVERY_S", 0.2)

    target = EmulatedTarget(tmp_path / "logs", status=STATUS, options=EmulatedOptions(counting="plugin"))
    seen: list[int] = []
    variants: set[str] = set()
    target.progress = lambda done, total, variant: (seen.append(done), variants.add(variant))
    target.run(mobilenet_pte, None, RunSpec(sme2=False, runs=12, warmup=1), tmp_path / "whole")
    assert variants == {"sme2=off"}  # each report says which run it is, for two counted side by side
    assert len(seen) >= 2 and seen == sorted(seen) and seen[-1] > 20_000_000  # reported as it went, growing
    with pytest.raises(RunnerError, match=r"(?s)timed out after 4 s.*\n.*counting plugin had counted [\d,]+ guest"):
        target.run(mobilenet_pte, None, RunSpec(sme2=True, runs=20, warmup=1, timeout_s=4), tmp_path / "killed")
    left = sum(p.stat().st_size for p in (tmp_path / "killed").rglob("*") if p.is_file() and not p.is_symlink())
    assert left < 10 * 2**20, f"{left:,} bytes left behind by a killed counted run"


ONE_LONG_OPERATOR = """
import torch


class OneMatmul(torch.nn.Module):
    def forward(self, a, b):
        return torch.mm(a, b)


def get_eager_model():
    return OneMatmul()


def get_example_inputs():
    generator = torch.Generator().manual_seed(0)
    return (torch.rand(SIZE, SIZE, generator=generator), torch.rand(SIZE, SIZE, generator=generator))
"""


@pytest.mark.skipif(not STATUS.ready or STATUS.plugin_header is None, reason="needs the plugin-capable qemu")
def test_progress_moves_inside_one_long_operator(
    tmp_path: Path, shared_export_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One portable matrix product of several seconds, nearly all of the run: the count reported while it runs
    must move inside it, not only at the event boundaries around it (EfficientSAM at 1024x1024 showed 12 G
    instructions for minutes). The watcher looks every 0.2 s here; the plugin writes about once a second."""
    from pytest_sme2.run import count_progress

    (tmp_path / "one_long_operator.py").write_text(ONE_LONG_OPERATOR.replace("SIZE", "1024"))
    session = Sme2Session(Settings(target="emulated", cache_dir=shared_export_cache, session_dir=tmp_path / "s"))
    session.registry.register_dir(tmp_path)
    pte = Path(session.export("one_long_operator", Recipe(partitioner="none")))
    monkeypatch.setattr(count_progress, "_EVERY_S", 0.2)
    target = EmulatedTarget(tmp_path / "logs", status=STATUS, options=EmulatedOptions(counting="plugin", fresh=True))
    seen: list[int] = []
    target.progress = lambda done, total, variant: seen.append(done)
    result = target.run(pte, None, RunSpec(sme2=False, runs=1, warmup=0), tmp_path / "run")
    counts = json.loads(Path(result.evidence["instruction_counts"]).read_text())["files"]["timed"]["instructions"]
    inference = max(counts)  # the outermost event; the operator's is the innermost of the events nested in it
    operator = min(c for c in counts if c > inference / 2)
    assert operator > 0.95 * inference, counts  # the product is (nearly) the whole run
    inside = sorted({n for n in seen if 0.05 * inference < n < 0.95 * inference})
    assert len(inside) >= 3, f"reports while the product ran: {inside} (all reports: {seen}; events: {counts})"
