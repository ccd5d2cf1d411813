// Test support: a fresh directory for one test, removed with everything in
// it when the TempDir goes.
#pragma once

#include <string>

namespace kvtier::testing {

class TempDir {
 public:
  // mkdtemp(prefix + "-XXXXXX"). /tmp may be a tmpfs, which refuses
  // O_DIRECT: an SSD tier's directory takes a prefix under /var/tmp.
  explicit TempDir(const std::string& prefix = "/tmp/kvtier-test");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // Where a path is wanted: a flag's value, a std::filesystem call.
  operator const std::string&() const { return path_; }  // NOLINT(google-explicit-constructor)
  // path() + "/" + name.
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace kvtier::testing
