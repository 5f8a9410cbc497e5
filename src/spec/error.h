// Errors as values. The library never prints or exits; it returns Result<T>, and only the CLI
// turns an Error into a message and an exit code. Messages name where, the value, the rule and a
// hint, e.g. "cluster.yaml: nodes[2].count = 0: must be >= 1 (hint: remove the entry)".
#pragma once

#include <expected>
#include <string>
#include <utility>

namespace hexiseq {

enum class ErrorCode { kInvalidArgument, kInfeasible, kNotSupported, kIo, kInternal };

struct Error {
  ErrorCode code = ErrorCode::kInternal;
  std::string message;
};

template <class T>
using Result = std::expected<T, Error>;

inline std::unexpected<Error> MakeError(ErrorCode code, std::string message) {
  return std::unexpected<Error>(Error{code, std::move(message)});
}
inline std::unexpected<Error> InvalidArgument(std::string message) {
  return MakeError(ErrorCode::kInvalidArgument, std::move(message));
}
inline std::unexpected<Error> Infeasible(std::string message) {
  return MakeError(ErrorCode::kInfeasible, std::move(message));
}
inline std::unexpected<Error> NotSupported(std::string message) {
  return MakeError(ErrorCode::kNotSupported, std::move(message));
}
inline std::unexpected<Error> IoError(std::string message) {
  return MakeError(ErrorCode::kIo, std::move(message));
}
inline std::unexpected<Error> Internal(std::string message) {
  return MakeError(ErrorCode::kInternal, std::move(message));
}

const char* ErrorCodeName(ErrorCode code);

// The one message shape for a bad field: "<where> = <value>: <problem> (rule: <rule>; hint:
// <hint>)". `value` and `hint` may be empty.
std::string FieldMessage(const std::string& where, const std::string& value,
                         const std::string& problem, const std::string& rule,
                         const std::string& hint);

// Whether a key can be shown unquoted in a field path: at most kMaxPlainFieldNameChars printable,
// non-space characters without quotes or backslashes; readers quote (and cut) any other key.
inline constexpr size_t kMaxPlainFieldNameChars = 60;
bool IsPlainFieldName(const std::string& key);

// Always-on assertion for internal invariants (bugs, never user input).
[[noreturn]] void AssertFail(const char* expr, const char* file, int line, const char* what);
#define HEXISEQ_CHECK(cond, what) \
  ((cond) ? (void)0 : ::hexiseq::AssertFail(#cond, __FILE__, __LINE__, (what)))

// Inside a function returning Result<...>: evaluates `expr` (a Result<T>), returns its error, or
// binds its value to a new local `var`.
#define HEXISEQ_TRY(var, expr)                                     \
  auto var##_result = (expr);                                      \
  if (!var##_result) return std::unexpected(var##_result.error()); \
  auto var = *var##_result

// The same for a Result<void>.
#define HEXISEQ_TRY_VOID(expr) \
  if (auto try_result = (expr); !try_result) return std::unexpected(try_result.error())

}  // namespace hexiseq
