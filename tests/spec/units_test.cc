// Units: parsing of bandwidth, memory and token counts against hand-computed byte counts, and the
// error messages for text, zero, negative and non-finite values.
#include "spec/units.h"

#include <gtest/gtest.h>

#include <cmath>

namespace hexiseq {
namespace {

TEST(UnitsTest, BandwidthUnits) {
  EXPECT_DOUBLE_EQ(*ParseBandwidth("450 GB/s", "f"), 450e9);
  EXPECT_DOUBLE_EQ(*ParseBandwidth("450GB/s", "f"), 450e9);
  EXPECT_DOUBLE_EQ(*ParseBandwidth("  12.5 GB/s ", "f"), 12.5e9);
  EXPECT_DOUBLE_EQ(*ParseBandwidth("400 Gb/s", "f"), 50e9);  // bits: divide by 8
  EXPECT_DOUBLE_EQ(*ParseBandwidth("200 Gb/s", "f"), 25e9);
  EXPECT_DOUBLE_EQ(*ParseBandwidth("1.8 TB/s", "f"), 1.8e12);
  EXPECT_DOUBLE_EQ(*ParseBandwidth("25", "f"), 25e9);  // a bare number is GB/s
  EXPECT_DOUBLE_EQ(*ParseBandwidth("1e2 GB/s", "f"), 100e9);
}

TEST(UnitsTest, BandwidthRejectsTextWithFieldRuleAndHint) {
  auto result = ParseBandwidth("fast", "nodes[0].intra_node");
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(result.error().message,
            "nodes[0].intra_node = \"fast\": not a bandwidth (rule: a number with unit GB/s, Gb/s "
            "or TB/s; hint: write 450 GB/s)");
}

TEST(UnitsTest, BandwidthRejectsUnknownUnitZeroNegativeAndNonFinite) {
  auto unit = ParseBandwidth("450 GB/h", "nodes[1].nic");
  ASSERT_FALSE(unit);
  EXPECT_NE(unit.error().message.find("nodes[1].nic = \"450 GB/h\": not a bandwidth (unknown "
                                      "unit \"GB/h\")"),
            std::string::npos)
      << unit.error().message;
  for (const char* text : {"0 GB/s", "0", "-5 GB/s", "-0.1"}) {
    auto result = ParseBandwidth(text, "inter_node");
    ASSERT_FALSE(result) << text;
    EXPECT_EQ(result.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(result.error().message.find(std::string("inter_node = \"") + text +
                                          "\": must be > 0 (rule:"),
              std::string::npos)
        << result.error().message;
  }
  for (const char* text : {"nan GB/s", "inf GB/s", "", "GB/s", "1e400 GB/s"}) {
    EXPECT_FALSE(ParseBandwidth(text, "nic")) << text;
  }
}

TEST(UnitsTest, MemoryUnits) {
  EXPECT_DOUBLE_EQ(*ParseMemory("80 GiB", "m"), 80 * kGiB);
  EXPECT_DOUBLE_EQ(*ParseMemory("80GB", "m"), 80e9);
  EXPECT_DOUBLE_EQ(*ParseMemory("1 TiB", "m"), 1024 * kGiB);
  EXPECT_DOUBLE_EQ(*ParseMemory("80", "m"), 80 * kGiB);  // a bare number is GiB
  EXPECT_DOUBLE_EQ(*ParseMemory("48 gib", "m"), 48 * kGiB);
  EXPECT_DOUBLE_EQ(*ParseMemory("512 MiB", "m"), 512.0 * 1024 * 1024);
}

TEST(UnitsTest, MemoryRejectsTextZeroAndNegative) {
  auto text = ParseMemory("lots", "nodes[0].gpu.memory");
  ASSERT_FALSE(text);
  EXPECT_EQ(text.error().message,
            "nodes[0].gpu.memory = \"lots\": not a memory size (rule: a number with unit GiB, GB "
            "or TiB; hint: write 80 GiB)");
  for (const char* bad : {"0 GiB", "-1 GiB"}) {
    auto result = ParseMemory(bad, "memory");
    ASSERT_FALSE(result);
    EXPECT_NE(result.error().message.find("must be > 0"), std::string::npos);
  }
  EXPECT_FALSE(ParseMemory("80 GiBs", "memory"));
}

TEST(UnitsTest, TokenCounts) {
  EXPECT_EQ(*ParseTokenCount("256K", "--seq"), 262144);
  EXPECT_EQ(*ParseTokenCount("256k", "--seq"), 262144);
  EXPECT_EQ(*ParseTokenCount("1M", "--seq"), 1048576);
  EXPECT_EQ(*ParseTokenCount("1048576", "--seq"), 1048576);
  EXPECT_EQ(*ParseTokenCount(" 8K ", "--seq"), 8192);
  EXPECT_EQ(*ParseTokenCount("1.5K", "--seq"), 1536);
  EXPECT_EQ(*ParseTokenCount("16M", "--seq"), 16 * 1048576);
  EXPECT_EQ(*ParseTokenCount("1", "--seq"), 1);
}

TEST(UnitsTest, TokenCountErrorsNameTheFlagValueRuleAndHint) {
  auto banana = ParseTokenCount("banana", "--seq");
  ASSERT_FALSE(banana);
  EXPECT_EQ(banana.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(banana.error().message,
            "--seq = \"banana\": not a token count (rule: a whole number of tokens >= 1, "
            "optionally with suffix K (x1024) or M (x1048576); hint: write 256K or 1M)");
  for (const char* bad : {"0", "-5", "0K"}) {
    auto result = ParseTokenCount(bad, "--seq");
    ASSERT_FALSE(result) << bad;
    EXPECT_NE(result.error().message.find(std::string("--seq = \"") + bad + "\": must be >= 1"),
              std::string::npos)
        << result.error().message;
  }
  for (const char* bad : {"", "5X", "1.3K", "0.5", "nan", "1e30M"}) {
    auto result = ParseTokenCount(bad, "--seq");
    ASSERT_FALSE(result) << bad;
    EXPECT_NE(result.error().message.find("hint: write 256K or 1M"), std::string::npos);
  }
}

TEST(UnitsTest, Formatting) {
  EXPECT_EQ(FormatBytes(80 * kGiB), "80.0 GiB");
  EXPECT_EQ(FormatBytes(1.5 * kGiB), "1.5 GiB");
  EXPECT_EQ(FormatBytes(2048.0 * kGiB), "2.0 TiB");
  EXPECT_EQ(FormatBytes(3.0 * 1024 * 1024), "3.0 MiB");
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBandwidth(12e9), "12.0 GB/s");
  EXPECT_EQ(FormatBandwidth(450e9), "450.0 GB/s");
  EXPECT_EQ(FormatBandwidth(1.8e12), "1.8 TB/s");
  EXPECT_EQ(FormatTokens(262144), "256K");
  EXPECT_EQ(FormatTokens(1048576), "1M");
  EXPECT_EQ(FormatTokens(1536), "1536");
  EXPECT_EQ(FormatTokens(1536 * 1024), "1536K");
  EXPECT_EQ(FormatTokens(1000), "1000");
}

TEST(UnitsTest, TokenFormatRoundTrips) {
  for (int64_t tokens : {int64_t{1}, int64_t{4095}, int64_t{4096}, int64_t{131072},
                         int64_t{1} << 24, int64_t{3} * 1024 * 1024 + 1024, int64_t{999983}}) {
    auto parsed = ParseTokenCount(FormatTokens(tokens), "--seq");
    ASSERT_TRUE(parsed) << parsed.error().message;
    EXPECT_EQ(*parsed, tokens);
  }
}

}  // namespace
}  // namespace hexiseq
