"""Instruction classes of counted runs (issue 26): each class checked against words LLVM's assembler encodes
from assembly text, so the expected encodings come from the assembler, never from the counter's own masks.
The SME2 instructions are the kinds XNNPACK's SME2 kernels in the executorch 1.5.1 wheel execute (read from
its disassembly by llvm-objdump 19); binutils 2.40 and qemu 11.1's disassembler know no SME2."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from pytest_sme2.errors import RunnerError
from pytest_sme2.evidence.instruction_classes import NAMES, SME_CLASSES, SVE_CLASSES
from pytest_sme2.evidence.qemu_counts import ExecutedBlocks
from pytest_sme2.run.native.build import build_exec_counter

MC = "llvm-mc-19"
needs_llvm_mc = pytest.mark.skipif(shutil.which(MC) is None, reason="needs LLVM 19's assembler (make system-deps: "
                                                                   "apt-get install llvm-19)")

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
    ("fmla za.s[w8, 0, vgx4], {z4.s - z7.s}, z15.s[0]", "sme2_multi_vector"),
    ("fdot za.s[w8, 0, vgx4], {z20.h - z23.h}, z4.h[0]", "sme2_multi_vector"),
    ("sdot za.s[w11, 0, vgx4], {z24.b - z27.b}, z0.b[0]", "sme2_multi_vector"),
    ("fclamp {z24.s - z27.s}, z30.s, z31.s", "sme2_multi_vector"),
    ("fcvt z20.h, {z4.s, z5.s}", "sme2_multi_vector"),
    ("ld1w {z0.s}, p0/z, [x0]", "sve_load_store"),
    ("st1w {z0.s}, p0, [x0]", "sve_load_store"),
    ("ldr z1, [x0]", "sve_load_store"),
    ("fmla z0.s, p0/m, z1.s, z2.s", "sve_other"),
    ("ptrue p0.s", "sve_other"),
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


def _encode(lines: list[str]) -> list[int]:
    done = subprocess.run([MC, "-triple=aarch64", "-mattr=+sme2,+sme-f64f64,+sme-i16i64,+dotprod", "-show-encoding"],
                          input="\n".join(lines) + "\n", capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    words = [int.from_bytes(bytes(int(b, 16) for b in m.group(1).split(",")), "little")
             for m in re.finditer(r"encoding: \[((?:0x[0-9a-f]{2},?){4})\]", done.stdout)]
    assert len(words) == len(lines), done.stdout
    return words


def _count(tmp_path: Path, words: list[int]) -> tuple[ExecutedBlocks, str]:
    """One qemu-log block per word, each listed and executed once, through the real counter."""
    text = []
    for i, word in enumerate(words):
        pc = 0x400000 + 0x100 * i
        text += ["----------------", f"IN: b{i}", f"0x{pc:016x}:  {word:08x}  insn", "",
                 f"Trace 0: 0x7f00{i:08x} [00000000/{pc:016x}/00000001/00000200] b{i}"]
    log = tmp_path / "log.txt"
    log.write_text("\n".join(text) + "\n")
    blocks_tsv, sequence = tmp_path / "blocks.tsv", tmp_path / "sequence.u32"
    done = subprocess.run([str(build_exec_counter()), str(blocks_tsv), str(sequence), str(log)], capture_output=True,
                          text=True, check=True)
    return ExecutedBlocks.from_files(blocks_tsv, sequence), done.stderr


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
