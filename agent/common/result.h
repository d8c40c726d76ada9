#pragma once
// Errors are values at every boundary: Result<T> holds a T or an Error.
// (std::expected is C++23; this is the small subset we need.)
#include <string>
#include <utility>
#include <variant>

#include "agent/common/status_code.h"

namespace kib {

struct Error {
  Code code = Code::internal;
  std::string message;
};

inline Error make_error(Code code, std::string message) { return Error{code, std::move(message)}; }

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}
  Result(Error error) : v_(std::move(error)) {}

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const Error& error() const& { return std::get<1>(v_); }
  Error&& error() && { return std::get<1>(std::move(v_)); }

 private:
  std::variant<T, Error> v_;
};

// Result<void>: success or an Error.
template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : err_(std::move(error)), failed_(true) {}

  bool ok() const { return !failed_; }
  explicit operator bool() const { return ok(); }
  const Error& error() const& { return err_; }
  Error&& error() && { return std::move(err_); }

 private:
  Error err_;
  bool failed_ = false;
};

using Status = Result<void>;

}  // namespace kib

// Propagates the error of an expression returning Result<...>: C++20 has no `?`.
//   KIB_TRY(write_all(fd, data));             // Status or a Result whose value is unused
//   KIB_TRY_ASSIGN(auto fd, open_socket());   // declares fd = the value, or returns the error
//   KIB_TRY_ASSIGN(config_, load_config());   // assigns an existing variable
// The enclosing function returns a Result<U> or Status.
#define KIB_TRY(expr)                                           \
  do {                                                          \
    auto kib_try_r_ = (expr);                                   \
    if (!kib_try_r_.ok()) return std::move(kib_try_r_).error(); \
  } while (0)

#define KIB_TRY_CONCAT_INNER_(a, b) a##b
#define KIB_TRY_CONCAT_(a, b) KIB_TRY_CONCAT_INNER_(a, b)
#define KIB_TRY_ASSIGN(lhs, expr) KIB_TRY_ASSIGN_IMPL_(KIB_TRY_CONCAT_(kib_try_r_, __LINE__), lhs, expr)
#define KIB_TRY_ASSIGN_IMPL_(tmp, lhs, expr)    \
  auto tmp = (expr);                            \
  if (!tmp.ok()) return std::move(tmp).error(); \
  lhs = std::move(tmp).value()
