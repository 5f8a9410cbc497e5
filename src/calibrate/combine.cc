// calibrate --combine: several calibrations of one job (their sidecar JSON files) made into one,
// every timed figure the median over the runs. A rank's rate can sit at one of two levels for a
// whole calibration run on a shared machine (docs/measured.md), so a cluster file made from the
// median of runs spread over a session rests on the level the rank holds most of the time.
#include <cmath>
#include <nlohmann/json.hpp>
#include <tuple>

#include "calibrate/calibrate_internal.h"
#include "runtime/str_cat.h"
#include "spec/input_file.h"
#include "spec/limits.h"

namespace hexiseq::calibrate {
namespace {

using internal::Median;
using nlohmann::json;
using runtime::StrCat;

constexpr const char* kFormat = "hexiseq.calibration/1";
constexpr double kSameFlopsTolerance = 1e-9;  // the FLOPs of one point, counted alike by each run

const char* const kSidecarRule =
    "rule: --combine reads the .measurements.json files that hexiseq calibrate writes; hint: "
    "rerun calibrate with this build";
const char* const kSameJobRule =
    "rule: --combine takes calibrations of one job: the same model, --seq, ranks, hosts, "
    "--slowdown, padding and probe sizes; hint: combine the sidecars of one testbed only";

// Reads the fields of one sidecar; every error names the file and the field.
class SidecarReader {
 public:
  explicit SidecarReader(std::string path) : path_(std::move(path)) {}

  Result<const json*> Field(const json& object, const std::string& where, const char* key,
                            json::value_t kind) const {
    const auto it = object.is_object() ? object.find(key) : object.end();
    const bool number = kind == json::value_t::number_float;
    if (it == object.end() || (number ? !it->is_number() : it->type() != kind)) {
      return InvalidArgument(StrCat(path_, ": ", where, key, " is missing or not ", KindName(kind),
                                    " (", kSidecarRule, ")"));
    }
    return &*it;
  }
  Result<double> Number(const json& object, const std::string& where, const char* key) const {
    HEXISEQ_TRY(value, Field(object, where, key, json::value_t::number_float));
    return value->get<double>();
  }
  Result<std::string> Text(const json& object, const std::string& where, const char* key) const {
    HEXISEQ_TRY(value, Field(object, where, key, json::value_t::string));
    return value->get<std::string>();
  }
  Result<const json*> List(const json& object, const std::string& where, const char* key) const {
    return Field(object, where, key, json::value_t::array);
  }

 private:
  static const char* KindName(json::value_t kind) {
    switch (kind) {
      case json::value_t::string:
        return "a string";
      case json::value_t::array:
        return "a list";
      default:
        return "a number";
    }
  }
  std::string path_;
};

Result<std::vector<RatePoint>> ReadCurve(const SidecarReader& reader, const json& rank,
                                         const std::string& where, const char* key) {
  HEXISEQ_TRY(points, reader.List(rank, where, key));
  std::vector<RatePoint> curve;
  for (size_t index = 0; index < points->size(); ++index) {
    const std::string at = StrCat(where, key, "[", index, "].");
    const json& point = (*points)[index];
    HEXISEQ_TRY(tokens, reader.Number(point, at, "tokens"));
    HEXISEQ_TRY(flops, reader.Number(point, at, "flops"));
    HEXISEQ_TRY(seconds, reader.Number(point, at, "seconds"));
    curve.push_back({static_cast<int64_t>(tokens), flops, seconds});
  }
  if (curve.empty()) {
    return InvalidArgument(StrCat(where, key, " has no points (", kSidecarRule, ")"));
  }
  return curve;
}

Result<RankMeasurement> ReadRank(const SidecarReader& reader, const json& value, size_t index) {
  const std::string where = StrCat("ranks[", index, "].");
  RankMeasurement rank;
  HEXISEQ_TRY(number, reader.Number(value, where, "rank"));
  rank.rank = static_cast<int>(number);
  HEXISEQ_TRY(host, reader.Text(value, where, "host"));
  rank.host = host;
  HEXISEQ_TRY(slowdown, reader.Number(value, where, "slowdown"));
  rank.slowdown = slowdown;
  HEXISEQ_TRY(gemm, ReadCurve(reader, value, where, "gemm_curve"));
  HEXISEQ_TRY(attention, ReadCurve(reader, value, where, "attention_curve"));
  HEXISEQ_TRY(optimizer_params, reader.Number(value, where, "optimizer_params"));
  HEXISEQ_TRY(optimizer_seconds, reader.Number(value, where, "optimizer_seconds"));
  rank.optimizer = {optimizer_params, optimizer_seconds};
  rank.gemm = std::move(gemm);
  rank.attention = std::move(attention);
  return rank;
}

Result<PairMeasurement> ReadPair(const SidecarReader& reader, const json& value, size_t index) {
  const std::string where = StrCat("pairs[", index, "].");
  PairMeasurement pair;
  HEXISEQ_TRY(ranks, reader.List(value, where, "ranks"));
  if (ranks->size() != 2 || !(*ranks)[0].is_number() || !(*ranks)[1].is_number()) {
    return InvalidArgument(StrCat(where, "ranks is not two rank numbers (", kSidecarRule, ")"));
  }
  pair.a = (*ranks)[0].get<int>();
  pair.b = (*ranks)[1].get<int>();
  HEXISEQ_TRY(latency, reader.Number(value, where, "latency_seconds"));
  HEXISEQ_TRY(bandwidth, reader.Number(value, where, "bytes_per_second"));
  pair.latency_seconds = latency;
  pair.bytes_per_second = bandwidth;
  HEXISEQ_TRY(sizes, reader.List(value, where, "message_bytes"));
  HEXISEQ_TRY(times, reader.List(value, where, "one_way_seconds"));
  if (sizes->size() != times->size()) {
    return InvalidArgument(
        StrCat(where, "message_bytes and one_way_seconds differ in length (", kSidecarRule, ")"));
  }
  for (size_t size = 0; size < sizes->size(); ++size) {
    if (!(*sizes)[size].is_number() || !(*times)[size].is_number()) {
      return InvalidArgument(StrCat(where, "message_bytes[", size, "] or one_way_seconds[", size,
                                    "] is not a number (", kSidecarRule, ")"));
    }
    pair.bytes.push_back((*sizes)[size].get<int64_t>());
    pair.half_rtt.push_back((*times)[size].get<double>());
  }
  return pair;
}

Result<AllToAllMeasurement> ReadAllToAll(const SidecarReader& reader, const json& value,
                                         size_t index) {
  const std::string where = StrCat("all_to_all[", index, "].");
  HEXISEQ_TRY(bytes, reader.Number(value, where, "bytes_per_peer"));
  HEXISEQ_TRY(seconds, reader.Number(value, where, "seconds"));
  HEXISEQ_TRY(predicted, reader.Number(value, where, "alpha_beta_seconds"));
  return AllToAllMeasurement{static_cast<int64_t>(bytes), seconds, predicted};
}

Result<void> ReadHeader(const SidecarReader& reader, const json& document, Calibration& out) {
  HEXISEQ_TRY(format, reader.Text(document, "", "format"));
  if (format != kFormat) {
    return InvalidArgument(
        StrCat("format = \"", format, "\": must be \"", kFormat, "\" (", kSidecarRule, ")"));
  }
  HEXISEQ_TRY(model, reader.Text(document, "", "model"));
  HEXISEQ_TRY(seq, reader.Number(document, "", "seq_len"));
  HEXISEQ_TRY(num_ranks, reader.Number(document, "", "num_ranks"));
  HEXISEQ_TRY(even, reader.Number(document, "", "even_shard_tokens"));
  HEXISEQ_TRY(padding, reader.Text(document, "", "slowdown_padding"));
  HEXISEQ_TRY(probe, reader.Text(document, "", "linear_probe"));
  HEXISEQ_TRY(optimizer_probe, reader.Text(document, "", "optimizer_probe"));
  HEXISEQ_TRY(memory, reader.Number(document, "", "host_memory_bytes"));
  out.model_name = model;
  out.seq_len = static_cast<int64_t>(seq);
  out.num_ranks = static_cast<int>(num_ranks);
  out.even_shard_tokens = static_cast<int64_t>(even);
  out.slowdown_padding = padding;
  out.linear_probe = probe;
  out.optimizer_probe = optimizer_probe;
  out.host_memory_bytes = memory;
  return {};
}

// Reads every list of a sidecar with `read` (one entry at a time).
template <class Entry, class ReadEntry>
Result<std::vector<Entry>> ReadList(const SidecarReader& reader, const json& document,
                                    const char* key, ReadEntry read) {
  HEXISEQ_TRY(list, reader.List(document, "", key));
  std::vector<Entry> entries;
  for (size_t index = 0; index < list->size(); ++index) {
    HEXISEQ_TRY(entry, read(reader, (*list)[index], index));
    entries.push_back(std::move(entry));
  }
  return entries;
}

Result<Calibration> ReadDocument(const SidecarReader& reader, const json& document) {
  Calibration out;
  HEXISEQ_TRY_VOID(ReadHeader(reader, document, out));
  HEXISEQ_TRY(ranks, ReadList<RankMeasurement>(reader, document, "ranks", ReadRank));
  HEXISEQ_TRY(pairs, ReadList<PairMeasurement>(reader, document, "pairs", ReadPair));
  HEXISEQ_TRY(all_to_all,
              ReadList<AllToAllMeasurement>(reader, document, "all_to_all", ReadAllToAll));
  out.ranks = std::move(ranks);
  out.pairs = std::move(pairs);
  out.all_to_all = std::move(all_to_all);
  if (out.num_ranks < 1 || static_cast<int>(out.ranks.size()) != out.num_ranks) {
    return InvalidArgument(StrCat("num_ranks = ", out.num_ranks, " but ranks has ",
                                  out.ranks.size(), " entries (", kSidecarRule, ")"));
  }
  for (int rank = 0; rank < out.num_ranks; ++rank) {
    if (out.ranks[rank].rank != rank) {
      return InvalidArgument(StrCat("ranks[", rank, "].rank = ", out.ranks[rank].rank, ": must be ",
                                    rank, " (", kSidecarRule, ")"));
    }
    for (const auto& [name, curve] : {std::pair{"gemm_curve", &out.ranks[rank].gemm},
                                      std::pair{"attention_curve", &out.ranks[rank].attention}}) {
      if (internal::PointAt(*curve, out.even_shard_tokens) < 0) {
        return InvalidArgument(StrCat("ranks[", rank, "].", name, " has no point at ",
                                      out.even_shard_tokens, " tokens: must hold one at ",
                                      "even_shard_tokens (", kSidecarRule, ")"));
      }
    }
    internal::ReadEvenSplitRates(out.ranks[rank], out.even_shard_tokens);
  }
  for (size_t index = 0; index < out.pairs.size(); ++index) {
    const PairMeasurement& pair = out.pairs[index];
    if (pair.a < 0 || pair.b < 0 || pair.a >= out.num_ranks || pair.b >= out.num_ranks ||
        pair.a == pair.b) {
      return InvalidArgument(StrCat("pairs[", index, "].ranks = [", pair.a, ", ", pair.b,
                                    "]: must be two different ranks below num_ranks = ",
                                    out.num_ranks, " (", kSidecarRule, ")"));
    }
  }
  return out;
}

// A difference between `run` and `first` that makes them calibrations of different jobs.
std::string Mismatch(const Calibration& first, const Calibration& run) {
  if (run.model_name != first.model_name) return "model = " + run.model_name;
  if (run.seq_len != first.seq_len) return StrCat("seq_len = ", run.seq_len);
  if (run.num_ranks != first.num_ranks) return StrCat("num_ranks = ", run.num_ranks);
  if (run.linear_probe != first.linear_probe) return "linear_probe = " + run.linear_probe;
  if (run.optimizer_probe != first.optimizer_probe)
    return "optimizer_probe = " + run.optimizer_probe;
  if (run.slowdown_padding != first.slowdown_padding)
    return "slowdown_padding = \"" + run.slowdown_padding + "\"";
  for (int rank = 0; rank < first.num_ranks; ++rank) {
    const RankMeasurement &a = first.ranks[rank], &b = run.ranks[rank];
    if (a.host != b.host) return StrCat("ranks[", rank, "].host = ", b.host);
    if (a.slowdown != b.slowdown) return StrCat("ranks[", rank, "].slowdown = ", b.slowdown);
    if (a.optimizer.params != b.optimizer.params)
      return StrCat("ranks[", rank, "].optimizer_params = ", b.optimizer.params);
    for (const auto& [name, ours, theirs] :
         {std::tuple{"gemm_curve", &a.gemm, &b.gemm},
          std::tuple{"attention_curve", &a.attention, &b.attention}}) {
      bool same = ours->size() == theirs->size();
      for (size_t point = 0; same && point < ours->size(); ++point) {
        same = (*ours)[point].tokens == (*theirs)[point].tokens &&
               std::abs((*ours)[point].flops - (*theirs)[point].flops) <=
                   kSameFlopsTolerance * (*ours)[point].flops;
      }
      if (!same) return StrCat("ranks[", rank, "].", name, " (other sizes or FLOPs)");
    }
  }
  if (run.pairs.size() != first.pairs.size() || run.all_to_all.size() != first.all_to_all.size())
    return "pairs or all_to_all (another number of entries)";
  for (size_t pair = 0; pair < first.pairs.size(); ++pair) {
    const PairMeasurement &a = first.pairs[pair], &b = run.pairs[pair];
    if (a.a != b.a || a.b != b.b || a.bytes != b.bytes)
      return StrCat("pairs[", pair, "] (other ranks or message sizes)");
  }
  for (size_t row = 0; row < first.all_to_all.size(); ++row) {
    if (first.all_to_all[row].bytes_per_peer != run.all_to_all[row].bytes_per_peer)
      return StrCat("all_to_all[", row, "].bytes_per_peer");
  }
  return "";
}

// The median over the runs of one figure, picked from each run by `figure`.
template <class Figure>
double MedianOver(const std::vector<Calibration>& runs, Figure figure) {
  std::vector<double> values;
  for (const Calibration& run : runs) values.push_back(figure(run));
  return Median(std::move(values));
}

void CombineRanks(const std::vector<Calibration>& runs, Calibration& out) {
  for (RankMeasurement& rank : out.ranks) {
    for (auto curve : {&RankMeasurement::gemm, &RankMeasurement::attention}) {
      for (size_t point = 0; point < (rank.*curve).size(); ++point) {
        (rank.*curve)[point].seconds = MedianOver(runs, [&](const Calibration& run) {
          return (run.ranks[rank.rank].*curve)[point].seconds;
        });
      }
    }
    internal::ReadEvenSplitRates(rank, out.even_shard_tokens);
    rank.optimizer.seconds = MedianOver(
        runs, [&](const Calibration& run) { return run.ranks[rank.rank].optimizer.seconds; });
    for (const Calibration& run : runs) {
      rank.gemm_rate_runs.push_back(run.ranks[rank.rank].gemm_rate);
      rank.attention_rate_runs.push_back(run.ranks[rank.rank].attention_rate);
    }
  }
}

void CombineLinks(const std::vector<Calibration>& runs, Calibration& out) {
  for (size_t index = 0; index < out.pairs.size(); ++index) {
    PairMeasurement& pair = out.pairs[index];
    pair.latency_seconds =
        MedianOver(runs, [&](const Calibration& run) { return run.pairs[index].latency_seconds; });
    pair.bytes_per_second =
        MedianOver(runs, [&](const Calibration& run) { return run.pairs[index].bytes_per_second; });
    for (size_t size = 0; size < pair.half_rtt.size(); ++size) {
      pair.half_rtt[size] =
          MedianOver(runs, [&](const Calibration& run) { return run.pairs[index].half_rtt[size]; });
    }
  }
  for (size_t row = 0; row < out.all_to_all.size(); ++row) {
    out.all_to_all[row].seconds =
        MedianOver(runs, [&](const Calibration& run) { return run.all_to_all[row].seconds; });
    out.all_to_all[row].predicted_seconds = MedianOver(
        runs, [&](const Calibration& run) { return run.all_to_all[row].predicted_seconds; });
  }
}

}  // namespace

Result<Calibration> ParseCalibrationJson(const std::string& text, const std::string& path) {
  const json document = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (document.is_discarded() || !document.is_object()) {
    return InvalidArgument(StrCat(path, ": not a JSON object (", kSidecarRule, ")"));
  }
  auto calibration = ReadDocument(SidecarReader(path), document);
  if (!calibration) {
    const std::string& message = calibration.error().message;
    if (message.rfind(path, 0) == 0) return calibration;
    return InvalidArgument(path + ": " + message);
  }
  return calibration;
}

Result<Calibration> ReadCalibrationFile(const std::string& path) {
  HEXISEQ_TRY(text, ReadInputFile(path, "calibration measurements", kMaxSpecFileBytes,
                                  "hexiseq calibrate writes them next to its -o file"));
  return ParseCalibrationJson(text, path);
}

Result<Calibration> CombineCalibrations(const std::vector<Calibration>& runs,
                                        const std::vector<std::string>& paths) {
  HEXISEQ_CHECK(!runs.empty() && runs.size() == paths.size(), "one path per calibration");
  for (size_t index = 1; index < runs.size(); ++index) {
    const std::string mismatch = Mismatch(runs[0], runs[index]);
    if (!mismatch.empty()) {
      return InvalidArgument(StrCat(paths[index], ": ", mismatch, " differs from ", paths[0], " (",
                                    kSameJobRule, ")"));
    }
  }
  Calibration out = runs[0];
  out.host_memory_bytes =
      MedianOver(runs, [](const Calibration& run) { return run.host_memory_bytes; });
  CombineRanks(runs, out);
  CombineLinks(runs, out);
  out.combined_from = paths;
  return out;
}

}  // namespace hexiseq::calibrate
