// Secrets in files (block keys, the remote tier's password): read only when
// no one but the file's owner may read or write it, so that a key left
// world-readable by mistake stops the start instead of leaking quietly.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "common/result.h"

namespace kvtier {

// The bytes of `path`, for the secret named `what` ("block keys file"):
//   - IoError when it cannot be opened or read (a symbolic link is not
//     followed: O_NOFOLLOW);
//   - InvalidArgument when it is not a regular file or holds more than
//     `max_bytes`;
//   - PermissionDenied, naming the path and its mode, when its group or
//     others may read or write it (it must be chmod 600 or 400).
// Messages name the file, never its contents.
Result<std::string> ReadPrivateFile(const std::string& path, std::string_view what,
                                    size_t max_bytes);

}  // namespace kvtier
