// Data sources: the recall task's structure (queries at the end ask for the pairs at the start),
// determinism in (seed, index), byte-file windows, and the errors.
#include "train/data.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>

namespace hexiseq::train {
namespace {

TEST(RecallData, QueriesAskForThePairsAtTheStart) {
  // vocab 256: alphabet 4, pair tokens 2..17 (2 + 4 key + value), queries 18..21, values 22..25.
  auto source = OpenDataSource("synthetic:recall", 127, 256, 9);
  ASSERT_TRUE(source) << source.error().message;
  const Sequence sequence = (*source)->Get(3);
  ASSERT_EQ(sequence.tokens.size(), 128u);
  ASSERT_EQ(sequence.recall_target.size(), 127u);
  std::map<int64_t, int64_t> dictionary;  // key -> value from the pair tokens at the start
  for (int64_t position = 0; position < 4; ++position) {
    const int64_t pair = sequence.tokens[position] - 2;
    ASSERT_TRUE(pair >= 0 && pair < 16) << "position " << position;
    dictionary[pair / 4] = pair % 4;
  }
  EXPECT_EQ(dictionary.size(), 4u);  // every key once
  int targets = 0;
  for (int64_t p = 0; p < 127; ++p) {
    if (!sequence.recall_target[p]) continue;
    ++targets;
    const int64_t key = sequence.tokens[p] - 18;
    ASSERT_TRUE(dictionary.contains(key)) << "position " << p;
    EXPECT_EQ(sequence.tokens[p + 1] - 22, dictionary[key]);
    EXPECT_GE(p, 128 - 32);  // queries sit at the end
  }
  EXPECT_EQ(targets, 16);                                                   // (S + 1) / 8
  for (int64_t p = 4; p < 128 - 32; ++p) EXPECT_EQ(sequence.tokens[p], 1);  // filler only
  EXPECT_NEAR((*source)->recall_chance_loss(), std::log(4.0), 1e-12);
}

TEST(RecallData, DeterministicInSeedAndIndex) {
  auto a = OpenDataSource("synthetic:recall", 63, 256, 1);
  auto b = OpenDataSource("synthetic:recall", 63, 256, 1);
  auto c = OpenDataSource("synthetic:recall", 63, 256, 2);
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ((*a)->Get(5).tokens, (*b)->Get(5).tokens);
  EXPECT_NE((*a)->Get(5).tokens, (*a)->Get(6).tokens);
  EXPECT_NE((*a)->Get(5).tokens, (*c)->Get(5).tokens);
}

TEST(ByteData, WindowsOfTheFile) {
  const std::string path = ::testing::TempDir() + "/bytes.bin";
  {
    std::ofstream out(path, std::ios::binary);
    for (int index = 0; index < 300; ++index) out.put(static_cast<char>(index % 251));
  }
  auto source = OpenDataSource(path, 40, 256, 3);
  ASSERT_TRUE(source) << source.error().message;
  EXPECT_FALSE((*source)->has_recall());
  for (int64_t index = 0; index < 50; ++index) {
    const Sequence sequence = (*source)->Get(index);
    ASSERT_EQ(sequence.tokens.size(), 41u);
    for (size_t p = 1; p < sequence.tokens.size(); ++p) {
      EXPECT_EQ(sequence.tokens[p], (sequence.tokens[p - 1] + 1) % 251);  // consecutive bytes
    }
  }
  auto exact = OpenDataSource(path, 299, 256, 3);  // the whole file is the only window
  ASSERT_TRUE(exact);
  EXPECT_EQ((*exact)->Get(7).tokens.front(), 0);
  std::remove(path.c_str());
}

TEST(DataErrors, Messages) {
  auto message = [](const std::string& spec, int64_t seq, int vocab) {
    auto source = OpenDataSource(spec, seq, vocab, 1);
    return source ? std::string("ok") : source.error().message;
  };
  EXPECT_NE(message("synthetic:copy", 64, 256).find("unknown synthetic task"), std::string::npos);
  EXPECT_NE(message("synthetic:recall", 64, 8).find("model vocab = 8: too small"),
            std::string::npos);
  EXPECT_NE(message("synthetic:recall", 4, 256).find("--seq = 4: too short"), std::string::npos);
  EXPECT_NE(message("/no/such/file", 64, 256).find("/no/such/file: cannot open"),
            std::string::npos);
  const std::string path = ::testing::TempDir() + "/short.bin";
  { std::ofstream(path, std::ios::binary) << "abc"; }
  EXPECT_NE(message(path, 3, 256).find("3 bytes: too short"), std::string::npos);
  EXPECT_EQ(message(path, 2, 256), "ok");
  std::remove(path.c_str());
}

}  // namespace
}  // namespace hexiseq::train
