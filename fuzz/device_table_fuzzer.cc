// Fuzzes the device table reader (DeviceCatalog::MergeFile, the --device-table file): any input
// is either a clear error naming the file, or a catalog whose every row is inside the stated
// plausibility ranges. MergeFile reads a path, so each input is written to a file first.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "fuzz_checks.h"
#include "spec/device.h"

namespace hexiseq::fuzz {
namespace {

// A file of this process in the temporary folder; libFuzzer runs one input at a time.
const std::string& TablePath() {
  static const std::string path = (std::filesystem::temp_directory_path() /
                                   ("hexiseq-fuzz-devices-" + std::to_string(::getpid()) + ".yaml"))
                                      .string();
  return path;
}

void WriteTable(const uint8_t* data, size_t size) {
  std::ofstream out(TablePath(), std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  Require(out.good(), "the harness can write its input file", TablePath());
}

}  // namespace
}  // namespace hexiseq::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hexiseq;
  fuzz::WriteTable(data, size);
  DeviceCatalog catalog;
  const size_t builtin_rows = catalog.rows().size();
  Result<void> merged = catalog.MergeFile(fuzz::TablePath());
  if (!merged) {
    fuzz::CheckError(merged.error(), fuzz::TablePath(), fuzz::kMaxReaderMessageBytes);
    return 0;
  }
  fuzz::Require(catalog.rows().size() >= builtin_rows, "merging keeps every built-in row");
  for (const DeviceSpec& row : catalog.rows()) fuzz::CheckDevice(row);
  return 0;
}
