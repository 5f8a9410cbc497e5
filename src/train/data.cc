// Byte-file and synthetic-recall data sources. The recall task: a dictionary of K keys (1 by
// default), each with a random value among 4, written as "pair" tokens (key and value in one token
// id) that fill the first eighth of the sequence (every entry once per round, rounds shuffled),
// then a constant filler token, then query tokens at evenly spaced positions of the second half,
// each followed by its answer token. Only the first ask of each key is a recall target (a later
// ask could copy an earlier answer); that answer can only come from the dictionary, at least
// 3S/8 positions back, so the recall loss falls below chance (ln 4) only when attention carries
// information from the first eighth (one shard) to the second half (the other shards).
#include "train/data.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <numeric>
#include <random>

#include "spec/input_file.h"
#include "spec/limits.h"

namespace hexiseq::train {
namespace {

constexpr int kByteVocab = 256;
constexpr int kFillerToken = 1;             // recall filler (constant: the loss is then all recall)
constexpr int kFirstRecallToken = 2;        // 0 and 1 are left out of the recall tokens
constexpr int64_t kRecallValues = 4;        // answers per key: chance is ln 4
constexpr int64_t kDefaultRecallKeys = 1;   // synthetic:recall; synthetic:recall:K for K keys
constexpr int64_t kDictionaryFraction = 8;  // the dictionary fills the first 1/8 of the sequence
constexpr int64_t kTokensPerQuerySlot = 8;  // at most one query per 8 tokens of the second half

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

// Token ids of the recall task for `keys` keys and `values` values: one pair token per
// (key, value), one query token per key, one answer token per value.
struct RecallTokens {
  int64_t keys = 0;
  int64_t values = 0;
  int64_t pair(int64_t key, int64_t value) const {
    return kFirstRecallToken + key * values + value;
  }
  int64_t query(int64_t key) const { return kFirstRecallToken + keys * values + key; }
  int64_t value(int64_t value) const { return query(keys) + value; }
  int64_t end() const { return value(values); }  // one past the last recall token
};

class RecallSource : public DataSource {
 public:
  RecallSource(int64_t seq_len, int64_t keys, uint64_t seed)
      : seq_len_(seq_len), seed_(seed), tokens_{keys, kRecallValues} {
    const int64_t total = seq_len + 1;
    dictionary_end_ = std::max<int64_t>(1, total / kDictionaryFraction);
    query_start_ = total / 2;
    pairs_ = std::min(tokens_.keys, dictionary_end_);
    queries_ = std::max<int64_t>(1, (total - query_start_) / kTokensPerQuerySlot);
    pairs_ = std::min(pairs_, queries_);
  }

  Sequence Get(int64_t index) const override {
    std::mt19937_64 rng(SequenceSeed(seed_, index));
    std::vector<int64_t> keys(tokens_.keys);
    std::iota(keys.begin(), keys.end(), 0);
    std::shuffle(keys.begin(), keys.end(), rng);
    keys.resize(pairs_);
    std::uniform_int_distribution<int64_t> value_dist(0, tokens_.values - 1);
    std::vector<int64_t> values(pairs_);
    for (int64_t& value : values) value = value_dist(rng);

    Sequence sequence;
    sequence.tokens.assign(seq_len_ + 1, kFillerToken);
    sequence.recall_target.assign(seq_len_, 0);
    WriteDictionary(keys, values, rng, sequence);
    WriteQueries(keys, values, rng, sequence);
    return sequence;
  }
  bool has_recall() const override { return true; }
  double recall_chance_loss() const override {
    return std::log(static_cast<double>(tokens_.values));
  }

 private:
  // The dictionary fills [0, dictionary_end_): every entry once per round, each round in a new
  // shuffled order (the last round may be cut short).
  void WriteDictionary(const std::vector<int64_t>& keys, const std::vector<int64_t>& values,
                       std::mt19937_64& rng, Sequence& sequence) const {
    std::vector<int64_t> entries(pairs_);
    std::iota(entries.begin(), entries.end(), 0);
    for (int64_t round_start = 0; round_start < dictionary_end_; round_start += pairs_) {
      std::shuffle(entries.begin(), entries.end(), rng);
      for (int64_t slot = 0; slot < pairs_ && round_start + slot < dictionary_end_; ++slot) {
        const int64_t entry = entries[slot];
        sequence.tokens[round_start + slot] = tokens_.pair(keys[entry], values[entry]);
      }
    }
  }

  // Queries at evenly spaced positions of the second half, each followed by its answer; every
  // key is asked in turn (shuffled), and only its first ask is a recall target: a later ask could
  // copy the answer of an earlier one, the first can only come from the dictionary.
  void WriteQueries(const std::vector<int64_t>& keys, const std::vector<int64_t>& values,
                    std::mt19937_64& rng, Sequence& sequence) const {
    std::vector<int64_t> order(queries_);
    for (int64_t query = 0; query < queries_; ++query) order[query] = query % pairs_;
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<uint8_t> asked(pairs_, 0);
    for (int64_t query = 0; query < queries_; ++query) {
      const int64_t entry = order[query];
      const int64_t position = QueryPosition(query);
      sequence.tokens[position] = tokens_.query(keys[entry]);
      sequence.tokens[position + 1] = tokens_.value(values[entry]);
      if (!asked[entry]) sequence.recall_target[position] = 1;  // predicts position + 1
      asked[entry] = 1;
    }
  }

  // Position of query `query` (its answer follows it): evenly spaced over [query_start_, S + 1),
  // the last answer at position S.
  int64_t QueryPosition(int64_t query) const {
    const int64_t span = seq_len_ + 1 - query_start_;
    return query_start_ + span - 2 - (queries_ - 1 - query) * span / queries_;
  }

  int64_t seq_len_;
  uint64_t seed_;
  RecallTokens tokens_;
  int64_t dictionary_end_ = 0;  // the dictionary fills [0, dictionary_end_)
  int64_t query_start_ = 0;     // queries fill [query_start_, S + 1)
  int64_t pairs_ = 0;           // dictionary entries
  int64_t queries_ = 0;         // queries per sequence
};

// A regular file of at most kMaxDataFileBytes (a FIFO or /dev/zero is refused by its type).
Result<std::vector<uint8_t>> ReadBytes(const std::string& path) {
  auto text = ReadInputFile(path, "--data file", kMaxDataFileBytes,
                            "--data takes a readable file of raw bytes, or synthetic:recall");
  if (!text) return std::unexpected(text.error());
  return std::vector<uint8_t>(text->begin(), text->end());
}

// Keys of "synthetic:recall" (kDefaultRecallKeys) or "synthetic:recall:K"; 0 when malformed.
int64_t ParseRecallKeys(const std::string& spec) {
  const std::string prefix = std::string(kRecallSpec) + ":";
  if (spec == kRecallSpec) return kDefaultRecallKeys;
  if (!spec.starts_with(prefix) || spec.size() == prefix.size() ||
      spec.size() > prefix.size() + 6) {
    return 0;
  }
  int64_t keys = 0;
  for (char digit : spec.substr(prefix.size())) {
    if (digit < '0' || digit > '9') return 0;
    keys = keys * 10 + (digit - '0');
  }
  return keys;
}

Result<std::unique_ptr<DataSource>> OpenRecall(const std::string& spec, int64_t seq_len, int vocab,
                                               uint64_t seed) {
  const int64_t keys = ParseRecallKeys(spec);
  if (keys < 1) {
    return InvalidArgument("--data " + spec +
                           ": bad recall task (rule: synthetic:recall or synthetic:recall:K with "
                           "K >= 1 keys; hint: write --data synthetic:recall)");
  }
  const int64_t needed_vocab = RecallTokens{keys, kRecallValues}.end();
  if (vocab < needed_vocab) {
    return InvalidArgument("--data " + spec + ": model vocab = " + std::to_string(vocab) +
                           ": too small (rule: the recall task with " + std::to_string(keys) +
                           " key(s) needs vocab >= " + std::to_string(needed_vocab) +
                           " for its pair, query and answer tokens; hint: use fewer keys or a "
                           "model with a larger vocab, e.g. examples/models/tiny.yaml)");
  }
  if (seq_len + 1 < kRecallMinTokens) {
    return InvalidArgument(
        "--data " + spec + ": --seq = " + std::to_string(seq_len) +
        ": too short (rule: the recall task needs S + 1 >= " + std::to_string(kRecallMinTokens) +
        " tokens; hint: use --seq 64 or more)");
  }
  return std::make_unique<RecallSource>(seq_len, keys, seed);
}

}  // namespace

Result<std::unique_ptr<DataSource>> OpenDataSource(const std::string& spec, int64_t seq_len,
                                                   int vocab, uint64_t seed) {
  if (spec.starts_with(kRecallSpec)) return OpenRecall(spec, seq_len, vocab, seed);
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
