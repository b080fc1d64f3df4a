/*
 * exec_counter: turns qemu-user's `-d in_asm,exec,nochain` log into the
 * sequence of translated blocks the guest's first thread executed, compactly.
 *
 * Why a C program: one emulated mobilenet inference logs about 3.3 million
 * executed blocks (250 MB of text); Python needs 6 s to parse that, this needs
 * a fraction of a second, so counting costs about what qemu's logging costs.
 * Python (pytest_sme2/evidence/qemu_counts.py) does the rest: libraries,
 * symbols, operators and ETDump events, from the two files written here.
 *
 * Usage: exec_counter BLOCKS_TSV SEQUENCE_U32 [LOG]   (LOG: a file or FIFO to read instead of stdin)
 *   BLOCKS_TSV    a header line "# pc instructions CLASS..." naming the instruction classes (see classify()
 *                 and pytest_sme2/evidence/instruction_classes.py, which must name the same classes in the same
 *                 order), then one line per block id: "guest_pc instructions count_of_each_class..."
 *   SEQUENCE_U32  the block id of every block thread 0 executed, in order, as little-endian uint32
 * On stderr, a last line "exec_counter: N blocks, M executions, U unbound" (U: executions whose block
 * was never disassembled; their instructions are unknown and the caller refuses the counts).
 *
 * Blocks are keyed by qemu's host code pointer. A new `IN:` listing of a guest PC
 * is bound to the host pointer of the next "Trace" line of that PC; qemu reuses
 * host code memory after it invalidates blocks (e.g. when the dynamic linker
 * writes to code pages), so a pointer seen before is rebound then.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    uint64_t key;
    uint32_t value;
    uint32_t used;
} slot_t;

typedef struct {
    slot_t *slots;
    size_t mask;
    size_t count;
} map_t;

static void die(const char *message) {
    fprintf(stderr, "exec_counter: %s\n", message);
    exit(2);
}

static void map_init(map_t *map, size_t capacity) {
    map->slots = calloc(capacity, sizeof(slot_t));
    if (!map->slots) die("out of memory");
    map->mask = capacity - 1;
    map->count = 0;
}

static uint64_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return x;
}

static slot_t *map_find(map_t *map, uint64_t key) {
    size_t i = mix(key) & map->mask;
    while (map->slots[i].used && map->slots[i].key != key) i = (i + 1) & map->mask;
    return &map->slots[i];
}

static void map_put(map_t *map, uint64_t key, uint32_t value);

/* After clearing a slot, re-insert the entries after it so probing still finds them. */
static void map_rehash(map_t *map) {
    slot_t *old = map->slots;
    size_t capacity = map->mask + 1;
    map->slots = calloc(capacity, sizeof(slot_t));
    if (!map->slots) die("out of memory");
    map->count = 0;
    for (size_t i = 0; i < capacity; ++i)
        if (old[i].used) map_put(map, old[i].key, old[i].value);
    free(old);
}

static void map_grow(map_t *map) {
    map_t bigger;
    map_init(&bigger, (map->mask + 1) * 2);
    for (size_t i = 0; i <= map->mask; ++i)
        if (map->slots[i].used) map_put(&bigger, map->slots[i].key, map->slots[i].value);
    free(map->slots);
    *map = bigger;
}

static void map_put(map_t *map, uint64_t key, uint32_t value) {
    if ((map->count + 1) * 2 > map->mask + 1) map_grow(map);
    slot_t *slot = map_find(map, key);
    if (!slot->used) {
        slot->used = 1;
        slot->key = key;
        map->count++;
    }
    slot->value = value;
}

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

typedef struct {
    uint64_t pc;
    uint32_t n;
    uint32_t classes[N_CLASSES];
} block_t;

static block_t *listings, *blocks;  /* listings: every `IN:` disassembly; blocks: bound blocks */
static size_t n_listings, cap_listings, n_blocks, cap_blocks;

static uint32_t push(block_t **array, size_t *count, size_t *capacity, block_t value) {
    if (*count == *capacity) {
        *capacity = *capacity ? *capacity * 2 : 4096;
        *array = realloc(*array, *capacity * sizeof(block_t));
        if (!*array) die("out of memory");
    }
    (*array)[*count] = value;
    return (uint32_t)(*count)++;
}

static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Parse hex digits at *p (after an optional 0x); advances *p. */
static uint64_t hex(const char **p) {
    const char *s = *p;
    if (s[0] == '0' && s[1] == 'x') s += 2;
    uint64_t value = 0;
    int digit;
    while ((digit = hexval((unsigned char)*s)) >= 0) {
        value = (value << 4) | (uint64_t)digit;
        ++s;
    }
    *p = s;
    return value;
}

/* Read a pipe in pieces of at least a quarter of ``size``: after a short read, sleep a millisecond so the
 * writer fills the pipe instead of waking this reader for every line. End of file returns what was read. */
static ssize_t batched_read(void *cookie, char *buffer, size_t size) {
    int fd = *(int *)cookie;
    size_t got = 0;
    const struct timespec pause = {0, 1000000};
    for (;;) {
        ssize_t n = read(fd, buffer + got, size - got);
        if (n < 0) {
            if (errno == EINTR) continue;
            return got ? (ssize_t)got : -1;
        }
        got += (size_t)n;
        if (n == 0 || got >= size / 4) return (ssize_t)got;
        nanosleep(&pause, NULL);
    }
}

int main(int argc, char **argv) {
    if (argc != 3 && argc != 4) die("usage: exec_counter BLOCKS_TSV SEQUENCE_U32 [LOG]");
    if (argc == 4 && !freopen(argv[3], "r", stdin)) die("cannot open the log");
    /* qemu writes the log a line at a time (it flushes after every entry): a reader that takes each line as it
     * comes is woken once per executed block, and qemu stops whenever the pipe is full, waiting for the reader
     * to be scheduled again, which on a busy machine is most of counting's cost. So the pipe is made as large
     * as an unprivileged process may ask (1 MiB by default: about 16,000 lines instead of 1,000) and the log is
     * read in large pieces (batched_read). Not a pipe, or a lower limit: the call fails, the default stays. */
    FILE *log = stdin;
#ifdef F_SETPIPE_SZ
    {
        FILE *limit = fopen("/proc/sys/fs/pipe-max-size", "r");
        int size = 1 << 20;
        if (limit) {
            if (fscanf(limit, "%d", &size) != 1) size = 1 << 20;
            fclose(limit);
        }
        if (fcntl(fileno(stdin), F_SETPIPE_SZ, size) > 0) {
            static int fd;
            fd = fileno(stdin);
            log = fopencookie(&fd, "r", (cookie_io_functions_t){.read = batched_read});
            if (!log) die("cannot read the log");
        }
    }
#endif
    static char input_buffer[1 << 20];
    setvbuf(log, input_buffer, _IOFBF, sizeof input_buffer);
    FILE *sequence = fopen(argv[2], "wb");
    if (!sequence) die("cannot write the sequence file");
    static char line[1 << 16];
    /* host code pointer -> block id; guest pc -> latest listing id; guest pc -> listing not yet bound */
    map_t by_host, latest, pending;
    map_init(&by_host, 1 << 16);
    map_init(&latest, 1 << 16);
    map_init(&pending, 1 << 10);
    int in_listing = 0;
    block_t current = {0};
    uint64_t executions = 0, unbound = 0;
    uint32_t buffer[8192];
    size_t buffered = 0;
    while (fgets(line, sizeof line, log)) {
        if (line[0] == '0' && line[1] == 'x') { /* "0x7f46ddb96700:  a9b27bfd  stp ..." */
            const char *p = line;
            uint64_t pc = hex(&p);
            if (*p != ':') continue;
            p += 1;
            while (*p == ' ') ++p;
            uint32_t word = (uint32_t)hex(&p);
            if (!in_listing) {
                in_listing = 1;
                current = (block_t){.pc = pc};
            }
            current.n++;
            current.classes[classify(word)]++;
            continue;
        }
        if (in_listing) { /* a listing ends at the first line that is not an instruction */
            in_listing = 0;
            uint32_t listing = push(&listings, &n_listings, &cap_listings, current);
            map_put(&latest, current.pc, listing);
            map_put(&pending, current.pc, listing);
        }
        if (strncmp(line, "Trace ", 6) != 0) continue;
        /* "Trace 0: 0x7f46cc000100 [80083009331/00007f46ddb9ac40/00000001/00000200] ..." */
        const char *p = line + 6;
        if (!(p[0] == '0' && p[1] == ':')) continue; /* other guest threads: not the inference */
        p += 3;
        uint64_t host = hex(&p);
        const char *q = strchr(p, '/');
        if (!q) continue;
        ++q;
        uint64_t pc = hex(&q);
        slot_t *slot = map_find(&by_host, host);
        slot_t *fresh = map_find(&pending, pc);
        uint32_t id;
        if (slot->used && !fresh->used && blocks[slot->value].pc == pc) {
            id = slot->value;
        } else {
            /* A new translation of this PC (its listing is pending), or a host pointer seen for the
             * first time, or one reused for other code after qemu invalidated a block. */
            uint32_t source;
            int known = 1;
            if (fresh->used) {
                source = fresh->value;
                fresh->used = 0; /* bound: later executions of this PC go by host pointer */
                pending.count--;
                map_rehash(&pending);
            } else {
                slot_t *listing = map_find(&latest, pc);
                known = listing->used;
                source = known ? listing->value : 0;
            }
            block_t bound = known ? listings[source] : (block_t){.pc = pc};
            id = push(&blocks, &n_blocks, &cap_blocks, bound);
            map_put(&by_host, host, id);
        }
        if (blocks[id].n == 0) unbound++;
        buffer[buffered++] = id;
        executions++;
        if (buffered == sizeof buffer / sizeof buffer[0]) {
            if (fwrite(buffer, sizeof buffer[0], buffered, sequence) != buffered) die("short write");
            buffered = 0;
        }
    }
    if (ferror(log)) die("reading the log failed");
    if (buffered && fwrite(buffer, sizeof buffer[0], buffered, sequence) != buffered) die("short write");
    if (fclose(sequence) != 0) die("cannot finish the sequence file");
    FILE *table = fopen(argv[1], "w");
    if (!table) die("cannot write the blocks file");
    fprintf(table, "# pc instructions");
    for (int c = 0; c < N_CLASSES; ++c) fprintf(table, " %s", CLASS_NAMES[c]);
    fprintf(table, "\n");
    for (size_t i = 0; i < n_blocks; ++i) {
        fprintf(table, "%llx %u", (unsigned long long)blocks[i].pc, blocks[i].n);
        for (int c = 0; c < N_CLASSES; ++c) fprintf(table, " %u", blocks[i].classes[c]);
        fprintf(table, "\n");
    }
    if (fclose(table) != 0) die("cannot finish the blocks file");
    fprintf(stderr, "exec_counter: %zu blocks, %llu executions, %llu unbound\n", n_blocks,
            (unsigned long long)executions, (unsigned long long)unbound);
    return 0;
}
