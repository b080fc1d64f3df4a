"""Which library provides an operator's kernel, and what a target says when a program needs one it lacks.

A program names its operators (``llama::custom_sdpa.out``); the runtime looks each up in its kernel registry
when a method loads and otherwise stops with ``Missing operator``. The kernels of ExecuTorch's own LLM ops
(``llama::custom_sdpa``, ``llama::update_cache``, ...) ship in one file of the executorch wheel,
``extension/llm/custom_ops/libcustom_ops_aot_lib.so``, which registers them when it is loaded. The same file
registers the ops with PyTorch, so it links libtorch and torch's Python module: the Python binding (host target)
loads it beside torch; pytest-sme2's Linux runner (emulated, adb, local; aarch64 and x86_64) loads the wheel's
copy for its architecture through a kernel kit that stands in for PyTorch (native/kernel_kit.py). Both with no
step from the user. Elsewhere (a macOS runner, a user's own runner) a program with these ops is refused with the
operator, the target and the way out in the error's first line, never run without them.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from pytest_sme2.errors import ProgramError, RunnerError
from pytest_sme2.system.regular_files import PROGRAM, SESSION_FILE, RefusedFile, open_checked, read_text


@dataclass(frozen=True)
class KernelProvider:
    """The library that registers the kernels of one operator namespace."""

    namespace: str  # "llama" for llama::custom_sdpa.out
    name: str  # what a user knows it as
    library: str  # the file, relative to the executorch package
    # Why a runner-binary target lacks them and what its user can do (the host target loads the library itself).
    runner_advice: str
    kit: bool = False  # pytest-sme2's Linux runner loads the library through a kernel kit (native/kernel_kit.py)


PROVIDERS: tuple[KernelProvider, ...] = (
    KernelProvider(
        "llama",
        "ExecuTorch's LLM custom ops (executorch.extension.llm.custom_ops)",
        "extension/llm/custom_ops/libcustom_ops_aot_lib.so",
        "which pytest-sme2's runner loads on Linux (aarch64 and x86_64: the emulated, adb and local targets, "
        "through its kernel kit); a macOS runner or a user's own runner build lacks it: run the program on the "
        "host target (--sme2-target=host), whose ExecuTorch Python binding loads that library beside torch, or "
        "on a Linux target",
        kit=True,
    ),
    KernelProvider(
        "quantized_decomposed",
        "ExecuTorch's quantized kernels (executorch.kernels.quantized)",
        "kernels/quantized/libquantized_ops_aot_lib.so",
        "which pytest-sme2's runner links: a runner without them is not pytest-sme2's (rebuild it with "
        "`pytest-sme2 build-runner`), or run the program on the host target (--sme2-target=host)",
    ),
)

# ExecuTorch's method loader: "Missing operator: [10] llama::custom_sdpa.out" (one line per instruction).
_MISSING = re.compile(r"Missing operator: \[\d+\] ([A-Za-z0-9_]+::[A-Za-z0-9_]+(?:\.[A-Za-z0-9_]*)?)")


class MissingKernelError(RunnerError):
    """A program needs operators whose kernels the target's runtime does not have; names them and the fix."""


def provider_of(operator: str) -> KernelProvider | None:
    namespace = operator.split("::", 1)[0]
    return next((p for p in PROVIDERS if p.namespace == namespace), None)


def missing_operators(log_text: str) -> list[str]:
    """The operators a runtime log says it has no kernel for, each once, in the order the log names them."""
    return list(dict.fromkeys(_MISSING.findall(log_text)))


def missing_kernel_error(
    operators: list[str], pte: str | Path, target: str, log: str | Path, binding: bool = False
) -> MissingKernelError:
    """The error whose first line names the operators, the target and what provides their kernels.

    ``binding``: the target runs ExecuTorch's Python binding, which loads the known libraries itself, so a
    known library missing there means the installed executorch package lacks it.
    """
    names = ", ".join(operators)
    providers = list(dict.fromkeys(p for p in map(provider_of, operators) if p is not None))
    if not providers:
        where = (
            "no kernel library pytest-sme2 knows registers them: run the program with a runtime that links "
            "the library registering them (on the local target a user's own runner build: --sme2-runner), "
            "or export without "
            "them"
        )
    elif binding:
        from pytest_sme2.run.native.build import executorch_release

        where = "; ".join(
            f"their kernels ship in {p.name} ({p.library} of the executorch package), which the "
            f"installed executorch package lacks: reinstall executorch=={executorch_release()}"
            for p in providers
        )
    else:
        where = "; ".join(
            f"their kernels ship in {p.name} ({p.library} of the executorch package), " f"{p.runner_advice}"
            for p in providers
        )
    return MissingKernelError(
        f"{Path(pte).name} needs operator(s) {names}, which the {target} target's runtime "
        f"has no kernel for: {where}. Log: {log}"
    )


def _named_namespaces(pte: Path) -> set[str]:
    """The known providers' namespaces whose ``namespace::`` the program's flatbuffer holds (operator names live
    there; constants and delegate blobs in the segments after it are not searched). A byte search, not a parse:
    ExecuTorch's own reader converts the whole flatbuffer to JSON with flatc and needs ``executorch.exir``, seconds
    per program; a false match only loads a library the program does not need."""
    with open_checked(pte, PROGRAM) as handle:  # every host run asks: read the flatbuffer only, not the weights
        size = os.fstat(handle.fileno()).st_size
        head = handle.read(24)
        program_size = int.from_bytes(head[16:24], "little") if head[8:12] == b"eh00" else 0
        if program_size > size:  # a crafted header (2^62 bytes) was a bare MemoryError on every target
            raise ProgramError(
                f"program {pte} is not a whole ExecuTorch program: its extended header gives a program size of "
                f"{program_size} bytes, and the file holds {size}; export it again (delete its cache entry, or "
                "--sme2-fresh) or point the test at the right file"
            )
        data = head + handle.read(program_size - len(head) if program_size > len(head) else -1)
    return {p.namespace for p in PROVIDERS if p.namespace.encode() + b"::" in data}


def binding_libraries(pte: str | Path) -> list[str]:
    """Kernel libraries the Python binding loads before this program: those of the providers whose operators it
    names that the installed executorch package ships (a missing one is left to the runtime's own error)."""
    import importlib.util

    spec = importlib.util.find_spec("executorch")
    roots = list(spec.submodule_search_locations or []) if spec is not None else []
    if not roots:
        return []
    namespaces = _named_namespaces(Path(pte))
    files = (Path(roots[0]) / p.library for p in PROVIDERS if p.namespace in namespaces)
    return [str(f) for f in files if f.is_file()]


def runner_libraries(pte: str | Path, runner_arch: str | None) -> list[Path]:
    """Kernel libraries pytest-sme2's runner loads before this program (``--kernel_library``): the kit of each
    provider the program names that has one, for a Linux runner of an arch the kit is built for (others, a
    macOS runner, get none, and the runtime's ``Missing operator`` becomes a MissingKernelError that says so)."""
    from pytest_sme2.run.native.kernel_kit import ARCHES, kit_library

    namespaces = _named_namespaces(Path(pte))
    wanted = [p for p in PROVIDERS if p.kit and p.namespace in namespaces]
    if not wanted or runner_arch not in ARCHES:
        return []
    return [kit_library(p.library, runner_arch) for p in wanted]


def raise_if_missing_kernels(log: Path, pte: str | Path, target: str, binding: bool = False) -> None:
    """Raise MissingKernelError when a failed run's log says the runtime lacked operators' kernels."""
    try:
        text = read_text(log, SESSION_FILE, errors="replace")
    except (OSError, RefusedFile):
        return
    operators = missing_operators(text)
    if operators:
        raise missing_kernel_error(operators, pte, target, log, binding=binding)
