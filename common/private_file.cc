#include "common/private_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace kvtier {

Result<std::string> ReadPrivateFile(const std::string& path, std::string_view what,
                                    size_t max_bytes) {
  const std::string name = std::string(what) + " " + path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    const int err = errno;
    return IoError(name + ": " + std::strerror(err));
  }
  struct Close {
    int fd;
    ~Close() { ::close(fd); }
  } close_fd{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    return IoError(name + ": " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) return InvalidArgumentError(name + " is not a regular file");
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return PermissionDeniedError(name + " has mode " + mode +
                                 ": its group or others may read or write it; refused (chmod 600 " +
                                 path + ")");
  }
  std::string text(max_bytes + 1, '\0');
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      return IoError(name + ": " + std::strerror(err));
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  if (got > max_bytes) {
    return InvalidArgumentError(name + " is larger than " + std::to_string(max_bytes) + " bytes");
  }
  text.resize(got);
  return text;
}

}  // namespace kvtier
