// Helpers shared by the libFuzzer targets (fuzz/README in docs/hardening.md).
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

// The entry point libFuzzer calls with each input; declared here because
// libFuzzer ships no header for it.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

// A property every input must keep; a failure aborts, which libFuzzer
// reports as a crash with the input saved.
#define KVTIER_FUZZ_CHECK(cond)                                                          \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      std::fprintf(stderr, "%s:%d: fuzz check failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                      \
    }                                                                                    \
  } while (0)

namespace kvtier::fuzz {

// An in-memory file with a path, for readers that only take a path. Each
// Write() replaces the content; every open of path() reads it from the
// start. Nothing touches the disk and nothing is left behind.
class MemFile {
 public:
  MemFile() : fd_(::memfd_create("kvtier-fuzz", 0)) {
    if (fd_ < 0) {
      std::perror("memfd_create");
      std::abort();
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemFile() { ::close(fd_); }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;

  void Write(const uint8_t* data, size_t size) {
    KVTIER_FUZZ_CHECK(::ftruncate(fd_, 0) == 0);
    size_t done = 0;
    while (done < size) {
      const ssize_t n = ::pwrite(fd_, data + done, size - done, static_cast<off_t>(done));
      KVTIER_FUZZ_CHECK(n > 0);
      done += static_cast<size_t>(n);
    }
  }
  const std::string& path() const { return path_; }

 private:
  int fd_;
  std::string path_;
};

}  // namespace kvtier::fuzz
