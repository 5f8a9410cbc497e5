// Data sources: the recall task's structure (second-half queries ask the dictionary of the first
// eighth), determinism in (seed, index), byte-file windows, and the errors.
#include "train/data.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>

namespace hexiseq::train {
namespace {

// Checks one recall sequence of S = 127 against the task's definition: the dictionary fills the
// first eighth, queries sit in the second half, each answer is the dictionary's value, and only
// the first ask of each key is a target.
void CheckRecallSequence(const Sequence& sequence, int64_t keys) {
  // Tokens: pairs 2 .. 2 + 4K - 1 (2 + 4 key + value), queries next (K), answers next (4).
  const int64_t first_query = 2 + 4 * keys, first_answer = first_query + keys;
  ASSERT_EQ(sequence.tokens.size(), 128u);
  ASSERT_EQ(sequence.recall_target.size(), 127u);
  std::map<int64_t, int64_t> dictionary;  // key -> value from the pair tokens
  for (int64_t position = 0; position < 128 / 8; ++position) {
    const int64_t pair = sequence.tokens[position] - 2;
    ASSERT_TRUE(pair >= 0 && pair < 4 * keys) << "position " << position;
    auto [it, inserted] = dictionary.try_emplace(pair / 4, pair % 4);
    EXPECT_EQ(it->second, pair % 4) << "key " << pair / 4 << " restated with another value";
  }
  EXPECT_EQ(static_cast<int64_t>(dictionary.size()), keys);  // every key stated
  std::map<int64_t, int> asks;
  int targets = 0, queries = 0;
  for (int64_t p = 128 / 8; p < 127; ++p) {
    const int64_t token = sequence.tokens[p];
    if (token == 1) {
      EXPECT_FALSE(sequence.recall_target[p]);
      continue;
    }
    if (token >= first_answer) continue;  // an answer, checked with its query
    ASSERT_TRUE(token >= first_query && token < first_answer) << "position " << p;
    ++queries;
    EXPECT_GE(p, 64) << "queries sit in the second half";
    const int64_t key = token - first_query;
    ASSERT_TRUE(dictionary.contains(key)) << "position " << p;
    EXPECT_EQ(sequence.tokens[p + 1] - first_answer, dictionary[key]);
    EXPECT_EQ(sequence.recall_target[p] != 0, asks[key]++ == 0) << "only first asks are targets";
    targets += sequence.recall_target[p];
  }
  EXPECT_EQ(queries, 8);  // one per 8 tokens of the second half (64 tokens)
  EXPECT_EQ(targets, keys);
}

TEST(RecallData, QueriesInTheSecondHalfAskTheDictionaryOfTheFirstEighth) {
  for (const auto& [spec, keys] :
       {std::pair<std::string, int64_t>{"synthetic:recall", 1}, {"synthetic:recall:4", 4}}) {
    SCOPED_TRACE(spec);
    auto source = OpenDataSource(spec, 127, 256, 9);
    ASSERT_TRUE(source) << source.error().message;
    for (int64_t index = 0; index < 5; ++index) CheckRecallSequence((*source)->Get(index), keys);
    EXPECT_NEAR((*source)->recall_chance_loss(), std::log(4.0), 1e-12);
  }
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
  EXPECT_NE(message("synthetic:recall:0", 64, 256).find("bad recall task"), std::string::npos);
  EXPECT_NE(message("synthetic:recall:x", 64, 256).find("bad recall task"), std::string::npos);
  EXPECT_NE(message("synthetic:recall:51", 64, 256).find("needs vocab >= 261"), std::string::npos);
  EXPECT_NE(message("synthetic:recall", 64, 8).find("model vocab = 8: too small"),
            std::string::npos);
  EXPECT_NE(message("synthetic:recall", 4, 256).find("--seq = 4: too short"), std::string::npos);
  EXPECT_NE(message("/no/such/file", 64, 256).find("/no/such/file: cannot read the --data file"),
            std::string::npos);
  const std::string path = ::testing::TempDir() + "/short.bin";
  { std::ofstream(path, std::ios::binary) << "abc"; }
  EXPECT_NE(message(path, 3, 256).find("3 bytes: too short"), std::string::npos);
  EXPECT_EQ(message(path, 2, 256), "ok");
  std::remove(path.c_str());
}

}  // namespace
}  // namespace hexiseq::train
