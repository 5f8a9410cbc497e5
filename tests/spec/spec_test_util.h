// Helpers for the spec tests: temporary files and the repository's source folder.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace hexiseq::spec_test {

// The repository root: $HEXISEQ_SOURCE_DIR (set by ctest), else derived from this file's path.
inline std::string SourceDir() {
  if (const char* env = std::getenv("HEXISEQ_SOURCE_DIR"); env != nullptr && *env != '\0') {
    return env;
  }
  return std::filesystem::path(__FILE__).parent_path().parent_path().parent_path().string();
}

// A private temporary folder, removed when the object goes away.
class TempDir {
 public:
  TempDir() {
    path_ = std::filesystem::temp_directory_path() /
            ("hexiseq_spec_test_" + std::to_string(::getpid()) + "_" + std::to_string(next_++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  // Writes `text` to `name` inside the folder and returns its path.
  std::string Write(const std::string& name, const std::string& text) const {
    const std::filesystem::path file = path_ / name;
    std::ofstream out(file, std::ios::binary);
    out << text;
    return file.string();
  }
  std::string Path(const std::string& name) const { return (path_ / name).string(); }

 private:
  static inline int next_ = 0;
  std::filesystem::path path_;
};

}  // namespace hexiseq::spec_test
