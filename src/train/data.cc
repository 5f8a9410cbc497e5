// Byte-file and synthetic-recall data sources. The recall task: a dictionary of up to 4 keys,
// each with a random value, stated at the very start as one "pair" token per entry (key and value
// in one token id), a constant filler token, then at the end of the sequence query tokens (every
// key up to 8 times, shuffled; one query per 8 tokens of the sequence at most), each followed by
// its value token. A value can only be predicted
// from the pair tokens at the start, so the recall loss falls only when attention reaches across
// every shard.
#include "train/data.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <numeric>
#include <random>

namespace hexiseq::train {
namespace {

constexpr int kByteVocab = 256;
constexpr int kFillerToken = 1;       // recall filler (constant: the loss is then all recall)
constexpr int kFirstRecallToken = 2;  // 0 and 1 are left out of the recall tokens
constexpr int kMaxRecallAlphabet = 4;
constexpr int64_t kQueriesPerKey = 8;
constexpr int64_t kTokensPerPairSlot = 8;  // at most one pair per 8 tokens of the sequence

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t SequenceSeed(uint64_t seed, int64_t index) {
  return SplitMix64(SplitMix64(seed) ^ static_cast<uint64_t>(index));
}

class ByteFileSource : public DataSource {
 public:
  ByteFileSource(std::vector<uint8_t> bytes, int64_t seq_len, uint64_t seed)
      : bytes_(std::move(bytes)), seq_len_(seq_len), seed_(seed) {}

  Sequence Get(int64_t index) const override {
    const uint64_t starts = bytes_.size() - static_cast<uint64_t>(seq_len_);  // >= 1
    const uint64_t offset = SequenceSeed(seed_, index) % starts;
    Sequence sequence;
    sequence.tokens.assign(bytes_.begin() + offset, bytes_.begin() + offset + seq_len_ + 1);
    sequence.recall_target.assign(seq_len_, 0);
    return sequence;
  }
  bool has_recall() const override { return false; }
  double recall_chance_loss() const override { return 0; }

 private:
  std::vector<uint8_t> bytes_;
  int64_t seq_len_;
  uint64_t seed_;
};

// Token ids of the recall task for an alphabet of A keys and A values.
struct RecallTokens {
  int64_t alphabet = 0;
  int64_t pair(int64_t key, int64_t value) const {
    return kFirstRecallToken + key * alphabet + value;
  }
  int64_t query(int64_t key) const { return kFirstRecallToken + alphabet * alphabet + key; }
  int64_t value(int64_t value) const { return query(alphabet) + value; }
  int64_t first_filler() const { return value(alphabet); }
};

// The largest alphabet A <= kMaxRecallAlphabet whose tokens (A^2 pairs, A queries, A values)
// fit in the vocab.
int64_t RecallAlphabet(int vocab) {
  int64_t alphabet = kMaxRecallAlphabet;
  while (alphabet > 1 && RecallTokens{alphabet}.first_filler() > vocab) --alphabet;
  return alphabet;
}

class RecallSource : public DataSource {
 public:
  RecallSource(int64_t seq_len, int vocab, uint64_t seed)
      : seq_len_(seq_len), seed_(seed), tokens_{RecallAlphabet(vocab)} {
    pairs_ = std::clamp<int64_t>((seq_len + 1) / kTokensPerPairSlot, 1, tokens_.alphabet);
    queries_ = std::clamp<int64_t>((seq_len + 1) / kTokensPerPairSlot, 1, kQueriesPerKey * pairs_);
  }

  Sequence Get(int64_t index) const override {
    std::mt19937_64 rng(SequenceSeed(seed_, index));
    std::vector<int64_t> keys(tokens_.alphabet);
    std::iota(keys.begin(), keys.end(), 0);
    std::shuffle(keys.begin(), keys.end(), rng);
    keys.resize(pairs_);
    std::uniform_int_distribution<int64_t> value_dist(0, tokens_.alphabet - 1);
    std::vector<int64_t> values(pairs_);
    for (int64_t& value : values) value = value_dist(rng);

    const int64_t total = seq_len_ + 1;
    Sequence sequence;
    sequence.tokens.assign(total, kFillerToken);
    sequence.recall_target.assign(seq_len_, 0);
    for (int64_t pair = 0; pair < pairs_; ++pair) {
      sequence.tokens[pair] = tokens_.pair(keys[pair], values[pair]);
    }
    // The end of the sequence asks about every key up to kQueriesPerKey times, shuffled.
    std::vector<int64_t> order(queries_);
    for (int64_t query = 0; query < queries_; ++query) order[query] = query % pairs_;
    std::shuffle(order.begin(), order.end(), rng);
    const int64_t query_start = total - 2 * queries_;
    for (int64_t query = 0; query < queries_; ++query) {
      const int64_t position = query_start + 2 * query;
      sequence.tokens[position] = tokens_.query(keys[order[query]]);
      sequence.tokens[position + 1] = tokens_.value(values[order[query]]);
      sequence.recall_target[position] = 1;  // predicts the value at position + 1
    }
    return sequence;
  }
  bool has_recall() const override { return true; }
  double recall_chance_loss() const override {
    return std::log(static_cast<double>(tokens_.alphabet));
  }

 private:
  int64_t seq_len_;
  uint64_t seed_;
  RecallTokens tokens_;
  int64_t pairs_ = 0;
  int64_t queries_ = 0;
};

Result<std::vector<uint8_t>> ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return IoError("--data " + path +
                   ": cannot open the file (rule: a readable file of raw bytes, or "
                   "synthetic:recall; hint: check the path)");
  }
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

Result<std::unique_ptr<DataSource>> OpenRecall(int64_t seq_len, int vocab, uint64_t seed) {
  if (vocab < kRecallMinVocab) {
    return InvalidArgument(
        "--data synthetic:recall: model vocab = " + std::to_string(vocab) +
        ": too small (rule: the recall task needs vocab >= " + std::to_string(kRecallMinVocab) +
        " for its key and value alphabets; hint: use a model with a larger "
        "vocab, e.g. examples/models/tiny.yaml)");
  }
  if (seq_len + 1 < kRecallMinTokens) {
    return InvalidArgument(
        "--data synthetic:recall: --seq = " + std::to_string(seq_len) +
        ": too short (rule: the recall task needs S + 1 >= " + std::to_string(kRecallMinTokens) +
        " tokens; hint: use --seq 64 or more)");
  }
  return std::make_unique<RecallSource>(seq_len, vocab, seed);
}

}  // namespace

Result<std::unique_ptr<DataSource>> OpenDataSource(const std::string& spec, int64_t seq_len,
                                                   int vocab, uint64_t seed) {
  if (spec == "synthetic:recall") return OpenRecall(seq_len, vocab, seed);
  if (spec.starts_with("synthetic:")) {
    return InvalidArgument("--data " + spec +
                           ": unknown synthetic task (rule: synthetic:recall or a file path; "
                           "hint: write --data synthetic:recall)");
  }
  if (vocab < kByteVocab) {
    return InvalidArgument(
        "--data " + spec + ": model vocab = " + std::to_string(vocab) +
        ": too small for byte-level tokens (rule: a byte file needs vocab >= " +
        std::to_string(kByteVocab) +
        "; hint: use a model with vocab >= 256, e.g. examples/models/tiny.yaml)");
  }
  auto bytes = ReadBytes(spec);
  if (!bytes) return std::unexpected(bytes.error());
  const int64_t needed = seq_len + 1;
  if (static_cast<int64_t>(bytes->size()) < needed) {
    return InvalidArgument(
        "--data " + spec + ": " + std::to_string(bytes->size()) +
        " bytes: too short (rule: a sequence is --seq + 1 = " + std::to_string(needed) +
        " consecutive bytes; hint: use a larger file or a smaller --seq)");
  }
  return std::unique_ptr<DataSource>(
      std::make_unique<ByteFileSource>(std::move(*bytes), seq_len, seed));
}

}  // namespace hexiseq::train
