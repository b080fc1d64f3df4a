/*
 * count_plugin: a qemu TCG plugin that counts what the guest's first thread executes, inside the emulator.
 *
 * Why: counting from qemu's execution log costs a log line, and a write(2), per executed block: 2.3-2.7x the
 * uncounted run, and a trace that grows with the model's work (a 208 GFLOP model did not finish one inference in
 * 16 minutes). Here every translated block gets one inline add into a counter of its own (no call, no output),
 * and only the blocks where ETDump events and XNNPACK operators begin and end ("markers", given by the caller)
 * call back into this plugin, which then writes what ran since the previous marker: the blocks whose counters
 * moved, and by how much. What is written grows with the number of events, not with the instructions executed.
 * pytest_sme2/evidence/qemu_counts.py cuts events from it exactly as it cuts them from the log's full sequence.
 *
 * Arguments (qemu -plugin PATH,markers=FILE,out=FILE,blocks=FILE[,skip=LOW-HIGH][,progress=FILE]):
 *   markers  text, one marker per line: "pc HEX" (a block starting there) or "range LOW HIGH" (every block
 *            starting in [LOW, HIGH)), addresses in hexadecimal
 *   skip     guest addresses [LOW, HIGH) not counted at all (the dynamic loader's image: qemu_counts.py's log
 *            leaves it out with -dfilter, so both count the same)
 *   out      the segments: per marker executed by thread 0, little-endian uint64 words
 *            [block id of the marker, sequence position of the marker, pairs N, then N x (block id, executions)]
 *            where the executions are those since the previous marker (the previous marker's block included,
 *            this one's not) and the position counts the blocks thread 0 executed before this one; at exit a
 *            last record with block id 2^64-1 holds the rest
 *   blocks   at exit, the table of every translated block, as exec_counter writes it:
 *            "# pc instructions CLASS..." then "guest_pc instructions count_of_each_class..." per block id
 *   progress optional: a file rewritten about once a second with "executions instructions" so far (thread 0),
 *            for a progress line and for "how far it got": the instructions summed from the blocks' counters
 *            when a loop's back edge (a block ending in a backward branch) has been taken TICK times, so a single
 *            operator of minutes still shows progress; the executions as of the last marker
 * Every translation of a block is a block id of its own (qemu translates a PC again after invalidating it).
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <qemu-plugin.h>

#include "instruction_classes.h"

QEMU_PLUGIN_EXPORT int qemu_plugin_version = QEMU_PLUGIN_VERSION;

/* Counters come in chunks of CHUNK blocks (512 KiB per guest thread each), made as translations need them, so
 * start-up touches no more memory than the blocks translated (a 16 MiB board up front cost 0.2 s of page faults);
 * the first is made at install (see qemu_plugin_install). */
#define CHUNK_BITS 16
#define CHUNK (1u << CHUNK_BITS)
#define MAX_CHUNKS 64
#define MAX_BLOCKS (CHUNK * MAX_CHUNKS)
#define NO_MARKER UINT64_MAX
/* Back edges taken between two looks at the clock for the progress file: about 10^6-10^7 instructions, well under a
 * tenth of a second. Only back-edge blocks carry this counter and its conditional callback: every long run of guest
 * code is a loop, and a callback test on every block cost 8-15 ms of a 50 ms start-up (a callback per block, as the
 * marker blocks have, would cost far more) */
#define TICK (UINT64_C(1) << 16)

typedef struct {
    uint64_t pc;
    uint32_t n;
    uint32_t classes[N_CLASSES];
} block_t;

static block_t *blocks;
static uint64_t n_blocks;
static uint64_t *seen;          /* thread 0's counter of each block at the previous marker */
static uint64_t position;       /* thread 0's block executions before the current marker */
static uint32_t *lengths;       /* each block's instructions, apart from ``blocks`` for a fast sum */
static struct qemu_plugin_scoreboard *tick_board;
static qemu_plugin_u64 ticks;   /* per guest thread: back edges taken since its counter was last emptied */
static struct qemu_plugin_scoreboard *counters[MAX_CHUNKS];
static uint64_t *marker_pcs;
static size_t n_marker_pcs;
static uint64_t (*ranges)[2];
static size_t n_ranges;
static uint64_t skip_low = 1, skip_high = 0;
static FILE *out;
static char *blocks_path, *progress_path;
static struct timespec last_progress;
static int overflowed;
static GMutex lock;

static void fail(const char *what, const char *detail) {
    fprintf(stderr, "count_plugin: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int is_marker(uint64_t pc) {
    if (bsearch(&pc, marker_pcs, n_marker_pcs, sizeof marker_pcs[0], cmp_u64)) return 1;
    for (size_t i = 0; i < n_ranges; ++i)
        if (pc >= ranges[i][0] && pc < ranges[i][1]) return 1;
    return 0;
}

static int read_markers(const char *path) {
    FILE *file = fopen(path, "r");
    if (!file) return fail("cannot read the markers file", path), -1;
    char kind[16];
    uint64_t a, b;
    size_t cap_pcs = 0, cap_ranges = 0;
    int got;
    while ((got = fscanf(file, "%15s %" SCNx64, kind, &a)) == 2) {
        if (strcmp(kind, "pc") == 0) {
            if (n_marker_pcs == cap_pcs) {
                cap_pcs = cap_pcs ? 2 * cap_pcs : 64;
                marker_pcs = realloc(marker_pcs, cap_pcs * sizeof marker_pcs[0]);
                if (!marker_pcs) return fclose(file), fail("out of memory", NULL), -1;
            }
            marker_pcs[n_marker_pcs++] = a;
        } else if (strcmp(kind, "range") == 0 && fscanf(file, "%" SCNx64, &b) == 1) {
            if (n_ranges == cap_ranges) {
                cap_ranges = cap_ranges ? 2 * cap_ranges : 8;
                ranges = realloc(ranges, cap_ranges * sizeof ranges[0]);
                if (!ranges) return fclose(file), fail("out of memory", NULL), -1;
            }
            ranges[n_ranges][0] = a;
            ranges[n_ranges++][1] = b;
        } else {
            fclose(file);
            return fail("a markers line is neither \"pc HEX\" nor \"range LOW HIGH\"", path), -1;
        }
    }
    fclose(file);
    if (got != EOF) return fail("the markers file does not parse", path), -1;
    qsort(marker_pcs, n_marker_pcs, sizeof marker_pcs[0], cmp_u64);
    return 0;
}

static void write_words(const uint64_t *words, size_t n) {
    if (fwrite(words, sizeof words[0], n, out) != n) fail("short write of the segments", NULL);
}

/* Thread 0's instructions so far: each block's executions times its length (called under ``lock``). */
static uint64_t instructions_so_far(void) {
    uint64_t sum = 0;
    const uint64_t *current = NULL;
    for (uint64_t id = 0; id < n_blocks; ++id) {
        if ((id & (CHUNK - 1)) == 0) current = qemu_plugin_scoreboard_find(counters[id >> CHUNK_BITS], 0);
        sum += current[id & (CHUNK - 1)] * lengths[id];
    }
    return sum;
}

static void write_progress(void) {
    char staging[4096];
    snprintf(staging, sizeof staging, "%s.tmp", progress_path);
    FILE *file = fopen(staging, "w");
    if (!file) return;
    fprintf(file, "%" PRIu64 " %" PRIu64 "\n", position, instructions_so_far());
    if (fclose(file) == 0) rename(staging, progress_path);
}

/* The progress file again when a second has passed since it was last written (called under ``lock``). */
static void progress_now_and_then(void) {
    if (!progress_path) return;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if ((now.tv_sec - last_progress.tv_sec) * 1000000000L + (now.tv_nsec - last_progress.tv_nsec) >= 1000000000L) {
        last_progress = now;
        write_progress();
    }
}

/* A guest thread's back-edge counter passed TICK: emptied, and for thread 0 the progress file written if it is time.
 * Other threads' counters are emptied too (their callbacks fire alike) and otherwise not used. */
static void ticked_over(unsigned int vcpu, void *udata) {
    g_mutex_lock(&lock);
    qemu_plugin_u64_set(ticks, vcpu, 0);
    if (vcpu == 0) progress_now_and_then();
    g_mutex_unlock(&lock);
}

/* Write the blocks thread 0 executed since the previous marker, ending a segment at marker block ``marker``. */
static void end_segment(uint64_t marker) {
    static uint64_t *record;
    static uint64_t capacity;
    if (capacity < 3 + 2 * n_blocks) {
        capacity = 3 + 2 * (n_blocks + 4096);
        record = realloc(record, capacity * sizeof record[0]);
        if (!record) {
            fail("out of memory", NULL);
            exit(2);
        }
    }
    uint64_t *current = NULL;
    uint64_t pairs = 0, moved = 0;
    for (uint64_t id = 0; id < n_blocks; ++id) {
        if ((id & (CHUNK - 1)) == 0) current = qemu_plugin_scoreboard_find(counters[id >> CHUNK_BITS], 0);
        uint64_t delta = current[id & (CHUNK - 1)] - seen[id];
        if (!delta) continue;
        record[3 + 2 * pairs] = id;
        record[4 + 2 * pairs] = delta;
        seen[id] = current[id & (CHUNK - 1)];
        moved += delta;
        ++pairs;
    }
    position += moved;
    record[0] = marker;
    record[1] = position;
    record[2] = pairs;
    write_words(record, 3 + 2 * pairs);
    progress_now_and_then();
}

static void marker_executed(unsigned int vcpu, void *udata) {
    if (vcpu != 0) return; /* other guest threads: not the inference */
    g_mutex_lock(&lock);
    end_segment((uint64_t)(uintptr_t)udata);
    g_mutex_unlock(&lock);
}

/* Whether an AArch64 instruction is a direct branch to itself or backwards (B, B.cond/BC.cond, CB(N)Z, TB(N)Z with
 * an offset of at most 0): the back edge of a loop. BL and indirect branches are not. */
static int is_back_edge(uint32_t word) {
    if ((word & 0xFC000000u) == 0x14000000u) return (word & 0x02000000u) || (word & 0x03FFFFFFu) == 0;
    if ((word & 0xFF000000u) == 0x54000000u || (word & 0x7E000000u) == 0x34000000u)
        return (word & 0x00800000u) || ((word >> 5) & 0x7FFFFu) == 0;
    if ((word & 0x7E000000u) == 0x36000000u) return (word & 0x00040000u) || ((word >> 5) & 0x3FFFu) == 0;
    return 0;
}

static void translated(qemu_plugin_id_t id, struct qemu_plugin_tb *tb) {
    uint64_t pc = qemu_plugin_tb_vaddr(tb);
    if (pc >= skip_low && pc < skip_high) return;
    size_t n = qemu_plugin_tb_n_insns(tb);
    block_t block = {.pc = pc, .n = (uint32_t)n};
    uint32_t word = 0;
    for (size_t i = 0; i < n; ++i) {
        word = 0;
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
        qemu_plugin_insn_data(insn, &word, sizeof word);
        block.classes[classify(word)]++;
    }
    g_mutex_lock(&lock);
    if (n_blocks == MAX_BLOCKS) {
        if (!overflowed) fail("more translated blocks than this plugin counts", "the counts are not kept");
        overflowed = 1;
        g_mutex_unlock(&lock);
        return;
    }
    uint64_t block_id = n_blocks++;
    blocks[block_id] = block;
    lengths[block_id] = block.n;
    if (!counters[block_id >> CHUNK_BITS])
        counters[block_id >> CHUNK_BITS] = qemu_plugin_scoreboard_new(CHUNK * sizeof(uint64_t));
    struct qemu_plugin_scoreboard *board = counters[block_id >> CHUNK_BITS];
    g_mutex_unlock(&lock);
    /* the callback before the add: a marker's segment ends before its own block's execution */
    if (is_marker(pc))
        qemu_plugin_register_vcpu_tb_exec_cb(tb, marker_executed, QEMU_PLUGIN_CB_NO_REGS,
                                             (void *)(uintptr_t)block_id);
    qemu_plugin_u64 counter = {.score = board, .offset = (block_id & (CHUNK - 1)) * sizeof(uint64_t)};
    qemu_plugin_register_vcpu_tb_exec_inline_per_vcpu(tb, QEMU_PLUGIN_INLINE_ADD_U64, counter, 1);
    /* the same in the loader probe as in the counted run (progress or not): the same host allocations */
    if (n && is_back_edge(word)) {
        qemu_plugin_register_vcpu_tb_exec_inline_per_vcpu(tb, QEMU_PLUGIN_INLINE_ADD_U64, ticks, 1);
        qemu_plugin_register_vcpu_tb_exec_cond_cb(tb, ticked_over, QEMU_PLUGIN_CB_NO_REGS, QEMU_PLUGIN_COND_GE,
                                                  ticks, TICK, NULL);
    }
}

static void finished(qemu_plugin_id_t id, void *p) {
    g_mutex_lock(&lock);
    end_segment(NO_MARKER);
    if (fclose(out) != 0) fail("cannot finish the segments file", NULL);
    FILE *table = fopen(blocks_path, "w");
    if (!table) {
        fail("cannot write the blocks file", blocks_path);
    } else {
        fprintf(table, "# pc instructions");
        for (int c = 0; c < N_CLASSES; ++c) fprintf(table, " %s", CLASS_NAMES[c]);
        fprintf(table, "\n");
        for (uint64_t i = 0; i < n_blocks; ++i) {
            fprintf(table, "%" PRIx64 " %u", blocks[i].pc, blocks[i].n);
            for (int c = 0; c < N_CLASSES; ++c) fprintf(table, " %u", blocks[i].classes[c]);
            fprintf(table, "\n");
        }
        if (fclose(table) != 0) fail("cannot finish the blocks file", blocks_path);
    }
    if (progress_path) write_progress();
    fprintf(stderr, "count_plugin: %" PRIu64 " blocks, %" PRIu64 " executions, %s\n", n_blocks, position,
            overflowed ? "overflowed" : "complete");
    g_mutex_unlock(&lock);
}

QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc, char **argv) {
    const char *markers = NULL, *out_path = NULL;
    for (int i = 0; i < argc; ++i) {
        char *value = strchr(argv[i], '=');
        if (!value) return fail("an argument is not NAME=VALUE", argv[i]), -1;
        *value++ = '\0';
        if (strcmp(argv[i], "markers") == 0) markers = value;
        else if (strcmp(argv[i], "out") == 0) out_path = value;
        else if (strcmp(argv[i], "blocks") == 0) blocks_path = strdup(value);
        else if (strcmp(argv[i], "progress") == 0) progress_path = strdup(value);
        else if (strcmp(argv[i], "skip") == 0) {
            if (sscanf(value, "%" SCNx64 "-%" SCNx64, &skip_low, &skip_high) != 2)
                return fail("skip is not LOW-HIGH in hexadecimal", value), -1;
        } else return fail("unknown argument", argv[i]), -1;
    }
    if (!markers || !out_path || !blocks_path) return fail("markers=, out= and blocks= are needed", NULL), -1;
    if (read_markers(markers) != 0) return -1;
    out = fopen(out_path, "wb");
    if (!out) return fail("cannot write the segments file", out_path), -1;
    static char buffer[1 << 20];
    setvbuf(out, buffer, _IOFBF, sizeof buffer);
    blocks = calloc(MAX_BLOCKS, sizeof blocks[0]);
    seen = calloc(MAX_BLOCKS, sizeof seen[0]);
    lengths = calloc(MAX_BLOCKS, sizeof lengths[0]);
    if (!blocks || !seen || !lengths) return fail("out of memory", NULL), -1;
    /* the first chunk now, before the guest runs: a counted run and its loader probe (run/guest_loader.py, which
     * counts the loader itself) then make the same host allocations until the guest's libraries are mapped, so
     * qemu puts them at the same guest addresses in both (the counted run checks this against its memory map) */
    counters[0] = qemu_plugin_scoreboard_new(CHUNK * sizeof(uint64_t));
    tick_board = qemu_plugin_scoreboard_new(sizeof(uint64_t));
    ticks = (qemu_plugin_u64){.score = tick_board, .offset = 0};
    qemu_plugin_register_vcpu_tb_trans_cb(id, translated);
    qemu_plugin_register_atexit_cb(id, finished, NULL);
    return 0;
}
