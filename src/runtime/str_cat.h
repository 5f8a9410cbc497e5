// StrCat: builds a message from streamable pieces (g++ 12 has no <format>).
#pragma once

#include <sstream>
#include <string>

namespace hexiseq::runtime {

template <class... Args>
std::string StrCat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

}  // namespace hexiseq::runtime
