#include "spec/error.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace hexiseq {

const char* ErrorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
      return "invalid argument";
    case ErrorCode::kInfeasible:
      return "infeasible";
    case ErrorCode::kNotSupported:
      return "not supported";
    case ErrorCode::kIo:
      return "I/O error";
    case ErrorCode::kInternal:
      return "internal error";
  }
  return "error";
}

std::string FieldMessage(const std::string& where, const std::string& value,
                         const std::string& problem, const std::string& rule,
                         const std::string& hint) {
  std::string out = where;
  if (!value.empty()) out += " = " + value;
  out += ": " + problem + " (rule: " + rule;
  if (!hint.empty()) out += "; hint: " + hint;
  out += ")";
  return out;
}

void AssertFail(const char* expr, const char* file, int line, const char* what) {
  std::fprintf(stderr, "hexiseq: internal error: %s:%d: check failed: %s (%s)\n", file, line, expr,
               what);
  std::abort();
}

bool IsPlainFieldName(const std::string& key) {
  return key.size() <= kMaxPlainFieldNameChars &&
         std::all_of(key.begin(), key.end(),
                     [](unsigned char c) { return c > 0x20 && c < 0x7f && c != '"' && c != '\\'; });
}

}  // namespace hexiseq
