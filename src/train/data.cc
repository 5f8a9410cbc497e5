// Byte-file and synthetic-recall data sources. The recall task: P key-value pairs at the start
// ("k1 v1 k2 v2 ..."), then distractor pairs from a second dictionary (keys from another
// alphabet, repeating, so the model learns to look keys up), then the P first keys again in a
// shuffled order, each followed by its value, at the very end. Predicting a value at the end needs
// the pair at the start, so that loss only falls when attention reaches across every shard.
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
constexpr int kFillerToken = 1;       // pads an odd gap before the recall queries
constexpr int kFirstRecallToken = 2;  // 0 and 1 are left out of the key/value alphabets
constexpr int kRecallAlphabets = 3;   // far keys, distractor keys, values
constexpr int kMaxRecallAlphabet = 32;
constexpr int64_t kMaxRecallPairs = 16;
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

class RecallSource : public DataSource {
 public:
  RecallSource(int64_t seq_len, int vocab, uint64_t seed) : seq_len_(seq_len), seed_(seed) {
    alphabet_ = std::min(kMaxRecallAlphabet, (vocab - kFirstRecallToken) / kRecallAlphabets);
    pairs_ = std::clamp<int64_t>((seq_len + 1) / kTokensPerPairSlot, 1,
                                 std::min<int64_t>(kMaxRecallPairs, alphabet_));
  }

  Sequence Get(int64_t index) const override {
    std::mt19937_64 rng(SequenceSeed(seed_, index));
    const int64_t far_keys = kFirstRecallToken, near_keys = far_keys + alphabet_;
    const int64_t values = near_keys + alphabet_;
    std::vector<int64_t> keys(alphabet_);
    std::iota(keys.begin(), keys.end(), far_keys);
    std::shuffle(keys.begin(), keys.end(), rng);
    keys.resize(pairs_);
    std::uniform_int_distribution<int64_t> value_dist(values, values + alphabet_ - 1);
    std::vector<int64_t> far_values(pairs_), near_values(alphabet_);
    for (int64_t& value : far_values) value = value_dist(rng);
    for (int64_t& value : near_values) value = value_dist(rng);

    const int64_t total = seq_len_ + 1;
    Sequence sequence;
    sequence.tokens.assign(total, kFillerToken);
    sequence.recall_target.assign(seq_len_, 0);
    for (int64_t pair = 0; pair < pairs_; ++pair) {
      sequence.tokens[2 * pair] = keys[pair];
      sequence.tokens[2 * pair + 1] = far_values[pair];
    }
    // Distractor pairs from a second dictionary fill the middle: they repeat, so they teach
    // the model to look a key up, but never answer a final query.
    const int64_t query_start = total - 2 * pairs_;
    std::uniform_int_distribution<int64_t> near_dist(0, alphabet_ - 1);
    for (int64_t position = 2 * pairs_; position + 1 < query_start; position += 2) {
      const int64_t key = near_dist(rng);
      sequence.tokens[position] = near_keys + key;
      sequence.tokens[position + 1] = near_values[key];
    }
    std::vector<int64_t> order(pairs_);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    for (int64_t query = 0; query < pairs_; ++query) {
      const int64_t key_position = query_start + 2 * query;
      sequence.tokens[key_position] = keys[order[query]];
      sequence.tokens[key_position + 1] = far_values[order[query]];
      sequence.recall_target[key_position] = 1;  // predicts the value at key_position + 1
    }
    return sequence;
  }
  bool has_recall() const override { return true; }
  double recall_chance_loss() const override { return std::log(static_cast<double>(alphabet_)); }

 private:
  int64_t seq_len_;
  uint64_t seed_;
  int alphabet_ = 0;
  int64_t pairs_ = 0;
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
