"""What a glibc program needs to start where no glibc is installed, such as an Android phone.

Android's own programs name bionic's ``/system/bin/linker64`` as their loader. Any other loader (glibc's
``/lib/ld-linux-aarch64.so.1``) is missing on a phone, so such a program travels with its loader and every
shared library it loads, and is started through the loader:
``./ld-linux-aarch64.so.1 --library-path DIR DIR/sme2_runner ...``. That is how pytest-sme2's own aarch64
runner (built with Debian's cross compiler against the aarch64 executorch wheel, the one the emulated target
runs) serves a phone without the NDK. The files come from next to the program (RUNPATH, ``$ORIGIN``) and from
the glibc of the program's architecture: Debian's cross sysroot ``/usr/<triplet>/lib``, or this machine's own
for its own architecture. Each candidate's ELF machine is checked, so a library of another architecture is
never taken.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pytest_sme2.errors import RunnerError
from pytest_sme2.system.elf import bundled_libraries, executable_arch, program_interpreter, read_dynamic

ANDROID_LOADERS = frozenset({"/system/bin/linker64", "/system/bin/linker"})
_TRIPLETS = {
    "aarch64": "aarch64-linux-gnu",
    "x86_64": "x86_64-linux-gnu",
    "arm": "arm-linux-gnueabihf",
    "i386": "i386-linux-gnu",
}
_CROSS_PACKAGES = {"aarch64": "g++-aarch64-linux-gnu", "arm": "g++-arm-linux-gnueabihf"}


@dataclass(frozen=True)
class CarriedLoader:
    """A glibc program's loader and every shared library the loader will open for it, by the name asked for."""

    loader: Path
    libraries: dict[str, Path]
    bundled: tuple[str, ...] = ()  # which of ``libraries`` came from next to the program (RUNPATH), not the C library

    @property
    def loader_name(self) -> str:
        return self.loader.name


def needs_carried_loader(binary: Path) -> bool:
    """True for a dynamically linked program whose loader is not Android's (a glibc or musl program)."""
    interpreter = program_interpreter(binary)
    return interpreter is not None and interpreter not in ANDROID_LOADERS


def system_library_dirs(arch: str) -> list[Path]:
    """Where the glibc of ``arch`` lives here: Debian's cross sysroot first, then this machine's own folders."""
    triplet = _TRIPLETS.get(arch, f"{arch}-linux-gnu")
    return [
        Path("/usr") / triplet / "lib",
        Path("/usr") / triplet / "lib64",
        Path("/lib") / triplet,
        Path("/usr/lib") / triplet,
        Path("/lib64"),
        Path("/usr/lib64"),
        Path("/lib"),
        Path("/usr/lib"),
    ]


def _find(name: str, arch: str, first: Path | None = None) -> Path | None:
    candidates = ([first] if first is not None else []) + [folder / name for folder in system_library_dirs(arch)]
    for candidate in candidates:
        if candidate.is_file() and executable_arch(candidate) == arch:
            return candidate.resolve()
    return None


def carried_loader(binary: Path) -> CarriedLoader:
    """The loader ``binary`` names and the transitive closure of the libraries it needs.

    A RunnerError names the first file that cannot be found and how to get it.
    """
    binary = Path(binary)
    interpreter = program_interpreter(binary)
    arch = executable_arch(binary)
    if interpreter is None or arch is None:
        raise RunnerError(f"{binary} is not a dynamically linked ELF program; nothing to carry with it")
    advice = (
        f"install the {arch} C library (`sudo apt-get install {_CROSS_PACKAGES[arch]}`)"
        if arch in _CROSS_PACKAGES
        else f"install the {arch} C library"
    )
    loader = _find(Path(interpreter).name, arch, first=Path(interpreter))
    if loader is None:
        raise RunnerError(
            f"{binary} names the loader {interpreter}, which is not on this machine for {arch} "
            f"(looked in {interpreter} and {', '.join(map(str, system_library_dirs(arch)))}); {advice}"
        )
    found: dict[str, Path] = dict(bundled_libraries(binary))
    bundled = tuple(found)
    pending = [binary, *found.values()]
    while pending:
        current = pending.pop()
        for name in read_dynamic(current).needed:
            if name in found or name == loader.name or name == Path(interpreter).name:
                continue
            path = _find(name, arch)
            if path is None:
                raise RunnerError(
                    f"{binary} needs {name} (through {current.name}), which is neither next to it "
                    f"nor in {', '.join(map(str, system_library_dirs(arch)))}; {advice}"
                )
            found[name] = path
            pending.append(path)
    return CarriedLoader(loader, found, bundled)
