/* DYLD_INSERT_LIBRARIES interposer that hides SME and SME2 from a process on macOS.
 *
 * NEVER RUN ON A MAC: written for Apple silicon (M4); the project has no Mac. What
 * is checked on Linux (tests/run/test_macos_contract.py): the macOS executorch wheel's
 * cpuinfo (in libexecutorch_threadpool.dylib) imports _sysctlbyname and asks for
 * exactly the SME names below, and pytest_sme2_hides_sysctl and
 * pytest_sme2_hidden_answer (compiled for Linux) hide each of them and nothing else.
 *
 * cpuinfo asks sysctlbyname("hw.optional.arm.FEAT_SME"), "...FEAT_SME2",
 * "...FEAT_SME2p1", "...FEAT_SME_B16B16", "...FEAT_SME_F16F16", "...SME_I16I32",
 * "...SME_BI32I32" and "hw.optional.arm.sme_max_svl_b". Answering 0 for all of
 * them, as macOS does on a Mac without SME, makes one runner build choose the
 * kernels it would choose there: hiding only SME2 would leave the SME1 kernels on.
 * The runner must not be SIP-protected or signed with the hardened runtime (dyld
 * then ignores DYLD_* variables); a runner you build yourself is neither.
 */
#include <stddef.h>

/* Declared here instead of included from the macOS SDK (same signatures as <string.h> and
 * <sys/sysctl.h>) so the file also builds without an SDK: the Linux CI cross-builds it with
 * Debian's clang and ld64.lld and reads the Mach-O it makes. */
int strncmp(const char* a, const char* b, size_t n);
size_t strlen(const char* s);
void* memset(void* p, int value, size_t n);
int sysctlbyname(const char* name, void* oldp, size_t* oldlenp, void* newp, size_t newlen);

/* Prefixes of the hidden names; every SME sysctl of Apple's hw.optional.arm tree starts with one. */
static const char* const kSmePrefixes[] = {"hw.optional.arm.FEAT_SME", "hw.optional.arm.SME_",
                                           "hw.optional.arm.sme_"};

/* 1 if `name` is an SME feature sysctl this library answers itself. */
int pytest_sme2_hides_sysctl(const char* name) {
  if (name == NULL) return 0;
  for (size_t i = 0; i < sizeof(kSmePrefixes) / sizeof(kSmePrefixes[0]); ++i) {
    if (strncmp(name, kSmePrefixes[i], strlen(kSmePrefixes[i])) == 0) return 1;
  }
  return 0;
}

/* sysctlbyname's answer for a hidden name: the integer 0 (cpuinfo reads these as 32-bit
 * integers; a wider buffer is zeroed whole), or the size 4 when the caller only asks for it. */
int pytest_sme2_hidden_answer(void* oldp, size_t* oldlenp) {
  if (oldlenp == NULL) return 0;
  if (oldp != NULL) memset(oldp, 0, *oldlenp);
  if (oldp == NULL || *oldlenp > sizeof(int)) *oldlenp = sizeof(int);
  return 0;
}

#ifdef __APPLE__
static int masked_sysctlbyname(const char* name, void* oldp, size_t* oldlenp, void* newp, size_t newlen) {
  if (pytest_sme2_hides_sysctl(name)) return pytest_sme2_hidden_answer(oldp, oldlenp);
  return sysctlbyname(name, oldp, oldlenp, newp, newlen);
}

/* dyld's interposing tuple: calls to sysctlbyname from every other image go to the replacement. */
__attribute__((used, section("__DATA,__interpose"))) static struct {
  const void* replacement;
  const void* original;
} interpose_sysctlbyname = {(const void*)masked_sysctlbyname, (const void*)sysctlbyname};
#endif

/* Lets the plugin check that the library was really loaded into the runner. */
const char pytest_sme2_sme_masked[] = "pytest-sme2: SME/SME2 hidden from sysctlbyname(hw.optional.arm SME names)";
