// Checkpoint I/O in the safetensors format (8-byte little-endian header length, a JSON header
// naming each tensor's dtype, shape and byte range, then the raw row-major little-endian data),
// so weights load into the Python ecosystem unchanged. Plain C++ with no libtorch: the trainer
// converts its tensors to NamedTensor. Ignores memory mapping and lazy loading (files are read
// whole); writes are atomic (temp file in the same directory, fsync, rename).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "spec/error.h"

namespace hexiseq::train {

enum class DType { kF32, kF64, kBF16, kF16, kI64, kI32, kU8 };

// The safetensors spelling ("F32", "BF16", "I64", ...).
const char* DTypeName(DType dtype);
// Bytes per element.
int64_t DTypeSize(DType dtype);
// Parses a safetensors dtype spelling; an unknown one is an invalid-argument error.
Result<DType> ParseDType(std::string_view name);

struct NamedTensor {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::vector<std::byte> data;  // little-endian raw bytes, row-major
  bool operator==(const NamedTensor&) const = default;
};

// Number of elements of `shape` (1 for a scalar shape []); an error for a negative dimension or
// an overflowing product.
Result<int64_t> ElementCount(std::span<const int64_t> shape);

// Writes `tensors` (in the given order) and `metadata` to `path` atomically: the bytes go to a
// temporary file in the same directory, which is fsync'ed and renamed over `path`, so a reader
// (or a crash) sees either the old file or the complete new one. Checked, not required: names are
// unique, non-empty, valid UTF-8 and not "__metadata__", and each tensor's data holds exactly
// shape * dtype-size bytes; otherwise an invalid-argument error names the tensor and nothing is
// written. I/O failures are kIo errors naming the path; the temporary file is removed.
Result<void> WriteSafetensors(const std::string& path, std::span<const NamedTensor> tensors,
                              const std::map<std::string, std::string>& metadata = {});

struct SafetensorsFile {
  std::vector<NamedTensor> tensors;  // in ascending order of data offset (file order)
  std::map<std::string, std::string> metadata;
};

// Reads and validates a whole safetensors file: a regular file, header length within the file
// and below kMaxSafetensorsHeaderBytes, JSON header, known dtypes, non-negative dims, offsets
// inside the data and matching shape * dtype size, no overlap, no trailing bytes. Errors name the
// file, the tensor and the field.
Result<SafetensorsFile> ReadSafetensors(const std::string& path);

// The tensor called `name` in `file`, or nullptr.
const NamedTensor* FindTensor(const SafetensorsFile& file, std::string_view name);

// Checks a floating-point tensor (F32, F64, BF16, F16) for NaN and infinity; integer tensors
// always pass. The error names the tensor, the first bad flat index and its value.
Result<void> CheckFinite(const NamedTensor& tensor);

// Atomic whole-file write for small sidecar files (JSON state etc.): temp file, fsync, rename.
Result<void> WriteFileAtomic(const std::string& path, std::string_view contents);

// Largest JSON header the reader accepts (real headers are a few hundred bytes per tensor).
inline constexpr int64_t kMaxSafetensorsHeaderBytes = 100LL * 1024 * 1024;

}  // namespace hexiseq::train
