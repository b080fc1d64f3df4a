"""The emulated target's result cache (issue 25): keyed by the bytes of everything that can change a count,
answered with the same counts as a fresh run, never used when damaged, and never hiding a model change."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
from pathlib import Path

import pytest
from helpers_emulated import assert_cached_equals_fresh, counted_profiles, newest_session

from conftest import REPO
from pytest_sme2 import DamagedCacheEntryWarning
from pytest_sme2.run import emulation_setup
from pytest_sme2.run import result_cache as rc
from pytest_sme2.run.result_cache import MANIFEST, LoadedRunner, ResultCache, code_digest, run_key
from pytest_sme2.run.targets import RunSpec
from pytest_sme2.run.targets import emulated as emulated_module
from pytest_sme2.run.targets.emulated import EmulatedOptions, EmulatedTarget, loaded_libraries
from pytest_sme2.system import digests

STATUS = emulation_setup.status()
needs_emulation = pytest.mark.skipif(not STATUS.ready, reason=f"emulated target not ready: {STATUS.problem}")


def _flip_last_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))


# ----------------------------------------------------------------- the key, from files alone


@pytest.fixture
def ingredients(tmp_path: Path) -> dict:
    files = {}
    for name in ("program.pte", "inputs.pt", "runner", "libone.so", "libtwo.so", "qemu-aarch64"):
        files[name] = tmp_path / name
        files[name].write_bytes(name.encode() * 100)
    return {
        "program": files["program.pte"],
        "inputs": files["inputs.pt"],
        "runner": files["runner"],
        "libraries": [files["libone.so"], files["libtwo.so"]],
        "emulator": files["qemu-aarch64"],
        "cpu": "-cpu max,sme=on,sme_fa64=on,sve-default-vector-length=64",
        "settings": {"runs": 1, "warmup": 1},
        "code": "c0de",
    }


def _run_key(ingredients: dict) -> rc.RunKey:
    """run_key of the ingredients above, whose runner and libraries it takes as one LoadedRunner."""
    flat = dict(ingredients)
    return run_key(runner=LoadedRunner(flat.pop("runner"), tuple(flat.pop("libraries"))), **flat)


def test_a_key_is_the_content_not_the_names_or_dates(ingredients: dict, tmp_path: Path) -> None:
    first = _run_key(ingredients)
    moved = tmp_path / "elsewhere"
    moved.mkdir()
    copy = dict(ingredients)
    for name in ("program", "inputs", "runner", "emulator"):
        copy[name] = Path(shutil.copy(ingredients[name], moved / f"renamed-{name}"))  # new name, new date
    assert _run_key(copy).digest == first.digest
    assert _run_key(ingredients).digest == first.digest  # stable


@pytest.mark.parametrize("ingredient", ["program", "inputs", "runner", "library", "emulator"])
def test_one_byte_of_any_file_changes_the_key(ingredients: dict, ingredient: str) -> None:
    before = _run_key(ingredients).digest
    _flip_last_byte(ingredients["libraries"][1] if ingredient == "library" else ingredients[ingredient])
    assert _run_key(ingredients).digest != before


@pytest.mark.parametrize(
    "change",
    [
        {"cpu": "-cpu max,sme=off"},  # SME2 off
        {"cpu": "-cpu max,sme=on,sme_fa64=on,sve-default-vector-length=32"},  # another SVL
        {"settings": {"runs": 2, "warmup": 1}},
        {"code": "c0df"},
        {"inputs": None},
    ],
)
def test_each_setting_changes_the_key(ingredients: dict, change: dict) -> None:
    assert _run_key({**ingredients, **change}).digest != _run_key(ingredients).digest


def test_the_code_digest_changes_with_one_byte_of_the_counting_code(tmp_path: Path) -> None:
    tree = shutil.copytree(REPO / "pytest_sme2", tmp_path / "pytest_sme2", ignore=shutil.ignore_patterns("__pycache__"))
    before = code_digest(tree)
    counting = tree / "evidence" / "qemu_counts.py"
    counting.write_text(counting.read_text() + "\n# one more line\n")
    digests._tree_digest.cache_clear()
    assert code_digest(tree) != before
    counter = tree / "run" / "native" / "exec_counter.c"
    after_python = code_digest(tree)
    counter.write_text(counter.read_text() + "\n/* one more line */\n")
    digests._tree_digest.cache_clear()
    assert code_digest(tree) != after_python
    assert code_digest() == code_digest(REPO / "pytest_sme2")  # the installed package is what a run keys on


# ----------------------------------------------------------------- entries: stored, loaded, damaged


@pytest.fixture
def stored(tmp_path: Path, ingredients: dict) -> tuple[ResultCache, rc.RunKey, Path]:
    run = tmp_path / "run"
    run.mkdir()
    for name in ("timed.etdp", "instructions.json", "runner.stdout"):
        (run / name).write_bytes(f"{name} bytes".encode())
    cache = ResultCache(tmp_path / "cache" / "results")
    key = _run_key(ingredients)
    cache.store(key, run, ["timed.etdp", "instructions.json", "runner.stdout"], {"kernel_trace": {"kernels": ["k"]}})
    return cache, key, run


def test_a_stored_run_is_loaded_with_its_files_and_evidence(stored: tuple, tmp_path: Path) -> None:
    cache, key, run = stored
    out = tmp_path / "later"
    assert cache.load(key, out) == {"kernel_trace": {"kernels": ["k"]}}
    assert (out / "timed.etdp").read_bytes() == b"timed.etdp bytes"
    assert not (out / "timed.etdp").is_symlink()  # a copy: writing an artifact never rewrites the entry
    other = dataclasses.replace(key, digest="0" * 64)
    assert cache.load(other, tmp_path / "miss") is None


def test_a_process_computing_a_key_makes_another_wait_for_its_answer(stored: tuple) -> None:
    """Two xdist workers wanting the same counted run: the second waits for the first's answer instead of
    emulating it again. flock conflicts between two open files even in one process, so threads show it."""
    import threading

    cache, key, _ = stored
    first_in, release, second_in = threading.Event(), threading.Event(), threading.Event()

    def first() -> None:
        with cache.computing(key):
            first_in.set()
            release.wait(30)

    def second() -> None:
        first_in.wait(30)
        with cache.computing(key):
            second_in.set()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    assert first_in.wait(30)
    assert not second_in.wait(1.0)  # blocked while the first holds the key
    other = dataclasses.replace(key, digest="1" * 64)
    with cache.computing(other):  # another key is never blocked by it
        pass
    release.set()
    assert second_in.wait(30)
    for thread in threads:
        thread.join(30)


def test_the_first_store_wins(stored: tuple) -> None:
    cache, key, run = stored
    (run / "timed.etdp").write_bytes(b"another run")
    cache.store(key, run, ["timed.etdp"], {"other": 1})
    manifest = json.loads((cache.entry(key) / MANIFEST).read_text())
    assert manifest["evidence"] == {"kernel_trace": {"kernels": ["k"]}}
    assert (cache.entry(key) / "timed.etdp").read_bytes() == b"timed.etdp bytes"


@pytest.mark.parametrize(
    "damage", ["flipped byte", "missing file", "manifest", "link", "other key", "fifo", "fifo manifest"]
)
def test_a_damaged_entry_is_reported_removed_and_never_used(stored: tuple, tmp_path: Path, damage: str) -> None:
    cache, key, _ = stored
    entry = cache.entry(key)
    if damage == "flipped byte":
        _flip_last_byte(entry / "timed.etdp")
    elif damage == "missing file":
        (entry / "instructions.json").unlink()
    elif damage == "manifest":
        (entry / MANIFEST).write_text("{ not json")
    elif damage == "link":
        victim = tmp_path / "victim"
        victim.write_bytes(b"instructions.json bytes")
        (entry / "instructions.json").unlink()
        (entry / "instructions.json").symlink_to(victim)
    elif damage in ("fifo", "fifo manifest"):  # issue 64 (bad 8): a tar archive restores a FIFO; it hung the lookup
        fifo = entry / ("timed.etdp" if damage == "fifo" else MANIFEST)
        fifo.unlink()
        os.mkfifo(fifo)
    else:
        manifest = json.loads((entry / MANIFEST).read_text())
        (entry / MANIFEST).write_text(json.dumps({**manifest, "key": "f" * 64}))
    out = tmp_path / "out"
    with pytest.warns(DamagedCacheEntryWarning, match="result cache entry .* is damaged"):
        assert cache.load(key, out) is None
    assert not entry.exists()
    assert not (out / "timed.etdp").exists()


def test_another_programs_entry_copied_under_this_key_is_refused(
    stored: tuple, ingredients: dict, tmp_path: Path
) -> None:
    """Another program's counted run, its folder copied under this run's key and its result.json naming this
    key: every file matches its own digest, yet it answers for another program. It is refused, not used."""
    cache, key, _ = stored
    ingredients["program"].write_bytes(b"another program" * 100)
    other_key = _run_key(ingredients)
    other_run = tmp_path / "other_run"
    other_run.mkdir()
    (other_run / "timed.etdp").write_bytes(b"the other program's ETDump")
    cache.store(other_key, other_run, ["timed.etdp"], {"kernel_trace": {"kernels": ["other"]}})
    entry = cache.entry(key)
    shutil.rmtree(entry)
    shutil.copytree(cache.entry(other_key), entry)
    manifest = json.loads((entry / MANIFEST).read_text())
    (entry / MANIFEST).write_text(json.dumps({**manifest, "key": key.digest}))
    out = tmp_path / "out"
    with pytest.warns(
        DamagedCacheEntryWarning,
        match="it answers for another run: its program is " f"{other_key.ingredients['program'][:16]}",
    ):
        assert cache.load(key, out) is None
    assert not (out / "timed.etdp").exists()
    assert cache.load(other_key, tmp_path / "its own") is not None  # the other program's entry is still good


# ----------------------------------------------------------------- the emulated target's key: its wiring


@needs_emulation
def test_the_emulated_targets_key_covers_program_inputs_runner_libraries_qemu_svl_sme2_and_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    program, inputs = tmp_path / "program.pte", tmp_path / "inputs.pt"
    program.write_bytes(b"program" * 50)
    inputs.write_bytes(b"inputs" * 50)
    target = EmulatedTarget(tmp_path / "logs", EmulatedOptions(512), STATUS)
    spec = RunSpec(sme2=True, runs=1, warmup=1)
    base = target.result_key(program, inputs, spec).digest
    assert target.result_key(program, inputs, dataclasses.replace(spec, timeout_s=10)).digest == base
    # SME2 "auto" emulates the very CPU "on" does (the qemu CPU settings are in the key): one answer for both
    assert target.result_key(program, inputs, dataclasses.replace(spec, sme2=None)).digest == base
    changed = {
        "SME2 off": target.result_key(program, inputs, dataclasses.replace(spec, sme2=False)),
        "SVL 256": EmulatedTarget(tmp_path / "logs", EmulatedOptions(256), STATUS).result_key(program, inputs, spec),
        "runs": target.result_key(program, inputs, dataclasses.replace(spec, runs=2)),
    }
    _flip_last_byte(program)
    changed["program"] = target.result_key(program, inputs, spec)
    _flip_last_byte(program)
    _flip_last_byte(inputs)
    changed["inputs"] = target.result_key(program, inputs, spec)
    _flip_last_byte(inputs)
    for role in ("runner", "qemu"):
        copy = tmp_path / role
        shutil.copy(getattr(STATUS, role), copy)
        _flip_last_byte(copy)
        status = dataclasses.replace(STATUS, **{role: copy})
        if role == "runner":  # its libraries are found beside the original ($ORIGIN): the same ones
            monkeypatch.setattr(emulated_module, "loaded_libraries", lambda _: loaded_libraries(STATUS.runner))
        changed[role] = EmulatedTarget(tmp_path / "logs", EmulatedOptions(512), status).result_key(
            program, inputs, spec
        )
    monkeypatch.undo()
    libraries = loaded_libraries(STATUS.runner)
    assert {"libexecutorch.so", "libc.so.6", "ld-linux-aarch64.so.1"} <= {p.name for p in libraries}
    xnnpack = next(p for p in libraries if "xnnpack" in p.name)
    changed_library = tmp_path / xnnpack.name
    shutil.copy(xnnpack, changed_library)
    _flip_last_byte(changed_library)
    monkeypatch.setattr(
        emulated_module,
        "loaded_libraries",
        lambda runner: [changed_library if p == xnnpack else p for p in loaded_libraries(runner)],
    )
    changed["a library"] = target.result_key(program, inputs, spec)
    monkeypatch.undo()
    monkeypatch.setattr(emulated_module, "code_digest", lambda: "another counting code")
    changed["counting code"] = target.result_key(program, inputs, spec)
    same = sorted(name for name, key in changed.items() if key.digest == base)
    assert not same, f"the key did not change with: {same}"


# ----------------------------------------------------------------- real runs: cached equals fresh


def _counted(root: Path, cache: Path, model: str, fresh: bool, sme2s: tuple[bool, ...]) -> list:
    return counted_profiles(root / f"run-{fresh}", model, sme2s, fresh=fresh, warmup=1, cache=cache)


# SME2 on for every bundled model; off too for the smallest. The cache stores and loads both settings alike,
# and the key tests above show on and off never share an entry: counting the other models again with SME2 off
# (about 50 s of the test suite, measured 2026-11-27) would check the same code once more. mobilenet_v3_small
# is compared, both sides, in tests/evidence/test_qemu_counts.py, against the fresh counts that file makes anyway
# (18 s of the suite saved).
BOTH_SIDES = "toy_cnn"
COMPARED_WITH_THE_QEMU_COUNTS = "mobilenet_v3_small"


# The registered bundled models (files starting with "_" are shared code) the emulated runner can run: tiny_llama's
# custom-op kernels load only in the Python binding (tests/run/test_llm_custom_ops.py), tiny_llama_portable is its
# graph for runner binaries.
HOST_ONLY = {"tiny_llama"}
# The real models' exports alone take 100 s each (EfficientSAM at 128x128 and 1024x1024); the perf suite gates them,
# and their counts were compared with the log's by benchmarks/counting_equality.py and bench_real_model.py.
REAL_MODELS = {"efficient_sam", "efficient_sam_1024"}


@needs_emulation
@pytest.mark.parametrize(
    "model",
    sorted(
        p.stem
        for p in (REPO / "models").glob("*.py")
        if not p.stem.startswith("_")
        and p.stem not in HOST_ONLY | REAL_MODELS
        and p.stem != COMPARED_WITH_THE_QEMU_COUNTS
    ),
)
def test_a_cached_answer_equals_a_fresh_run_in_every_counted_quantity(
    tmp_path: Path, shared_export_cache: Path, model: str
) -> None:
    sme2s = (True, False) if model == BOTH_SIDES else (True,)
    # the run's shared cache: its exports are reused; the fresh runs are emulated whatever it holds
    fresh = _counted(tmp_path, shared_export_cache, model, fresh=True, sme2s=sme2s)  # emulated, and stored
    cached = _counted(tmp_path, shared_export_cache, model, fresh=False, sme2s=sme2s)
    assert len(fresh) == len(sme2s)
    assert_cached_equals_fresh(fresh, cached)
    if len(sme2s) == 2:
        assert fresh[0].metadata["result_cache"]["key"] != fresh[1].metadata["result_cache"]["key"]  # SME2 on/off
        assert fresh[0].to_dict()["instructions"] != fresh[1].to_dict()["instructions"]


# ----------------------------------------------------------------- as a user runs it: a model change is not hidden

CACHED_PROJECT_TEST = """
import pytest

pytestmark = [pytest.mark.sme2, pytest.mark.model("tiny")]

def test_tiny(exported_pte, runner, etdump_profile):
    etdump_profile(exported_pte, runner(sme2=True))
"""


def _session_log(project: pytest.Pytester) -> str:
    """The newest session's progress.log (the progress lines a terminal shows)."""
    return (newest_session(project.path) / "progress.log").read_text()


@needs_emulation
def test_an_unchanged_model_is_answered_from_the_cache_and_a_changed_one_is_emulated_and_fails(
    sme2_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)  # the gate on: these sessions judge baselines
    sme2_project.makepyfile(test_cached=CACHED_PROJECT_TEST)
    # a cache folder of its own: the run's shared one may hold this count from another test already
    on = (
        "--sme2-target=emulated",
        "-o",
        "sme2_fresh=false",
        "-o",
        f"sme2_cache_dir={sme2_project.path / 'cache'}",
        "-p",
        "no:cacheprovider",
    )
    first = sme2_project.runpytest_inprocess(*on, "--sme2-update-baselines")
    first.assert_outcomes(passed=1)
    assert "[emulated sme2=on threads=1] done" in _session_log(sme2_project)
    assert "from the result cache" not in _session_log(sme2_project)
    again = sme2_project.runpytest_inprocess(*on)
    again.assert_outcomes(passed=1)
    assert "[emulated sme2=on threads=1] done" not in _session_log(sme2_project)  # no run claimed (issue 65)
    assert re.search(
        r"tiny fp32-xnnpack \[emulated sme2=on threads=1\]: 1 counted run answered from the result cache \(key "
        r"[0-9a-f]{16}\), none emulated in ",
        _session_log(sme2_project),
    )
    assert "counted run from the result cache, key " in (newest_session(sme2_project.path) / "summary.md").read_text()
    # in the terminal too, where under xdist no progress line says it: the row, and how many of the session's runs
    again.stdout.fnmatch_lines(
        [
            "test_tiny *emulated sme2=on threads=1 * instr (cached) *",
            "sme2: 1 of 1 counted runs answered from the result cache (*--sme2-fresh*",
        ]
    )
    assert "(cached)" not in first.stdout.str() and "answered from the result cache" not in first.stdout.str()
    # a table of counted emulated runs: no "ms" over its column of counts
    again.stdout.fnmatch_lines(["test * variant * instructions per inference (emulated) * verdict*"])
    assert "median ms" not in again.stdout.str()
    fresh = sme2_project.runpytest_inprocess(*on, "--sme2-fresh")
    fresh.assert_outcomes(passed=1)
    assert "[emulated sme2=on threads=1] done" in _session_log(sme2_project)
    assert "from the result cache" not in _session_log(sme2_project)
    model = sme2_project.path / "models" / "tiny.py"
    layer = "torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(),"
    assert layer in model.read_text()
    model.write_text(model.read_text().replace(layer, layer + " torch.nn.Conv2d(8, 8, 1), torch.nn.ReLU(),"))
    changed = sme2_project.runpytest_inprocess(*on)
    assert "from the result cache" not in _session_log(sme2_project)
    changed.assert_outcomes(failed=1)
    changed.stdout.fnmatch_lines(["*instructions*"])


# SME2 "auto" and "on" counted once in two xdist workers: tests/run/test_emulated_target.py (one -n 2 session
# with the xdist provenance check).


@needs_emulation
def test_an_entry_whose_counts_another_code_wrote_is_discarded_and_counted_again(tmp_path: Path) -> None:
    """An entry is keyed by the package's digest; counts of another format under it were written by other code
    (seen once: a session that imported the old code keyed its counts by the digest of files edited meanwhile).
    Such an entry is reported, removed and counted again: a timeline is never drawn without positions."""
    from pytest_sme2.report.timeline import timeline_document

    cache = tmp_path / "cache"
    (fresh,) = counted_profiles(tmp_path / "a", "toy_cnn", (True,), cache=cache)
    (entry,) = [p for p in (cache / "results").iterdir() if p.is_dir()]
    counts = json.loads((entry / "instructions.json").read_text())
    assert counts["version"] == 3 and "starts" in counts["files"]["timed"]
    for part in counts["files"].values():  # what the code before positions wrote, with a manifest to match
        del part["starts"]
    (entry / "instructions.json").write_text(json.dumps({**counts, "version": 2}))
    manifest = json.loads((entry / MANIFEST).read_text())
    manifest["files"]["instructions.json"] = digests.file_sha256(entry / "instructions.json")
    (entry / MANIFEST).write_text(json.dumps(manifest))
    with pytest.warns(
        DamagedCacheEntryWarning, match="instructions.json is format 2, and this pytest-sme2 writes " "format 3"
    ):
        (again,) = counted_profiles(tmp_path / "b", "toy_cnn", (True,), cache=cache)
    assert timeline_document("t", [again])["traceEvents"] == timeline_document("t", [fresh])["traceEvents"]
    assert json.loads((entry / "instructions.json").read_text())["version"] == 3  # stored again, whole


def test_a_session_digests_the_package_when_it_starts(tmp_path: Path) -> None:
    """The code digests in every result key and export key are taken when a session is created (the code this
    process imported), not at its first counted run or export."""
    from pytest_sme2.export import export as export_module
    from pytest_sme2.measure.session import Settings, Sme2Session

    digests._tree_digest.cache_clear()
    session = Sme2Session(Settings(target="host", cache_dir=tmp_path / "cache", session_dir=tmp_path / "s"))
    try:
        assert digests._tree_digest.cache_info().currsize == 2  # the package's and the export code's
        assert digests._tree_digest.cache_info().hits == 0
        assert code_digest() == digests.tree_digest(rc.PACKAGE, rc.CODE_SUFFIXES)
        export_module.export_code_digest()
        assert digests._tree_digest.cache_info().misses == 2  # later calls answered from what the session took
    finally:
        session.close()


def test_a_fifo_in_an_entry_is_refused_while_the_lock_is_held_and_the_lock_is_released(stored: tuple) -> None:
    """Issue 64 (bad 8): the lookup runs under the entry's lock; a FIFO in the entry hung it there, so every xdist
    worker wanting that run waited too. Refused as damage, named, and the lock free for the next process."""
    cache, key, _ = stored
    fifo = cache.entry(key) / "instructions.json"
    fifo.unlink()
    os.mkfifo(fifo)
    with cache.computing(key):
        with pytest.warns(DamagedCacheEntryWarning, match=r"instructions.json is a FIFO \(named pipe\), not a regular"):
            assert cache.load(key, cache.root / "out") is None
    with cache.computing(key):  # released: a second process gets it at once
        pass
