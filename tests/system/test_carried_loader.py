"""What a glibc runner carries to a phone: its loader and every library, of its own architecture only."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_sme2.errors import RunnerError
from pytest_sme2.run import emulation_setup
from pytest_sme2.system import carried_loader as carried_module
from pytest_sme2.system.carried_loader import carried_loader, needs_carried_loader
from pytest_sme2.system.elf import executable_arch, program_interpreter, read_dynamic

STATUS = emulation_setup.status()
needs_aarch64_runner = pytest.mark.skipif(STATUS.runner is None, reason=f"no aarch64 runner: {STATUS.problem}")


@needs_aarch64_runner
def test_the_aarch64_runner_carries_an_aarch64_loader_and_the_closure_of_its_libraries() -> None:
    runner = STATUS.runner
    assert program_interpreter(runner) == "/lib/ld-linux-aarch64.so.1" and needs_carried_loader(runner)
    carried = carried_loader(runner)
    assert carried.loader_name == "ld-linux-aarch64.so.1" and executable_arch(carried.loader) == "aarch64"
    assert all(executable_arch(path) == "aarch64" for path in carried.libraries.values())
    # Everything any carried file asks for is carried (or is the loader itself): the loader finds it all.
    asked = set(read_dynamic(runner).needed).union(*(read_dynamic(p).needed for p in carried.libraries.values()))
    assert asked - {carried.loader_name} == set(carried.libraries)
    assert {"libc.so.6", "libstdc++.so.6", "libm.so.6", "libexecutorch.so"} <= set(carried.libraries)


@needs_aarch64_runner
def test_an_android_program_carries_nothing(tmp_path: Path) -> None:
    """A program linked by the NDK names bionic's linker: the phone has it. (The runner with its PT_INTERP
    rewritten stands for one: no NDK here.)"""
    data = STATUS.runner.read_bytes()
    glibc = b"/lib/ld-linux-aarch64.so.1\0"
    android = b"/system/bin/linker64\0".ljust(len(glibc), b"\0")
    assert data.count(glibc) == 1
    program = tmp_path / "android_runner"
    program.write_bytes(data.replace(glibc, android))
    assert program_interpreter(program) == "/system/bin/linker64" and not needs_carried_loader(program)


@needs_aarch64_runner
def test_a_missing_library_is_named_with_the_package_that_has_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(carried_module, "system_library_dirs", lambda arch: [tmp_path / "empty"])
    with pytest.raises(
        RunnerError,
        match=r"names the loader /lib/ld-linux-aarch64\.so\.1, which is not on this "
        r"machine for aarch64.*apt-get install g\+\+-aarch64-linux-gnu",
    ):
        carried_loader(STATUS.runner)
    (tmp_path / "empty").mkdir()
    loader = carried_module._find(
        "ld-linux-aarch64.so.1", "aarch64", first=emulation_setup.SYSROOT / "lib" / "ld-linux-aarch64.so.1"
    )
    assert loader is not None
    monkeypatch.setattr(carried_module, "program_interpreter", lambda path: str(loader))
    with pytest.raises(
        RunnerError,
        match=r"needs (libc\.so\.6|libstdc\+\+\.so\.6|libm\.so\.6|libgcc_s\.so\.1|"
        r"libdl\.so\.2|libpthread\.so\.0) .*neither next to it",
    ):
        carried_loader(STATUS.runner)


def test_a_library_of_another_architecture_is_never_taken(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """This machine's x86_64 libc sits where an aarch64 one would be looked for: it is passed over."""
    host_libc = carried_loader(Path("/bin/sh")).libraries["libc.so.6"]
    fake = tmp_path / "lib"
    fake.mkdir()
    (fake / "libc.so.6").write_bytes(host_libc.read_bytes())
    monkeypatch.setattr(carried_module, "system_library_dirs", lambda arch: [fake])
    assert carried_module._find("libc.so.6", "x86_64") == (fake / "libc.so.6").resolve()
    assert carried_module._find("libc.so.6", "aarch64") is None
