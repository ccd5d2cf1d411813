#include "host_buffers.h"

#include <sys/mman.h>

#include <map>
#include <mutex>
#include <new>

namespace kvtier::python {
namespace {

// Sizes round up to this, so that loads of nearby lengths share buffers.
constexpr uint64_t kGranule = 2ull << 20;

struct Pool {
  std::mutex mu;
  std::multimap<uint64_t, void*> free;  // capacity -> buffer
  uint64_t cached = 0;
  uint64_t cap = 1ull << 30;
};

Pool& ThePool() {
  static Pool* pool = new Pool();  // never destroyed: views may outlive static teardown
  return *pool;
}

// Unmaps buffers, largest first, until `keep` bytes or fewer stay. REQUIRES: mu.
void TrimLocked(Pool& p, uint64_t keep) {
  while (p.cached > keep && !p.free.empty()) {
    auto last = std::prev(p.free.end());
    ::munmap(last->second, last->first);
    p.cached -= last->first;
    p.free.erase(last);
  }
}

}  // namespace

void* TakeHostBuffer(uint64_t bytes, uint64_t* capacity) {
  const uint64_t size = (bytes + kGranule - 1) / kGranule * kGranule;
  Pool& p = ThePool();
  {
    std::lock_guard<std::mutex> lock(p.mu);
    // The smallest free buffer that fits, unless it is more than twice the size.
    auto it = p.free.lower_bound(size);
    if (it != p.free.end() && it->first <= 2 * size) {
      void* buffer = it->second;
      *capacity = it->first;
      p.cached -= it->first;
      p.free.erase(it);
      return buffer;
    }
  }
  void* buffer = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (buffer == MAP_FAILED) throw std::bad_alloc();
  // Huge pages where the kernel makes them on request (transparent huge
  // pages "madvise"): a copy into 4 KiB pages walks the page table per 4 KiB.
  ::madvise(buffer, size, MADV_HUGEPAGE);
  *capacity = size;
  return buffer;
}

void GiveHostBuffer(void* buffer, uint64_t capacity) {
  Pool& p = ThePool();
  std::lock_guard<std::mutex> lock(p.mu);
  if (capacity > p.cap) {
    ::munmap(buffer, capacity);
    return;
  }
  TrimLocked(p, p.cap - capacity);
  p.free.emplace(capacity, buffer);
  p.cached += capacity;
}

void SetHostBufferCacheBytes(uint64_t bytes) {
  Pool& p = ThePool();
  std::lock_guard<std::mutex> lock(p.mu);
  p.cap = bytes;
  TrimLocked(p, bytes);
}

uint64_t HostBufferCacheBytes() {
  Pool& p = ThePool();
  std::lock_guard<std::mutex> lock(p.mu);
  return p.cap;
}

uint64_t HostBufferCachedBytes() {
  Pool& p = ThePool();
  std::lock_guard<std::mutex> lock(p.mu);
  return p.cached;
}

}  // namespace kvtier::python
