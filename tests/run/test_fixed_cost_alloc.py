"""The allocator every counted run preloads (run/native/fixed_cost_alloc.c) is a correct malloc family.

A guest program under qemu makes a seeded random sequence of malloc, calloc, realloc, posix_memalign,
aligned_alloc and free calls, small blocks and large ones, fills each block with its own byte, checks every byte
before the block is freed or moved, checks alignment and calloc's zeros, and prints ``malloc_usable_size`` of a
17-byte block: 32 under this allocator (its class), 24 under glibc's, so the control run without the preload
shows the test reads the preloaded library and not glibc's. That a counted run's guest really loads it is checked
on every counted run (run/targets/emulated.py reads the run's memory map).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from pytest_sme2.run import emulation_setup

STATUS = emulation_setup.status()

STRESS = r"""
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SLOTS 512
static unsigned char *block[SLOTS];
static size_t size[SLOTS];
static unsigned char fill[SLOTS];
static unsigned long state = 12345;

static unsigned long next(void) { state = state * 6364136223846793005UL + 1442695040888963407UL; return state >> 33; }

static int intact(int i) {
  for (size_t k = 0; k < size[i]; k++) if (block[i][k] != fill[i]) return 0;
  return 1;
}

static size_t pick_size(void) {
  unsigned long kind = next() % 100;
  if (kind < 70) return next() % 600;                /* small, 0 included */
  if (kind < 95) return next() % (600 * 1024);       /* up to the largest classes */
  return (1 << 20) + next() % (3 << 20);             /* large: mapped one each */
}

int main(void) {
  for (int step = 0; step < 20000; step++) {
    int i = (int)(next() % SLOTS);
    if (block[i] != NULL && !intact(i)) { printf("corrupt slot %d at step %d\n", i, step); return 1; }
    unsigned long op = next() % 6;
    if (op == 0) { free(block[i]); block[i] = NULL; size[i] = 0; continue; }
    size_t n = pick_size();
    unsigned char *p;
    if (op == 1 && block[i] != NULL) {                      /* realloc keeps what fits */
      p = realloc(block[i], n);
      if (n != 0 && p == NULL) { printf("realloc failed\n"); return 1; }
      size_t kept = size[i] < n ? size[i] : n;
      for (size_t k = 0; k < kept; k++) if (p[k] != fill[i]) { printf("realloc lost data\n"); return 1; }
    } else {
      free(block[i]);
      if (op == 2) {
        p = calloc(1, n);
        for (size_t k = 0; k < n; k++) if (p[k] != 0) { printf("calloc not zero\n"); return 1; }
      } else if (op == 3) {
        size_t align = (size_t)1 << (4 + next() % 10);
        void *q = NULL;
        if (posix_memalign(&q, align, n) != 0) { printf("posix_memalign failed\n"); return 1; }
        p = q;
        if ((uintptr_t)p % align != 0) { printf("misaligned %zu\n", align); return 1; }
      } else if (op == 4) {
        size_t align = (size_t)1 << (4 + next() % 14);
        p = aligned_alloc(align, n);
        if ((uintptr_t)p % align != 0) { printf("misaligned %zu\n", align); return 1; }
      } else {
        p = malloc(n);
        if ((uintptr_t)p % 16 != 0) { printf("malloc misaligned\n"); return 1; }
      }
    }
    if (p == NULL && n != 0) { printf("allocation of %zu failed\n", n); return 1; }
    if (n != 0 && malloc_usable_size(p) < n) { printf("usable size too small\n"); return 1; }
    block[i] = p; size[i] = n; fill[i] = (unsigned char)(1 + next() % 255);
    memset(p, fill[i], n);
  }
  for (int i = 0; i < SLOTS; i++) {
    if (block[i] != NULL && !intact(i)) { printf("corrupt at end\n"); return 1; }
    free(block[i]);
  }
  void *probe = malloc(17);
  printf("ok %zu\n", malloc_usable_size(probe));
  return 0;
}
"""


@pytest.mark.skipif(
    not STATUS.ready or shutil.which("aarch64-linux-gnu-gcc") is None,
    reason="needs the emulated target (`pytest-sme2 setup-emulation`) and aarch64-linux-gnu-gcc (`make system-deps`)",
)
def test_the_counted_runs_allocator_keeps_every_block_intact_under_qemu(tmp_path: Path) -> None:
    from pytest_sme2.run.native.build import build_fixed_cost_allocator

    (tmp_path / "stress.c").write_text(STRESS)
    subprocess.run(["aarch64-linux-gnu-gcc", "-O1", "-o", "stress", "stress.c"], cwd=tmp_path, check=True)
    env = {**os.environ, "QEMU_LD_PREFIX": str(emulation_setup.SYSROOT)}
    allocator = build_fixed_cost_allocator()

    def stress(*flags: str) -> str:
        done = subprocess.run(
            [str(STATUS.qemu), "-cpu", "max", *flags, "./stress"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        return (done.stdout + done.stderr).strip()

    assert stress("-E", f"LD_PRELOAD={allocator}") == "ok 32"
    assert stress() == "ok 24"  # glibc's own: the same program, so the line above read the preloaded library
