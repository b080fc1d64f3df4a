"""The counted run binds every symbol at start-up and keeps the guest's loader out of qemu's log
(run/guest_loader.py): where the loader is found, the memory-map check that guards the log filter, and, on real
models, that counting so changes no count but the loader's own: every event counts what counting with lazy binding
and the loader logged gave, less exactly the loader's instructions inside it (lazy binding in load, init and the
warmup; a dynamic TLS lookup in some portable kernels' calls), and no more in any instruction class."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from pytest_sme2.errors import RunnerError
from pytest_sme2.evidence.qemu_counts import QEMU_LOG_FLAGS, TOP_FUNCTIONS
from pytest_sme2.run import emulation_setup
from pytest_sme2.run.guest_loader import LoaderRange, loader_range
from pytest_sme2.run.targets.base import RunSpec
from pytest_sme2.run.targets.emulated import EmulatedOptions, EmulatedTarget, counted_guest_flags
from pytest_sme2.system.carried_loader import carried_loader

STATUS = emulation_setup.status()
needs_emulation = pytest.mark.skipif(not STATUS.ready, reason=f"emulated target not ready: {STATUS.problem}")
REPO = Path(__file__).resolve().parents[2]
LOADER = LoaderRange(0x7FFF_F7F0_0000, 0x7FFF_F7F4_2000, "ld-linux-aarch64.so.1")


def _maps(*lines: tuple[int, int, str, str]) -> str:
    return "".join(f"{low:x}-{high:x} {perms} 00000000 fe:00 1 {path}\n" for low, high, perms, path in lines)


def test_the_log_filter_logs_every_address_but_the_loaders() -> None:
    option, ranges = LOADER.log_filter()
    assert option == "-dfilter"
    assert ranges == "0..0x7ffff7efffff,0x7ffff7f42000..0xffffffffffffffff"


def test_a_memory_map_with_the_loader_where_it_was_expected_passes() -> None:
    LOADER.check(
        _maps(
            (0x7FFF_F7F0_0000, 0x7FFF_F7F2_7000, "r-xp", "/usr/aarch64-linux-gnu/lib/ld-linux-aarch64.so.1"),
            (0x7FFF_F7F3_E000, 0x7FFF_F7F4_0000, "r--p", "/usr/aarch64-linux-gnu/lib/ld-linux-aarch64.so.1"),
            (0x7FFF_F4CA_0000, 0x7FFF_F4E2_7000, "r-xp", "/usr/aarch64-linux-gnu/lib/libc.so.6"),
        ),
        "maps.txt",
    )


@pytest.mark.parametrize(
    "maps, named",
    [
        (
            _maps((0x7FFF_F7E0_0000, 0x7FFF_F7E2_7000, "r-xp", "/lib/ld-linux-aarch64.so.1")),
            "0x7ffff7e00000-0x7ffff7e27000",
        ),
        (_maps((0x7FFF_F4CA_0000, 0x7FFF_F4E2_7000, "r-xp", "/lib/libc.so.6")), "its code is not mapped"),
        (
            _maps(
                (0x7FFF_F7F0_0000, 0x7FFF_F7F2_7000, "r-xp", "/lib/ld-linux-aarch64.so.1"),
                (0x7FFF_F7F2_8000, 0x7FFF_F7F3_0000, "r-xp", "/lib/libc.so.6"),
            ),
            "other code inside: /lib/libc.so.6",
        ),
    ],
)
def test_a_memory_map_that_moved_the_loader_or_put_code_in_its_range_is_refused(maps: str, named: str) -> None:
    with pytest.raises(RunnerError, match="left out the wrong addresses") as caught:
        LOADER.check(maps, "run/maps.txt")
    assert named in str(caught.value) and "run/maps.txt" in str(caught.value)


@needs_emulation
@pytest.mark.parametrize("way", ["log", "plugin"])
def test_the_loader_is_found_where_qemu_maps_it(way: str) -> None:
    """The loader's own trace under the counted run's qemu command names where qemu put it (page-aligned, its whole
    image); every counted run then checks that range against its own memory map (the real-model test below). The
    log's qemu-user 11.1 is static; the qemu built with plugins places the guest by its own threads' malloc arenas,
    so its counted runs (and this) give it one arena."""
    setarch = shutil.which("setarch")
    if setarch is None:
        pytest.skip("needs setarch (util-linux)")
    qemu = STATUS.log_qemu if way == "log" else (STATUS.qemu if STATUS.plugin_header is not None else None)
    if qemu is None:
        pytest.skip(f"no qemu for counting from the {way} here: {STATUS.counting_note()}")
    env = {"QEMU_LD_PREFIX": str(emulation_setup.SYSROOT)}
    arena = ["-U", "MALLOC_ARENA_MAX"] if way == "plugin" else []
    if way == "plugin":
        env["MALLOC_ARENA_MAX"] = "1"
    command = [setarch, "-R", str(qemu), "-cpu", emulation_setup.svl_cpu(emulation_setup.DEFAULT_SVL_BITS), *arena]
    loader = carried_loader(STATUS.runner).loader
    found = loader_range(command, STATUS.runner, loader, env)
    assert found.name == loader.name and found.start % 0x1000 == 0 and found.end % 0x1000 == 0
    assert found.end - found.start >= loader.stat().st_size // 2  # its image, not a page of it
    # the same place every time: three repeats with one arena. The log's counted run needs only the loader's own
    # range (its -dfilter); where the libraries went it reads from the run's own memory map, and qemu-user 11.1 moved
    # them between two traces beside busy xdist workers (CI of 9b23af6: loader at the same address, libraries not).
    # The plugin's markers are computed from the libraries' places before the run, so there they must hold too.
    again = [loader_range(command, STATUS.runner, loader, env) for _ in range(3 if way == "plugin" else 1)]
    where = (lambda r: r) if way == "plugin" else (lambda r: (r.start, r.end, r.name))
    assert all(where(a) == where(found) for a in again), [(hex(a.start), a.libraries) for a in [found, *again]]


class _LazyTarget(EmulatedTarget):
    """Counting as it was before: symbols bound lazily and the loader's code logged with everything else."""

    def counted_prefix(self, qemu: list[str], setarch: str, log: str) -> tuple[list[str], LoaderRange]:
        _, loader = super().counted_prefix(qemu, setarch, log)
        return [setarch, "-R", *qemu, *counted_guest_flags(), *QEMU_LOG_FLAGS, "-D", log], loader


def _counts(target: EmulatedTarget, pte: Path, sme2: bool, out: Path) -> dict:
    result = target.run(pte, None, RunSpec(runs=1, warmup=1, threads=1, etdump=True, sme2=sme2), out)
    return json.loads(Path(result.evidence["instruction_counts"]).read_text())["files"]


# Every bundled model and recipe, SME2 on and off, when PYTEST_SME2_ALL_COUNTS=1 (about 20 minutes on 2 cores;
# run once for a change of counting, results in benchmarks/results/notebook.md); by default the quick ones: each
# recipe SME2 both ways on toy_cnn, and a program with portable kernels (the transformer's) with SME2 off. Its SME2
# on took 60 s of make test's 10 minutes (the log's qemu is 2.3x slower with SME2), for the same portable kernels.
QUICK = [("toy_cnn", recipe, sme2) for recipe in ("fp32", "fp16", "int8") for sme2 in (True, False)] + [
    ("transformer_encoder", "fp32", False)
]
EVERY = [
    (model, recipe, sme2)
    for model in ("toy_cnn", "mlp", "mobilenet_v3_small", "transformer_encoder")
    for recipe in ("fp32", "fp16", "int8")
    for sme2 in (True, False)
]
CASES = EVERY if os.environ.get("PYTEST_SME2_ALL_COUNTS") == "1" else QUICK


@needs_emulation
@pytest.mark.parametrize("model, recipe, sme2", CASES, ids=[f"{m}-{r}-{'on' if s else 'off'}" for m, r, s in CASES])
def test_counting_without_the_loader_changes_only_the_loaders_blocks(
    model: str, recipe: str, sme2: bool, tmp_path: Path, shared_export_cache: Path
) -> None:
    if shutil.which("setarch") is None:
        pytest.skip("needs setarch (util-linux)")
    from pytest_sme2 import Recipe
    from pytest_sme2.measure.session import Settings, Sme2Session

    session = Sme2Session(Settings(target="emulated", cache_dir=shared_export_cache, session_dir=tmp_path / "s"))
    session.registry.register_dir(REPO / "models")
    try:
        pte = Path(session.export(model, Recipe(recipe)))
    finally:
        session.close()
    # the log's counting (the plugin's skips the loader the same way: tests/run/test_counting_plugin.py)
    now = _counts(
        EmulatedTarget(tmp_path / "log", options=EmulatedOptions(counting="log")), pte, sme2, tmp_path / "now"
    )
    before = _counts(
        _LazyTarget(tmp_path / "log", options=EmulatedOptions(counting="log")), pte, sme2, tmp_path / "before"
    )
    loader = carried_loader(STATUS.runner).loader.name
    for file in ("warmup", "timed"):  # load, init and the warmup inference; the inference after it
        was, is_ = before[file], now[file]
        assert len(is_["instructions"]) == len(was["instructions"])
        for event, (a, b) in enumerate(zip(was["instructions"], is_["instructions"])):
            # what the loader ran inside the event is gone: after the warmup (a dynamic TLS lookup in some portable
            # kernels) exactly that, where the event's function list is whole (fewer than the TOP_FUNCTIONS kept);
            # in load, init and the warmup, lazy binding also ran each library's PLT entry into the loader
            in_loader = sum(v for k, v in was["functions"][event].items() if k.startswith(f"{loader}:"))
            if file == "timed" and len(was["functions"][event]) < TOP_FUNCTIONS:
                assert a - b == in_loader, (file, event, a, b, was["functions"][event])
            else:
                assert in_loader <= a - b or len(was["functions"][event]) >= TOP_FUNCTIONS, (file, event, a, b)
                assert b <= a, (file, event, a, b)
        for name, counts in was["classes"].items():
            assert all(b <= a for a, b in zip(counts, is_["classes"][name])), (file, name)
        assert not any(k.startswith(f"{loader}:") for f in is_["functions"] for k in f), file
    assert sum(now["warmup"]["instructions"]) < sum(before["warmup"]["instructions"])  # lazy binding gone
