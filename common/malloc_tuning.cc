#include "common/malloc_tuning.h"

#include <malloc.h>

namespace kvtier {

void TuneMallocForLargeBuffers() {
  // 32 MiB is the largest mmap threshold glibc accepts on 64-bit
  // (DEFAULT_MMAP_THRESHOLD_MAX); setting it also stops glibc adjusting it.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
}

}  // namespace kvtier
