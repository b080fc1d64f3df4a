"""Which function names are SME/SME2 kernels, what instruction set a kernel's name says, and which SME
kernels ran in a counted emulated run (the kernel trace: ``--sme2-no-kernel-trace`` turns it off).

Operator names in an ETDump show packed formats (PF32, PQS8, ...) when XNNPACK picked an SME kernel, but
some kernels keep their name either way (the int8 dynamic "QP8" GEMM has NEON and SME2 variants). The
counted run already names every function that ran inside each ETDump event (qemu_counts.py, from library
symbols: KleidiAI's ``kai_run_*_sme2_mopa`` and XNNPACK's ``*neonsme2`` kernels are exported), so the
kernels that ran are read from there. The tests have a second, independent way: qemu's own ``-d in_asm``
log of a rerun (tests/helpers_in_asm.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pytest_sme2.evidence.qemu_counts import EventCounts

# KleidiAI ("..._sme", "..._sme2_mopa") and XNNPACK ("...__neonsme2") kernel names; case-sensitive,
# so mangled C++ names ("...DynamismE...") do not match. Helpers that only describe a kernel
# (kai_get_m_step_..., xnn_..._get_mr) run at setup and prove nothing.
_SME_KERNEL = re.compile(r"(?:_|neon)sme2?(?:_|$)")
_HELPER = re.compile(r"^kai_get_|_get_[mn]r$")


def is_sme_kernel(name: str) -> bool:
    """Whether a function name is an SME/SME2 compute kernel (not a helper that only describes one)."""
    return bool(_SME_KERNEL.search(name)) and not _HELPER.match(name)


# The instruction set a kernel's name says it uses (XNNPACK's ``__neonfma``/``__avx2``... suffixes,
# KleidiAI's ``_neon_dotprod``/``_sme2_mopa``). A name made of library and address range
# (kernel_sampling.py) says nothing: "unnamed".
KERNEL_KINDS = ("SME2", "SME", "NEON", "x86 SIMD", "other", "unnamed")
_SME2_KERNEL = re.compile(r"(?:_|neon)sme2(?:_|$)")
_NEON_KERNEL = re.compile(r"neon|aarch64|asimd|dotprod|i8mm")
_X86_KERNEL = re.compile(r"avx|sse[0-9]|ssse3|fma3|f16c|amx|xop")
UNNAMED_MARK = "@0x"


def kernel_kind(name: str) -> str:
    """One of KERNEL_KINDS for a function name."""
    if UNNAMED_MARK in name:
        return "unnamed"
    if is_sme_kernel(name):
        return "SME2" if _SME2_KERNEL.search(name) else "SME"
    if _NEON_KERNEL.search(name):
        return "NEON"
    if _X86_KERNEL.search(name):
        return "x86 SIMD"
    return "other"


@dataclass(frozen=True)
class KernelTrace:
    """The SME and SME2 kernels that executed during one counted inference."""

    sme_kernels: tuple[str, ...]  # every executed kernel whose name says SME (SME2 ones included)
    functions: int  # distinct symbolised functions that ran, for scale

    @property
    def sme2_kernels(self) -> tuple[str, ...]:
        return tuple(k for k in self.sme_kernels if "sme2" in k.lower())

    @classmethod
    def from_names(cls, names: set[str] | list[str]) -> "KernelTrace":
        """From the names of the functions that executed (e.g. qemu_counts' per-event functions)."""
        names = set(names)
        kernels = sorted(n for n in names if is_sme_kernel(n))
        return cls(tuple(kernels), len(names))

    def as_dict(self) -> dict[str, Any]:
        return {
            "sme_kernels": list(self.sme_kernels),
            "sme2_kernels": list(self.sme2_kernels),
            "functions": self.functions,
        }


def kernel_trace_of(counts: EventCounts) -> KernelTrace:
    """The SME/SME2 kernels that executed inside a counted run's events (all of them, not only the top)."""
    names = {
        label.split(":", 1)[1]
        for functions in counts.functions
        for label in functions
        if not label.endswith(":(unnamed)")
    }
    return KernelTrace.from_names(names)
