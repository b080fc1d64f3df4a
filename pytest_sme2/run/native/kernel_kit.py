"""A kernel library of the executorch wheel made loadable by pytest-sme2's runner, without PyTorch.

ExecuTorch's LLM custom ops (``llama::custom_sdpa``, ``llama::update_cache``, ...) have their ExecuTorch
kernels in one file of the wheel, ``extension/llm/custom_ops/libcustom_ops_aot_lib.so``. Loading it registers
them in ExecuTorch's kernel registry, which is all a runner needs. The same file also registers the ops with
PyTorch, so it links libtorch, libc10 and torch's Python module, and its static constructors call PyTorch's
operator-registration API when it loads. For aarch64 those libraries come only in PyPI's CUDA build of torch
(libtorch_cpu alone 267 MB, needing the CUDA runtime): too much to emulate or push to a phone.

The kit is the wheel's own file beside a small stand-in for the PyTorch symbols it names, built here with the
cross compiler from the file's own dynamic symbol table:
- the registration calls its constructors make (``torch::Library``'s constructor, ``_def``, ``_impl``,
  ``parseSchema``, ``make_function_schema``, ``~CppFunction``) do nothing and return what leaves the caller's
  objects valid (an all-zero ``FunctionSchema``), so the PyTorch half registers nothing;
- every other PyTorch function aborts with its name: the ExecuTorch kernels never call PyTorch, and if one ever
  did, the run stops with the name rather than computing with a stand-in;
- data symbols are zero-filled storage (the address of ``UndefinedTensorImpl::_singleton`` is all code takes).
So the kernels that run are ExecuTorch's own, from the wheel; tests compare a program's outputs with PyTorch
eager on the emulated target (tests/run/test_kernel_kit.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import zipfile
from dataclasses import dataclass
from pathlib import Path

from pytest_sme2.errors import RunnerError
from pytest_sme2.system.elf import read_dynamic
from pytest_sme2.system.locks import locked

ARCHES = ("aarch64", "x86_64")
# The libraries of PyTorch's a kernel library may need (NEEDED names): these get stand-ins, nothing else does.
TORCH_LIBRARIES = ("libtorch", "libc10", "_C.")
STANDIN_NAME = "libpytest_sme2_torch_standin.so"
MANIFEST = "kit.json"
# Registration calls made by the library's static constructors (PyTorch's TORCH_LIBRARY macros), by demangled
# name: how each stand-in returns. "self": the object the member function was called on (x0, untouched);
# "schema": a FunctionSchema by value, written all-zero to the caller's result slot (x8), which the caller then
# moves from and destroys: zeroed strings, vectors and optionals destroy as empty ones.
_REGISTRATION = {
    "torch::Library::Library(": "self",
    "torch::Library::_def(": "self",
    "torch::Library::_impl(": "self",
    "torch::Library::_fallback(": "self",
    "torch::CppFunction::~CppFunction()": "self",
    "torch::jit::parseSchema(": "schema",
    "c10::detail::infer_schema::make_function_schema(": "schema",
}
# sizeof(c10::FunctionSchema) in the PyTorch 2.13 headers the executorch 1.5.1 wheel was built against (two
# strings, two vectors, flags and an optional: the same on every LP64 libstdc++ target).
_FUNCTION_SCHEMA_BYTES = 120
_DATA_BYTES = 1024  # zeroed storage for each data symbol (UndefinedTensorImpl is 176 bytes in 2.13)


@dataclass(frozen=True)
class Symbol:
    name: str  # mangled, as the dynamic symbol table has it
    kind: str  # FUNC or OBJECT
    shown: str  # demangled


def _readelf(path: Path, *flags: str) -> str:
    readelf = shutil.which("readelf")
    if readelf is None:
        raise RunnerError(
            "building pytest-sme2's kernel kit needs `readelf` (binutils): `sudo apt-get install "
            "binutils`, or run programs with ExecuTorch's LLM custom ops on the host target"
        )
    return subprocess.run([readelf, "-W", *flags, str(path)], capture_output=True, text=True, check=True).stdout


def _dynamic_symbols(path: Path) -> list[tuple[str, str, str, bool]]:
    """(name, type, binding, defined) of each dynamic symbol of an ELF file."""
    rows = []
    for line in _readelf(path, "--dyn-syms").splitlines():
        fields = line.split()
        if len(fields) >= 8 and fields[0].rstrip(":").isdigit():
            rows.append((fields[7], fields[3], fields[4], fields[6] != "UND"))
    return rows


def _demangle(names: list[str]) -> list[str]:
    """The demangled names, which the registration calls are recognised by: without them every stand-in would
    abort, the registration calls at load included, so a missing c++filt is an error, not mangled names."""
    if not names:
        return []
    cxxfilt = shutil.which("c++filt")
    if cxxfilt is None:
        raise RunnerError(
            "building pytest-sme2's kernel kit needs `c++filt` (binutils): `sudo apt-get install binutils`, "
            "or run programs with ExecuTorch's LLM custom ops on the host target"
        )
    out = subprocess.run([cxxfilt], input="\n".join(names), capture_output=True, text=True, check=True).stdout
    shown = out.splitlines()
    if len(shown) != len(names):
        raise RunnerError(f"c++filt gave {len(shown)} names for {len(names)} symbols while building the kernel kit")
    return shown


def standin_symbols(library: Path, providers: list[Path]) -> list[Symbol]:
    """The symbols ``library`` takes from PyTorch: undefined, strongly bound, unversioned (a versioned one is the
    C or C++ runtime's) and defined by none of ``providers`` (the wheel's own libraries)."""
    defined = {name for lib in providers for name, _, _, is_defined in _dynamic_symbols(lib) if is_defined}
    wanted = [
        (name, kind)
        for name, kind, bind, is_defined in _dynamic_symbols(library)
        if not is_defined
        and bind == "GLOBAL"
        and "@" not in name
        and kind in ("FUNC", "OBJECT")
        and name not in defined
    ]
    shown = _demangle([name for name, _ in wanted])
    return [Symbol(name, kind, text) for (name, kind), text in zip(wanted, shown)]


def _registration_role(symbol: Symbol) -> str | None:
    return next((role for prefix, role in _REGISTRATION.items() if symbol.shown.startswith(prefix)), None)


def _function_body(role: str | None, index: int, arch: str) -> list[str]:
    """The instructions of one stand-in function. A FunctionSchema returned by value is written through the
    result pointer: x8 on aarch64, the hidden first argument (rdi, returned in rax) on x86_64. A member function
    returning its object (``Library&``) returns x0 untouched on aarch64 and rdi in rax on x86_64."""
    if arch == "aarch64":
        if role == "schema":
            zero = [f"  stp xzr, xzr, [x8, #{offset}]" for offset in range(0, _FUNCTION_SCHEMA_BYTES - 8, 16)]
            if _FUNCTION_SCHEMA_BYTES % 16:
                zero.append(f"  str xzr, [x8, #{_FUNCTION_SCHEMA_BYTES - 8}]")
            return [*zero, "  ret"]
        if role == "self":
            return ["  ret"]
        return [f"  adrp x0, .Lname{index}", f"  add x0, x0, :lo12:.Lname{index}", "  b pytest_sme2_torch_called"]
    if role == "schema":
        zero = [f"  movq $0, {offset}(%rdi)" for offset in range(0, _FUNCTION_SCHEMA_BYTES, 8)]
        return [*zero, "  movq %rdi, %rax", "  ret"]
    if role == "self":
        return ["  movq %rdi, %rax", "  ret"]
    return [f"  leaq .Lname{index}(%rip), %rdi", "  jmp pytest_sme2_torch_called@PLT"]


def standin_sources(symbols: list[Symbol], arch: str = "aarch64") -> tuple[str, str]:
    """(assembly, C) of the stand-in library for ``symbols`` on ``arch`` (aarch64 or x86_64)."""
    if arch not in ARCHES:
        raise RunnerError(f"pytest-sme2's kernel kit is built for {' and '.join(ARCHES)} Linux, not {arch}")
    asm = [".text"]
    for index, symbol in enumerate(symbols):
        if symbol.kind == "OBJECT":
            asm += [
                ".data",
                ".balign 64",
                f".globl {symbol.name}",
                f".type {symbol.name}, %object",
                f".size {symbol.name}, {_DATA_BYTES}",
                f"{symbol.name}:",
                f"  .zero {_DATA_BYTES}",
                ".text",
            ]
            continue
        asm += [f".globl {symbol.name}", f".type {symbol.name}, %function", f"{symbol.name}:"]
        role = _registration_role(symbol)
        asm += _function_body(role, index, arch)
        if role is None:
            asm += [".section .rodata", f".Lname{index}: .asciz {json.dumps(symbol.shown)}", ".text"]
    c_source = (
        "#include <stdio.h>\n#include <stdlib.h>\n"
        "/* Every PyTorch function but the registration calls: the kernels never call PyTorch, so stop. */\n"
        "void pytest_sme2_torch_called(const char* name) {\n"
        "  fprintf(stderr, \"pytest-sme2 kernel kit: ExecuTorch's kernel library called PyTorch's %s, which "
        "pytest-sme2's runner does not load (it loads the library without PyTorch); run this program on the "
        'host target (--sme2-target=host)\\n", name);\n'
        "  abort();\n}\n"
    )
    return "\n".join(asm) + "\n", c_source


def _compile(compiler: str, sources: list[Path], output: Path, soname: str, extra: tuple[str, ...] = ()) -> None:
    command = [
        compiler,
        "-shared",
        "-fPIC",
        "-O1",
        *map(str, sources),
        "-o",
        str(output),
        f"-Wl,-soname,{soname}",
        *extra,
    ]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RunnerError(f"building pytest-sme2's kernel kit failed: `{' '.join(command)}`:\n{done.stderr[-2000:]}")


def _standin_folder(library: Path, root: Path) -> Path:
    """The folder of the library's RUNPATH that lies inside the kit and is not the library's own: where its
    PyTorch libraries are looked for (``$ORIGIN/../../../../torch/lib`` in executorch 1.5.1)."""
    origin = library.parent
    for entry in read_dynamic(library).search_path:
        if not entry.startswith("$ORIGIN") or "torch" not in entry:
            continue
        folder = Path(os.path.normpath(entry.replace("$ORIGIN", str(origin))))
        if folder.is_relative_to(root):
            return folder
    raise RunnerError(
        f"{library.name} does not search a PyTorch folder beside the executorch package (its RUNPATH: "
        f"{':'.join(read_dynamic(library).search_path)}); pytest-sme2's kernel kit knows the layout "
        f"of executorch 1.5.1's wheel, not this executorch {_release()}'s: run this program on the host target "
        f"(--sme2-target=host)"
    )


def _release() -> str:
    from pytest_sme2.run.native.build import executorch_release

    return executorch_release()


def _wheel_member(wheel: Path, member: str, destination: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        try:
            data = archive.read(member)
        except KeyError:
            raise RunnerError(
                f"the executorch wheel {wheel} has no {member}; reinstall it or run programs with its "
                f"operators on the host target (--sme2-target=host)"
            ) from None
    destination.parent.mkdir(parents=True, exist_ok=True)
    destination.write_bytes(data)


def kit_library(library: str, arch: str = "aarch64") -> Path:
    """The path of the wheel's ``library`` (relative to the executorch package) in its kit for ``arch`` Linux,
    built once per executorch version, arch and kit source under the runner cache. aarch64 takes the library
    from the aarch64 wheel and builds with the cross compiler; x86_64 from the installed package, with cc."""
    from pytest_sme2.run.native.build import cache_root, executorch_release

    if arch not in ARCHES:
        raise RunnerError(f"pytest-sme2's kernel kit is built for {' and '.join(ARCHES)} Linux, not {arch}")
    source = hashlib.sha256(Path(__file__).read_bytes() + library.encode()).hexdigest()[:12]
    root = cache_root() / f"kernel-kit-{executorch_release()}-linux-{arch}-{source}"
    target = root / "executorch" / library
    with locked(cache_root() / f"{root.name}.lock"):
        if (root / MANIFEST).is_file():
            return target
        staging = root.with_name(root.name + ".tmp")
        shutil.rmtree(staging, ignore_errors=True)
        staged = staging / "executorch" / library
        compiler, package = _stage_library(library, arch, staged)
        _build_standins(library, arch, compiler, package, staged, staging)
        shutil.rmtree(root, ignore_errors=True)
        os.replace(staging, root)
    return target


def _stage_library(library: str, arch: str, staged: Path) -> tuple[str, Path]:
    """Copy the wheel's ``library`` for ``arch`` to ``staged`` (from the aarch64 wheel, or the installed package
    on x86_64); the compiler that builds its stand-ins and the executorch package whose libraries it links."""
    from pytest_sme2.run.native.build import (
        CROSS_CC,
        _cross_compiler,
        aarch64_executorch,
        aarch64_wheel,
        executorch_prefix,
        executorch_release,
    )

    if arch == "aarch64":
        compiler = _cross_compiler(CROSS_CC)
        package = aarch64_executorch()
        _wheel_member(aarch64_wheel(), f"executorch/{library}", staged)
        return compiler, package
    compiler = shutil.which("cc") or shutil.which("gcc") or ""
    if not compiler:
        raise RunnerError(
            "building pytest-sme2's kernel kit needs a C compiler (cc): `sudo apt-get install "
            "gcc`, or run programs with ExecuTorch's LLM custom ops on the host target"
        )
    package = executorch_prefix()
    installed = package / library
    if not installed.is_file():
        raise RunnerError(
            f"the installed executorch package has no {library}; reinstall executorch=={executorch_release()} "
            f"or run programs with its operators on the host target (--sme2-target=host)"
        )
    staged.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(installed, staged)
    return compiler, package


def _build_standins(library: str, arch: str, compiler: str, package: Path, staged: Path, staging: Path) -> None:
    """Build the staged library's stand-in for the PyTorch symbols it needs, and an empty library of each
    PyTorch library's name that needs the stand-in, where its RUNPATH looks; then the kit's manifest."""
    from pytest_sme2.run.native.build import executorch_release

    providers = sorted((package / "lib").glob("*.so"))
    symbols = standin_symbols(staged, providers)
    folder = _standin_folder(staged, staging)
    folder.mkdir(parents=True, exist_ok=True)
    asm, c_source = standin_sources(symbols, arch)
    (staging / "standin.S").write_text(asm)
    (staging / "standin.c").write_text(c_source)
    _compile(compiler, [staging / "standin.S", staging / "standin.c"], folder / STANDIN_NAME, STANDIN_NAME)
    stood_in = [name for name in read_dynamic(staged).needed if name.startswith(TORCH_LIBRARIES)]
    empty = staging / "empty.c"
    empty.write_text(
        "/* A PyTorch library's name; its symbols are in the stand-in it needs. */\n"
        "void pytest_sme2_torch_library(void) {}\n"
    )
    for name in stood_in:
        _compile(
            compiler,
            [empty],
            folder / name,
            name,
            ("-Wl,--no-as-needed", f"-L{folder}", f"-l:{STANDIN_NAME}", "-Wl,-rpath,$ORIGIN"),
        )
    (staging / MANIFEST).write_text(
        json.dumps(
            {
                "library": library,
                "executorch": executorch_release(),
                "arch": arch,
                "stood_in_libraries": stood_in,
                "registration_symbols": [s.shown for s in symbols if _registration_role(s)],
                "aborting_symbols": len([s for s in symbols if s.kind == "FUNC" and not _registration_role(s)]),
                "data_symbols": [s.shown for s in symbols if s.kind == "OBJECT"],
            },
            indent=1,
        )
    )


def kit_root(library: Path) -> Path:
    """The kit folder ``library`` lies in (the one holding the manifest)."""
    for folder in library.parents:
        if (folder / MANIFEST).is_file():
            return folder
    raise RunnerError(f"{library} is not in a pytest-sme2 kernel kit (no {MANIFEST} above it)")


def kit_files(library: Path) -> list[Path]:
    """Every file of the kit ``library`` belongs to, sorted (for cache keys and for pushing to a device)."""
    return sorted(p for p in kit_root(library).rglob("*") if p.is_file() and not p.name.endswith((".S", ".c")))
