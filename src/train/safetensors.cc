// Safetensors reader and writer: header JSON via nlohmann_json, file I/O via POSIX (open with
// O_NONBLOCK so a FIFO never blocks, fstat to insist on a regular file, pread for the data,
// mkstemp + fsync + rename + directory fsync for atomic writes).
#include "train/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <utility>

namespace hexiseq::train {
namespace {

using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;

constexpr int64_t kHeaderLengthBytes = 8;  // u64 little-endian length of the JSON header
constexpr int64_t kHeaderAlignment = 8;    // the header is space-padded to this multiple
constexpr const char* kMetadataKey = "__metadata__";
constexpr mode_t kWrittenFileMode = 0644;

template <class... Args>
std::string Cat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

// A JSON-quoted string for messages; invalid UTF-8 bytes show as U+FFFD instead of throwing.
std::string Quote(std::string_view text) {
  return Json(std::string(text)).dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string SystemError(int error_number) { return std::strerror(error_number); }

// ---------------------------------------------------------------------------------------------
// Atomic writes.

// Owns a file descriptor.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd = -1) : fd_(fd) {}
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor() { Close(); }
  int get() const { return fd_; }
  void Reset(int fd) {
    Close();
    fd_ = fd;
  }
  int Close() {
    int status = 0;
    if (fd_ >= 0) status = ::close(fd_);
    fd_ = -1;
    return status;
  }

 private:
  int fd_;
};

std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// A temporary file beside the destination that replaces it on Commit(); an uncommitted one is
// removed on destruction, so a failed write never leaves the destination half-written.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path) : path_(std::move(path)) {}
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile() {
    if (!temp_path_.empty() && !committed_) {
      fd_.Close();
      ::unlink(temp_path_.c_str());
    }
  }

  Result<void> Open() {
    if (path_.empty() || path_.back() == '/') {
      return InvalidArgument(
          Cat("output path ", Quote(path_),
              ": names no file (rule: a file path; hint: e.g. ckpt/model.safetensors)"));
    }
    std::string pattern = path_ + ".tmp.XXXXXX";
    const int fd = ::mkstemp(pattern.data());
    if (fd < 0) {
      const int error_number = errno;
      return IoError(Cat(path_, ": cannot create a temporary file in ", Quote(DirectoryOf(path_)),
                         ": ", SystemError(error_number),
                         " (hint: check that the directory exists and is writable)"));
    }
    fd_.Reset(fd);
    temp_path_ = pattern;
    ::fchmod(fd, kWrittenFileMode);
    return {};
  }

  Result<void> Write(const void* bytes, size_t size) {
    const auto* cursor = static_cast<const char*>(bytes);
    while (size > 0) {
      const ssize_t written = ::write(fd_.get(), cursor, size);
      if (written < 0 && errno == EINTR) continue;
      if (written <= 0) {
        const int error_number = errno;
        return IoError(Cat(path_, ": writing ", Quote(temp_path_), " failed: ",
                           SystemError(error_number), " (hint: check free disk space and quotas)"));
      }
      cursor += written;
      size -= static_cast<size_t>(written);
    }
    return {};
  }

  // fsync, close, rename over the destination, then fsync the directory so the rename is durable.
  Result<void> Commit() {
    if (::fsync(fd_.get()) != 0 || fd_.Close() != 0) {
      const int error_number = errno;
      return IoError(Cat(path_, ": flushing ", Quote(temp_path_),
                         " to disk failed: ", SystemError(error_number)));
    }
    if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
      const int error_number = errno;
      return IoError(Cat(path_, ": renaming the complete temporary file ", Quote(temp_path_),
                         " over it failed: ", SystemError(error_number),
                         " (hint: is the destination a directory?)"));
    }
    committed_ = true;
    FileDescriptor directory(
        ::open(DirectoryOf(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (directory.get() >= 0) ::fsync(directory.get());  // best effort: the data itself is safe
    return {};
  }

 private:
  std::string path_;
  std::string temp_path_;
  FileDescriptor fd_;
  bool committed_ = false;
};

// ---------------------------------------------------------------------------------------------
// Writing.

Result<void> ValidateForWrite(const std::string& path, std::span<const NamedTensor> tensors) {
  std::set<std::string_view> names;
  for (size_t index = 0; index < tensors.size(); ++index) {
    const NamedTensor& tensor = tensors[index];
    const std::string where = Cat(path, ": tensors[", index, "] ", Quote(tensor.name));
    if (tensor.name.empty() || tensor.name == kMetadataKey) {
      return InvalidArgument(Cat(where, ": invalid name (rule: non-empty and not ", kMetadataKey,
                                 "; hint: use the Hugging Face parameter name)"));
    }
    if (!names.insert(tensor.name).second) {
      return InvalidArgument(Cat(where,
                                 ": duplicate name (rule: tensor names are unique; hint: "
                                 "each parameter is written once)"));
    }
    auto elements = ElementCount(tensor.shape);
    if (!elements) return InvalidArgument(Cat(where, ": ", elements.error().message));
    const int64_t expected_bytes = *elements * DTypeSize(tensor.dtype);
    if (static_cast<int64_t>(tensor.data.size()) != expected_bytes) {
      return InvalidArgument(Cat(where, ": data holds ", tensor.data.size(), " bytes, shape x ",
                                 DTypeName(tensor.dtype), " needs ", expected_bytes,
                                 " (rule: data is shape-product x dtype-size bytes)"));
    }
  }
  return {};
}

// The JSON header with each tensor's byte range in the given order, space-padded to 8 bytes.
Result<std::string> BuildHeader(const std::string& path, std::span<const NamedTensor> tensors,
                                const std::map<std::string, std::string>& metadata) {
  OrderedJson header = OrderedJson::object();
  if (!metadata.empty()) header[kMetadataKey] = metadata;
  int64_t offset = 0;
  for (const NamedTensor& tensor : tensors) {
    const int64_t end = offset + static_cast<int64_t>(tensor.data.size());
    header[tensor.name] = {{"dtype", DTypeName(tensor.dtype)},
                           {"shape", tensor.shape},
                           {"data_offsets", {offset, end}}};
    offset = end;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const Json::exception& error) {
    return InvalidArgument(Cat(path, ": a tensor name or metadata entry is not valid UTF-8 (",
                               error.what(), "; hint: use ASCII names)"));
  }
  const int64_t padding =
      (kHeaderAlignment - static_cast<int64_t>(text.size()) % kHeaderAlignment) % kHeaderAlignment;
  text.append(static_cast<size_t>(padding), ' ');
  return text;
}

std::array<unsigned char, kHeaderLengthBytes> EncodeLittleEndian(uint64_t value) {
  std::array<unsigned char, kHeaderLengthBytes> bytes{};
  for (size_t index = 0; index < bytes.size(); ++index) {
    bytes[index] = static_cast<unsigned char>(value >> (8 * index));
  }
  return bytes;
}

uint64_t DecodeLittleEndian(const unsigned char* bytes, int count) {
  uint64_t value = 0;
  for (int index = count - 1; index >= 0; --index) value = (value << 8) | bytes[index];
  return value;
}

// ---------------------------------------------------------------------------------------------
// Reading: the file, the header, each entry, the layout of the data section.

struct OpenedFile {
  FileDescriptor fd;
  int64_t size = 0;
};

Result<void> OpenRegularFile(const std::string& path, OpenedFile& file) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; it has no effect on regular files.
  file.fd.Reset(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  if (file.fd.get() < 0) {
    const int error_number = errno;
    return IoError(Cat(path, ": cannot open: ", SystemError(error_number),
                       " (hint: check the path of the safetensors file)"));
  }
  struct stat info {};
  if (::fstat(file.fd.get(), &info) != 0) {
    const int error_number = errno;
    return IoError(Cat(path, ": cannot stat: ", SystemError(error_number)));
  }
  if (!S_ISREG(info.st_mode)) {
    return InvalidArgument(Cat(path,
                               ": not a regular file (rule: a safetensors file is a regular "
                               "file; hint: a FIFO, device or directory cannot be read)"));
  }
  file.size = static_cast<int64_t>(info.st_size);
  return {};
}

Result<void> ReadExactly(const std::string& path, const OpenedFile& file, int64_t offset,
                         void* destination, int64_t size, std::string_view what) {
  auto* cursor = static_cast<char*>(destination);
  while (size > 0) {
    const ssize_t got = ::pread(file.fd.get(), cursor, static_cast<size_t>(size), offset);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      const int error_number = errno;
      return IoError(Cat(path, ": reading ", what, " failed: ", SystemError(error_number)));
    }
    if (got == 0) {
      return IoError(Cat(path, ": file ended while reading ", what,
                         " (rule: the file does not change while it is read; hint: is another "
                         "process writing it?)"));
    }
    cursor += got;
    offset += got;
    size -= got;
  }
  return {};
}

// Reads the 8-byte length and checks it against the file size and the cap.
Result<int64_t> ReadHeaderLength(const std::string& path, const OpenedFile& file) {
  if (file.size < kHeaderLengthBytes) {
    return InvalidArgument(Cat(path, ": truncated: ", file.size,
                               " bytes (rule: a safetensors file "
                               "starts with an 8-byte header length; hint: the file is "
                               "empty or was cut short, write it again)"));
  }
  std::array<unsigned char, kHeaderLengthBytes> bytes{};
  if (auto read = ReadExactly(path, file, 0, bytes.data(), kHeaderLengthBytes, "the header length");
      !read) {
    return std::unexpected(read.error());
  }
  const uint64_t length = DecodeLittleEndian(bytes.data(), kHeaderLengthBytes);
  if (length > static_cast<uint64_t>(kMaxSafetensorsHeaderBytes)) {
    return InvalidArgument(Cat(path, ": header length = ", length, " bytes: must be <= ",
                               kMaxSafetensorsHeaderBytes, " (hint: not a safetensors file)"));
  }
  const int64_t header_length = static_cast<int64_t>(length);
  if (header_length > file.size - kHeaderLengthBytes) {
    return InvalidArgument(Cat(path, ": header length = ", header_length,
                               " bytes: larger than the ", file.size - kHeaderLengthBytes,
                               " bytes after the length field "
                               "(rule: the header fits in the file; hint: the file is truncated "
                               "or not a safetensors file)"));
  }
  return header_length;
}

// Parses the header, rejecting a duplicate key (nlohmann_json would keep the last one silently).
Result<Json> ParseHeaderJson(const std::string& path, const std::string& text) {
  std::set<std::string> top_keys;
  std::set<std::string> inner_keys;
  std::string current_top;
  std::string duplicate;
  auto note_key = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (event != Json::parse_event_t::key || !parsed.is_string() || !duplicate.empty()) return true;
    const std::string key = parsed.get<std::string>();
    if (depth == 1) {
      if (!top_keys.insert(key).second) duplicate = Cat("name ", Quote(key));
      current_top = key;
      inner_keys.clear();
    } else if (depth == 2 && !inner_keys.insert(key).second) {
      duplicate = Cat("key ", Quote(key), " inside ", Quote(current_top));
    }
    return true;
  };
  Json header = Json::parse(text, note_key, /*allow_exceptions=*/false);
  if (header.is_discarded()) {
    return InvalidArgument(Cat(path,
                               ": header is not valid JSON (rule: 8-byte length, then a "
                               "JSON object; hint: not a safetensors file, or corrupted)"));
  }
  if (!header.is_object()) {
    return InvalidArgument(Cat(path, ": header is JSON ", header.type_name(),
                               ": must be an object mapping tensor names to entries"));
  }
  if (!duplicate.empty()) {
    return InvalidArgument(Cat(path, ": header has duplicate ", duplicate,
                               " (rule: names are unique; hint: the writer is broken)"));
  }
  return header;
}

Result<std::map<std::string, std::string>> ParseMetadata(const std::string& path,
                                                         const Json& entry) {
  if (!entry.is_object()) {
    return InvalidArgument(Cat(path, ": ", kMetadataKey, " is JSON ", entry.type_name(),
                               ": must be an object of string values"));
  }
  std::map<std::string, std::string> metadata;
  for (const auto& [key, value] : entry.items()) {
    if (!value.is_string()) {
      return InvalidArgument(Cat(path, ": ", kMetadataKey, ".", key, " = ", value.dump(),
                                 ": must be a string (rule: metadata maps strings to strings)"));
    }
    metadata[key] = value.get<std::string>();
  }
  return metadata;
}

// One header entry: its dtype, shape and byte range [begin, end) inside the data section.
struct EntryLayout {
  NamedTensor tensor;  // data not yet read
  int64_t begin = 0;
  int64_t end = 0;
};

bool IsNonNegativeInteger(const Json& value) {
  return value.is_number_unsigned() || (value.is_number_integer() && value.get<int64_t>() >= 0);
}

Result<std::vector<int64_t>> ParseShape(const std::string& where, const Json& shape) {
  if (!shape.is_array()) {
    return InvalidArgument(Cat(where, ".shape = ", shape.dump(), ": must be an array of integers"));
  }
  std::vector<int64_t> dims;
  for (size_t axis = 0; axis < shape.size(); ++axis) {
    const Json& dim = shape[axis];
    if (!dim.is_number_integer() || !IsNonNegativeInteger(dim) ||
        dim.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return InvalidArgument(Cat(where, ".shape[", axis, "] = ", dim.dump(),
                                 ": must be an integer >= 0 (rule: dimensions are not negative)"));
    }
    dims.push_back(dim.get<int64_t>());
  }
  return dims;
}

Result<std::pair<int64_t, int64_t>> ParseOffsets(const std::string& where, const Json& offsets) {
  const bool well_formed = offsets.is_array() && offsets.size() == 2 &&
                           IsNonNegativeInteger(offsets[0]) && IsNonNegativeInteger(offsets[1]);
  if (!well_formed) {
    return InvalidArgument(Cat(where, ".data_offsets = ", offsets.dump(),
                               ": must be [begin, end] with integers >= 0"));
  }
  const uint64_t begin = offsets[0].get<uint64_t>();
  const uint64_t end = offsets[1].get<uint64_t>();
  if (begin > end) {
    return InvalidArgument(Cat(where, ".data_offsets = ", offsets.dump(),
                               ": must have begin <= end (rule: a byte range [begin, end))"));
  }
  if (end > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return InvalidArgument(Cat(where, ".data_offsets = ", offsets.dump(),
                               ": end is beyond 2^63 - 1 (hint: the file is corrupted)"));
  }
  return std::pair{static_cast<int64_t>(begin), static_cast<int64_t>(end)};
}

Result<EntryLayout> ParseEntry(const std::string& path, const std::string& name, const Json& entry,
                               int64_t data_bytes) {
  const std::string where = Cat(path, ": tensor ", Quote(name));
  if (!entry.is_object()) {
    return InvalidArgument(
        Cat(where, " = ", entry.dump(), ": must be an object with dtype, shape and data_offsets"));
  }
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    if (!entry.contains(field)) {
      return InvalidArgument(Cat(where, ": field ", field,
                                 " is missing (rule: each tensor has "
                                 "dtype, shape and data_offsets)"));
    }
  }
  EntryLayout layout;
  layout.tensor.name = name;
  const Json& dtype = entry["dtype"];
  auto parsed_dtype = ParseDType(dtype.is_string() ? dtype.get<std::string>() : dtype.dump());
  if (!parsed_dtype) return InvalidArgument(Cat(where, ".dtype: ", parsed_dtype.error().message));
  layout.tensor.dtype = *parsed_dtype;
  auto shape = ParseShape(where, entry["shape"]);
  if (!shape) return std::unexpected(shape.error());
  layout.tensor.shape = std::move(*shape);
  auto offsets = ParseOffsets(where, entry["data_offsets"]);
  if (!offsets) return std::unexpected(offsets.error());
  std::tie(layout.begin, layout.end) = *offsets;

  auto elements = ElementCount(layout.tensor.shape);
  if (!elements) return InvalidArgument(Cat(where, ".shape: ", elements.error().message));
  const int64_t element_size = DTypeSize(layout.tensor.dtype);
  if (*elements > std::numeric_limits<int64_t>::max() / element_size ||
      *elements * element_size != layout.end - layout.begin) {
    return InvalidArgument(Cat(where, ".data_offsets = [", layout.begin, ", ", layout.end,
                               "]: ", layout.end - layout.begin, " bytes, but shape ",
                               entry["shape"].dump(), " x ", DTypeName(layout.tensor.dtype),
                               " needs ", *elements, " x ", element_size,
                               " (rule: the byte range matches shape and dtype)"));
  }
  if (layout.end > data_bytes) {
    return InvalidArgument(Cat(where, ".data_offsets = [", layout.begin, ", ", layout.end,
                               "]: past the end of the data section (", data_bytes,
                               " bytes) (hint: the file is truncated)"));
  }
  return layout;
}

// The byte ranges must tile the data section exactly: no overlap, no hole, no trailing bytes.
Result<void> CheckLayoutTiles(const std::string& path, std::vector<EntryLayout>& layouts,
                              int64_t data_bytes) {
  std::stable_sort(layouts.begin(), layouts.end(), [](const EntryLayout& a, const EntryLayout& b) {
    return std::pair{a.begin, a.end} < std::pair{b.begin, b.end};
  });
  int64_t covered = 0;
  const EntryLayout* previous = nullptr;
  for (const EntryLayout& layout : layouts) {
    if (layout.begin < covered) {
      return InvalidArgument(Cat(path, ": tensor ", Quote(layout.tensor.name), ".data_offsets = [",
                                 layout.begin, ", ", layout.end, "]: overlaps tensor ",
                                 Quote(previous->tensor.name), " (which ends at ", covered,
                                 ") (rule: tensors do not share bytes)"));
    }
    if (layout.begin > covered) {
      return InvalidArgument(Cat(path, ": tensor ", Quote(layout.tensor.name), ".data_offsets = [",
                                 layout.begin, ", ", layout.end, "]: leaves bytes [", covered, ", ",
                                 layout.begin, ") unused (rule: the data has no holes)"));
    }
    covered = layout.end;
    previous = &layout;
  }
  if (covered != data_bytes) {
    return InvalidArgument(Cat(path, ": ", data_bytes - covered,
                               " trailing bytes after the last tensor (data section is ",
                               data_bytes, " bytes, tensors cover ", covered,
                               ") (rule: no bytes beyond the tensors; hint: the file is corrupted "
                               "or two files were concatenated)"));
  }
  return {};
}

// ---------------------------------------------------------------------------------------------
// Finite checks.

// The value of one element as a double and whether it is finite.
std::pair<double, bool> ElementValue(DType dtype, const std::byte* bytes) {
  const auto* raw = reinterpret_cast<const unsigned char*>(bytes);
  switch (dtype) {
    case DType::kF32: {
      const float value = std::bit_cast<float>(static_cast<uint32_t>(DecodeLittleEndian(raw, 4)));
      return {value, std::isfinite(value)};
    }
    case DType::kF64: {
      const double value = std::bit_cast<double>(DecodeLittleEndian(raw, 8));
      return {value, std::isfinite(value)};
    }
    case DType::kBF16: {
      const uint32_t bits = static_cast<uint32_t>(DecodeLittleEndian(raw, 2)) << 16;
      const float value = std::bit_cast<float>(bits);
      return {value, std::isfinite(value)};
    }
    case DType::kF16: {
      // IEEE half: 1 sign bit, 5 exponent bits (bias 15), 10 mantissa bits.
      const uint32_t bits = static_cast<uint32_t>(DecodeLittleEndian(raw, 2));
      const int exponent = static_cast<int>((bits >> 10) & 0x1F);
      const int mantissa = static_cast<int>(bits & 0x3FF);
      const double sign = (bits & 0x8000) != 0 ? -1.0 : 1.0;
      if (exponent == 0x1F) {
        const double special = mantissa != 0 ? std::numeric_limits<double>::quiet_NaN()
                                             : std::numeric_limits<double>::infinity();
        return {sign * special, false};
      }
      const double magnitude =
          exponent == 0 ? std::ldexp(mantissa, -24) : std::ldexp(mantissa + 1024, exponent - 25);
      return {sign * magnitude, true};
    }
    default:
      return {0.0, true};
  }
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t axis = 0; axis < shape.size(); ++axis) text += Cat(axis ? ", " : "", shape[axis]);
  return text + "]";
}

}  // namespace

// -----------------------------------------------------------------------------------------------
// Public API.

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "F32";
    case DType::kF64:
      return "F64";
    case DType::kBF16:
      return "BF16";
    case DType::kF16:
      return "F16";
    case DType::kI64:
      return "I64";
    case DType::kI32:
      return "I32";
    case DType::kU8:
      return "U8";
  }
  return "?";
}

int64_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kF64:
    case DType::kI64:
      return 8;
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kBF16:
    case DType::kF16:
      return 2;
    case DType::kU8:
      return 1;
  }
  return 1;
}

Result<DType> ParseDType(std::string_view name) {
  for (DType dtype : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16, DType::kI64, DType::kI32,
                      DType::kU8}) {
    if (name == DTypeName(dtype)) return dtype;
  }
  return InvalidArgument(Cat("dtype = ", Quote(name),
                             ": unknown (rule: one of F32, F64, BF16, F16, "
                             "I64, I32, U8; hint: convert the tensor)"));
}

Result<int64_t> ElementCount(std::span<const int64_t> shape) {
  int64_t count = 1;
  for (size_t axis = 0; axis < shape.size(); ++axis) {
    const int64_t dim = shape[axis];
    if (dim < 0) {
      return InvalidArgument(Cat("shape[", axis, "] = ", dim, ": must be >= 0"));
    }
    if (dim != 0 && count > std::numeric_limits<int64_t>::max() / dim) {
      return InvalidArgument(
          Cat("shape[", axis, "] = ", dim, ": the element count overflows 64 bits"));
    }
    count *= dim;
  }
  return count;
}

Result<void> WriteSafetensors(const std::string& path, std::span<const NamedTensor> tensors,
                              const std::map<std::string, std::string>& metadata) {
  if (auto valid = ValidateForWrite(path, tensors); !valid) return valid;
  auto header = BuildHeader(path, tensors, metadata);
  if (!header) return std::unexpected(header.error());
  AtomicFile file(path);
  if (auto opened = file.Open(); !opened) return opened;
  const auto length = EncodeLittleEndian(header->size());
  if (auto written = file.Write(length.data(), length.size()); !written) return written;
  if (auto written = file.Write(header->data(), header->size()); !written) return written;
  for (const NamedTensor& tensor : tensors) {
    if (auto written = file.Write(tensor.data.data(), tensor.data.size()); !written) return written;
  }
  return file.Commit();
}

Result<SafetensorsFile> ReadSafetensors(const std::string& path) {
  OpenedFile file;
  if (auto opened = OpenRegularFile(path, file); !opened) return std::unexpected(opened.error());
  auto header_length = ReadHeaderLength(path, file);
  if (!header_length) return std::unexpected(header_length.error());
  std::string text(static_cast<size_t>(*header_length), '\0');
  if (auto read =
          ReadExactly(path, file, kHeaderLengthBytes, text.data(), *header_length, "the header");
      !read) {
    return std::unexpected(read.error());
  }
  auto header = ParseHeaderJson(path, text);
  if (!header) return std::unexpected(header.error());

  const int64_t data_start = kHeaderLengthBytes + *header_length;
  const int64_t data_bytes = file.size - data_start;
  SafetensorsFile result;
  std::vector<EntryLayout> layouts;
  for (const auto& [name, entry] : header->items()) {
    if (name == kMetadataKey) {
      auto metadata = ParseMetadata(path, entry);
      if (!metadata) return std::unexpected(metadata.error());
      result.metadata = std::move(*metadata);
      continue;
    }
    auto layout = ParseEntry(path, name, entry, data_bytes);
    if (!layout) return std::unexpected(layout.error());
    layouts.push_back(std::move(*layout));
  }
  if (auto tiled = CheckLayoutTiles(path, layouts, data_bytes); !tiled) {
    return std::unexpected(tiled.error());
  }
  for (EntryLayout& layout : layouts) {
    layout.tensor.data.resize(static_cast<size_t>(layout.end - layout.begin));
    const std::string what = Cat("tensor ", Quote(layout.tensor.name));
    if (auto read = ReadExactly(path, file, data_start + layout.begin, layout.tensor.data.data(),
                                layout.end - layout.begin, what);
        !read) {
      return std::unexpected(read.error());
    }
    result.tensors.push_back(std::move(layout.tensor));
  }
  return result;
}

const NamedTensor* FindTensor(const SafetensorsFile& file, std::string_view name) {
  for (const NamedTensor& tensor : file.tensors) {
    if (tensor.name == name) return &tensor;
  }
  return nullptr;
}

Result<void> CheckFinite(const NamedTensor& tensor) {
  const int64_t element_size = DTypeSize(tensor.dtype);
  const int64_t elements = static_cast<int64_t>(tensor.data.size()) / element_size;
  for (int64_t index = 0; index < elements; ++index) {
    const auto [value, finite] =
        ElementValue(tensor.dtype, tensor.data.data() + index * element_size);
    if (!finite) {
      return InvalidArgument(Cat("tensor ", Quote(tensor.name), " (", DTypeName(tensor.dtype), " ",
                                 ShapeText(tensor.shape), ") element ", index, " = ", value,
                                 ": must be finite (hint: the weights diverged or the file is "
                                 "corrupted)"));
    }
  }
  return {};
}

Result<void> WriteFileAtomic(const std::string& path, std::string_view contents) {
  AtomicFile file(path);
  if (auto opened = file.Open(); !opened) return opened;
  if (auto written = file.Write(contents.data(), contents.size()); !written) return written;
  return file.Commit();
}

}  // namespace hexiseq::train
