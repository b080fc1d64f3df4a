/*
 * instruction_classes.h: the class of an A64 instruction word, by its encoding alone. One table for both
 * counters of the emulated target: exec_counter.c (qemu's execution log) and count_plugin.c (the TCG plugin
 * that counts inside qemu). Names and order: pytest_sme2/evidence/instruction_classes.py.
 */
#ifndef PYTEST_SME2_INSTRUCTION_CLASSES_H
#define PYTEST_SME2_INSTRUCTION_CLASSES_H
#include <stdint.h>

/* Instruction classes, by encoding alone (so every qemu version counts alike; qemu 11.1 cannot even
 * disassemble SME2). Groups of the A64 SME space (op0=1, op1=0000) by their top bits: 1000000x floating-point
 * outer products, 1010000x integer outer products (bit 23 set) and SME2 multi-vector loads and stores of Z
 * registers (bit 23 clear), 11000000 SME moves and misc, 11000001 SME2 multi-vector arithmetic, 1110000x loads
 * and stores of ZA and ZT0. The outer products by data type follow qemu's target/arm/tcg/sme.decode. In
 * 11000001 (za_group()), what writes ZA array vectors (dot products, multiply-accumulates, adds) is told from
 * what writes Z registers (clamps, conversions, min/max, zips) and split by vector group size, which sets its
 * cost (Apple M4: vgx2 forms issue twice as often as vgx4 ones, whatever the data type). The rules were read
 * from LLVM 19's encodings of every such form; tests/evidence/test_instruction_classes.py checks every class
 * against words LLVM's assembler encodes and against every SME word of the aarch64 XNNPACK library as LLVM's
 * disassembler names it. Names and order: instruction_classes.py. */
enum {
    MOPA_FP32,       /* FMOPA/FMOPS single precision (non-widening) */
    MOPA_FP16,       /* FMOPA/FMOPS widening from half, BFMOPA/BFMOPS widening from bfloat16 */
    MOPA_INT8,       /* SMOPA/SUMOPA/USMOPA/UMOPA, 4-way 8-bit into 32-bit */
    MOPA_OTHER,      /* other outer products: FP64, 16-bit into 64-bit, 2-way 16-bit, BMOPA */
    ZA_VGX2,         /* SME2 FMLA/FDOT/SDOT/FMLAL/ADD... into ZA array vectors, 1- or 2-vector groups */
    ZA_VGX4,         /* the same with 4-vector groups */
    SME2_Z,          /* other SME2 multi-vector instructions, on Z registers: FCLAMP, FCVT, ZIP, FMAX, ... */
    SME_LOAD_STORE,  /* loads and stores of ZA, ZT0, and SME2 multi-vector loads and stores of Z registers */
    SME_OTHER,       /* other SME instructions (MOVA, ZERO, ADDHA, LUTI), SMSTART/SMSTOP */
    SVE_LOAD_STORE,  /* SVE loads and stores (streaming SVE in streaming mode) */
    SVE_PREDICATE,   /* SVE/SME predicate and vector-length counting: PTRUE, WHILELT, PSEL, CNTW, INCW Xd, ADDVL */
    SVE_OTHER,       /* other SVE encodings: data processing on Z registers */
    SIMD_FP,         /* Advanced SIMD (NEON) and scalar floating-point data processing */
    LOAD_STORE_VEC,  /* loads and stores of SIMD&FP registers (LDR q, LD1 {v..}, LDP d) */
    LOAD_STORE,      /* loads and stores of general-purpose registers */
    SCALAR,          /* integer data processing, branches, system */
    N_CLASSES
};
static const char *const CLASS_NAMES[N_CLASSES] = {
    "mopa_fp32", "mopa_fp16", "mopa_int8", "mopa_other", "za_vgx2", "za_vgx4", "sme2_z", "sme_load_store", "sme_other",
    "sve_load_store", "sve_predicate", "sve_other", "simd_fp", "load_store_vec", "load_store", "scalar",
};

/* 11000001: ZA_VGX2, ZA_VGX4 or SME2_Z. Bits 23:20 pick the form: 0001/0101/1001/1101 are the indexed ones
 * (ZA, bit 15 = 4-vector group); elsewhere bit 15 set means a Z destination; 0011/0111 are multiple-and-single
 * 4-vector groups, 1010/1110 multiple-vector forms with bit 16 = 4-vector group. */
static int za_group(uint32_t word) {
    uint32_t form = (word >> 20) & 0xF;
    if ((form & 0x3) == 0x1) return (word >> 15) & 1 ? ZA_VGX4 : ZA_VGX2;
    if ((word >> 15) & 1) return SME2_Z;
    if (form == 0x3 || form == 0x7) return ZA_VGX4;
    if ((form == 0xA || form == 0xE) && ((word >> 16) & 1)) return ZA_VGX4;
    return ZA_VGX2;
}

/* SVE data processing (op0=0, op1=0010) that names no Z register: predicate generation and logic, loop control
 * and vector-length arithmetic, which KleidiAI's and XNNPACK's SME2 kernels run around every tile (stop 39: 32
 * million of SqueezeSAM's SME2 instructions). By top byte: 00000100 the stack-frame ones (ADDVL, ADDPL, ADDSVL,
 * ADDSPL, RDVL, RDSVL) and the element counts into a general register (bit 21, bits 15:13 = 111: CNTB..D,
 * INC/DEC Xd, SQINC/UQDEC Xd; the vector forms are 1100); 00000101 the predicate permutes (bit 21, bits 15:13 =
 * 010: ZIP, UZP, TRN, REV, PUNPK on P); 00100101 everything but the compares with an immediate (bit 21 clear,
 * bit 14 clear), the wide immediates (bit 21, bits 15:14 = 11: DUP, FDUP, ADD #imm) and the vector INCP/DECP
 * (bit 21, bits 15:11 = 10000, bits 20:19 = 01). Read from LLVM 19's encodings; the tests check every SVE word of
 * the aarch64 XNNPACK library against "no Z operand" in LLVM's disassembly. */
static int sve_predicate(uint32_t word) {
    uint32_t top = word >> 24, bit21 = (word >> 21) & 1;
    if (top == 0x04)
        return (word & 0xFFA0F000u) == 0x04205000u || (word & 0xFFFFF000u) == 0x04BF5000u
            || (bit21 && ((word >> 13) & 7) == 7);
    if (top == 0x05) return bit21 && ((word >> 13) & 7) == 2;
    if (top == 0x25) {
        uint32_t b1514 = (word >> 14) & 3;
        if (!bit21) return (word >> 14) & 1;
        if (b1514 == 3) return 0;
        if (b1514 == 2) return !(((word >> 11) & 0x1F) == 0x10 && ((word >> 19) & 3) == 1);
        return 1;
    }
    return 0;
}

static int classify(uint32_t word) {
    uint32_t op1 = (word >> 25) & 0xF;
    if ((word & 0xFFFFF0FFu) == 0xD503407Fu) return SME_OTHER; /* SMSTART/SMSTOP (MSR SVCR*) */
    if ((word >> 31) == 1 && op1 == 0) { /* SME */
        uint32_t group = word >> 25;
        if (group == 0x40) { /* 1000000: floating-point outer products */
            if ((word & 0xFFE0000Cu) == 0x80800000u) return MOPA_FP32;
            if ((word & 0xFFC0000Cu) == 0x81800000u) return MOPA_FP16;  /* BFMOPA 0x818..., FMOPA (half) 0x81A... */
            return MOPA_OTHER;
        }
        if (group == 0x50) { /* 1010000: integer outer products, SME2 multi-vector loads and stores */
            if (!((word >> 23) & 1)) return SME_LOAD_STORE;
            return (word & 0xFEC0000Cu) == 0xA0800000u ? MOPA_INT8 : MOPA_OTHER;
        }
        if (group == 0x70) return SME_LOAD_STORE;  /* 1110000 */
        if ((word >> 24) == 0xC1) return za_group(word);
        return SME_OTHER;
    }
    if (op1 == 0x2) {  /* SVE memory: op0 1xx */
        if ((word >> 31) == 1) return SVE_LOAD_STORE;
        return sve_predicate(word) ? SVE_PREDICATE : SVE_OTHER;
    }
    if ((op1 & 0x5) == 0x4) return (word >> 26) & 1 ? LOAD_STORE_VEC : LOAD_STORE;  /* x1x0, V bit 26 */
    if ((op1 & 0x7) == 0x7) return SIMD_FP;  /* x111 */
    return SCALAR;
}

#endif
