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

#include "instruction_classes.h"

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
