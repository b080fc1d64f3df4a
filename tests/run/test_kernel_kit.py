"""The kernel kit: the executorch wheel's LLM kernel library loaded by the aarch64 runner without PyTorch.

Unit tests of the stand-in's code on synthetic symbols; the kit built from the real aarch64 wheel; a real call
into the stand-in under qemu. The kernels' results against PyTorch eager: tests/measure/test_llm.py.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_sme2.run import emulation_setup
from pytest_sme2.run.native.kernel_kit import (
    MANIFEST,
    STANDIN_NAME,
    Symbol,
    kit_files,
    kit_library,
    kit_root,
    standin_sources,
)

LIBRARY = "extension/llm/custom_ops/libcustom_ops_aot_lib.so"


def _body(asm: str, name: str) -> list[str]:
    """The instructions of one stand-in function, up to the next label."""
    lines = asm.splitlines()
    start = lines.index(f"{name}:") + 1
    body = []
    for line in lines[start:]:
        if not line.startswith("  "):
            break
        body.append(line.strip())
    return body


def test_registration_calls_return_and_other_pytorch_functions_abort_with_their_name() -> None:
    symbols = [
        Symbol("_ZN5torch7LibraryC1Ev", "FUNC", "torch::Library::Library(torch::Library::Kind)"),
        Symbol("_ZN5torch3jit11parseSchemaE", "FUNC", "torch::jit::parseSchema(std::string const&, bool)"),
        Symbol("_ZN3c106SymInt1fEv", "FUNC", "c10::SymInt::promote_to_negative()"),
        Symbol("_ZN3c1019UndefinedTensorImpl10_singletonE", "OBJECT", "c10::UndefinedTensorImpl::_singleton"),
    ]
    asm, c_source = standin_sources(symbols)
    assert _body(asm, "_ZN5torch7LibraryC1Ev") == ["ret"]
    schema = _body(asm, "_ZN5torch3jit11parseSchemaE")
    # A c10::FunctionSchema (120 bytes) written all-zero through the result pointer, then back to the caller.
    assert schema[-1] == "ret" and all("xzr" in line and "[x8" in line for line in schema[:-1])
    zeroed = sum(16 if line.startswith("stp") else 8 for line in schema[:-1])
    assert zeroed == 120
    aborting = _body(asm, "_ZN3c106SymInt1fEv")
    assert aborting[-1] == "b pytest_sme2_torch_called"
    assert '"c10::SymInt::promote_to_negative()"' in asm  # the name it stops with
    assert ".zero 1024" in _body(asm, "_ZN3c1019UndefinedTensorImpl10_singletonE")
    assert "abort();" in c_source and "--sme2-target=host" in c_source


def test_x86_64_stand_ins_return_their_object_and_write_the_schema_through_the_hidden_pointer() -> None:
    symbols = [
        Symbol("_ZN5torch7Library4_defE", "FUNC", "torch::Library::_def(c10::FunctionSchema&&) &"),
        Symbol(
            "_ZN3c1023infer_schema20make_function_schemaE",
            "FUNC",
            "c10::detail::infer_schema::make_function_schema(c10::ArrayRef<...>)",
        ),
        Symbol("_ZN3c106SymInt1fEv", "FUNC", "c10::SymInt::promote_to_negative()"),
    ]
    asm, _ = standin_sources(symbols, "x86_64")
    assert _body(asm, "_ZN5torch7Library4_defE") == ["movq %rdi, %rax", "ret"]
    schema = _body(asm, "_ZN3c1023infer_schema20make_function_schemaE")
    assert schema[-2:] == ["movq %rdi, %rax", "ret"] and len(schema[:-2]) * 8 == 120
    assert _body(asm, "_ZN3c106SymInt1fEv")[-1] == "jmp pytest_sme2_torch_called@PLT"


def _calling_torch(compiler: str, folder: Path, tmp_path: Path) -> Path:
    """A real program, linked against the kit's stand-in in ``folder``, that calls one of PyTorch's functions."""
    program = tmp_path / "calls_torch.c"
    program.write_text(
        'extern void promote(void) __asm__("_ZN3c106SymInt19promote_to_negativeEv");\n'
        "int main(void) { promote(); return 0; }\n"
    )
    binary = tmp_path / "calls_torch"
    subprocess.run(
        [compiler, str(program), "-o", str(binary), f"-L{folder}", f"-l:{STANDIN_NAME}", f"-Wl,-rpath,{folder}"],
        check=True,
    )
    return binary


def test_the_x86_64_kit_stops_a_pytorch_call_with_its_name(tmp_path: Path) -> None:
    """This machine's kit (the installed package's library), a real program calling one of PyTorch's functions
    through the stand-in."""
    compiler = shutil.which("cc")
    if compiler is None:
        pytest.skip("no C compiler")
    library = kit_library(LIBRARY, "x86_64")
    manifest = json.loads((kit_root(library) / MANIFEST).read_text())
    assert manifest["arch"] == "x86_64" and "libtorch_cpu.so" in manifest["stood_in_libraries"]
    folder = kit_root(library) / "torch" / "lib"
    binary = _calling_torch(compiler, folder, tmp_path)
    done = subprocess.run([str(binary)], capture_output=True, text=True)
    assert done.returncode != 0 and "called PyTorch's c10::SymInt::promote_to_negative()" in done.stderr


kit_ready = pytest.mark.skipif(
    not emulation_setup.status().ready, reason="emulated target not ready (no " "aarch64 wheel or cross compiler)"
)


@kit_ready
def test_the_kit_holds_the_wheel_library_and_stands_in_for_the_pytorch_libraries_it_needs() -> None:
    library = kit_library(LIBRARY)
    root = kit_root(library)
    manifest = json.loads((root / MANIFEST).read_text())
    # executorch 1.5.1's library needs torch's Python module (of the wheel's Python: this one's), libtorch,
    # libtorch_cpu and libc10.
    python = f"cpython-{sys.version_info.major}{sys.version_info.minor}"
    assert sorted(manifest["stood_in_libraries"]) == sorted(
        [f"_C.{python}-aarch64-linux-gnu.so", "libtorch.so", "libtorch_cpu.so", "libc10.so"]
    )
    registration = " ".join(manifest["registration_symbols"])
    assert "torch::Library::Library(" in registration and "torch::jit::parseSchema(" in registration
    assert manifest["aborting_symbols"] > 10
    names = {f.name for f in kit_files(library)}
    assert {library.name, STANDIN_NAME, "libtorch.so", "libc10.so", MANIFEST} <= names
    # The stand-ins lie where the library's RUNPATH ($ORIGIN/../../../../torch/lib) looks.
    assert (root / "torch" / "lib" / STANDIN_NAME).is_file()
    assert library.read_bytes()[:4] == b"\x7fELF"


@kit_ready
def test_a_pytorch_function_called_through_the_kit_stops_the_run_with_its_name(tmp_path: Path) -> None:
    """A real aarch64 program linked against the stand-in, run under qemu, calls one of PyTorch's functions."""
    compiler = shutil.which("aarch64-linux-gnu-gcc")
    if compiler is None:
        pytest.skip("no aarch64 cross compiler")
    folder = kit_root(kit_library(LIBRARY)) / "torch" / "lib"
    binary = _calling_torch(compiler, folder, tmp_path)
    status = emulation_setup.status()
    done = subprocess.run(
        [str(status.qemu), "-cpu", "max", str(binary)],
        capture_output=True,
        text=True,
        env={"QEMU_LD_PREFIX": str(emulation_setup.SYSROOT)},
    )
    assert done.returncode != 0
    assert "called PyTorch's c10::SymInt::promote_to_negative()" in done.stderr
    assert "--sme2-target=host" in done.stderr
