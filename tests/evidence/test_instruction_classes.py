"""Instruction classes of counted runs (issue 26): each class checked against words LLVM's assembler encodes
from assembly text, so the expected encodings come from the assembler, never from the counter's own masks.
The SME2 instructions are the kinds XNNPACK's SME2 kernels in the executorch 1.5.1 wheel execute (read from
its disassembly by llvm-objdump 19); binutils 2.40 and qemu 11.1's disassembler know no SME2."""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from helpers_versions import needs_runtime_libraries

from pytest_sme2.errors import RunnerError
from pytest_sme2.evidence.instruction_classes import NAMES, SME_CLASSES, SVE_CLASSES
from pytest_sme2.evidence.qemu_counts import ExecutedBlocks
from pytest_sme2.run.native.build import build_exec_counter

MC = "llvm-mc-19"
needs_llvm_mc = pytest.mark.skipif(
    shutil.which(MC) is None, reason="needs LLVM 19's assembler (make system-deps: " "apt-get install llvm-19)"
)

# assembly -> the class the Arm architecture puts it in (what each instruction does, by its mnemonic)
EXPECTED = [
    ("fmopa za0.s, p0/m, p1/m, z0.s, z1.s", "mopa_fp32"),
    ("fmops za1.s, p0/m, p1/m, z0.s, z1.s", "mopa_fp32"),
    ("fmopa za0.s, p0/m, p1/m, z0.h, z1.h", "mopa_fp16"),  # widening from half
    ("bfmopa za3.s, p0/m, p1/m, z0.h, z1.h", "mopa_fp16"),  # widening from bfloat16
    ("smopa za0.s, p0/m, p1/m, z0.b, z1.b", "mopa_int8"),
    ("usmopa za2.s, p0/m, p1/m, z0.b, z1.b", "mopa_int8"),
    ("umopa za3.s, p0/m, p1/m, z0.b, z1.b", "mopa_int8"),
    ("sumopa za1.s, p0/m, p1/m, z0.b, z1.b", "mopa_int8"),
    ("fmopa za0.d, p0/m, p1/m, z0.d, z1.d", "mopa_other"),  # FP64
    ("smopa za0.d, p0/m, p1/m, z0.h, z1.h", "mopa_other"),  # 16-bit into 64-bit
    ("ld1w {za0h.s[w12, 0]}, p0/z, [x0]", "sme_load_store"),
    ("st1b {za0v.b[w13, 15]}, p0, [x1]", "sme_load_store"),
    ("str za[w12, 0], [x0]", "sme_load_store"),
    ("ldr za[w12, 0], [x0]", "sme_load_store"),
    ("smstart", "sme_other"),
    ("smstop", "sme_other"),
    ("zero {za}", "sme_other"),
    ("mova z0.s, p0/m, za0h.s[w12, 0]", "sme_other"),
    ("addha za0.s, p0/m, p1/m, z0.s", "sme_other"),
    ("luti4 {z8.b, z9.b}, zt0, z0[0]", "sme_other"),
    # SME2: multi-vector loads and stores of Z registers, ZT0, and multi-vector arithmetic
    ("ld1w {z0.s - z3.s}, pn9/z, [x11]", "sme_load_store"),
    ("ldnt1h {z20.h, z21.h}, pn9/z, [x14]", "sme_load_store"),
    ("ld1b {z2.b, z6.b, z10.b, z14.b}, pn8/z, [x27]", "sme_load_store"),
    ("st1w {z24.s - z27.s}, pn9, [x17]", "sme_load_store"),
    ("ldr zt0, [x7]", "sme_load_store"),
    ("fmla za.s[w8, 0, vgx4], {z4.s - z7.s}, z15.s[0]", "za_vgx4"),
    ("fdot za.s[w8, 0, vgx4], {z20.h - z23.h}, z4.h[0]", "za_vgx4"),
    ("sdot za.s[w11, 0, vgx4], {z24.b - z27.b}, z0.b[0]", "za_vgx4"),
    ("fmla za.s[w8, 0, vgx2], {z0.s, z1.s}, z4.s", "za_vgx2"),
    ("fmlal za.s[w8, 0:1], z0.h, z4.h", "za_vgx2"),  # one vector
    ("add za.s[w8, 0, vgx4], {z0.s - z3.s}", "za_vgx4"),
    ("fclamp {z24.s - z27.s}, z30.s, z31.s", "sme2_z"),
    ("fcvt z20.h, {z4.s, z5.s}", "sme2_z"),
    ("ld1w {z0.s}, p0/z, [x0]", "sve_load_store"),
    ("st1w {z0.s}, p0, [x0]", "sve_load_store"),
    ("ldr z1, [x0]", "sve_load_store"),
    ("fmla z0.s, p0/m, z1.s, z2.s", "sve_other"),
    ("dup z0.s, #0", "sve_other"),  # a wide immediate: among the predicate encodings, but writes a Z register
    ("cmpgt p0.s, p1/z, z0.s, #0", "sve_other"),  # a compare reads Z registers
    ("incw z0.s", "sve_other"),  # the vector form of an element count
    ("incp z0.s, p0.s", "sve_other"),
    ("ptrue p0.s", "sve_predicate"),
    ("whilelt p0.s, x8, x9", "sve_predicate"),
    ("whilelo {p0.s, p1.s}, x0, x1", "sve_predicate"),
    ("psel p0, p1, p2.s[w12, 0]", "sve_predicate"),
    ("and p0.b, p1/z, p2.b, p3.b", "sve_predicate"),
    ("zip2 p0.h, p1.h, p2.h", "sve_predicate"),
    ("cntw x8", "sve_predicate"),
    ("incw x0, all, mul #4", "sve_predicate"),
    ("sqincw x0", "sve_predicate"),
    ("incp x0, p0.s", "sve_predicate"),
    ("cntp x0, pn8.s, vlx2", "sve_predicate"),
    ("addvl sp, sp, #-2", "sve_predicate"),
    ("addsvl x0, x1, #1", "sve_predicate"),
    ("rdsvl x0, #1", "sve_predicate"),
    ("fmla v0.4s, v1.4s, v2.4s", "simd_fp"),
    ("sdot v0.4s, v1.16b, v2.16b", "simd_fp"),
    ("fadd s0, s1, s2", "simd_fp"),
    ("ldr q0, [x0]", "load_store_vec"),
    ("ldp d0, d1, [x0]", "load_store_vec"),
    ("ld1 {v0.4s, v1.4s}, [x0], #32", "load_store_vec"),
    ("ldr x1, [x0]", "load_store"),
    ("stp x29, x30, [sp, #-16]!", "load_store"),
    ("add x0, x1, x2", "scalar"),
    ("madd x0, x1, x2, x3", "scalar"),
    ("b.ne #8", "scalar"),
    ("ret", "scalar"),
]


FEATURES = "+sme2,+sme-f64f64,+sme-i16i64,+dotprod,+sve2p1"


def _encode(lines: list[str]) -> list[int]:
    done = subprocess.run(
        [MC, "-triple=aarch64", f"-mattr={FEATURES}", "-show-encoding"],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    words = [
        int.from_bytes(bytes(int(b, 16) for b in m.group(1).split(",")), "little")
        for m in re.finditer(r"encoding: \[((?:0x[0-9a-f]{2},?){4})\]", done.stdout)
    ]
    assert len(words) == len(lines), done.stdout
    return words


def _classify(words: list[int], tmp_path: Path) -> list[str]:
    blocks, summary = _count(tmp_path, words)
    assert summary.strip().endswith(f"{len(words)} blocks, {len(words)} executions, 0 unbound")
    return [NAMES[int(np.argmax(row))] for row in blocks.classes]


def _named_class(mnemonic: str, operands: str) -> str:
    """The class of an SME2 instruction in 11000001 from how LLVM's disassembler writes it: an array-vector
    destination ``za.s[w8, 0, vgx4]`` (4-vector group) or ``za.s[w8, 0...]`` otherwise; else a Z destination."""
    if re.match(r"za\.[bhsd]\[", operands):
        return "za_vgx4" if "vgx4" in operands.split("]")[0] else "za_vgx2"
    return "sme2_z"


def _count(tmp_path: Path, words: list[int]) -> tuple[ExecutedBlocks, str]:
    """One qemu-log block per word, each listed and executed once, through the real counter."""
    text = []
    for i, word in enumerate(words):
        pc = 0x400000 + 0x100 * i
        text += [
            "----------------",
            f"IN: b{i}",
            f"0x{pc:016x}:  {word:08x}  insn",
            "",
            f"Trace 0: 0x7f00{i:08x} [00000000/{pc:016x}/00000001/00000200] b{i}",
        ]
    log = tmp_path / "log.txt"
    log.write_text("\n".join(text) + "\n")
    blocks_tsv, sequence = tmp_path / "blocks.tsv", tmp_path / "sequence.u32"
    done = subprocess.run(
        [str(build_exec_counter()), str(blocks_tsv), str(sequence), str(log)],
        capture_output=True,
        text=True,
        check=True,
    )
    return ExecutedBlocks.from_files(blocks_tsv, sequence), done.stderr


# SME2 instructions into ZA (every multiply-accumulate, dot product and add, each as multiple-and-single,
# multiple-vector and indexed form, 2- and 4-vector groups, and the single-vector widening ones), and ones that
# write Z registers: the forms whose encodings the rules in exec_counter.c's za_group() were read from.
_ZA_OPS = {
    "fmla": "s",
    "fmls": "s",
    "fdot": "h",
    "bfdot": "h",
    "sdot": "b",
    "udot": "b",
    "usdot": "b",
    "sudot": "b",
    "fmlal": "h",
    "fmlsl": "h",
    "bfmlal": "h",
    "smlal": "h",
    "umlal": "h",
    "smlall": "b",
    "umlall": "b",
}
_WIDENING = {"fmlal": ":1", "fmlsl": ":1", "bfmlal": ":1", "smlal": ":1", "umlal": ":1", "smlall": ":3", "umlall": ":3"}
_Z_OPS = [
    "fclamp {z24.s - z27.s}, z30.s, z31.s",
    "fclamp {z24.h, z25.h}, z30.h, z31.h",
    "sclamp {z20.s - z23.s}, z3.s, z26.s",
    "uclamp {z20.b, z21.b}, z3.b, z26.b",
    "fcvt z20.h, {z4.s, z5.s}",
    "bfcvt z20.h, {z4.s, z5.s}",
    "fcvtzs {z12.s - z15.s}, {z12.s - z15.s}",
    "scvtf {z12.s - z15.s}, {z12.s - z15.s}",
    "frintn {z20.s - z23.s}, {z20.s - z23.s}",
    "add {z20.s - z23.s}, {z20.s - z23.s}, z9.s",
    "fmax {z0.s - z3.s}, {z0.s - z3.s}, z4.s",
    "fmin {z0.s, z1.s}, {z0.s, z1.s}, {z4.s, z5.s}",
    "smax {z0.b - z3.b}, {z0.b - z3.b}, z4.b",
    "zip {z0.s - z3.s}, {z4.s - z7.s}",
    "uzp {z0.s, z1.s}, z4.s, z5.s",
    "sqrshr z0.h, {z4.s, z5.s}, #16",
    "sqcvt z0.b, {z4.s - z7.s}",
    "sunpk {z0.s, z1.s}, z4.h",
    "srshl {z0.s - z3.s}, {z0.s - z3.s}, z4.s",
    "sel {z0.s, z1.s}, pn8, {z4.s, z5.s}, {z6.s, z7.s}",
    "ucvtf {z0.s, z1.s}, {z4.s, z5.s}",
]


def _sme2_forms() -> list[str]:
    forms = []
    for mnemonic, element in _ZA_OPS.items():
        slices = _WIDENING.get(mnemonic, "")
        for group, first, second in (
            (2, "{z0.%s, z1.%s}", "{z4.%s, z5.%s}"),
            (4, "{z0.%s - z3.%s}", "{z4.%s - z7.%s}"),
        ):
            head = f"{mnemonic} za.s[w8, 0{slices}, vgx{group}], {first % (element, element)}"
            forms += [f"{head}, z8.{element}", f"{head}, {second % (element, element)}", f"{head}, z8.{element}[0]"]
        if slices:
            forms.append(f"{mnemonic} za.s[w8, 0{slices}], z0.{element}, z8.{element}")
    for op in ("add", "sub"):
        forms += [f"{op} za.s[w8, 0, vgx2], {{z0.s, z1.s}}", f"{op} za.s[w8, 0, vgx4], {{z0.s - z3.s}}, z8.s"]
    return forms + _Z_OPS


def _encodable(forms: list[str]) -> list[tuple[str, int]]:
    """The forms LLVM 19 encodes (a few combinations do not exist in the architecture), with their words."""
    kept = []
    for form in forms:
        done = subprocess.run(
            [MC, "-triple=aarch64", f"-mattr={FEATURES}", "-show-encoding"],
            input=form + "\n",
            capture_output=True,
            text=True,
        )
        if done.returncode == 0:
            kept.append((form, _encode([form])[0]))
    return kept


@needs_llvm_mc
def test_sme2_array_vector_instructions_are_told_from_z_ones_and_split_by_vector_group(tmp_path: Path) -> None:
    forms = _encodable(_sme2_forms())
    assert len(forms) >= 100, len(forms)
    assert all(word >> 24 == 0xC1 for _, word in forms), [(f, hex(w)) for f, w in forms if w >> 24 != 0xC1]
    want = []
    for form, _ in forms:
        mnemonic, _, operands = form.partition(" ")
        want.append(_named_class(mnemonic, operands))
    got = _classify([word for _, word in forms], tmp_path)
    wrong = [(form, f"{word:08x}", w, g) for (form, word), w, g in zip(forms, want, got) if w != g]
    assert not wrong, wrong
    assert {"za_vgx2", "za_vgx4", "sme2_z"} == set(got)


@functools.lru_cache(maxsize=1)  # a skip raises, and is not cached
def _xnnpack_disassembly() -> tuple[tuple[int, str, str], ...]:
    """(word, mnemonic, operands) of every instruction of the executorch wheel's aarch64 XNNPACK library, as
    LLVM 19's disassembler writes it: the kernels counted runs execute (disassembled once per test process)."""
    objdump = shutil.which("llvm-objdump-19")
    if objdump is None:
        pytest.skip("needs llvm-objdump-19 (make system-deps: apt-get install llvm-19)")
    from pytest_sme2.run.native.build import aarch64_executorch

    library = aarch64_executorch() / "lib" / "libexecutorch_backend_xnnpack.so"
    listing = subprocess.run(
        [objdump, "-d", f"--mattr={FEATURES}", str(library)], capture_output=True, text=True, check=True
    ).stdout
    return tuple(
        (int(m.group(1), 16), m.group(2), m.group(3))
        for m in re.finditer(r"^\s*[0-9a-f]+:\s+([0-9a-f]{8})\s+(\S+)[ \t]*(.*)$", listing, re.M)
    )


def _classified_as_named(named: dict[int, str], tmp_path: Path) -> dict[int, str]:
    """The counter's class of each word of ``named``; fails listing the words whose class is not the one named."""
    words = sorted(named)
    got = dict(zip(words, _classify(words, tmp_path)))
    wrong = sorted({(named[w], got[w], f"{w:08x}") for w in words if named[w] != got[w]})
    assert not wrong, wrong[:20]
    return got


@needs_llvm_mc
@needs_runtime_libraries
def test_every_sme_instruction_of_the_aarch64_xnnpack_library_is_in_the_class_llvm_names(tmp_path: Path) -> None:
    """The kernels counted runs execute: every SME-space word of the executorch wheel's aarch64 XNNPACK library,
    classified by the counter and by what LLVM 19's disassembler calls it."""
    named = {
        word: _named_sme(word, mnemonic, operands)
        for word, mnemonic, operands in _xnnpack_disassembly()
        if word >> 31 == 1 and (word >> 25) & 0xF == 0
    }  # the SME space
    assert len(named) >= 500, len(named)  # the wheel's SME and SME2 kernels
    got = _classified_as_named(named, tmp_path)
    assert {"mopa_fp32", "mopa_fp16", "mopa_int8", "za_vgx4", "sme2_z", "sme_load_store", "sme_other"} <= set(
        got.values()
    )


@needs_llvm_mc
@needs_runtime_libraries
def test_every_sve_instruction_of_the_aarch64_xnnpack_library_names_a_z_register_or_is_a_predicate_one(
    tmp_path: Path,
) -> None:
    """Every SVE data-processing word of the executorch wheel's aarch64 XNNPACK library (the kernels and KleidiAI's
    packing and loop control, which run in streaming mode): counted as a predicate or counting instruction exactly
    when LLVM 19's disassembly of it names no Z register."""
    named = {
        word: "sve_other" if re.search(r"\bz\d+", operands) else "sve_predicate"
        for word, _, operands in _xnnpack_disassembly()
        if word >> 31 == 0 and (word >> 25) & 0xF == 0x2
    }  # SVE data processing (loads and stores: op0 1xx)
    assert len(named) >= 1000, len(named)
    got = _classified_as_named(named, tmp_path)
    assert sum(c == "sve_predicate" for c in got.values()) >= 100  # WHILELT, PSEL, CNTW, ADDVL ... are there


def _named_sme(word: int, mnemonic: str, operands: str) -> str:
    """The class of an SME-space word from LLVM's disassembly of it (mnemonic and operands, not its bits)."""
    types = re.findall(r"z\d+\.([bhsd])", operands)
    if mnemonic in ("fmopa", "fmops"):
        return {"s": "mopa_fp32", "h": "mopa_fp16"}.get(types[-1], "mopa_other")
    if mnemonic in ("bfmopa", "bfmops") and operands.startswith("za") and ".s" in operands.split(",")[0]:
        return "mopa_fp16"
    if mnemonic in ("smopa", "umopa", "sumopa", "usmopa", "smops", "umops", "sumops", "usmops"):
        return "mopa_int8" if types[-1] == "b" else "mopa_other"
    if mnemonic == "bmopa":
        return "mopa_other"
    if re.match(r"(ld|st)(nt)?1[bhwdq]|ldr|str", mnemonic):
        return "sme_load_store"
    if word >> 24 == 0xC1:
        return _named_class(mnemonic, operands)
    return "sme_other"


@needs_llvm_mc
def test_each_instruction_is_counted_in_its_class(tmp_path: Path) -> None:
    words = _encode([asm for asm, _ in EXPECTED])
    blocks, summary = _count(tmp_path, words)
    assert summary.strip().endswith(f"{len(words)} blocks, {len(words)} executions, 0 unbound")
    got = [NAMES[int(np.argmax(row))] for row in blocks.classes]
    wrong = [(asm, f"{word:08x}", want, have) for (asm, want), word, have in zip(EXPECTED, words, got) if want != have]
    assert not wrong, wrong
    assert blocks.classes.sum(axis=1).tolist() == [1] * len(words) == blocks.instructions.tolist()
    # SME and SVE totals are the sums of their classes, as the counter counted them before classes existed
    sme_rows = [i for i, (_, c) in enumerate(EXPECTED) if c in SME_CLASSES]
    sve_rows = [i for i, (_, c) in enumerate(EXPECTED) if c in SVE_CLASSES]
    assert np.flatnonzero(blocks.sme).tolist() == sme_rows and np.flatnonzero(blocks.sve).tolist() == sve_rows


def test_a_block_table_with_other_classes_is_refused(tmp_path: Path) -> None:
    blocks_tsv, sequence = tmp_path / "blocks.tsv", tmp_path / "sequence.u32"
    sequence.write_bytes(b"")
    blocks_tsv.write_text("400000 3 1 0\n")  # the table of a counter from before classes: no header
    with pytest.raises(RunnerError, match=r"blocks\.tsv was written by another version of the instruction counter"):
        ExecutedBlocks.from_files(blocks_tsv, sequence)
    header = "# pc instructions " + " ".join(NAMES)
    blocks_tsv.write_text(header + "\n400000 3 " + " ".join(["1"] * len(NAMES)) + "\n")  # classes add up to 12, not 3
    with pytest.raises(RunnerError, match="do not add up to its instructions"):
        ExecutedBlocks.from_files(blocks_tsv, sequence)
