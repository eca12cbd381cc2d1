//===- hsnn/Error.h - Errors as values for the public API -------*- C++ -*-===//
//
// Every fallible public entry point returns an Error or an Expected<T>; no
// exception crosses the public API and nothing calls exit(). Both are
// [[nodiscard]]: a result cannot be dropped without a warning (an error
// under -Werror).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <variant>
#include <vector>

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
class [[nodiscard]] Error {
public:
  Error() = default;
  Error(ErrorCode code, std::string message) : failed_(true), code_(code), message_(std::move(message)) {}

  static Error success() { return Error(); }

  /// The same error naming the layer's nodes it is about.
  Error withNodes(std::vector<int> nodes) && {
    nodes_ = std::move(nodes);
    return std::move(*this);
  }

  explicit operator bool() const { return failed_; }
  ErrorCode code() const { return code_; }
  const std::string &message() const { return message_; }
  /// A layer's formula errors: every failing node, in order (the message
  /// reports a formula shared by many nodes once); empty otherwise.
  const std::vector<int> &nodes() const { return nodes_; }

private:
  bool failed_ = false;
  ErrorCode code_ = ErrorCode::Internal;
  std::string message_;
  std::vector<int> nodes_;
};

namespace detail {
/// Taking the value of an Expected that holds an error is a bug in the
/// caller. It never throws (the message would be lost in a terminate) and
/// never returns garbage: it prints the error's message to stderr and aborts.
[[noreturn]] inline void valueOfError(const Error &e) {
  std::fprintf(stderr, "hsnn: the value of an Expected was taken, but it holds an error:\n%s\n", e.message().c_str());
  std::fflush(stderr);
  std::abort();
}
} // namespace detail

/// Either a value or the Error that prevented it (in the spirit of
/// llvm::Expected). value(), operator* and operator-> on an error print the
/// error and abort (see detail::valueOfError); check it first.
template <class T> class [[nodiscard]] Expected {
public:
  Expected(T value) : state_(std::in_place_index<0>, std::move(value)) {}
  /// `error` must be a failure; a success Error becomes an Internal error
  /// saying so, rather than an Expected with neither a value nor an error.
  Expected(Error error)
      : state_(std::in_place_index<1>,
               error ? std::move(error) : Error(ErrorCode::Internal, "an Expected was made from a success Error")) {}

  explicit operator bool() const { return state_.index() == 0; }
  bool has_value() const { return state_.index() == 0; }

  T &value() & { return *get(); }
  const T &value() const & { return *get(); }
  T &&value() && { return std::move(*get()); }
  T &operator*() & { return value(); }
  const T &operator*() const & { return value(); }
  T &&operator*() && { return std::move(*get()); }
  T *operator->() { return get(); }
  const T *operator->() const { return get(); }

  /// The error; a success Error when it holds a value.
  const Error &error() const {
    static const Error none;
    return has_value() ? none : std::get<1>(state_);
  }
  Error takeError() { return has_value() ? Error() : std::get<1>(std::move(state_)); }

private:
  T *get() {
    if (state_.index() != 0)
      detail::valueOfError(std::get<1>(state_));
    return &std::get<0>(state_);
  }
  const T *get() const { return const_cast<Expected *>(this)->get(); }

  std::variant<T, Error> state_;
};

} // namespace hsnn
