// Safetensors I/O: round trips of every dtype, the on-disk bytes checked by hand, every reader
// error path with its message, special files, atomic writes under a simulated crash, the finite
// check, and a cross-check against an independent Python reader/writer (tests/train/).
#include "train/safetensors.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

namespace hexiseq::train {
namespace {

namespace fs = std::filesystem;

const std::vector<DType> kAllDTypes = {DType::kF32, DType::kF64, DType::kBF16, DType::kF16,
                                       DType::kI64, DType::kI32, DType::kU8};

// A fresh directory per test, removed afterwards.
class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           (std::string("hexiseq_st_") + info->name() + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ignored;
    fs::permissions(dir_, fs::perms::owner_all, ignored);
    fs::remove_all(dir_, ignored);
  }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

NamedTensor RandomTensor(const std::string& name, DType dtype, std::vector<int64_t> shape,
                         std::mt19937& rng) {
  NamedTensor tensor{name, dtype, std::move(shape), {}};
  tensor.data.resize(static_cast<size_t>(*ElementCount(tensor.shape) * DTypeSize(dtype)));
  for (std::byte& byte : tensor.data) byte = static_cast<std::byte>(rng() & 0xFF);
  return tensor;
}

template <class T>
NamedTensor TensorOf(const std::string& name, DType dtype, std::vector<int64_t> shape,
                     const std::vector<T>& values) {
  static_assert(std::endian::native == std::endian::little, "test data is built little-endian");
  NamedTensor tensor{name, dtype, std::move(shape), {}};
  tensor.data.resize(values.size() * sizeof(T));
  if (!values.empty())  // memcpy from an empty vector's null data() is undefined (UBSan)
    std::memcpy(tensor.data.data(), values.data(), tensor.data.size());
  return tensor;
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// Writes a file from a raw header text and data bytes, bypassing the writer's checks.
void WriteRaw(const std::string& path, const std::string& header, const std::string& data,
              int64_t declared_length = -1) {
  const uint64_t length = declared_length >= 0 ? declared_length : header.size();
  std::ofstream out(path, std::ios::binary);
  for (int index = 0; index < 8; ++index)
    out.put(static_cast<char>((length >> (8 * index)) & 0xFF));
  out << header << data;
}

// Reads `path` expecting failure; returns the message.
std::string ReadError(const std::string& path, ErrorCode code = ErrorCode::kInvalidArgument) {
  auto file = ReadSafetensors(path);
  EXPECT_FALSE(file.has_value()) << path << " was accepted";
  if (file) return "";
  EXPECT_EQ(file.error().code, code) << file.error().message;
  return file.error().message;
}

// ----------------------------------------------------------------------------------------------
// Round trips and the bytes on disk.

TEST_F(SafetensorsTest, RoundTripsEveryDTypeAndShape) {
  std::mt19937 rng(42);
  std::vector<NamedTensor> tensors;
  const std::vector<std::vector<int64_t>> shapes = {{},        {1}, {7},      {3, 5},
                                                    {2, 3, 4}, {0}, {4, 0, 2}};
  for (DType dtype : kAllDTypes) {
    for (size_t index = 0; index < shapes.size(); ++index) {
      tensors.push_back(
          RandomTensor(std::string("t.") + DTypeName(dtype) + "." + std::to_string(index), dtype,
                       shapes[index], rng));
    }
  }
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"step", "12"}};
  ASSERT_TRUE(WriteSafetensors(Path("a.safetensors"), tensors, metadata).has_value());
  auto file = ReadSafetensors(Path("a.safetensors"));
  ASSERT_TRUE(file.has_value()) << file.error().message;
  EXPECT_EQ(file->metadata, metadata);
  ASSERT_EQ(file->tensors.size(), tensors.size());
  for (const NamedTensor& expected : tensors) {
    const NamedTensor* got = FindTensor(*file, expected.name);
    ASSERT_NE(got, nullptr) << expected.name;
    EXPECT_EQ(*got, expected) << expected.name;
  }
  EXPECT_EQ(FindTensor(*file, "absent"), nullptr);
}

TEST_F(SafetensorsTest, BytesOnDiskFollowTheFormat) {
  const std::vector<float> values = {1.5f, -2.0f, 0.25f};
  std::vector<NamedTensor> tensors = {TensorOf("w", DType::kF32, {3}, values),
                                      TensorOf<int64_t>("n", DType::kI64, {1}, {-3})};
  ASSERT_TRUE(WriteSafetensors(Path("b.safetensors"), tensors).has_value());
  const std::string bytes = ReadBytes(Path("b.safetensors"));
  ASSERT_GE(bytes.size(), 8u);
  uint64_t header_length = 0;
  for (int index = 7; index >= 0; --index) {
    header_length = (header_length << 8) | static_cast<unsigned char>(bytes[index]);
  }
  EXPECT_EQ(header_length % 8, 0u) << "header is padded to 8 bytes";
  ASSERT_EQ(bytes.size(), 8 + header_length + 12 + 8);
  const std::string header = bytes.substr(8, header_length);
  EXPECT_EQ(header.front(), '{');
  auto json = nlohmann::json::parse(header);
  EXPECT_EQ(json["w"]["dtype"], "F32");
  EXPECT_EQ(json["w"]["shape"], nlohmann::json::array({3}));
  EXPECT_EQ(json["w"]["data_offsets"], nlohmann::json::array({0, 12}));
  EXPECT_EQ(json["n"]["data_offsets"], nlohmann::json::array({12, 20}));
  EXPECT_FALSE(json.contains("__metadata__")) << "no metadata given, none written";
  // 1.5f = 0x3FC00000, little-endian.
  EXPECT_EQ(bytes.substr(8 + header_length, 4), std::string("\x00\x00\xC0\x3F", 4));
  // -3 as int64 little-endian.
  EXPECT_EQ(bytes.substr(8 + header_length + 12, 8),
            std::string("\xFD\xFF\xFF\xFF\xFF\xFF\xFF\xFF", 8));
}

TEST_F(SafetensorsTest, EmptyFileOfNoTensors) {
  ASSERT_TRUE(WriteSafetensors(Path("e.safetensors"), {}).has_value());
  auto file = ReadSafetensors(Path("e.safetensors"));
  ASSERT_TRUE(file.has_value()) << file.error().message;
  EXPECT_TRUE(file->tensors.empty());
  EXPECT_TRUE(file->metadata.empty());
}

TEST_F(SafetensorsTest, OverwriteReplacesTheWholeFile) {
  std::mt19937 rng(1);
  const std::string path = Path("o.safetensors");
  std::vector<NamedTensor> big = {RandomTensor("big", DType::kF64, {100}, rng)};
  std::vector<NamedTensor> small = {RandomTensor("small", DType::kU8, {3}, rng)};
  ASSERT_TRUE(WriteSafetensors(path, big).has_value());
  ASSERT_TRUE(WriteSafetensors(path, small).has_value());
  auto file = ReadSafetensors(path);
  ASSERT_TRUE(file.has_value()) << file.error().message;
  ASSERT_EQ(file->tensors.size(), 1u);
  EXPECT_EQ(file->tensors[0], small[0]);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1)
      << "no temporary file left behind";
}

// ----------------------------------------------------------------------------------------------
// Writer errors.

TEST_F(SafetensorsTest, WriterRejectsBadTensors) {
  const std::string path = Path("w.safetensors");
  auto expect_error = [&](std::vector<NamedTensor> tensors, const std::string& fragment) {
    auto written = WriteSafetensors(path, tensors);
    ASSERT_FALSE(written.has_value()) << fragment;
    EXPECT_EQ(written.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(written.error().message.find(fragment), std::string::npos) << written.error().message;
    EXPECT_FALSE(fs::exists(path));
  };
  const NamedTensor good = TensorOf<float>("a", DType::kF32, {1}, {1.0f});
  expect_error({good, good}, "tensors[1] \"a\": duplicate name");
  expect_error({TensorOf<float>("", DType::kF32, {1}, {1.0f})}, "invalid name");
  expect_error({TensorOf<float>("__metadata__", DType::kF32, {1}, {1.0f})}, "invalid name");
  expect_error({TensorOf<float>("b", DType::kF32, {2}, {1.0f})},
               "\"b\": data holds 4 bytes, shape x F32 needs 8");
  expect_error({TensorOf<float>("c", DType::kF32, {-1}, {})}, "\"c\": shape[0] = -1: must be >= 0");
  expect_error({TensorOf<float>("bad\xff", DType::kF32, {1}, {1.0f})}, "not valid UTF-8");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 0);
}

TEST_F(SafetensorsTest, WriterReportsAMissingDirectory) {
  auto written = WriteSafetensors(Path("no/such/dir/x.safetensors"), {});
  ASSERT_FALSE(written.has_value());
  EXPECT_EQ(written.error().code, ErrorCode::kIo);
  EXPECT_NE(
      written.error().message.find("no/such/dir/x.safetensors: cannot create a temporary file"),
      std::string::npos)
      << written.error().message;
  EXPECT_NE(written.error().message.find("No such file or directory"), std::string::npos);
}

// ----------------------------------------------------------------------------------------------
// Atomicity.

std::vector<NamedTensor> OldContents() {
  return {TensorOf<float>("old", DType::kF32, {2}, {3.0f, 4.0f})};
}

void ExpectOldFileIntact(const std::string& path) {
  auto file = ReadSafetensors(path);
  ASSERT_TRUE(file.has_value()) << file.error().message;
  ASSERT_EQ(file->tensors.size(), 1u);
  EXPECT_EQ(file->tensors[0], OldContents()[0]);
}

std::vector<NamedTensor> LargeContents() {
  std::mt19937 rng(3);
  return {RandomTensor("new", DType::kF32, {64 * 1024}, rng)};  // 256 KiB
}

// Child of the death test: writes past RLIMIT_FSIZE, which kills the process with SIGXFSZ.
void WriteWithFileSizeLimit(const std::string& path) {
  constexpr rlim_t kLimitBytes = 64 * 1024;
  struct rlimit limit = {kLimitBytes, kLimitBytes};
  ::setrlimit(RLIMIT_FSIZE, &limit);
  (void)WriteSafetensors(path, LargeContents());
  std::_Exit(0);
}

// A process killed in the middle of writing (SIGXFSZ on passing RLIMIT_FSIZE, a real crash
// between the temp-file write and the rename) leaves the previous file complete and readable.
TEST_F(SafetensorsTest, CrashDuringWriteLeavesTheOldFile) {
  // "fast" death-test style: the child is a fork of this process and writes into this dir_.
  GTEST_FLAG_SET(death_test_style, "fast");
  const std::string path = Path("ckpt.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, OldContents()).has_value());
  EXPECT_EXIT(WriteWithFileSizeLimit(path), ::testing::KilledBySignal(SIGXFSZ), "");
  ExpectOldFileIntact(path);
}

// The same failure when the process survives it: a clean error, old file intact, temp removed.
TEST_F(SafetensorsTest, FailedWriteReportsAndCleansUp) {
  const std::string path = Path("ckpt.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, OldContents()).has_value());
  struct rlimit saved {};
  ::getrlimit(RLIMIT_FSIZE, &saved);
  auto* saved_handler = ::signal(SIGXFSZ, SIG_IGN);
  struct rlimit limit = {64 * 1024, saved.rlim_max};
  ::setrlimit(RLIMIT_FSIZE, &limit);
  auto written = WriteSafetensors(path, LargeContents());
  ::setrlimit(RLIMIT_FSIZE, &saved);
  ::signal(SIGXFSZ, saved_handler);
  ASSERT_FALSE(written.has_value());
  EXPECT_EQ(written.error().code, ErrorCode::kIo);
  EXPECT_NE(written.error().message.find("ckpt.safetensors: writing"), std::string::npos)
      << written.error().message;
  EXPECT_NE(written.error().message.find("File too large"), std::string::npos)
      << written.error().message;
  ExpectOldFileIntact(path);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1)
      << "the temporary file is removed";
}

// A read-only directory (where permissions bind: not for root) refuses the temp file.
TEST_F(SafetensorsTest, ReadOnlyDirectoryFailsCleanly) {
  const std::string path = Path("ckpt.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, OldContents()).has_value());
  fs::permissions(dir_, fs::perms::owner_read | fs::perms::owner_exec);
  if (::access(dir_.c_str(), W_OK) == 0) GTEST_SKIP() << "running as root: permissions do not bind";
  auto written = WriteSafetensors(path, LargeContents());
  ASSERT_FALSE(written.has_value());
  EXPECT_EQ(written.error().code, ErrorCode::kIo);
  EXPECT_NE(written.error().message.find("Permission denied"), std::string::npos);
  ExpectOldFileIntact(path);
}

// Rename onto a directory fails after the temp file is complete: the temp file is removed.
TEST_F(SafetensorsTest, RenameFailureRemovesTheTempFile) {
  fs::create_directories(dir_ / "target" / "child");
  auto written = WriteFileAtomic(Path("target"), "x");
  ASSERT_FALSE(written.has_value());
  EXPECT_EQ(written.error().code, ErrorCode::kIo);
  EXPECT_NE(written.error().message.find("renaming the complete temporary file"), std::string::npos)
      << written.error().message;
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
}

TEST_F(SafetensorsTest, WriteFileAtomicWritesAndReplaces) {
  const std::string path = Path("state.json");
  ASSERT_TRUE(WriteFileAtomic(path, "{\"step\": 1}").has_value());
  EXPECT_EQ(ReadBytes(path), "{\"step\": 1}");
  ASSERT_TRUE(WriteFileAtomic(path, "{}").has_value());
  EXPECT_EQ(ReadBytes(path), "{}");
  ASSERT_TRUE(WriteFileAtomic(path, std::string_view("a\0b", 3)).has_value());
  EXPECT_EQ(ReadBytes(path), std::string("a\0b", 3));
  auto empty_path = WriteFileAtomic("", "x");
  ASSERT_FALSE(empty_path.has_value());
  EXPECT_NE(empty_path.error().message.find("names no file"), std::string::npos);
}

// ----------------------------------------------------------------------------------------------
// Reader errors: the file itself.

TEST_F(SafetensorsTest, ReaderRejectsMissingAndSpecialFiles) {
  EXPECT_NE(ReadError(Path("missing.safetensors"), ErrorCode::kIo)
                .find("missing.safetensors: cannot open: No such file or directory"),
            std::string::npos);
  EXPECT_NE(ReadError(dir_.string()).find("not a regular file"), std::string::npos);
  EXPECT_NE(ReadError("/dev/zero").find("/dev/zero: not a regular file"), std::string::npos);
  const std::string fifo = Path("pipe");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_NE(ReadError(fifo).find("pipe: not a regular file"), std::string::npos)
      << "a FIFO without a writer must be refused, not waited on";
}

TEST_F(SafetensorsTest, ReaderRejectsTruncatedFiles) {
  const std::string path = Path("t.safetensors");
  std::ofstream(path, std::ios::binary) << "abc";
  EXPECT_NE(ReadError(path).find("t.safetensors: truncated: 3 bytes"), std::string::npos);

  WriteRaw(path, "{}", "", 4096);
  EXPECT_NE(ReadError(path).find("header length = 4096 bytes: larger than the 2 bytes"),
            std::string::npos);

  WriteRaw(path, "{}", "", int64_t{1} << 40);
  EXPECT_NE(ReadError(path).find("header length = 1099511627776 bytes: must be <= 104857600"),
            std::string::npos);

  // A valid file cut short inside the data.
  std::vector<NamedTensor> tensors = {TensorOf<double>("x", DType::kF64, {4}, {1, 2, 3, 4})};
  ASSERT_TRUE(WriteSafetensors(path, tensors).has_value());
  fs::resize_file(path, fs::file_size(path) - 5);
  EXPECT_NE(ReadError(path).find("tensor \"x\".data_offsets = [0, 32]: past the end of the data "
                                 "section (27 bytes)"),
            std::string::npos);
}

// ----------------------------------------------------------------------------------------------
// Reader errors: the header.

struct HeaderCase {
  std::string header;
  std::string data;
  std::string expected_fragment;
};

TEST_F(SafetensorsTest, ReaderRejectsBadHeaders) {
  const std::string entry_f32x2 = R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  const std::string eight_bytes(8, '\0');
  const std::vector<HeaderCase> cases = {
      {"not json", "", "header is not valid JSON"},
      {"[1, 2]", "", "header is JSON array: must be an object"},
      {R"({"a":)" + entry_f32x2 + R"(,"a":)" + entry_f32x2 + "}", eight_bytes,
       "header has duplicate name \"a\""},
      {R"({"a":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}})", eight_bytes,
       "header has duplicate key \"dtype\" inside \"a\""},
      {R"({"a":{"dtype":"F8","shape":[2],"data_offsets":[0,8]}})", eight_bytes,
       "tensor \"a\".dtype: dtype = \"F8\": unknown (rule: one of F32, F64, BF16, F16, I64, I32, "
       "U8"},
      {R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", eight_bytes,
       "tensor \"a\".shape[0] = -2: must be an integer >= 0"},
      {R"({"a":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", eight_bytes,
       "tensor \"a\".shape[0] = 2.5: must be an integer >= 0"},
      {R"({"a":{"dtype":"F32","shape":2,"data_offsets":[0,8]}})", eight_bytes,
       "tensor \"a\".shape = 2: must be an array"},
      {R"({"a":{"dtype":"F32","shape":[2]}})", eight_bytes,
       "tensor \"a\": field data_offsets is missing"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", eight_bytes,
       "tensor \"a\".data_offsets = [0]: must be [begin, end]"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", eight_bytes,
       "tensor \"a\".data_offsets = [8,0]: must have begin <= end"},
      {R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", eight_bytes,
       "tensor \"a\".data_offsets = [0, 8]: 8 bytes, but shape [3] x F32 needs 3 x 4"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", eight_bytes + "xyz",
       "3 trailing bytes after the last tensor"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
       R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
       eight_bytes, "tensor \"b\".data_offsets = [4, 8]: overlaps tensor \"a\" (which ends at 8)"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", eight_bytes,
       "tensor \"a\".data_offsets = [4, 8]: leaves bytes [0, 4) unused"},
      {R"({"__metadata__":{"k":3},"a":{"dtype":"U8","shape":[],"data_offsets":[0,1]}})", "z",
       "__metadata__.k = 3: must be a string"},
      {R"({"__metadata__":[1],"a":{"dtype":"U8","shape":[],"data_offsets":[0,1]}})", "z",
       "__metadata__ is JSON array: must be an object"},
      {R"({"a":[1]})", "", "tensor \"a\" = [1]: must be an object"},
      {R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,18446744073709551615]}})", "z",
       "data_offsets = [0,18446744073709551615]: end is beyond 2^63 - 1"},
      {R"({"a":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,1]}})", "z",
       "tensor \"a\".shape: shape[1] = 4294967296: the element count overflows 64 bits"},
      {"{\"a\xff\":1}", "", "header is not valid JSON"},
  };
  const std::string path = Path("h.safetensors");
  for (const HeaderCase& test_case : cases) {
    WriteRaw(path, test_case.header, test_case.data);
    const std::string message = ReadError(path);
    EXPECT_NE(message.find(test_case.expected_fragment), std::string::npos)
        << "header: " << test_case.header << "\nmessage: " << message;
    EXPECT_EQ(message.rfind(path, 0), 0u) << "message names the file: " << message;
  }
}

TEST_F(SafetensorsTest, ReaderAcceptsForeignButValidLayouts) {
  // Tensors listed out of data order, padded header, metadata, a scalar and an empty tensor.
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"b":{"dtype":"I32","shape":[],"data_offsets":[4,8]},)"
      R"("e":{"dtype":"F32","shape":[0,3],"data_offsets":[4,4]},)"
      R"("a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})"
      "     ";
  WriteRaw(Path("f.safetensors"), header, std::string("\x01\x02\x03\x04\x07\x00\x00\x00", 8));
  auto file = ReadSafetensors(Path("f.safetensors"));
  ASSERT_TRUE(file.has_value()) << file.error().message;
  ASSERT_EQ(file->tensors.size(), 3u);
  EXPECT_EQ(file->tensors[0].name, "a");
  EXPECT_EQ(file->tensors[2].name, "b");
  EXPECT_EQ(file->tensors[2], TensorOf<int32_t>("b", DType::kI32, {}, {7}));
  EXPECT_EQ(FindTensor(*file, "e")->shape, (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(file->metadata.at("format"), "pt");
}

// ----------------------------------------------------------------------------------------------
// Finite check.

TEST(CheckFiniteTest, NamesTheTensorAndTheFirstBadIndex) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto f32 = CheckFinite(TensorOf<float>("model.norm.weight", DType::kF32, {2, 2}, {1, 2, 3, nan}));
  ASSERT_FALSE(f32.has_value());
  EXPECT_NE(f32.error().message.find("tensor \"model.norm.weight\" (F32 [2, 2]) element 3 = nan"),
            std::string::npos)
      << f32.error().message;

  const double inf = std::numeric_limits<double>::infinity();
  auto f64 = CheckFinite(TensorOf<double>("d", DType::kF64, {3}, {0, -inf, inf}));
  ASSERT_FALSE(f64.has_value());
  EXPECT_NE(f64.error().message.find("element 1 = -inf"), std::string::npos);

  // BF16 0x3F80 = 1.0, 0x7F80 = +inf; F16 0x3C00 = 1.0, 0x7E00 = NaN, 0xFC00 = -inf.
  EXPECT_TRUE(CheckFinite(TensorOf<uint16_t>("b", DType::kBF16, {2}, {0x3F80, 0xFF7F})));
  auto bf16 = CheckFinite(TensorOf<uint16_t>("b", DType::kBF16, {2}, {0x3F80, 0x7F80}));
  ASSERT_FALSE(bf16.has_value());
  EXPECT_NE(bf16.error().message.find("element 1 = inf"), std::string::npos);
  EXPECT_TRUE(CheckFinite(TensorOf<uint16_t>("h", DType::kF16, {2}, {0x3C00, 0x7BFF})));
  auto f16 = CheckFinite(TensorOf<uint16_t>("h", DType::kF16, {3}, {0x3C00, 0xFC00, 0x7E00}));
  ASSERT_FALSE(f16.has_value());
  EXPECT_NE(f16.error().message.find("element 1 = -inf"), std::string::npos);

  // Integer tensors have no NaN: bit patterns that would be NaN as floats pass.
  EXPECT_TRUE(CheckFinite(TensorOf<int32_t>("i", DType::kI32, {1}, {0x7FC00000})));
  EXPECT_TRUE(CheckFinite(TensorOf<float>("ok", DType::kF32, {3}, {0.0f, -1e30f, 1e-40f})));
}

TEST(DTypeTest, NamesSizesAndParsing) {
  for (DType dtype : kAllDTypes) {
    auto parsed = ParseDType(DTypeName(dtype));
    ASSERT_TRUE(parsed.has_value());
    EXPECT_EQ(*parsed, dtype);
  }
  EXPECT_EQ(DTypeSize(DType::kBF16), 2);
  EXPECT_EQ(DTypeSize(DType::kI64), 8);
  EXPECT_FALSE(ParseDType("f32").has_value()) << "dtype names are case-sensitive";
  EXPECT_EQ(*ElementCount(std::vector<int64_t>{}), 1);
  EXPECT_EQ(*ElementCount(std::vector<int64_t>{3, 0}), 0);
  auto overflow = ElementCount(std::vector<int64_t>{int64_t{1} << 40, int64_t{1} << 40});
  ASSERT_FALSE(overflow.has_value());
  EXPECT_NE(overflow.error().message.find("overflows"), std::string::npos);
}

// ----------------------------------------------------------------------------------------------
// Cross-check against the independent Python reader/writer (standard library only).

std::string PythonScript() {
  return std::string(HEXISEQ_SOURCE_PATH) + "/tests/train/safetensors_lite.py";
}

bool PythonAvailable() {
  return fs::exists(PythonScript()) &&
         std::system("/usr/bin/python3 -c 'import json, struct' >/dev/null 2>&1") == 0;
}

// The sample rule of safetensors_lite.py: sample_value(dtype, index).
double SampleValue(const std::string& dtype, int index) {
  if (dtype == "F64" || dtype == "F32" || dtype == "F16" || dtype == "BF16") {
    return (index - 3) * 0.25;
  }
  if (dtype == "I64") return static_cast<double>((int64_t{1} << 40) + index * 7 - 5);
  if (dtype == "I32") return index * 7 - 5;
  return (index * 37) % 256;
}

// Builds the sample tensor of `dtype` in C++ from the same rule.
NamedTensor SampleTensor(DType dtype) {
  const std::string name = std::string("sample.") + DTypeName(dtype);
  const std::vector<int64_t> shape = {2, 3};
  std::vector<double> values;
  for (int index = 0; index < 6; ++index) values.push_back(SampleValue(DTypeName(dtype), index));
  switch (dtype) {
    case DType::kF64:
      return TensorOf<double>(name, dtype, shape, values);
    case DType::kF32:
      return TensorOf<float>(name, dtype, shape, {values.begin(), values.end()});
    case DType::kBF16:
    case DType::kF16: {
      // (index - 3) / 4 for index 0..5: -0.75, -0.5, -0.25, 0, 0.25, 0.5, written bit by bit.
      const std::vector<uint16_t> bf16 = {0xBF40, 0xBF00, 0xBE80, 0x0000, 0x3E80, 0x3F00};
      const std::vector<uint16_t> f16 = {0xBA00, 0xB800, 0xB400, 0x0000, 0x3400, 0x3800};
      return TensorOf<uint16_t>(name, dtype, shape, dtype == DType::kBF16 ? bf16 : f16);
    }
    case DType::kI64: {
      std::vector<int64_t> ints;
      for (int index = 0; index < 6; ++index) ints.push_back((int64_t{1} << 40) + index * 7 - 5);
      return TensorOf<int64_t>(name, dtype, shape, ints);
    }
    case DType::kI32:
      return TensorOf<int32_t>(name, dtype, shape, {values.begin(), values.end()});
    case DType::kU8:
      return TensorOf<uint8_t>(name, dtype, shape, {values.begin(), values.end()});
  }
  return {};
}

TEST_F(SafetensorsTest, PythonReadsWhatCppWrites) {
  if (!PythonAvailable()) GTEST_SKIP() << "/usr/bin/python3 or " << PythonScript() << " missing";
  std::vector<NamedTensor> tensors;
  for (DType dtype : kAllDTypes) tensors.push_back(SampleTensor(dtype));
  tensors.push_back(NamedTensor{"sample.empty", DType::kF32, {0, 4}, {}});
  const std::string path = Path("cpp.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, tensors, {{"writer", "c++"}}).has_value());
  const std::string dump_path = Path("dump.json");
  const std::string command =
      "/usr/bin/python3 " + PythonScript() + " dump " + path + " > " + dump_path;
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  auto dump = nlohmann::json::parse(ReadBytes(dump_path));
  EXPECT_EQ(dump["metadata"]["writer"], "c++");
  ASSERT_EQ(dump["tensors"].size(), tensors.size());
  for (DType dtype : kAllDTypes) {
    const auto& entry = dump["tensors"][std::string("sample.") + DTypeName(dtype)];
    EXPECT_EQ(entry["dtype"], DTypeName(dtype));
    EXPECT_EQ(entry["shape"], nlohmann::json::array({2, 3}));
    for (int index = 0; index < 6; ++index) {
      EXPECT_EQ(entry["values"][index].get<double>(), SampleValue(DTypeName(dtype), index))
          << DTypeName(dtype) << " element " << index;
    }
  }
  EXPECT_EQ(dump["tensors"]["sample.empty"]["shape"], nlohmann::json::array({0, 4}));
}

TEST_F(SafetensorsTest, CppReadsWhatPythonWrites) {
  if (!PythonAvailable()) GTEST_SKIP() << "/usr/bin/python3 or " << PythonScript() << " missing";
  const std::string path = Path("py.safetensors");
  const std::string command = "/usr/bin/python3 " + PythonScript() + " write-sample " + path;
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  auto file = ReadSafetensors(path);
  ASSERT_TRUE(file.has_value()) << file.error().message;
  EXPECT_EQ(file->metadata.at("writer"), "safetensors_lite.py");
  ASSERT_EQ(file->tensors.size(), kAllDTypes.size() + 1);
  for (DType dtype : kAllDTypes) {
    const NamedTensor* got = FindTensor(*file, std::string("sample.") + DTypeName(dtype));
    ASSERT_NE(got, nullptr) << DTypeName(dtype);
    EXPECT_EQ(*got, SampleTensor(dtype)) << DTypeName(dtype);
  }
  const NamedTensor* empty = FindTensor(*file, "sample.empty");
  ASSERT_NE(empty, nullptr);
  EXPECT_EQ(empty->shape, (std::vector<int64_t>{0, 4}));
  EXPECT_TRUE(empty->data.empty());
}

}  // namespace
}  // namespace hexiseq::train
