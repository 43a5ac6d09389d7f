// SPDX-License-Identifier: MIT
#include <ckptfs/base/cpu_features.hpp>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace ckptfs {

bool cpu_has_avx2_f16c() noexcept {
#if defined(__x86_64__)
  // The avx2 check includes the OS saving the AVX registers (XGETBV), which F16C needs too.
  // F16C is read from CPUID itself: clang 14 does not know the name "f16c" in
  // __builtin_cpu_supports.
  __builtin_cpu_init();
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
  return __builtin_cpu_supports("avx2") && f16c;
#else
  return false;
#endif
}

}  // namespace ckptfs
