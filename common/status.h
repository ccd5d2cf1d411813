// Status: the outcome of an operation that can fail, returned across module
// boundaries instead of exceptions (STYLE.md 6-8).
//
// An OK status is a null pointer: creating, copying and testing it costs
// nothing. An error carries a code and a message on the heap.
//
// Thread-safety: a Status is a value; distinct objects may be used from
// distinct threads.
#pragma once

#include <memory>
#include <string>
#include <string_view>

namespace kvtier {

enum class StatusCode : int {
  kOk = 0,
  kNotFound = 1,
  kInvalidArgument = 2,
  kResourceExhausted = 3,  // a tier, a queue or a limit is full
  kIoError = 4,
  kCorruption = 5,          // stored bytes fail their checksum or format
  kUnavailable = 6,         // transient: the caller may retry
  kInternal = 7,            // a bug: an invariant did not hold
  kFailedPrecondition = 8,  // the object is in the wrong state for the call
  kPermissionDenied = 9,    // the caller may not do this (kvtierd's allow lists)
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() noexcept = default;
  Status(StatusCode code, std::string_view message);
  Status(const Status& other);
  Status& operator=(const Status& other);
  Status(Status&&) noexcept = default;
  Status& operator=(Status&&) noexcept = default;
  ~Status() = default;

  static Status Ok() { return Status(); }

  bool ok() const { return rep_ == nullptr; }
  StatusCode code() const { return rep_ ? rep_->code : StatusCode::kOk; }
  // Empty for OK.
  std::string_view message() const;
  // "OK" or "<code name>: <message>".
  std::string ToString() const;

  // Returns a copy with `context` prepended to the message ("context: message").
  Status WithContext(std::string_view context) const;

  // Marks a deliberately ignored error, so that ignoring one is visible and
  // greppable (STYLE.md 8).
  void IgnoreError() const {}

  friend bool operator==(const Status& a, const Status& b) {
    return a.code() == b.code() && a.message() == b.message();
  }

 private:
  struct Rep {
    StatusCode code;
    std::string message;
  };
  std::unique_ptr<Rep> rep_;
};

inline Status NotFoundError(std::string_view msg) { return {StatusCode::kNotFound, msg}; }
inline Status InvalidArgumentError(std::string_view msg) {
  return {StatusCode::kInvalidArgument, msg};
}
inline Status ResourceExhaustedError(std::string_view msg) {
  return {StatusCode::kResourceExhausted, msg};
}
inline Status IoError(std::string_view msg) { return {StatusCode::kIoError, msg}; }
inline Status CorruptionError(std::string_view msg) { return {StatusCode::kCorruption, msg}; }
inline Status UnavailableError(std::string_view msg) { return {StatusCode::kUnavailable, msg}; }
inline Status InternalError(std::string_view msg) { return {StatusCode::kInternal, msg}; }
inline Status FailedPreconditionError(std::string_view msg) {
  return {StatusCode::kFailedPrecondition, msg};
}
inline Status PermissionDeniedError(std::string_view msg) {
  return {StatusCode::kPermissionDenied, msg};
}

// Evaluates `expr` (a Status or a Result) and returns its error from the
// enclosing function if it failed.
#define KVTIER_RETURN_IF_ERROR(expr)                                                        \
  do {                                                                                      \
    if (auto kvtier_status_ = ::kvtier::internal::ToStatus((expr)); !kvtier_status_.ok()) { \
      return kvtier_status_;                                                                \
    }                                                                                       \
  } while (false)

namespace internal {
inline const Status& ToStatus(const Status& s) { return s; }
inline Status ToStatus(Status&& s) { return std::move(s); }
}  // namespace internal

}  // namespace kvtier
