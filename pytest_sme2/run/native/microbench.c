/*
 * microbench: short loops of one instruction class each, timed on the device `pytest-sme2 calibrate` measures
 * (pytest_sme2/measure/calibrate.py), so a device file's rates come from the user's own SME2 CPU.
 *
 * Why each loop is what it is: a device file prices every instruction class of
 * pytest_sme2/evidence/instruction_classes.py on a resource at a rate (instructions per ns). Each kernel
 * below repeats independent instructions of one class (enough independent accumulators or registers that
 * latency does not bound it: four ZA tiles for outer products, eight ZA vectors for SME2 FMLA, twelve chains
 * for FMLA), then two loop instructions (SUBS, B.NE). The table KERNELS says what one iteration executes, class
 * by class; tests/measure/test_calibrate.py counts it under qemu and must find exactly that.
 *
 * The SVE, SME and SME2 instructions are written as their encodings (.inst), each with its assembly beside it:
 * binutils 2.40 and GCC 12 (Debian's cross toolchain) know no SME2; the words are LLVM 19's encodings of the
 * assembly shown (the test checks them against llvm-mc when it is installed). NEON and scalar code is text.
 *
 * Usage:
 *   microbench list                       one line per kernel: name, class measured, its count per iteration,
 *                                         streaming (1/0), bytes per iteration, and every class's count
 *   microbench info                       svl_bits=N sme2=0|1 l1d_bytes=N l2_bytes=N (0: unknown)
 *   microbench run NAME ITERS BYTES REPS WARMUP
 *                                         runs NAME WARMUP iterations, then REPS times ITERS iterations over a
 *                                         buffer of BYTES (buffer kernels); prints "ns=MIN" (the fastest rep)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__APPLE__)
#include <sys/sysctl.h>
#else
#include <sys/auxv.h>
#endif

typedef void (*kernel_fn)(uint64_t iters, uint8_t *buffer, uint64_t bytes);

#define CLOBBER_V "v0", "v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8", "v9", "v10", "v11", "v12", "v13", \
    "v14", "v15", "v16", "v17", "v18", "v19", "v20", "v21", "v22", "v23", "v24", "v25", "v26", "v27", "v28", \
    "v29", "v30", "v31"
#define CLOBBER_X "x1", "x2", "x3", "x4", "x5", "x6", "x7", "x9", "x10", "x11", "x12", "x13", "x14", "x15", \
    "x16", "x17"

/* Entering streaming mode and setting up what the kernels read: all-true predicates, w8 = w12 = 0 (ZA vector
 * and slice selects), FP operands of 1.0 and 0.5 (no denormals), x10 > x9 for WHILELT. */
#define STREAMING_SETUP \
    ".inst 0xd503477f\n" /* smstart */ \
    ".inst 0x2518e3e0\n" /* ptrue p0.b */ \
    ".inst 0x2518e3e1\n" /* ptrue p1.b */ \
    ".inst 0xc00800ff\n" /* zero {za} */ \
    ".inst 0x25b9ce1c\n" /* fmov z28.s, #1.0 */ \
    ".inst 0x25b9ce1d\n" /* fmov z29.s, #1.0 */ \
    ".inst 0x25b9cc1e\n" /* fmov z30.s, #0.5 */ \
    ".inst 0x25b9ce1f\n" /* fmov z31.s, #1.0 */ \
    "mov w8, #0\n" "mov w12, #0\n" "mov x9, #0\n" "mov x10, #1000\n"
#define STREAMING_END ".inst 0xd503467f\n" /* smstop */
#define LOOP_END "subs %[n], %[n], #1\n" "b.ne 1b\n"

#define STREAMING_KERNEL(name, body) \
    static void name(uint64_t iters, uint8_t *buffer, uint64_t bytes) { \
        (void)buffer; (void)bytes; \
        __asm__ volatile(STREAMING_SETUP "1:\n" body LOOP_END STREAMING_END \
                         : [n] "+r"(iters) : : "x8", "x9", "x10", "x12", CLOBBER_V, "cc", "memory"); \
    }

STREAMING_KERNEL(k_mopa_fp32,
    ".inst 0x80812000\n" /* fmopa za0.s, p0/m, p1/m, z0.s, z1.s */
    ".inst 0x80832041\n" /* fmopa za1.s, p0/m, p1/m, z2.s, z3.s */
    ".inst 0x80852082\n" /* fmopa za2.s, p0/m, p1/m, z4.s, z5.s */
    ".inst 0x808720c3\n" /* fmopa za3.s, p0/m, p1/m, z6.s, z7.s */
    ".inst 0x80812000\n" ".inst 0x80832041\n" ".inst 0x80852082\n" ".inst 0x808720c3\n")
STREAMING_KERNEL(k_mopa_fp16,
    ".inst 0x81a12000\n" /* fmopa za0.s, p0/m, p1/m, z0.h, z1.h (widening) */
    ".inst 0x81a32041\n" /* fmopa za1.s, p0/m, p1/m, z2.h, z3.h */
    ".inst 0x81a52082\n" /* fmopa za2.s, p0/m, p1/m, z4.h, z5.h */
    ".inst 0x81a720c3\n" /* fmopa za3.s, p0/m, p1/m, z6.h, z7.h */
    ".inst 0x81a12000\n" ".inst 0x81a32041\n" ".inst 0x81a52082\n" ".inst 0x81a720c3\n")
STREAMING_KERNEL(k_mopa_int8,
    ".inst 0xa0812000\n" /* smopa za0.s, p0/m, p1/m, z0.b, z1.b */
    ".inst 0xa0832041\n" /* smopa za1.s, p0/m, p1/m, z2.b, z3.b */
    ".inst 0xa0852082\n" /* smopa za2.s, p0/m, p1/m, z4.b, z5.b */
    ".inst 0xa08720c3\n" /* smopa za3.s, p0/m, p1/m, z6.b, z7.b */
    ".inst 0xa0812000\n" ".inst 0xa0832041\n" ".inst 0xa0852082\n" ".inst 0xa08720c3\n")
STREAMING_KERNEL(k_za_vgx2,
    ".inst 0xc1241800\n" /* fmla za.s[w8, 0, vgx2], {z0.s, z1.s}, z4.s */
    ".inst 0xc1241801\n" /* fmla za.s[w8, 1, vgx2], {z0.s, z1.s}, z4.s */
    ".inst 0xc1241802\n" /* ... offsets 2 to 7: eight independent ZA vector groups */
    ".inst 0xc1241803\n" ".inst 0xc1241804\n" ".inst 0xc1241805\n" ".inst 0xc1241806\n" ".inst 0xc1241807\n")
STREAMING_KERNEL(k_za_vgx4,
    ".inst 0xc1341800\n" /* fmla za.s[w8, 0, vgx4], {z0.s - z3.s}, z4.s */
    ".inst 0xc1341801\n" /* fmla za.s[w8, 1, vgx4], {z0.s - z3.s}, z4.s */
    ".inst 0xc1341802\n" /* ... offsets 2 to 7 */
    ".inst 0xc1341803\n" ".inst 0xc1341804\n" ".inst 0xc1341805\n" ".inst 0xc1341806\n" ".inst 0xc1341807\n")
STREAMING_KERNEL(k_sme2_z,
    ".inst 0xc1bfc3d0\n" /* fclamp {z16.s, z17.s}, z30.s, z31.s */
    ".inst 0xc1bfc3d2\n" /* fclamp {z18.s, z19.s}, z30.s, z31.s */
    ".inst 0xc1bfc3d4\n" /* fclamp {z20.s, z21.s}, z30.s, z31.s */
    ".inst 0xc1bfc3d6\n" /* fclamp {z22.s, z23.s}, z30.s, z31.s */
    ".inst 0xc1bfc3d8\n" /* fclamp {z24.s, z25.s}, z30.s, z31.s */
    ".inst 0xc1bfc3da\n" /* fclamp {z26.s, z27.s}, z30.s, z31.s */)
STREAMING_KERNEL(k_sme_other,
    ".inst 0xc0820000\n" /* mova z0.s, p0/m, za0h.s[w12, 0] */
    ".inst 0xc0820021\n" /* mova z1.s, p0/m, za0h.s[w12, 1] */
    ".inst 0xc0820042\n" /* mova z2.s, p0/m, za0h.s[w12, 2] */
    ".inst 0xc0820063\n" /* mova z3.s, p0/m, za0h.s[w12, 3] */
    ".inst 0xc0820084\n" /* mova z4.s, p0/m, za1h.s[w12, 0] */
    ".inst 0xc08200a5\n" /* mova z5.s, p0/m, za1h.s[w12, 1] */
    ".inst 0xc08200c6\n" /* mova z6.s, p0/m, za1h.s[w12, 2] */
    ".inst 0xc08200e7\n" /* mova z7.s, p0/m, za1h.s[w12, 3] */)
STREAMING_KERNEL(k_sve_other,
    ".inst 0x65bd0380\n" /* fmla z0.s, p0/m, z28.s, z29.s */
    ".inst 0x65bd0381\n" /* fmla z1.s, p0/m, z28.s, z29.s */
    ".inst 0x65bd0382\n" /* ... z2 to z11: twelve independent chains */
    ".inst 0x65bd0383\n" ".inst 0x65bd0384\n" ".inst 0x65bd0385\n" ".inst 0x65bd0386\n" ".inst 0x65bd0387\n"
    ".inst 0x65bd0388\n" ".inst 0x65bd0389\n" ".inst 0x65bd038a\n" ".inst 0x65bd038b\n")
STREAMING_KERNEL(k_sve_predicate,
    ".inst 0x25aa1522\n" /* whilelt p2.s, x9, x10 */
    ".inst 0x25aa1523\n" /* whilelt p3.s, x9, x10 */
    ".inst 0x25aa1524\n" /* whilelt p4.s, x9, x10 */
    ".inst 0x25aa1525\n" /* whilelt p5.s, x9, x10 */
    ".inst 0x25aa1526\n" /* whilelt p6.s, x9, x10 */
    ".inst 0x25aa1527\n" /* whilelt p7.s, x9, x10 */)

/* Buffer kernels: four vectors per iteration from x0, which steps through the buffer and wraps at its end
 * (ADD, CMP, CSEL: three scalar instructions more per iteration). x2-x4: one, two, three vectors in 32-bit
 * elements (the ZA slice loads' register offsets), x5: four vectors in bytes. */
#define BUFFER_KERNEL(name, body) \
    static void name(uint64_t iters, uint8_t *buffer, uint64_t bytes) { \
        uint8_t *end = buffer + bytes; \
        __asm__ volatile(STREAMING_SETUP \
                         ".inst 0x04bf5825\n" /* rdsvl x5, #1 */ \
                         "lsr x2, x5, #2\n" "add x3, x2, x2\n" "add x4, x3, x2\n" "lsl x5, x5, #2\n" \
                         "mov x0, %[buf]\n" \
                         "1:\n" body \
                         "add x0, x0, x5\n" "cmp x0, %[end]\n" "csel x0, %[buf], x0, hs\n" \
                         LOOP_END STREAMING_END \
                         : [n] "+r"(iters) : [buf] "r"(buffer), [end] "r"(end) \
                         : "x0", "x2", "x3", "x4", "x5", "x8", "x9", "x10", "x12", CLOBBER_V, "cc", "memory"); \
    }

BUFFER_KERNEL(k_sme_load,
    ".inst 0xe09f0000\n" /* ld1w {za0h.s[w12, 0]}, p0/z, [x0] */
    ".inst 0xe0820004\n" /* ld1w {za1h.s[w12, 0]}, p0/z, [x0, x2, lsl #2] */
    ".inst 0xe0830008\n" /* ld1w {za2h.s[w12, 0]}, p0/z, [x0, x3, lsl #2] */
    ".inst 0xe084000c\n" /* ld1w {za3h.s[w12, 0]}, p0/z, [x0, x4, lsl #2] */)
BUFFER_KERNEL(k_sme_store,
    ".inst 0xe0bf0000\n" /* st1w {za0h.s[w12, 0]}, p0, [x0] */
    ".inst 0xe0a20001\n" /* st1w {za0h.s[w12, 1]}, p0, [x0, x2, lsl #2] */
    ".inst 0xe0a30002\n" /* st1w {za0h.s[w12, 2]}, p0, [x0, x3, lsl #2] */
    ".inst 0xe0a40003\n" /* st1w {za0h.s[w12, 3]}, p0, [x0, x4, lsl #2] */)
BUFFER_KERNEL(k_sve_load,
    ".inst 0xa540a000\n" /* ld1w {z0.s}, p0/z, [x0] */
    ".inst 0xa541a001\n" /* ld1w {z1.s}, p0/z, [x0, #1, mul vl] */
    ".inst 0xa542a002\n" /* ld1w {z2.s}, p0/z, [x0, #2, mul vl] */
    ".inst 0xa543a003\n" /* ld1w {z3.s}, p0/z, [x0, #3, mul vl] */)
BUFFER_KERNEL(k_sve_store,
    ".inst 0xe540e000\n" /* st1w {z0.s}, p0, [x0] */
    ".inst 0xe541e000\n" /* st1w {z0.s}, p0, [x0, #1, mul vl] */
    ".inst 0xe542e000\n" /* st1w {z0.s}, p0, [x0, #2, mul vl] */
    ".inst 0xe543e000\n" /* st1w {z0.s}, p0, [x0, #3, mul vl] */)

/* The core outside streaming mode (NEON is illegal in streaming mode on a CPU without FEAT_SME_FA64). */
#define CORE_KERNEL(name, body) \
    static void name(uint64_t iters, uint8_t *buffer, uint64_t bytes) { \
        (void)bytes; \
        __asm__ volatile("mov x0, %[buf]\n" "movi v12.16b, #0\n" "movi v13.16b, #0\n" "movi v16.16b, #0\n" \
                         "1:\n" body LOOP_END \
                         : [n] "+r"(iters) : [buf] "r"(buffer) : "x0", CLOBBER_X, CLOBBER_V, "cc", "memory"); \
    }

CORE_KERNEL(k_clock, /* sixteen dependent one-cycle adds: instructions per ns = the clock in GHz */
    "add x9, x9, #1\n" "add x9, x9, #1\n" "add x9, x9, #1\n" "add x9, x9, #1\n"
    "add x9, x9, #1\n" "add x9, x9, #1\n" "add x9, x9, #1\n" "add x9, x9, #1\n"
    "add x9, x9, #1\n" "add x9, x9, #1\n" "add x9, x9, #1\n" "add x9, x9, #1\n"
    "add x9, x9, #1\n" "add x9, x9, #1\n" "add x9, x9, #1\n" "add x9, x9, #1\n")
CORE_KERNEL(k_scalar, /* fourteen independent adds */
    "add x1, x1, #1\n" "add x2, x2, #1\n" "add x3, x3, #1\n" "add x4, x4, #1\n" "add x5, x5, #1\n"
    "add x6, x6, #1\n" "add x7, x7, #1\n" "add x9, x9, #1\n" "add x10, x10, #1\n" "add x11, x11, #1\n"
    "add x12, x12, #1\n" "add x13, x13, #1\n" "add x14, x14, #1\n" "add x15, x15, #1\n")
CORE_KERNEL(k_simd_fp, /* twelve independent FMLA chains */
    "fmla v0.4s, v12.4s, v13.4s\n" "fmla v1.4s, v12.4s, v13.4s\n" "fmla v2.4s, v12.4s, v13.4s\n"
    "fmla v3.4s, v12.4s, v13.4s\n" "fmla v4.4s, v12.4s, v13.4s\n" "fmla v5.4s, v12.4s, v13.4s\n"
    "fmla v6.4s, v12.4s, v13.4s\n" "fmla v7.4s, v12.4s, v13.4s\n" "fmla v8.4s, v12.4s, v13.4s\n"
    "fmla v9.4s, v12.4s, v13.4s\n" "fmla v10.4s, v12.4s, v13.4s\n" "fmla v11.4s, v12.4s, v13.4s\n")
CORE_KERNEL(k_load_store_vec, /* eight 128-bit loads of the same 128 bytes: L1 */
    "ldr q0, [x0]\n" "ldr q1, [x0, #16]\n" "ldr q2, [x0, #32]\n" "ldr q3, [x0, #48]\n"
    "ldr q4, [x0, #64]\n" "ldr q5, [x0, #80]\n" "ldr q6, [x0, #96]\n" "ldr q7, [x0, #112]\n")
CORE_KERNEL(k_load_store, /* eight 64-bit loads of the same 64 bytes: L1 */
    "ldr x1, [x0]\n" "ldr x2, [x0, #8]\n" "ldr x3, [x0, #16]\n" "ldr x4, [x0, #24]\n"
    "ldr x5, [x0, #32]\n" "ldr x6, [x0, #40]\n" "ldr x7, [x0, #48]\n" "ldr x9, [x0, #56]\n")
CORE_KERNEL(k_mix, /* the widest mix of independent work: adds, FP adds and loads together (the core's width) */
    "add x1, x1, #1\n" "add x2, x2, #1\n" "add x3, x3, #1\n" "add x4, x4, #1\n" "add x5, x5, #1\n"
    "fadd v0.4s, v0.4s, v16.4s\n" "fadd v1.4s, v1.4s, v16.4s\n" "fadd v2.4s, v2.4s, v16.4s\n"
    "fadd v3.4s, v3.4s, v16.4s\n" "ldr x9, [x0]\n" "ldr x10, [x0, #8]\n" "ldr q4, [x0, #16]\n")

typedef struct {
    const char *name;      /* what calibrate.py asks for */
    const char *measures;  /* the class (instruction_classes.py) whose rate it gives */
    int count;             /* instructions of that class per iteration */
    int streaming;         /* 1: runs in streaming mode (needs SME) */
    int buffer_bytes;      /* bytes loaded or stored per iteration in vectors of SVL (0: none), x4 SVL bytes */
    const char *claims;    /* every class it executes per iteration (the loop instructions are scalar) */
    kernel_fn fn;
} kernel_t;

static const kernel_t KERNELS[] = {
    {"clock", "scalar", 16, 0, 0, "scalar=18", k_clock},
    {"scalar", "scalar", 14, 0, 0, "scalar=16", k_scalar},
    {"simd_fp", "simd_fp", 12, 0, 0, "simd_fp=12,scalar=2", k_simd_fp},
    {"load_store_vec", "load_store_vec", 8, 0, 0, "load_store_vec=8,scalar=2", k_load_store_vec},
    {"load_store", "load_store", 8, 0, 0, "load_store=8,scalar=2", k_load_store},
    {"mix", "all", 14, 0, 0, "scalar=7,simd_fp=4,load_store=2,load_store_vec=1", k_mix},
    {"mopa_fp32", "mopa_fp32", 8, 1, 0, "mopa_fp32=8,scalar=2", k_mopa_fp32},
    {"mopa_fp16", "mopa_fp16", 8, 1, 0, "mopa_fp16=8,scalar=2", k_mopa_fp16},
    {"mopa_int8", "mopa_int8", 8, 1, 0, "mopa_int8=8,scalar=2", k_mopa_int8},
    {"za_vgx2", "za_vgx2", 8, 1, 0, "za_vgx2=8,scalar=2", k_za_vgx2},
    {"za_vgx4", "za_vgx4", 8, 1, 0, "za_vgx4=8,scalar=2", k_za_vgx4},
    {"sme2_z", "sme2_z", 6, 1, 0, "sme2_z=6,scalar=2", k_sme2_z},
    {"sme_other", "sme_other", 8, 1, 0, "sme_other=8,scalar=2", k_sme_other},
    {"sve_other", "sve_other", 12, 1, 0, "sve_other=12,scalar=2", k_sve_other},
    {"sve_predicate", "sve_predicate", 6, 1, 0, "sve_predicate=6,scalar=2", k_sve_predicate},
    {"sme_load", "sme_load_store", 4, 1, 4, "sme_load_store=4,scalar=5", k_sme_load},
    {"sme_store", "sme_load_store", 4, 1, 4, "sme_load_store=4,scalar=5", k_sme_store},
    {"sve_load", "sve_load_store", 4, 1, 4, "sve_load_store=4,scalar=5", k_sve_load},
    {"sve_store", "sve_load_store", 4, 1, 4, "sve_load_store=4,scalar=5", k_sve_store},
};
#define N_KERNELS (sizeof(KERNELS) / sizeof(KERNELS[0]))

static int has_sme2(void) {
#if defined(__APPLE__)
    int value = 0;
    size_t size = sizeof(value);
    return sysctlbyname("hw.optional.arm.FEAT_SME2", &value, &size, NULL, 0) == 0 && value;
#else
    return (getauxval(AT_HWCAP2) >> 37) & 1; /* HWCAP2_SME2 */
#endif
}

static uint64_t svl_bytes(void) {
    uint64_t value = 0;
    if (has_sme2()) __asm__ volatile(".inst 0x04bf5820\n" /* rdsvl x0, #1 */ "mov %0, x0\n" : "=r"(value) : : "x0");
    return value;
}

static uint64_t cache_bytes(int level) {
#if defined(__APPLE__)
    uint64_t value = 0;
    size_t size = sizeof(value);
    const char *name = level == 1 ? "hw.perflevel0.l1dcachesize" : "hw.perflevel0.l2cachesize";
    return sysctlbyname(name, &value, &size, NULL, 0) == 0 ? value : 0;
#else
    char path[96], text[64];
    for (int index = 0; index < 8; index++) {
        snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu0/cache/index%d/level", index);
        FILE *f = fopen(path, "r");
        if (!f) break;
        int found = fgets(text, sizeof(text), f) && atoi(text) == level;
        fclose(f);
        if (!found) continue;
        snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu0/cache/index%d/type", index);
        f = fopen(path, "r");
        int instruction = f && fgets(text, sizeof(text), f) && strncmp(text, "Instruction", 11) == 0;
        if (f) fclose(f);
        if (instruction) continue;
        snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu0/cache/index%d/size", index);
        f = fopen(path, "r");
        if (!f || !fgets(text, sizeof(text), f)) { if (f) fclose(f); return 0; }
        fclose(f);
        char *unit;
        uint64_t value = strtoull(text, &unit, 10);
        return value * (*unit == 'K' ? 1024 : *unit == 'M' ? 1024 * 1024 : 1);
    }
    return 0;
#endif
}

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "list") == 0) {
        for (size_t i = 0; i < N_KERNELS; i++)
            printf("%s %s %d %d %d %s\n", KERNELS[i].name, KERNELS[i].measures, KERNELS[i].count,
                   KERNELS[i].streaming, KERNELS[i].buffer_bytes, KERNELS[i].claims);
        return 0;
    }
    if (argc == 2 && strcmp(argv[1], "info") == 0) {
        printf("svl_bits=%llu sme2=%d l1d_bytes=%llu l2_bytes=%llu\n", (unsigned long long)svl_bytes() * 8,
               has_sme2(), (unsigned long long)cache_bytes(1), (unsigned long long)cache_bytes(2));
        return 0;
    }
    if (argc != 7 || strcmp(argv[1], "run") != 0) {
        fprintf(stderr, "usage: microbench list | info | run NAME ITERS BYTES REPS WARMUP\n");
        return 2;
    }
    const kernel_t *kernel = NULL;
    for (size_t i = 0; i < N_KERNELS; i++)
        if (strcmp(KERNELS[i].name, argv[2]) == 0) kernel = &KERNELS[i];
    if (!kernel) {
        fprintf(stderr, "microbench: no kernel %s (microbench list names them)\n", argv[2]);
        return 2;
    }
    if (kernel->streaming && !has_sme2()) {
        fprintf(stderr, "microbench: %s needs SME2, which this CPU does not report\n", kernel->name);
        return 3;
    }
    uint64_t iters = strtoull(argv[3], NULL, 10), bytes = strtoull(argv[4], NULL, 10);
    uint64_t reps = strtoull(argv[5], NULL, 10), warmup = strtoull(argv[6], NULL, 10);
    uint64_t step = kernel->buffer_bytes * svl_bytes();
    if (iters == 0 || reps == 0 || (step && (bytes < step || bytes % step))) {
        fprintf(stderr, "microbench: ITERS and REPS must be > 0 and BYTES a multiple of %llu\n",
                (unsigned long long)step);
        return 2;
    }
    if (bytes < 256) bytes = 256; /* the core kernels read the first 128 bytes */
    uint8_t *buffer = aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    if (!buffer) {
        fprintf(stderr, "microbench: cannot allocate %llu bytes\n", (unsigned long long)bytes);
        return 2;
    }
    memset(buffer, 1, bytes);
    if (warmup) kernel->fn(warmup, buffer, bytes);
    uint64_t best = UINT64_MAX;
    for (uint64_t r = 0; r < reps; r++) {
        uint64_t start = now_ns();
        kernel->fn(iters, buffer, bytes);
        uint64_t elapsed = now_ns() - start;
        if (elapsed < best) best = elapsed;
    }
    printf("ns=%llu\n", (unsigned long long)best);
    free(buffer);
    return 0;
}
