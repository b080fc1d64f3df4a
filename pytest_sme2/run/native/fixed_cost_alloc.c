/* LD_PRELOAD allocator for counted runs: what a call costs depends on its arguments only.
 *
 * glibc's malloc walks bins, splits and merges chunks: the instructions a call takes follow the state of the
 * heap that every call before it left. An operator that allocates while it runs (KleidiAI's packed operand of a
 * PF32 batch matmul, a portable kernel's scratch) then counts a few hundred instructions more or less wherever
 * it runs after other work, so its count in one program is not its count in another, and counts cannot be
 * reused between programs (issue 63). Here a call's path is decided by its size and alignment alone:
 *
 * - small blocks (up to SMALL_MAX bytes) come in power-of-two classes, each class in its own slice of one
 *   region reserved at the first call; a class hands out the block its free list holds, or the next one of its
 *   slice, chosen without a branch (a sentinel block whose link points at itself marks an empty list);
 * - large blocks are mmap'd and munmap'd one each (a fixed number of guest instructions: qemu-user runs the
 *   system call itself, uncounted), which also gives their memory back at free.
 *
 * glibc supports replacing its allocator so ("Replacing malloc" in its manual): every function of the family is
 * defined here. A counted run has one thread, the lock is for safety and costs the same uncontended.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define MIN_SHIFT 4                                   /* 16-byte blocks, glibc's alignment */
#define CLASSES 16                                    /* 16 B .. 512 KiB */
#define SMALL_MAX ((size_t)1 << (MIN_SHIFT + CLASSES - 1))
#define SLICE_SHIFT 31                                /* 2 GiB of addresses a class, never all touched */
#define REGION_SIZE ((size_t)CLASSES << SLICE_SHIFT)  /* 32 GiB reserved, MAP_NORESERVE */
#define PAGE 4096
#define LARGE_HEADER 32 /* before a large block: its mapping's start and length, and the size asked */

typedef struct block {
  struct block *next;
} block;

static block empty = {&empty}; /* an empty list's head: its own link, so popping it changes nothing */
static block *heads[CLASSES];
static char *fresh[CLASSES]; /* the next block of each slice never handed out */
static char *region;
static volatile int lock_word;

static void lock(void) {
  while (__atomic_exchange_n(&lock_word, 1, __ATOMIC_ACQUIRE)) {
  }
}

static void unlock(void) { __atomic_store_n(&lock_word, 0, __ATOMIC_RELEASE); }

/* The first call reserves the region; every later call passes this test the same way. */
static int ready(void) {
  if (region != NULL) {
    return 1;
  }
  void *start = mmap(NULL, REGION_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (start == MAP_FAILED) {
    return 0;
  }
  region = start;
  for (int c = 0; c < CLASSES; c++) {
    heads[c] = &empty;
    fresh[c] = region + ((size_t)c << SLICE_SHIFT);
  }
  return 1;
}

/* The class of a small request: the smallest power of two of at least n bytes (and 16), without a loop. */
static inline int class_of(size_t n) {
  size_t m = ((n + (n == 0)) - 1) | (((size_t)1 << MIN_SHIFT) - 1); /* n <= 16: 15, class 0 */
  return (int)(64 - __builtin_clzl(m)) - MIN_SHIFT;
}

static void *large_alloc(size_t n, size_t align);

static void *small_alloc(size_t n) {
  int c = class_of(n);
  if (heads[c] == &empty && fresh[c] == region + ((size_t)(c + 1) << SLICE_SHIFT)) {
    return large_alloc(n, PAGE); /* a class's 2 GiB all live: the rest of it as large blocks */
  }
  lock();
  block *head = heads[c];
  uintptr_t none = (uintptr_t)(head == &empty); /* 1: take the slice's next block, 0: the list's head */
  uintptr_t mask = (uintptr_t)0 - none;
  char *next_fresh = fresh[c] + ((size_t)1 << (c + MIN_SHIFT));
  void *taken = (void *)(((uintptr_t)fresh[c] & mask) | ((uintptr_t)head & ~mask));
  heads[c] = head->next; /* the sentinel's link is itself */
  fresh[c] = (char *)(((uintptr_t)next_fresh & mask) | ((uintptr_t)fresh[c] & ~mask));
  unlock();
  return taken;
}

static void small_free(void *p) {
  int c = (int)(((char *)p - region) >> SLICE_SHIFT);
  block *b = p;
  lock();
  b->next = heads[c];
  heads[c] = b;
  unlock();
}

/* A large block aligned to `align` (a power of two, at least PAGE): its own mapping, its header just before it. */
static void *large_alloc(size_t n, size_t align) {
  size_t length = n + align + PAGE;
  char *start = mmap(NULL, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (start == MAP_FAILED) {
    errno = ENOMEM;
    return NULL;
  }
  char *p = (char *)(((uintptr_t)start + PAGE + align - 1) & ~(uintptr_t)(align - 1));
  size_t *header = (size_t *)(p - LARGE_HEADER);
  header[0] = (size_t)start;
  header[1] = length;
  header[2] = n;
  return p;
}

static int is_small(const void *p) { return (const char *)p >= region && (const char *)p < region + REGION_SIZE; }

static size_t usable(const void *p) {
  if (is_small(p)) {
    return (size_t)1 << ((((const char *)p - region) >> SLICE_SHIFT) + MIN_SHIFT);
  }
  return ((const size_t *)((const char *)p - LARGE_HEADER))[2];
}

static void *aligned(size_t align, size_t n) {
  if (!ready() || n > SIZE_MAX / 2 || align > SIZE_MAX / 4) {
    errno = ENOMEM;
    return NULL;
  }
  size_t wanted = n > align ? n : align; /* a class of at least `align` bytes is aligned to it */
  if (wanted <= SMALL_MAX) {
    return small_alloc(wanted);
  }
  return large_alloc(n, align > PAGE ? align : PAGE);
}

void *malloc(size_t n) { return aligned(16, n); }

void free(void *p) {
  if (p == NULL) {
    return;
  }
  if (is_small(p)) {
    small_free(p);
    return;
  }
  const size_t *header = (const size_t *)((const char *)p - LARGE_HEADER);
  munmap((void *)header[0], header[1]);
}

void *calloc(size_t count, size_t size) {
  if (size != 0 && count > SIZE_MAX / size) {
    errno = ENOMEM;
    return NULL;
  }
  size_t n = count * size;
  void *p = malloc(n);
  if (p != NULL && n <= SMALL_MAX) { /* a large block is a fresh mapping: zero already */
    memset(p, 0, n);
  }
  return p;
}

void *realloc(void *p, size_t n) {
  if (p == NULL) {
    return malloc(n);
  }
  if (n == 0) {
    free(p);
    return NULL;
  }
  void *moved = malloc(n);
  if (moved != NULL) {
    size_t old = usable(p);
    memcpy(moved, p, old < n ? old : n);
    free(p);
  }
  return moved;
}

void *reallocarray(void *p, size_t count, size_t size) {
  if (size != 0 && count > SIZE_MAX / size) {
    errno = ENOMEM;
    return NULL;
  }
  return realloc(p, count * size);
}

int posix_memalign(void **out, size_t align, size_t n) {
  if (align < sizeof(void *) || (align & (align - 1)) != 0) {
    return EINVAL;
  }
  void *p = aligned(align < 16 ? 16 : align, n);
  if (p == NULL) {
    return ENOMEM;
  }
  *out = p;
  return 0;
}

void *aligned_alloc(size_t align, size_t n) {
  if (align == 0 || (align & (align - 1)) != 0) {
    errno = EINVAL;
    return NULL;
  }
  return aligned(align < 16 ? 16 : align, n);
}

void *memalign(size_t align, size_t n) { return aligned_alloc(align, n); }

void *valloc(size_t n) { return aligned(PAGE, n); }

void *pvalloc(size_t n) { return aligned(PAGE, (n + PAGE - 1) & ~(size_t)(PAGE - 1)); }

size_t malloc_usable_size(void *p) { return p == NULL ? 0 : usable(p); }

/* Lets a check see that the library was really loaded into the runner. */
const char pytest_sme2_fixed_cost_alloc[] = "pytest-sme2: allocator whose cost depends on a call's arguments only";
