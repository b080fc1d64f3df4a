/* DYLD_INSERT_LIBRARIES interposer that hides SME and SME2 from a process on macOS.
 *
 * UNTESTED: written for Apple silicon (M4) but never built or run by the
 * project's CI, which has no Mac. On macOS, XNNPACK's cpuinfo asks the kernel
 * with sysctlbyname("hw.optional.arm.FEAT_SME"), "...FEAT_SME2" and related
 * FEAT_SME_* names; answering 0 for every hw.optional.arm.FEAT_SME* name makes
 * one runner build choose the kernels it would choose on a Mac without SME2.
 * The runner must not be a SIP-protected binary (DYLD_* variables are stripped
 * for those); a runner you build yourself is not.
 */
#include <string.h>
#include <sys/sysctl.h>
#include <sys/types.h>

static int masked_sysctlbyname(const char* name, void* oldp, size_t* oldlenp, void* newp, size_t newlen) {
  if (name != NULL && strncmp(name, "hw.optional.arm.FEAT_SME", 24) == 0) {
    if (oldp != NULL && oldlenp != NULL && *oldlenp >= sizeof(int)) {
      memset(oldp, 0, *oldlenp);
    }
    if (oldlenp != NULL && *oldlenp > sizeof(int)) *oldlenp = sizeof(int);
    return 0;
  }
  return sysctlbyname(name, oldp, oldlenp, newp, newlen);
}

/* dyld's interposing tuple: calls to sysctlbyname from every other image go to the replacement. */
__attribute__((used, section("__DATA,__interpose"))) static struct {
  const void* replacement;
  const void* original;
} interpose_sysctlbyname = {(const void*)masked_sysctlbyname, (const void*)sysctlbyname};

/* Lets the plugin check that the library was really loaded into the runner. */
const char pytest_sme2_sme_masked[] = "pytest-sme2: SME/SME2 hidden from sysctlbyname(hw.optional.arm.FEAT_SME*)";
