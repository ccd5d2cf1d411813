#include "support/temp_dir.h"

#include <unistd.h>

#include <filesystem>
#include <stdexcept>
#include <system_error>
#include <vector>

namespace kvtier::testing {

TempDir::TempDir(const std::string& prefix) {
  std::string tmpl = prefix + "-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr) throw std::runtime_error("mkdtemp " + tmpl + " failed");
  path_ = buf.data();
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

}  // namespace kvtier::testing
