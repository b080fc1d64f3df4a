"""The native runner and the local target: real build, real subprocesses, real models."""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers_versions import needs_runtime_libraries

from conftest import REPO
from pytest_sme2 import EtdumpError, Recipe, RunnerError, UsageError
from pytest_sme2.measure.runner import Runner
from pytest_sme2.measure.session import Settings, Sme2Session
from pytest_sme2.run.native.build import build_mask_library, build_runner
from pytest_sme2.run.targets import RunSpec
from pytest_sme2.run.targets.local import LocalTarget, check_runner, executable_arch
from pytest_sme2.run.targets.native_runner import STARTUP_REPEATS

# The runner links the wheel's C++ runtime libraries: on executorch 1.4.1 (none) every test here skips, naming why.
pytestmark = needs_runtime_libraries


@pytest.fixture(scope="module")
def runner_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cache = tmp_path_factory.mktemp("runner-cache")
    previous = os.environ.get("PYTEST_SME2_RUNNER_CACHE")
    os.environ["PYTEST_SME2_RUNNER_CACHE"] = str(cache)
    yield cache
    if previous is None:
        os.environ.pop("PYTEST_SME2_RUNNER_CACHE", None)
    else:
        os.environ["PYTEST_SME2_RUNNER_CACHE"] = previous


@pytest.fixture(scope="module")
def runner_binary(runner_cache: Path) -> Path:
    return build_runner()


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory, runner_binary: Path, shared_export_cache: Path) -> Sme2Session:
    root = tmp_path_factory.mktemp("local")
    sess = Sme2Session(
        Settings(target="local", cache_dir=shared_export_cache, session_dir=root / "artifacts", runner=runner_binary)
    )
    sess.registry.register_dir(REPO / "models")
    yield sess
    sess.close()


def _runner(session: Sme2Session, name: str, **spec) -> Runner:
    return Runner(session, RunSpec(**spec), session.test_dir(name))


def test_build_is_cached_per_version_and_source(runner_binary: Path) -> None:
    mtime = runner_binary.stat().st_mtime_ns
    assert build_runner() == runner_binary
    assert runner_binary.stat().st_mtime_ns == mtime
    assert executable_arch(runner_binary) == os.uname().machine


def test_native_runner_profile_matches_eager_and_etdump(session: Sme2Session) -> None:
    exported = session.export("mobilenet_v3_small", Recipe())
    profile = _runner(session, "native-mobilenet", runs=5, warmup=2, threads=2).profile(exported)
    assert profile.runs == 5 and len(profile.wall_ms) == 5
    assert profile.metadata["target"]["name"] == "local"
    assert profile.metadata["runtime_threads"] == 2
    assert profile.load_ms is not None and profile.load_ms > 0
    assert profile.delegation_coverage > 0.9
    # The native runner's own clock brackets Method::execute.
    assert np.all(profile.e2e_ms <= profile.wall_ms + 1e-3)
    outputs = torch.load(profile.artifacts["outputs"], weights_only=True)
    reference = torch.load(exported.reference_outputs_path, weights_only=True)
    torch.testing.assert_close(outputs[0], reference, rtol=1e-3, atol=1e-4)
    # ExecuTorch's Inspector reads the runner's ETDump too.
    frame = profile.inspector().to_dataframe()
    assert (frame["event_name"] == "Method::execute").sum() == 1
    # The reference program ran before each timed run, untraced (the ETDump holds the 5 model runs only).
    assert profile.reference_ms is not None and len(profile.reference_ms) == 5 and np.all(profile.reference_ms > 0)
    assert np.allclose(profile.relative_ms, profile.e2e_ms / profile.reference_ms)
    # Its method was loaded STARTUP_REPEATS times, the first before the runs (the one they used, and the warmup
    # file's), the rest after them in the timed file's block after the runs' (the runs' count is still 5).
    [(loads, inits)] = profile.trace.startup_parts
    assert loads.size == inits.size == STARTUP_REPEATS and profile.reference_load_ms.size == STARTUP_REPEATS
    assert profile.load_ms == pytest.approx(loads[0]) and profile.init_ms == pytest.approx(inits[0])


def _scripted_target(session: Sme2Session, tmp_path: Path, name: str, script: str) -> LocalTarget:
    """A local target whose runner is a shell script (a stand-in for another or older runner)."""
    runner = tmp_path / f"{name}_runner"
    runner.write_text(f"#!/bin/sh\n{script}\n")
    runner.chmod(0o755)
    other = Sme2Session(
        Settings(
            target="local",
            cache_dir=session.settings.cache_dir,
            session_dir=tmp_path / f"artifacts-{name}",
            runner=runner,
        )
    )
    return other.target


def test_reference_program_errors_are_clear(session: Sme2Session, tmp_path: Path) -> None:
    exported = session.export("toy_cnn", Recipe())
    target = session.target
    with pytest.raises(RunnerError) as info:
        target.run(
            exported.path,
            exported.inputs_path,
            RunSpec(runs=2, warmup=0),
            tmp_path / "missing",
            reference=tmp_path / "no such reference.pte",
        )
    assert "exited with status 3" in str(info.value) and "reference program" in str(info.value)
    # A runner that is not pytest-sme2's (here: a script printing a result without reference times).
    other = _scripted_target(
        session, tmp_path, "foreign", 'echo \'PYTEST_SME2_RESULT {"latency_ms": [1.0, 1.0], "threads": 1}\''
    )
    with pytest.raises(RunnerError, match="reported none in 'reference_ms'.*--sme2-latency-reference=off"):
        other.run(
            exported.path,
            exported.inputs_path,
            RunSpec(runs=2, warmup=0, etdump=False),
            tmp_path / "foreign",
            reference=exported.path,
        )
    # A runner of an older pytest-sme2 (no --startup_repeats) says so and how to get past it.
    older = _scripted_target(
        session,
        tmp_path,
        "older",
        "echo \"sme2_runner: unknown argument '--startup_repeats=8' " '(flags take the form --name=value)" >&2\nexit 2',
    )
    with pytest.raises(
        RunnerError,
        match=r"older pytest-sme2's sme2_runner.cpp.*pytest-sme2 build-runner.*" r"--sme2-latency-reference=off",
    ):
        older.run(
            exported.path, exported.inputs_path, RunSpec(runs=2, warmup=0), tmp_path / "older", reference=exported.path
        )
    # A reference load per load of the method, or the runner is not this version's.
    short = _scripted_target(
        session,
        tmp_path,
        "short",
        'echo \'PYTEST_SME2_RESULT {"latency_ms": [1.0], '
        '"reference_ms": [1.0], "reference_load_ms": [1.0, 1.0], "threads": 1}\'',
    )
    with pytest.raises(RunnerError, match=rf"2 times in 'reference_load_ms' for {STARTUP_REPEATS} loads"):
        short.run(
            exported.path, exported.inputs_path, RunSpec(runs=1, warmup=0), tmp_path / "short", reference=exported.path
        )
    # Without a reference it is accepted: the relative gate is off, raw latency is all there is.
    result = other.run(
        exported.path, exported.inputs_path, RunSpec(runs=2, warmup=0, etdump=False), tmp_path / "foreign2"
    )
    assert result.reference_ms is None and list(result.wall_ms) == [1.0, 1.0]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (
            "PYTEST_SME2_RESULT {not json",
            "printed a result line that is not JSON (Expecting property name enclosed in "
            "double quotes at column 21): 'PYTEST_SME2_RESULT {not json'",
        ),
        (
            "PYTEST_SME2_RESULT {}",
            "printed a result line without what pytest-sme2 needs (no 'latency_ms'): " "'PYTEST_SME2_RESULT {}'",
        ),
        ("PYTEST_SME2_RESULT [1, 2]", "(a JSON object expected, got list)"),
        (
            'PYTEST_SME2_RESULT {"latency_ms": "fast"}',
            "('latency_ms' must be a list of milliseconds, one per timed run)",
        ),
        ('PYTEST_SME2_RESULT {"latency_ms": [1.0]}', "reported 1 times in 'latency_ms' for 2 timed runs"),
    ],
    ids=["not-json", "empty", "list", "wrong-type", "wrong-count"],
)
def test_malformed_runner_output_is_a_runner_error_naming_the_runner_and_line(
    session: Sme2Session, tmp_path: Path, line: str, message: str
) -> None:
    exported = session.export("toy_cnn", Recipe())
    foreign = tmp_path / "odd_runner"
    foreign.write_text(f"#!/bin/sh\necho '{line}'\n")
    foreign.chmod(0o755)
    other = Sme2Session(
        Settings(
            target="local", cache_dir=session.settings.cache_dir, session_dir=tmp_path / "artifacts", runner=foreign
        )
    )
    with pytest.raises(RunnerError) as info:
        other.target.run(exported.path, exported.inputs_path, RunSpec(runs=2, warmup=0, etdump=False), tmp_path / "o")
    text = str(info.value)
    assert message in text and ("odd_runner" in text or "Log: " in text)


def test_sme2_off_with_one_build_preloads_the_mask_library(session: Sme2Session, tmp_path: Path) -> None:
    exported = session.export("toy_cnn", Recipe())
    profile = _runner(session, "masked", sme2=False, runs=3, warmup=1).profile(exported)
    command_line = Path(profile.artifacts["log"]).read_text().splitlines()[0]
    assert command_line.startswith(f"$ LD_PRELOAD={build_mask_library()} ")
    # The library really loads into a process and exports its marker symbol.
    probe = tmp_path / "probe.c"
    probe.write_text(
        "#define _GNU_SOURCE\n#include <dlfcn.h>\n#include <stdio.h>\n#include <sys/auxv.h>\n"
        'int main(void){ printf("%d %lu\\n", dlsym(RTLD_DEFAULT, "pytest_sme2_sme_masked") != 0,'
        " getauxval(AT_HWCAP2)); return 0; }\n"
    )
    subprocess.run(["cc", "-o", str(tmp_path / "probe"), str(probe), "-ldl"], check=True)
    plain = subprocess.run([str(tmp_path / "probe")], capture_output=True, text=True, check=True).stdout.split()
    masked = subprocess.run(
        [str(tmp_path / "probe")],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "LD_PRELOAD": str(build_mask_library())},
    ).stdout.split()
    assert plain[0] == "0" and masked[0] == "1"
    sme_bits = (0xFF << 23) | (0x3F << 37)
    assert int(masked[1]) == int(plain[1]) & ~sme_bits


def test_two_builds_mode_picks_the_build_per_variant(session: Sme2Session, runner_binary: Path, tmp_path: Path) -> None:
    on, off = tmp_path / "runner on", tmp_path / "runner off"
    shutil.copy2(runner_binary, on)
    shutil.copy2(runner_binary, off)
    sess = Sme2Session(
        Settings(
            target="local",
            cache_dir=session.settings.cache_dir,
            session_dir=tmp_path / "artifacts",
            runner_on=on,
            runner_off=off,
        )
    )
    sess.registry.register_dir(REPO / "models")
    exported = sess.export("toy_cnn", Recipe())
    profile = Runner(sess, RunSpec(sme2=False, runs=2, warmup=0), sess.test_dir("two")).profile(exported)
    first = Path(profile.artifacts["log"]).read_text().splitlines()[0]
    assert first.startswith(f"$ '{off}' ") and "LD_PRELOAD" not in first
    assert sess.target.info.details["sme2_off_mode"] == "two builds"
    with pytest.raises(UsageError, match="--sme2-runner-off is missing"):
        LocalTarget(tmp_path, runner_on=on)


def test_runner_checks_before_anything_runs(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="does not exist"):
        check_runner(tmp_path / "nope", "runner")
    plain = tmp_path / "plain"
    plain.write_bytes(b"#!/bin/sh\n")
    with pytest.raises(UsageError, match="is not an executable file"):
        check_runner(plain, "runner")
    foreign = tmp_path / "aarch64_runner"
    header = bytearray(64)
    header[:4], header[4], header[5], header[18:20] = b"\x7fELF", 2, 1, (183).to_bytes(2, "little")
    foreign.write_bytes(bytes(header))
    foreign.chmod(foreign.stat().st_mode | stat.S_IXUSR)
    with pytest.raises(UsageError, match=r"is built for aarch64, but this machine is x86_64"):
        check_runner(foreign, "runner")


def test_bad_runner_option_is_a_usage_error_before_tests(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = pytester.runpytest_inprocess("--sme2-target=local", f"--sme2-runner={pytester.path / 'missing'}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*runner (--sme2-runner)*missing does not exist*build-runner*"])


def test_runner_failure_shows_command_and_stderr(session: Sme2Session, tmp_path: Path) -> None:
    exported = session.export("toy_cnn", Recipe())
    wrong = tmp_path / "wrong inputs.pt"
    torch.save((torch.ones(1, 3, 8, 8),), wrong)
    target = session.target
    with pytest.raises(RunnerError) as info:
        target.run(exported.path, wrong, RunSpec(runs=1, warmup=0), tmp_path / "out")
    message = str(info.value)
    assert "exited with status 5" in message and "--model_path=" in message
    assert "forward failed" in message  # the runner's own stderr line
    assert (tmp_path / "out" / "runner.log").exists()  # the log stays


def test_runner_crash_is_reported_with_the_signal(session: Sme2Session, tmp_path: Path) -> None:
    exported = session.export("mlp", Recipe())
    out_dir = tmp_path / "crash"

    def crash_it() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for proc in Path("/proc").iterdir():
                try:
                    cmdline = (proc / "cmdline").read_bytes()
                except OSError:
                    continue
                if b"sme2_runner" in cmdline and str(out_dir).encode() in cmdline:
                    time.sleep(0.5)
                    os.kill(int(proc.name), signal.SIGSEGV)
                    return
            time.sleep(0.05)

    killer = threading.Thread(target=crash_it, daemon=True)
    killer.start()
    with pytest.raises(RunnerError, match="was killed by SIGSEGV"):
        session.target.run(
            exported.path, exported.inputs_path, RunSpec(runs=10_000_000, warmup=0, timeout_s=120), out_dir
        )
    killer.join()


def test_runner_timeout_kills_it(session: Sme2Session, tmp_path: Path) -> None:
    exported = session.export("mlp", Recipe())
    started = time.monotonic()
    with pytest.raises(RunnerError, match="timed out after 1.5 s"):
        session.target.run(
            exported.path, exported.inputs_path, RunSpec(runs=10_000_000, warmup=0, timeout_s=1.5), tmp_path / "slow"
        )
    assert time.monotonic() - started < 30


def test_paths_with_spaces_and_quotes(session: Sme2Session, tmp_path: Path) -> None:
    exported = session.export("toy_cnn", Recipe())
    odd = tmp_path / "dir with 'quotes' and \"double\" $(echo no) ;rm -rf x"
    odd.mkdir()
    pte = odd / "model; echo injected.pte"
    shutil.copy2(exported.path, pte)
    result = session.target.run(pte, exported.inputs_path, RunSpec(runs=2, warmup=1), odd / "out dir")
    assert result.timed_etdump is not None and result.timed_etdump.exists()
    assert not (Path.cwd() / "x").exists()


def test_a_garbage_etdump_from_the_runner_blames_the_runner_not_the_user(session: Sme2Session, tmp_path: Path) -> None:
    """Inside a test nobody passed a file by hand: the advice must point at the runner and its log."""
    exported = session.export("toy_cnn", Recipe())
    garbage = tmp_path / "garbage_runner"
    garbage.write_text(
        "#!/bin/sh\nfor arg in \"$@\"; do case $arg in --etdump_path=*) echo 'not an etdump, just text' > "
        '"${arg#--etdump_path=}";; esac; done\n'
        'echo \'PYTEST_SME2_RESULT {"latency_ms": [1.0, 1.0], "threads": 1}\'\n'
    )
    garbage.chmod(0o755)
    other = Sme2Session(
        Settings(
            target="local",
            cache_dir=session.settings.cache_dir,
            session_dir=tmp_path / "artifacts",
            runner=garbage,
            latency_reference=False,
        )
    )
    with pytest.raises(EtdumpError) as info:
        Runner(other, RunSpec(runs=2, warmup=0), other.test_dir("t")).profile(exported, extra_rounds=False)
    text = str(info.value)
    assert "is not an ETDump" in text and "The runner wrote it in this run" in text and "runner.log" in text
    assert ".pte" not in text.split("is not an ETDump")[1]


def test_sme2_on_without_sme2_here_names_where_it_can_run(session: Sme2Session) -> None:
    if session.target.info.has_sme2:
        pytest.skip("this CPU has SME2: the local target runs SME2 on")
    reason = session.target.unsupported(True)
    assert reason is not None and "has no SME2" in reason
    assert "--sme2-target=adb" in reason and "--sme2-target=emulated" in reason  # the two places it can run


def test_the_method_is_loaded_again_only_when_a_reference_program_and_an_etdump_are_there() -> None:
    """The repeated loads are read from the ETDump and divided by reference loads: without either, no repeats
    (and a runner that is not pytest-sme2's, given no reference program, never sees the flag)."""
    from pytest_sme2.run.targets.native_runner import RunnerFiles, runner_arguments

    files = RunnerFiles(pte="m.pte", timed_etdump="t.etdp", warmup_etdump="w.etdp", outputs="o.bin", reference="r.pte")
    flag = f"--startup_repeats={STARTUP_REPEATS}"
    assert flag in runner_arguments("runner", files, RunSpec())
    assert flag not in runner_arguments("runner", files, RunSpec(etdump=False))
    assert not any(
        a.startswith("--startup_repeats")
        for a in runner_arguments(
            "runner", RunnerFiles(pte="m.pte", timed_etdump="t", warmup_etdump="w", outputs="o"), RunSpec()
        )
    )
