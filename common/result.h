// Result<T>: a T or an error Status, with an std::expected-like API
// (STYLE.md 6). Construct it from a value or from a non-OK Status.
#pragma once

#include <cassert>
#include <type_traits>
#include <utility>
#include <variant>

#include "common/status.h"

namespace kvtier {

template <typename T>
class [[nodiscard]] Result {
  static_assert(!std::is_same_v<std::remove_cv_t<T>, Status>, "use Status instead");

 public:
  using value_type = T;

  // REQUIRES: !status.ok()
  Result(Status status) : v_(std::move(status)) {  // NOLINT: implicit by design
    assert(!std::get<Status>(v_).ok() && "Result built from an OK status");
  }
  Result(const T& value) : v_(value) {}        // NOLINT
  Result(T&& value) : v_(std::move(value)) {}  // NOLINT
  template <typename U>
  requires(std::is_constructible_v<T, U&&> && !std::is_same_v<std::decay_t<U>, Status> &&
           !std::is_same_v<std::decay_t<U>, Result> && !std::is_same_v<std::decay_t<U>, T>)
      Result(U&& value)
      : v_(std::in_place_type<T>, std::forward<U>(value)) {}  // NOLINT

  bool has_value() const { return v_.index() == 1; }
  bool ok() const { return has_value(); }
  explicit operator bool() const { return has_value(); }

  // REQUIRES: has_value()
  T& value() & { return Get(); }
  const T& value() const& { return Get(); }
  T&& value() && { return std::move(Get()); }
  T& operator*() & { return Get(); }
  const T& operator*() const& { return Get(); }
  T&& operator*() && { return std::move(Get()); }
  T* operator->() { return &Get(); }
  const T* operator->() const { return &Get(); }

  template <typename U>
  T value_or(U&& fallback) const& {
    return has_value() ? Get() : static_cast<T>(std::forward<U>(fallback));
  }

  // OK when a value is held.
  Status status() const { return has_value() ? Status() : std::get<Status>(v_); }
  // REQUIRES: !has_value()
  const Status& error() const& {
    assert(!has_value());
    return std::get<Status>(v_);
  }
  Status&& error() && {
    assert(!has_value());
    return std::get<Status>(std::move(v_));
  }

 private:
  T& Get() {
    assert(has_value() && "value() of an error Result");
    return *std::get_if<T>(&v_);
  }
  const T& Get() const {
    assert(has_value() && "value() of an error Result");
    return *std::get_if<T>(&v_);
  }

  std::variant<Status, T> v_;
};

namespace internal {
template <typename T>
Status ToStatus(const Result<T>& r) {
  return r.status();
}
}  // namespace internal

#define KVTIER_CONCAT_INNER_(a, b) a##b
#define KVTIER_CONCAT_(a, b) KVTIER_CONCAT_INNER_(a, b)

// Evaluates `rexpr` (a Result<T>); on error returns its Status from the
// enclosing function, otherwise assigns the value to `lhs`
// (`KVTIER_ASSIGN_OR_RETURN(auto slot, tier.Allocate(n));`).
#define KVTIER_ASSIGN_OR_RETURN(lhs, rexpr) \
  KVTIER_ASSIGN_OR_RETURN_IMPL_(KVTIER_CONCAT_(kvtier_result_, __LINE__), lhs, rexpr)
#define KVTIER_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, rexpr) \
  auto tmp = (rexpr);                                  \
  if (!tmp.has_value()) return std::move(tmp).error(); \
  lhs = std::move(tmp).value()

}  // namespace kvtier
