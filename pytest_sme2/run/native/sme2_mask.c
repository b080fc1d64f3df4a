/* LD_PRELOAD library that hides SME and SME2 from a process.
 *
 * XNNPACK's cpuinfo decides whether to use SME/SME2 kernels from
 * getauxval(AT_HWCAP2). Answering that call with the SME bits cleared makes
 * one runner build pick exactly the kernels it would pick on the same CPU
 * without SME2, with every other difference between the two runs removed.
 * Bit values: Linux arch/arm64/include/uapi/asm/hwcap.h.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>

#ifndef AT_HWCAP2
#define AT_HWCAP2 26
#endif

/* HWCAP2_SME .. HWCAP2_SME_FA64 (bits 23-30), HWCAP2_SME2 .. HWCAP2_SME_F16F16 (bits 37-42). */
#define SME_HWCAP2_MASK ((0xFFUL << 23) | (0x3FUL << 37))

unsigned long getauxval(unsigned long type) {
  static unsigned long (*real_getauxval)(unsigned long) = NULL;
  if (real_getauxval == NULL) {
    real_getauxval = (unsigned long (*)(unsigned long))dlsym(RTLD_NEXT, "getauxval");
  }
  unsigned long value = real_getauxval ? real_getauxval(type) : 0;
  if (type == AT_HWCAP2) {
    value &= ~SME_HWCAP2_MASK;
  }
  return value;
}

/* Lets the plugin check that the library was really loaded into the runner. */
const char pytest_sme2_sme_masked[] = "pytest-sme2: SME/SME2 hidden from getauxval(AT_HWCAP2)";
