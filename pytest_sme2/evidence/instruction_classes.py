"""The instruction classes a counted emulated run is broken into, per ETDump event.

Why classes and not one count: one SME2 FMOPA does 256 fp32 multiply-accumulates at a 512-bit
streaming vector length, one SMOPA 1,024 int8 ones, a NEON FMLA 4; a device model needs to
know which instructions ran, not how many. ``native/exec_counter.c`` classifies each executed
instruction by its encoding alone and writes one column per class, in this order; the block
table's header names them, and :func:`check_header` refuses a counter that names others.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    import numpy as np

# name -> what it holds (the encodings are exec_counter.c's classify() and za_group(); tests/evidence/
# test_instruction_classes.py checks each against words LLVM 19 encodes, and against every SME word of the aarch64
# XNNPACK library as LLVM 19's disassembler names it)
CLASSES: dict[str, str] = {
    "mopa_fp32": "SME FMOPA/FMOPS single precision (non-widening outer products)",
    "mopa_fp16": "SME FMOPA/FMOPS widening from half and BFMOPA/BFMOPS widening from bfloat16",
    "mopa_int8": "SME SMOPA/SUMOPA/USMOPA/UMOPA, 4-way 8-bit into 32-bit outer products",
    "mopa_other": "other SME outer products (FP64, 16-bit into 64-bit, 2-way 16-bit, BMOPA)",
    "za_vgx2": "SME2 multiply-accumulates, dot products and adds into ZA array vectors (FMLA, FDOT, SDOT, "
    "FMLAL, ADD ...; the batch-1 GEMV kernels), 1- or 2-vector groups",
    "za_vgx4": "the same with 4-vector groups (half the issue rate of 2-vector ones on Apple M4)",
    "sme2_z": "other SME2 multi-vector instructions, writing Z registers (FCLAMP, FCVT, ZIP, FMAX ...)",
    "sme_load_store": "SME loads and stores of ZA and ZT0, and SME2 multi-vector loads and stores of Z registers",
    "sme_other": "other SME instructions (MOVA, ZERO, ADDHA, LUTI), SMSTART/SMSTOP",
    "sve_load_store": "SVE loads and stores (streaming SVE in streaming mode)",
    "sve_predicate": "SVE and SME predicate and vector-length counting instructions, which name no Z register "
    "(PTRUE, WHILELT, PSEL, CNTW, INCW Xd, ADDVL, RDSVL; the kernels' loop control)",
    "sve_other": "other SVE instructions: data processing on Z registers (streaming SVE in streaming mode)",
    "simd_fp": "Advanced SIMD (NEON) and scalar floating-point data processing",
    "load_store_vec": "loads and stores of SIMD&FP registers (LDR q, LD1 {v}, LDP d)",
    "load_store": "loads and stores of general-purpose registers",
    "scalar": "integer data processing, branches, system instructions",
}
NAMES: tuple[str, ...] = tuple(CLASSES)
SME_CLASSES: tuple[str, ...] = (
    "mopa_fp32",
    "mopa_fp16",
    "mopa_int8",
    "mopa_other",
    "za_vgx2",
    "za_vgx4",
    "sme2_z",
    "sme_load_store",
    "sme_other",
)
SVE_CLASSES: tuple[str, ...] = ("sve_load_store", "sve_predicate", "sve_other")
OUTER_PRODUCTS: tuple[str, ...] = ("mopa_fp32", "mopa_fp16", "mopa_int8", "mopa_other")
# What an SME kernel's arithmetic is: outer products and multiply-accumulates into ZA (a GEMV kernel's). An
# operator with any of these ran an SME kernel; packing and SMSTART alone do not make one.
SME_MULTIPLY_ACCUMULATES: tuple[str, ...] = (*OUTER_PRODUCTS, "za_vgx2", "za_vgx4")


def total(classes: "np.ndarray", names: Sequence[str]) -> "np.ndarray":
    """Per row of ``classes`` (one column per class of :data:`NAMES`: blocks or events), the instructions of the
    classes ``names`` together."""
    return classes[:, [NAMES.index(n) for n in names]].sum(axis=1)


def check_header(fields: Sequence[str], where: str) -> None:
    """The block table's header (``# pc instructions CLASS...``) must name :data:`NAMES` in order."""
    from pytest_sme2.errors import RunnerError

    if list(fields[:3]) != ["#", "pc", "instructions"] or tuple(fields[3:]) != NAMES:
        raise RunnerError(
            f"{where} was written by another version of the instruction counter (classes: "
            f"{' '.join(fields[3:]) or 'none'}) than this pytest-sme2 reads ({' '.join(NAMES)}); "
            f"run the test again (the counter is rebuilt from the installed exec_counter.c)"
        )
