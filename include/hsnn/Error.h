//===- hsnn/Error.h - Errors as values for the public API -------*- C++ -*-===//
//
// Every fallible public entry point returns an Error or an Expected<T>; no
// exception crosses the public API and nothing calls exit().
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace hsnn {

/// What went wrong, coarsely; the message says the rest.
enum class ErrorCode {
  InvalidFormula,  ///< The formula text does not parse or does not type-check.
  InvalidArgument, ///< A call was made with arguments it cannot accept.
  Unsupported,     ///< The request is valid but this build or machine cannot serve it.
  Internal,        ///< A bug in hsnn; the message says where.
};

/// A failure with a human-readable message. A default-constructed Error means
/// success, so `if (Error e = f()) report(e);` reads naturally.
class Error {
public:
  Error() = default;
  Error(ErrorCode code, std::string message) : failed_(true), code_(code), message_(std::move(message)) {}

  static Error success() { return Error(); }

  explicit operator bool() const { return failed_; }
  ErrorCode code() const { return code_; }
  const std::string &message() const { return message_; }

private:
  bool failed_ = false;
  ErrorCode code_ = ErrorCode::Internal;
  std::string message_;
};

/// Either a value or the Error that prevented it (in the spirit of llvm::Expected).
template <class T> class Expected {
public:
  Expected(T value) : state_(std::in_place_index<0>, std::move(value)) {}
  Expected(Error error) : state_(std::in_place_index<1>, std::move(error)) {
    assert(std::get<1>(state_) && "an Expected cannot hold a success Error");
  }

  explicit operator bool() const { return state_.index() == 0; }
  bool has_value() const { return state_.index() == 0; }

  T &value() & { return std::get<0>(state_); }
  const T &value() const & { return std::get<0>(state_); }
  T &&value() && { return std::get<0>(std::move(state_)); }
  T &operator*() & { return value(); }
  const T &operator*() const & { return value(); }
  T *operator->() { return &std::get<0>(state_); }
  const T *operator->() const { return &std::get<0>(state_); }

  const Error &error() const { return std::get<1>(state_); }
  Error takeError() { return has_value() ? Error() : std::get<1>(std::move(state_)); }

private:
  std::variant<T, Error> state_;
};

} // namespace hsnn
