"""pytest-sme2's fast paths in the qemu it builds (run/native/qemu_fmopa_s.c.inc: the fp32 SME outer product on the
host's vector FMA; run/native/qemu_fmla_s.c.inc: NEON and SVE fp32 FMLA by vector and by element) give bit for bit
what qemu's own arithmetic gives. For the outer product: an aarch64 program doing FMOPA and FMOPS on
ordinary values and on every special one (signed zeros, denormals, the smallest normal, infinities, quiet and
signalling NaNs, the largest finite, values whose products underflow) in n, in m and in the accumulator, at three
streaming vector lengths, prints the ZA tile and FPSR; the built qemu must print exactly what Debian's qemu-user
11.1, which has no fast path, prints. For the vector FMA: NEON FMLA by element and by vector (4S, 2S) and SVE FMLA
by element on the same values, under three FPCR settings (default, flush to zero, round toward zero), with FPSR
cleared before each (so the first operations run before the inexact flag is raised), at three vector lengths."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from pytest_sme2.run import emulation_setup

STATUS = emulation_setup.status()
PROGRAM = r"""
#include <stdio.h>
#include <stdint.h>
#include <string.h>
/* z0 = n (column vector elements), z1 = m; za0.s = n x m + za (za preset from acc) */
static float n[64], m[64], acc[64 * 64], out[64 * 64];
int main(void) {
    uint32_t special[] = {0x00000000, 0x80000000, 0x00000001, 0x807fffff, 0x00800000, 0x7f800000, 0xff800000,
                          0x7fc00000, 0x7f800001, 0x3f800000, 0xbf800000, 0x7f7fffff, 0x1e3ce508, 0x21a2b3c4};
    for (int i = 0; i < 64; ++i) { n[i] = 0.37f * (i - 20) + 1e-3f; m[i] = 1.0f / (i + 1.5f) - 0.2f; }
    for (int i = 0; i < 64 * 64; ++i) acc[i] = (float)((i * 7919) % 211) * 0.013f - 1.3f;
    int variant = 0;
    for (int round = 0; round < 4; ++round) {
        if (round == 1) { memcpy(&n[3], &special[0], 4 * 14); }            /* specials in n */
        if (round == 2) { memcpy(&m[5], &special[0], 4 * 14); }            /* and in m */
        if (round == 3) { for (int i = 0; i < 14; ++i) memcpy(&acc[i * 17], &special[i], 4); } /* and in za */
        __asm__ volatile(
            "smstart\n"
            "zero {za}\n"
            "ptrue p0.s\n"
            "mov x9, 0\n"
            "cntw x10\n"
            "mov w12, 0\n"
            "1: ld1w {za0h.s[w12, 0]}, p0/z, [%[acc], x9, lsl #2]\n"
            "incw x9\n"
            "add w12, w12, 1\n"
            "cmp w12, w10\n"
            "b.lt 1b\n"
            "ld1w {z0.s}, p0/z, [%[n]]\n"
            "ld1w {z1.s}, p0/z, [%[m]]\n"
            "fmopa za0.s, p0/m, p0/m, z0.s, z1.s\n"
            "fmops za0.s, p0/m, p0/m, z1.s, z0.s\n"
            "fmopa za0.s, p0/m, p0/m, z0.s, z0.s\n"
            "mov x9, 0\n"
            "mov w12, 0\n"
            "2: st1w {za0h.s[w12, 0]}, p0, [%[out], x9, lsl #2]\n"
            "incw x9\n"
            "add w12, w12, 1\n"
            "cmp w12, w10\n"
            "b.lt 2b\n"
            "smstop\n"
            :
            : [acc] "r"(acc), [n] "r"(n), [m] "r"(m), [out] "r"(out)
            : "x9", "x10", "x12", "memory", "cc");
        uint64_t fpsr;
        __asm__ volatile("mrs %0, fpsr" : "=r"(fpsr));
        fwrite(out, 4, 64 * 64, stdout);
        fwrite(&fpsr, 8, 1, stdout);
        variant++;
    }
    return 0;
}
"""


VECTOR_PROGRAM = r"""
#include <stdio.h>
#include <stdint.h>
#include <string.h>
/* NEON FMLA by element and by vector (4S and 2S) and SVE FMLA by element, on ordinary and special values, under
 * three FPCR settings; prints every result and FPSR after each setting */
static float n[64], m[64], a[64], neon[64], sve[64];
int main(void) {
    uint32_t special[] = {0x00000000, 0x80000000, 0x00000001, 0x807fffff, 0x00800000, 0x7f800000, 0xff800000,
                          0x7fc00000, 0x7f800001, 0x3f800000, 0xbf800000, 0x7f7fffff, 0x1e3ce508, 0x21a2b3c4};
    uint64_t fpcrs[] = {0, 1ull << 24, 3ull << 22}; /* default; flush to zero; round toward zero */
    for (int round = 0; round < 4; ++round) {
        for (int i = 0; i < 64; ++i) {
            n[i] = 0.37f * (i - 20) + 1e-3f; m[i] = 1.0f / (i + 1.5f) - 0.2f;
            a[i] = (float)((i * 7919) % 211) * 0.013f - 1.3f;
        }
        if (round == 1) memcpy(&n[3], special, sizeof special);
        if (round == 2) memcpy(&m[5], special, sizeof special);
        if (round == 3) memcpy(&a[1], special, sizeof special);
        for (int f = 0; f < 3; ++f) {
            uint64_t zero = 0;
            __asm__ volatile("msr fpcr, %0\n msr fpsr, %1" : : "r"(fpcrs[f]), "r"(zero));
            for (int i = 0; i < 64; i += 4) {
                __asm__ volatile(
                    "ld1 {v0.4s}, [%[n]]\n ld1 {v1.4s}, [%[m]]\n ld1 {v2.4s}, [%[a]]\n"
                    "fmla v2.4s, v0.4s, v1.s[1]\n"
                    "fmla v2.4s, v1.4s, v0.4s\n"
                    "fmla v2.2s, v0.2s, v1.2s\n"
                    "fmla v2.4s, v0.4s, v2.s[3]\n"
                    "st1 {v2.4s}, [%[o]]\n"
                    : : [n] "r"(n + i), [m] "r"(m + i), [a] "r"(a + i), [o] "r"(neon + i) : "v0", "v1", "v2", "memory");
            }
            uint64_t fpsr_neon, fpsr;
            __asm__ volatile("mrs %0, fpsr" : "=r"(fpsr_neon));
            __asm__ volatile(
                "ptrue p0.s\n mov x9, 0\n cntw x10\n"
                "1: ld1w {z0.s}, p0/z, [%[n], x9, lsl #2]\n ld1w {z1.s}, p0/z, [%[m], x9, lsl #2]\n"
                "ld1w {z2.s}, p0/z, [%[a], x9, lsl #2]\n"
                "fmla z2.s, z0.s, z1.s[2]\n fmla z2.s, z1.s, z0.s[0]\n"
                "st1w {z2.s}, p0, [%[o], x9, lsl #2]\n"
                "add x9, x9, x10\n cmp x9, 64\n b.lt 1b\n"
                : : [n] "r"(n), [m] "r"(m), [a] "r"(a), [o] "r"(sve)
                : "x9", "x10", "p0", "z0", "z1", "z2", "memory", "cc");
            __asm__ volatile("mrs %0, fpsr" : "=r"(fpsr));
            fwrite(neon, 4, 64, stdout); fwrite(&fpsr_neon, 8, 1, stdout);
            fwrite(sve, 4, 64, stdout); fwrite(&fpsr, 8, 1, stdout);
        }
    }
    return 0;
}
"""

needs_both_qemus = pytest.mark.skipif(
    not STATUS.ready or STATUS.plugin_header is None or STATUS.log_qemu is None,
    reason="needs the qemu setup-emulation builds and qemu-user 11.1 (`pytest-sme2 setup-emulation`)",
)


def _built(tmp_path: Path, source: str, march: str) -> Path:
    clang, gcc = shutil.which("clang"), shutil.which("aarch64-linux-gnu-gcc")
    if clang is None or gcc is None:
        pytest.skip("needs clang (SME and SVE assembly) and aarch64-linux-gnu-gcc (`make system-deps`)")
    (tmp_path / "program.c").write_text(source)
    subprocess.run(
        [clang, "--target=aarch64-linux-gnu", f"-march={march}", "-O1", "-c", "program.c", "-o", "program.o"],
        cwd=tmp_path,
        check=True,
    )
    subprocess.run([gcc, "-static", "-o", "program", "program.o"], cwd=tmp_path, check=True)
    return tmp_path / "program"


@needs_both_qemus
@pytest.mark.parametrize("vl_bytes", [16, 64, 256])
def test_the_fast_vector_fma_is_bit_identical_to_qemus_own(tmp_path: Path, vl_bytes: int) -> None:
    program = _built(tmp_path, VECTOR_PROGRAM, "armv8.2-a+sve")
    cpu = f"max,sve-default-vector-length={vl_bytes}"
    ours, theirs = (
        subprocess.run([str(q), "-cpu", cpu, str(program)], capture_output=True, check=True, timeout=120).stdout
        for q in (STATUS.qemu, STATUS.log_qemu)
    )
    assert len(ours) == 4 * 3 * 2 * (64 * 4 + 8)  # four rounds, three FPCR settings: NEON and SVE results, FPSR
    assert ours == theirs


@pytest.mark.skipif(
    not STATUS.ready or STATUS.plugin_header is None or STATUS.log_qemu is None,
    reason="needs the qemu setup-emulation builds and qemu-user 11.1 (`pytest-sme2 setup-emulation`)",
)
@pytest.mark.parametrize("svl_bytes", [16, 64, 256])
def test_the_fast_outer_product_is_bit_identical_to_qemus_own(tmp_path: Path, svl_bytes: int) -> None:
    clang, gcc = shutil.which("clang"), shutil.which("aarch64-linux-gnu-gcc")
    if clang is None or gcc is None:
        pytest.skip("needs clang (SME assembly) and aarch64-linux-gnu-gcc (`make system-deps`)")
    (tmp_path / "fm.c").write_text(PROGRAM)
    subprocess.run(
        [clang, "--target=aarch64-linux-gnu", "-march=armv9-a+sme", "-O1", "-c", "fm.c", "-o", "fm.o"],
        cwd=tmp_path,
        check=True,
    )
    subprocess.run([gcc, "-static", "-o", "fm", "fm.o"], cwd=tmp_path, check=True)
    cpu = f"max,sme-default-vector-length={svl_bytes}"
    ours, theirs = (
        subprocess.run([str(q), "-cpu", cpu, "./fm"], cwd=tmp_path, capture_output=True, check=True, timeout=120).stdout
        for q in (STATUS.qemu, STATUS.log_qemu)
    )
    assert len(ours) == 4 * (64 * 64 * 4 + 8)  # four rounds: the 64x64 buffer and FPSR
    assert ours == theirs
