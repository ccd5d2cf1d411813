#include "common/page_allocator.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

namespace kvtier {
namespace {

// Whether the page holding `p` is mapped in this process.
bool Mapped(const void* p) {
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  unsigned char resident = 0;
  void* start = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(p) & ~(page - 1));
  return ::mincore(start, page, &resident) == 0 || errno != ENOMEM;
}

TEST(PageAllocatorTest, LargeArraysAreMappedAndGoBackWhenFreed) {
  PageAllocator<uint64_t> a;
  const size_t n = PageAllocator<uint64_t>::kMapBytes / sizeof(uint64_t);
  uint64_t* p = a.allocate(n);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE)), 0u);
  p[0] = 1;
  p[n - 1] = 2;
  EXPECT_TRUE(Mapped(p));
  a.deallocate(p, n);
  EXPECT_FALSE(Mapped(p));  // unmapped at once, not kept in malloc's heap
}

TEST(PageAllocatorTest, SmallArraysComeFromMalloc) {
  PageAllocator<uint32_t> a;
  uint32_t* p = a.allocate(16);
  p[15] = 7;
  EXPECT_EQ(p[15], 7u);
  a.deallocate(p, 16);
}

TEST(PageAllocatorTest, AVectorKeepsItsElementsAcrossGrowth) {
  PageVector<uint32_t> v;
  for (uint32_t i = 0; i < 100'000; ++i) v.push_back(i * 3);  // crosses kMapBytes
  ASSERT_EQ(v.size(), 100'000u);
  for (uint32_t i = 0; i < 100'000; ++i) ASSERT_EQ(v[i], i * 3) << i;
  PageVector<uint32_t> copy = v;
  EXPECT_EQ(copy, v);
  v.clear();
  v.shrink_to_fit();
  EXPECT_EQ(copy.back(), 99'999u * 3);
}

}  // namespace
}  // namespace kvtier
