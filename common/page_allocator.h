// PageAllocator: the allocator of the arrays that grow with the number of
// blocks (the index's nodes and slot table, the engine's per-block records,
// the policies' per-block nodes). An array of kMapBytes or more is mapped
// straight from the kernel and unmapped when freed; smaller ones come from
// malloc as usual.
//
// Why: such an array grows by doubling, a copy into a new buffer. kvtierd
// keeps every allocation under 32 MiB in malloc's heap and trims it only
// past 256 MiB (TuneMallocForLargeBuffers, for its large reply buffers), so
// with malloc each outgrown copy of an array under 32 MiB stayed resident:
// up to half again of every such array, a daemon's memory per block 1.5x
// higher at 10 thousand blocks than at a million. Mapped, an outgrown copy
// goes back to the kernel at once, and only pages written count: memory per
// block is the same at any size.
//
// Thread-safety: as std::allocator (stateless).
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <memory>
#include <new>
#include <vector>

namespace kvtier {

template <typename T>
class PageAllocator {
 public:
  using value_type = T;
  // Arrays this large or larger are mapped (16 pages: a mapping's page
  // rounding is then at most 1/16 of it).
  static constexpr size_t kMapBytes = 64 * 1024;

  PageAllocator() noexcept = default;
  template <typename U>
  PageAllocator(const PageAllocator<U>&) noexcept {}  // NOLINT: rebinding is implicit

  T* allocate(size_t n) {
    const size_t bytes = n * sizeof(T);
    if (bytes < kMapBytes) return std::allocator<T>().allocate(n);
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    return static_cast<T*>(p);
  }

  void deallocate(T* p, size_t n) noexcept {
    const size_t bytes = n * sizeof(T);
    if (bytes < kMapBytes) return std::allocator<T>().deallocate(p, n);
    ::munmap(p, bytes);
  }

  template <typename U>
  friend bool operator==(const PageAllocator&, const PageAllocator<U>&) noexcept {
    return true;
  }
};

// A vector of per-block records.
template <typename T>
using PageVector = std::vector<T, PageAllocator<T>>;

}  // namespace kvtier
