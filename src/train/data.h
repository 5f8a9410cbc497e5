// Training data: the token sequences every rank sees (each rank gets the full sequence and keeps
// its plan's positions). A sequence is S + 1 consecutive tokens: position p < S predicts token
// p + 1. Sequences are a pure function of (seed, index), so the data position is just the count
// of sequences consumed and a resumed run sees the same data. Two sources: a file of raw bytes
// (byte-level tokens) and the built-in synthetic recall task.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "spec/error.h"

namespace hexiseq::train {

struct Sequence {
  std::vector<int64_t> tokens;         // S + 1 tokens
  std::vector<uint8_t> recall_target;  // S flags: position p's prediction is a recall answer
};

class DataSource {
 public:
  virtual ~DataSource() = default;
  // Sequence number `index` (0, 1, 2, ...): deterministic in (seed, index).
  virtual Sequence Get(int64_t index) const = 0;
  // True when sequences mark recall targets (synthetic:recall).
  virtual bool has_recall() const = 0;
  // ln(number of possible answers): the recall loss of guessing uniformly; 0 without recall.
  virtual double recall_chance_loss() const = 0;
};

// `spec` is a file path (raw bytes, tokens 0..255: REQUIRES vocab >= 256, file >= S + 1 bytes)
// or "synthetic:recall[:K]" (K keys, default 1; REQUIRES vocab >= 6 + 5K, S + 1 >=
// kRecallMinTokens).
// Errors name the flag (--data), the value, the rule and a hint.
Result<std::unique_ptr<DataSource>> OpenDataSource(const std::string& spec, int64_t seq_len,
                                                   int vocab, uint64_t seed);

inline constexpr char kRecallSpec[] = "synthetic:recall";
inline constexpr int64_t kRecallMinTokens = 8;

}  // namespace hexiseq::train
