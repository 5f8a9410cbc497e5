// calibrate: the probes' FLOP counts against closed forms, the option checks, the node grouping,
// and the cluster file read back by the cluster parser (rates, bandwidths, latencies exactly).
#include "calibrate/calibrate.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "calibrate/calibrate_internal.h"
#include "cost/cost_model.h"
#include "spec/cluster.h"

namespace hexiseq::calibrate {
namespace {

ModelSpec Tiny() {  // examples/models/tiny.yaml
  ModelSpec model;
  model.name = "tiny";
  model.layers = 2;
  model.hidden = 64;
  model.heads = 8;
  model.kv_heads = 2;
  model.head_dim = 8;
  model.ffn_hidden = 128;
  model.vocab = 256;
  return model;
}

TEST(CalibrateProbes, SizesRunFromAQuarterOfTheEvenSplitToTheWholeSequence) {
  EXPECT_EQ(internal::ProbeSizes(2048, 4096), (std::vector<int64_t>{512, 1024, 2048, 4096}));
  EXPECT_EQ(internal::ProbeSizes(128, 1024), (std::vector<int64_t>{32, 64, 128, 256, 512, 1024}));
  EXPECT_EQ(internal::ProbeSizes(130, 390), (std::vector<int64_t>{32, 65, 130, 260, 390}));
  EXPECT_EQ(internal::ProbeSizes(2048, 2048), (std::vector<int64_t>{512, 1024, 2048}));
}

TEST(CalibrateProbes, AboveTheEvenSplitTheAttentionProbeTakesAUlyssesMembersHeads) {
  // Tiny: 8 heads. Every head up to the even split; above it heads x even / tokens, at least 1.
  EXPECT_EQ(internal::ProbeQueryHeads(Tiny(), 128, 64), 8);
  EXPECT_EQ(internal::ProbeQueryHeads(Tiny(), 128, 128), 8);
  EXPECT_EQ(internal::ProbeQueryHeads(Tiny(), 128, 256), 4);
  EXPECT_EQ(internal::ProbeQueryHeads(Tiny(), 130, 390), 2);
  EXPECT_EQ(internal::ProbeQueryHeads(Tiny(), 128, 2048), 1);
}

TEST(CalibrateProbes, GemmFlopsAreTheCostModelsLinearFlops) {
  // q 64x64, k and v 16x64, o 64x64, gate/up/down 128x64: 34816 parameters; full recompute
  // charges forward x (1 + 2 + 1).
  const int64_t tokens = 64;
  const RatePoint point = internal::TimeLayerGemms(Tiny(), Recompute::kFull, tokens, 1);
  EXPECT_DOUBLE_EQ(point.flops, 2.0 * 34816 * tokens * 4);
  EXPECT_GT(point.seconds, 0);
  const RatePoint none = internal::TimeLayerGemms(Tiny(), Recompute::kNone, tokens, 1);
  EXPECT_DOUBLE_EQ(none.flops, 2.0 * 34816 * tokens * 3);
}

TEST(CalibrateProbes, LinearPhaseFlopsAreWhatTheCostModelChargesForOneSequence) {
  auto cluster = ParseCluster("nodes:\n  - {gpu: H100-SXM, count: 1, gpus_per_node: 1}\n",
                              "one.yaml", DeviceCatalog());
  ASSERT_TRUE(cluster.has_value()) << cluster.error().message;
  for (Recompute recompute : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
    Workload workload;
    workload.seq_len = 96;
    workload.recompute = recompute;
    const double charged = CostModel(*cluster, Tiny(), workload).TotalLinearFlops();
    EXPECT_NEAR(LinearPhaseFlops(Tiny(), recompute, 96), charged, 1e-12 * charged);
  }
}

// The plain AdamW loop: the model's parameters (capped), a positive time, and the bandwidth the
// cost model charges the step at is 28 bytes per parameter over that time.
TEST(CalibrateProbes, OptimizerLoopTimesTheModelsParameters) {
  const OptimizerPoint point = internal::TimeAdamWLoop(Tiny(), 1);
  EXPECT_DOUBLE_EQ(point.params, Tiny().TotalParams());
  EXPECT_GT(point.seconds, 0);
  EXPECT_DOUBLE_EQ(internal::OptimizerBytesPerSecond(OptimizerPoint{1e6, 0.014}), 2e9);
}

TEST(CalibrateProbes, AttentionFlopsCountTheCausalAndTheFullBlock) {
  // Queries at [s, 2s): s(s+1)/2 pairs on their own block, s^2 on the earlier one;
  // 4 d H pairs forward, x (1 + 2.5 + 1) with full recompute.
  const int64_t s = 64;
  const double pairs = s * s + s * (s + 1) / 2.0;
  const RatePoint point = internal::TimeAttentionBlocks(Tiny(), Recompute::kFull, s, 8, 1);
  EXPECT_DOUBLE_EQ(point.flops, 4.0 * 8 * 8 * pairs * 4.5);
  EXPECT_GT(point.seconds, 0);
  // Three of the eight heads (they read two of the two KV heads): three heads' FLOPs.
  const RatePoint three = internal::TimeAttentionBlocks(Tiny(), Recompute::kFull, s, 3, 1);
  EXPECT_DOUBLE_EQ(three.flops, 4.0 * 8 * 3 * pairs * 4.5);
  EXPECT_GT(three.seconds, 0);
}

CalibrateOptions Options(int64_t seq) {
  CalibrateOptions options;
  options.model = Tiny();
  options.seq_len = seq;
  return options;
}

TEST(CalibrateOptionsCheck, SeqTooSmallForTheKernels) {
  auto checked = CheckOptions(Options(255), 2);
  ASSERT_FALSE(checked.has_value());
  EXPECT_EQ(checked.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(checked.error().message.find("--seq = 255: the even split over 2 ranks is 127 tokens "
                                         "per rank, must be >= 128"),
            std::string::npos)
      << checked.error().message;
  EXPECT_NE(checked.error().message.find("hint: --seq 256 or more"), std::string::npos);
  EXPECT_TRUE(CheckOptions(Options(256), 2).has_value());
}

TEST(CalibrateOptionsCheck, HostListMustNameEveryRank) {
  CalibrateOptions options = Options(4096);
  options.hosts = {"a", "a", "b"};
  auto missing = CheckOptions(options, 4);
  ASSERT_FALSE(missing.has_value());
  EXPECT_NE(missing.error().message.find("--hosts names 3 host(s) but 4 ranks are running: rank 3 "
                                         "is missing from the list"),
            std::string::npos)
      << missing.error().message;
  auto extra = CheckOptions(options, 2);
  ASSERT_FALSE(extra.has_value());
  EXPECT_NE(extra.error().message.find("name 2 has no rank"), std::string::npos);
  options.hosts = {"a", ""};
  auto empty = CheckOptions(options, 2);
  ASSERT_FALSE(empty.has_value());
  EXPECT_NE(empty.error().message.find("the name of rank 1 is ''"), std::string::npos);
  options.repeats = 0;
  options.hosts.clear();
  EXPECT_FALSE(CheckOptions(options, 2).has_value());
}

constexpr int64_t kEvenShard = 1365;  // ThreeRanks: S = 4096 over 3 ranks

RankMeasurement Rank(int rank, std::string host, double gemm, double attention) {
  RankMeasurement out;
  out.rank = rank;
  out.host = std::move(host);
  out.gemm = {RatePoint{kEvenShard, gemm, 1.0}};
  out.attention = {RatePoint{kEvenShard, attention, 1.0}};
  out.gemm_rate = gemm;
  out.attention_rate = attention;
  // An optimizer step over 1 M parameters in 14 ms: 28 bytes each at 2 GB/s, 4 GB/s on rank 2.
  out.optimizer = {1e6, rank == 2 ? 0.007 : 0.014};
  return out;
}

PairMeasurement Pair(int a, int b, double bytes_per_second, double latency) {
  PairMeasurement pair;
  pair.a = a;
  pair.b = b;
  pair.bytes = {8, 1024};
  pair.half_rtt = {latency, latency + 1024 / bytes_per_second};
  pair.latency_seconds = latency;
  pair.bytes_per_second = bytes_per_second;
  return pair;
}

Calibration ThreeRanks() {
  Calibration calibration;
  calibration.model_name = "tiny";
  calibration.seq_len = 4096;
  calibration.num_ranks = 3;
  calibration.even_shard_tokens = kEvenShard;
  calibration.host_memory_bytes = 12.0 * (1 << 30);
  calibration.ranks = {Rank(0, "a", 10e9, 5e9), Rank(1, "a", 10.5e9, 5.1e9),
                       Rank(2, "a", 5e9, 2.5e9)};
  calibration.pairs = {Pair(0, 1, 8e9, 1e-6), Pair(0, 2, 4e9, 2e-6), Pair(1, 2, 6e9, 3e-6)};
  return calibration;
}

TEST(CalibrateGrouping, NeighboursOfAHostWithinTheToleranceShareAKind) {
  const Calibration calibration = ThreeRanks();
  auto groups = internal::GroupRanks(calibration.ranks, 0.10);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].num_ranks, 2);
  EXPECT_EQ(groups[1].first_rank, 2);
  EXPECT_EQ(internal::GroupRanks(calibration.ranks, 0.0).size(), 3u);
  std::vector<RankMeasurement> two_hosts = {Rank(0, "a", 10e9, 5e9), Rank(1, "b", 10e9, 5e9)};
  EXPECT_EQ(internal::GroupRanks(two_hosts, 0.10).size(), 2u);
}

TEST(CalibrateClusterFile, LoadsBackWithTheMeasuredFigures) {
  const Calibration calibration = ThreeRanks();
  CalibrateOptions options = Options(4096);
  const std::string yaml = ClusterYaml(calibration, options, "measured");
  auto cluster = ParseCluster(yaml, "measured.yaml", DeviceCatalog());
  ASSERT_TRUE(cluster.has_value()) << cluster.error().message << "\n" << yaml;
  ASSERT_EQ(cluster->num_ranks(), 3);
  EXPECT_EQ(cluster->name, "measured");
  EXPECT_TRUE(cluster->SameNode(0, 1));
  EXPECT_FALSE(cluster->SameNode(1, 2));
  const double rel = 1e-8;
  EXPECT_NEAR(cluster->device(0).GemmFlops(), 10.25e9, rel * 10.25e9);  // the kind's mean
  EXPECT_NEAR(cluster->device(0).AttentionFlops(), 5.05e9, rel * 5.05e9);
  EXPECT_NEAR(cluster->device(2).GemmFlops(), 5e9, rel * 5e9);
  EXPECT_NEAR(cluster->device(2).AttentionFlops(), 2.5e9, rel * 2.5e9);
  EXPECT_NEAR(cluster->Bandwidth(0, 1), 8e9, rel * 8e9);
  EXPECT_NEAR(cluster->Bandwidth(0, 2), 5e9, rel * 5e9);  // median of pairs 0-2 and 1-2
  EXPECT_NEAR(cluster->Latency(0, 1), 1e-6, rel * 1e-6);
  EXPECT_NEAR(cluster->Latency(1, 2), 2.5e-6, rel * 2.5e-6);
  // The optimizer step's bandwidth (28 bytes per parameter over its time): the cost model charges
  // a 1 M-parameter step the measured 14 ms on kind 0 and 7 ms on kind 1.
  EXPECT_NEAR(cluster->device(0).hbm_bytes_per_second, 2e9, rel * 2e9);
  EXPECT_NEAR(cluster->device(2).hbm_bytes_per_second, 4e9, rel * 4e9);
  EXPECT_NE(yaml.find("# Optimizer step probe: "), std::string::npos);

  options.merge_tolerance = 0;
  auto per_rank = ParseCluster(ClusterYaml(calibration, options, "m"), "m.yaml", DeviceCatalog());
  ASSERT_TRUE(per_rank.has_value()) << per_rank.error().message;
  EXPECT_FALSE(per_rank->SameNode(0, 1));
  EXPECT_NEAR(per_rank->device(1).GemmFlops(), 10.5e9, rel * 10.5e9);
  EXPECT_NEAR(per_rank->Bandwidth(1, 2), 6e9, rel * 6e9);
}

// A kind's rate curve: per probe size, the kind's mean rate there over its rate at the even split
// (a middle point), which the cost model reads at each rank's shard and each group's tokens.
TEST(CalibrateClusterFile, CarriesEachKindsRateCurve) {
  Calibration calibration = ThreeRanks();
  for (RankMeasurement& rank : calibration.ranks) {
    // Two points below the even split (GEMM at 0.8x and 0.9x, attention at 0.5x and 0.75x) and
    // two above it (GEMM at 1.1x and 1.2x, attention at 1.05x and 0.9x).
    const double gemm = rank.gemm_rate, attention = rank.attention_rate;
    rank.gemm = {RatePoint{341, 0.8 * gemm, 1.0}, RatePoint{682, 0.9 * gemm, 1.0},
                 RatePoint{1365, gemm, 1.0}, RatePoint{2730, 1.1 * gemm, 1.0},
                 RatePoint{4096, 1.2 * gemm, 1.0}};
    rank.attention = {RatePoint{341, 0.5 * attention, 1.0}, RatePoint{682, 0.75 * attention, 1.0},
                      RatePoint{1365, attention, 1.0}, RatePoint{2730, 1.05 * attention, 1.0},
                      RatePoint{4096, 0.9 * attention, 1.0}};
    rank.gemm_rate = rank.attention_rate = 0;  // read back from the curves at the even split
    internal::ReadEvenSplitRates(rank, kEvenShard);
    EXPECT_DOUBLE_EQ(rank.gemm_rate, gemm);
    EXPECT_DOUBLE_EQ(rank.attention_rate, attention);
  }
  const std::string yaml = ClusterYaml(calibration, Options(4096), "measured");
  EXPECT_NE(yaml.find("rate_curve: {tokens: [341, 682, 1365, 2730, 4096], "
                      "gemm: [0.8, 0.9, 1, 1.1, 1.2], attention: [0.5, 0.75, 1, 1.05, 0.9]}"),
            std::string::npos)
      << yaml;
  auto cluster = ParseCluster(yaml, "measured.yaml", DeviceCatalog());
  ASSERT_TRUE(cluster.has_value()) << cluster.error().message << "\n" << yaml;
  const double rel = 1e-8;
  EXPECT_NEAR(cluster->device(2).GemmFlopsAt(341), 0.8 * 5e9, rel * 5e9);
  EXPECT_NEAR(cluster->device(2).AttentionFlopsAt(682), 0.75 * 2.5e9, rel * 2.5e9);
  EXPECT_NEAR(cluster->device(2).GemmFlopsAt(4096), 1.2 * 5e9, rel * 5e9);
  EXPECT_NEAR(cluster->device(0).AttentionFlopsAt(2730), 1.05 * 5.05e9, rel * 5.05e9);
  EXPECT_NEAR(cluster->device(0).AttentionFlopsAt(8192), 0.9 * 5.05e9, rel * 5.05e9);
  // One point (ThreeRanks as measured): no curve.
  EXPECT_EQ(ClusterYaml(ThreeRanks(), Options(4096), "m").find("rate_curve: {"), std::string::npos);
}

TEST(CalibrateClusterFile, OneRankNeedsNoPairs) {
  Calibration calibration = ThreeRanks();
  calibration.num_ranks = 1;
  calibration.ranks.resize(1);
  calibration.pairs.clear();
  auto cluster =
      ParseCluster(ClusterYaml(calibration, Options(4096), "one"), "one.yaml", DeviceCatalog());
  ASSERT_TRUE(cluster.has_value()) << cluster.error().message;
  EXPECT_EQ(cluster->num_ranks(), 1);
}

TEST(CalibrateChecks, AFailedMeasurementIsAnErrorNotAZero) {
  Calibration calibration = ThreeRanks();
  EXPECT_TRUE(internal::CheckMeasured(calibration.ranks, calibration.pairs).has_value());
  calibration.ranks[1].attention[0].seconds = 0;
  auto zero = internal::CheckMeasured(calibration.ranks, calibration.pairs);
  ASSERT_FALSE(zero.has_value());
  EXPECT_NE(
      zero.error().message.find("rank 1 (a): the attention probe at 1365 tokens measured 0 s"),
      std::string::npos)
      << zero.error().message;
  calibration = ThreeRanks();
  calibration.ranks[0].optimizer.seconds = 0;
  auto optimizer = internal::CheckMeasured(calibration.ranks, calibration.pairs);
  ASSERT_FALSE(optimizer.has_value());
  EXPECT_NE(optimizer.error().message.find("rank 0 (a): the optimizer probe measured 0 s"),
            std::string::npos)
      << optimizer.error().message;
  calibration = ThreeRanks();
  calibration.pairs[2].bytes_per_second = std::nan("");
  auto pair = internal::CheckMeasured(calibration.ranks, calibration.pairs);
  ASSERT_FALSE(pair.has_value());
  EXPECT_NE(pair.error().message.find("ranks 1 and 2: ping-pong measured"), std::string::npos)
      << pair.error().message;
  calibration = ThreeRanks();
  calibration.ranks[2].host = "";
  EXPECT_FALSE(internal::CheckMeasured(calibration.ranks, calibration.pairs).has_value());
  // A point 4.2x the even split's rate (the rank lost its core while the even split was timed):
  // a cluster file's rate_curve may not hold it, so calibrate says so instead of writing one.
  calibration = ThreeRanks();
  calibration.ranks[1].gemm.insert(calibration.ranks[1].gemm.begin(),
                                   RatePoint{682, 4.2 * 10.5e9, 1.0});
  auto spread = internal::CheckMeasured(calibration.ranks, calibration.pairs);
  ASSERT_FALSE(spread.has_value());
  EXPECT_NE(spread.error().message.find("rank 1 (a): the GEMM probe at 682 tokens measured 4.2 "
                                        "times the rate at the even split"),
            std::string::npos)
      << spread.error().message;
  EXPECT_NE(spread.error().message.find("hint: rerun on a quieter machine"), std::string::npos);
  calibration.ranks[1].gemm.front().flops = 4.0 * 10.5e9;  // the largest a cluster file takes
  EXPECT_TRUE(internal::CheckMeasured(calibration.ranks, calibration.pairs).has_value());
}

TEST(CalibrateLinks, BandwidthLeavesOutSizesLostInTheNoise) {
  PairMeasurement pair;
  pair.bytes = {8, 1000, 4000, 16000};
  pair.latency_seconds = 1e-6;
  pair.half_rtt = {1e-6, 2e-6, 5e-6, 17e-6};  // 1000 B/us at every size
  EXPECT_DOUBLE_EQ(internal::PairBandwidth(pair), 1e9);
  // Ranks sharing a core: the latency probe was preempted and took longer than two sizes. Those
  // sizes say nothing; the one left sets the figure (this once was a zero and a failed run).
  pair.latency_seconds = 6e-6;
  pair.half_rtt = {6e-6, 2e-6, 5e-6, 22e-6};
  EXPECT_DOUBLE_EQ(internal::PairBandwidth(pair), 1e9);
  // Every size no slower than the latency probe: the largest message's whole time, a lower bound.
  pair.latency_seconds = 30e-6;
  pair.half_rtt = {30e-6, 2e-6, 5e-6, 20e-6};
  EXPECT_DOUBLE_EQ(internal::PairBandwidth(pair), 16000 / 20e-6);
}

TEST(CalibrateSidecar, CarriesEveryRankAndPair) {
  const auto json = nlohmann::json::parse(CalibrationJson(ThreeRanks()));
  EXPECT_EQ(json["format"], "hexiseq.calibration/1");
  ASSERT_EQ(json["ranks"].size(), 3u);
  EXPECT_DOUBLE_EQ(json["ranks"][2]["gemm_flops_per_second"].get<double>(), 5e9);
  ASSERT_EQ(json["pairs"].size(), 3u);
  EXPECT_DOUBLE_EQ(json["pairs"][1]["bytes_per_second"].get<double>(), 4e9);
  EXPECT_EQ(json["slowdown_padding"], "");  // no rank slowed
}

TEST(CalibrateSidecar, SaysHowSlowedRanksPadded) {
  Calibration calibration = ThreeRanks();
  calibration.slowdown_padding = "spin";
  EXPECT_EQ(nlohmann::json::parse(CalibrationJson(calibration))["slowdown_padding"], "spin");
  EXPECT_NE(ClusterYaml(calibration, Options(4096), "m").find("# --slowdown padding: spin."),
            std::string::npos);
}

// A calibration like ThreeRanks whose timed figures are all `scale` times as long.
Calibration Slower(double scale) {
  Calibration calibration = ThreeRanks();
  for (RankMeasurement& rank : calibration.ranks) {
    for (auto* curve : {&rank.gemm, &rank.attention})
      for (RatePoint& point : *curve) point.seconds *= scale;
    rank.gemm_rate /= scale;
    rank.attention_rate /= scale;
    rank.optimizer.seconds *= scale;
  }
  for (PairMeasurement& pair : calibration.pairs) {
    pair.latency_seconds *= scale;
    pair.bytes_per_second /= scale;
    for (double& one_way : pair.half_rtt) one_way *= scale;
  }
  calibration.all_to_all = {{4096, 1e-3 * scale, 0.9e-3 * scale}};
  return calibration;
}

TEST(CalibrateSidecar, ReadsBackWhatItWrote) {
  const Calibration written = Slower(1.0);
  auto read = ParseCalibrationJson(CalibrationJson(written), "x.measurements.json");
  ASSERT_TRUE(read.has_value()) << read.error().message;
  EXPECT_EQ(read->model_name, "tiny");
  EXPECT_EQ(read->num_ranks, 3);
  EXPECT_EQ(read->even_shard_tokens, 1365);
  EXPECT_DOUBLE_EQ(read->host_memory_bytes, written.host_memory_bytes);
  ASSERT_EQ(read->ranks.size(), 3u);
  EXPECT_EQ(read->ranks[2].host, "a");
  EXPECT_DOUBLE_EQ(read->ranks[2].gemm_rate, 5e9);
  EXPECT_DOUBLE_EQ(read->ranks[1].attention_rate, 5.1e9);
  EXPECT_DOUBLE_EQ(read->ranks[2].optimizer.params, 1e6);
  EXPECT_DOUBLE_EQ(read->ranks[2].optimizer.seconds, 0.007);
  ASSERT_EQ(read->pairs.size(), 3u);
  EXPECT_EQ(read->pairs[2].a, 1);
  EXPECT_EQ(read->pairs[2].bytes, (std::vector<int64_t>{8, 1024}));
  EXPECT_DOUBLE_EQ(read->pairs[2].bytes_per_second, 6e9);
  ASSERT_EQ(read->all_to_all.size(), 1u);
  EXPECT_DOUBLE_EQ(read->all_to_all[0].predicted_seconds, 0.9e-3);
}

TEST(CalibrateCombine, EveryTimedFigureIsTheMedianOverTheRuns) {
  // Three runs at 1x, 1.5x and 1.2x the time: the median run is the 1.2x one, figure by figure,
  // whatever the order of the files.
  const std::vector<Calibration> runs = {Slower(1.0), Slower(1.5), Slower(1.2)};
  auto combined = CombineCalibrations(runs, {"one.json", "two.json", "three.json"});
  ASSERT_TRUE(combined.has_value()) << combined.error().message;
  const double rel = 1e-12;
  EXPECT_NEAR(combined->ranks[0].gemm_rate, 10e9 / 1.2, rel * 10e9);
  EXPECT_NEAR(combined->ranks[2].attention_rate, 2.5e9 / 1.2, rel * 2.5e9);
  EXPECT_NEAR(combined->ranks[1].gemm[0].seconds, 1.2, rel);
  EXPECT_NEAR(combined->pairs[1].bytes_per_second, 4e9 / 1.2, rel * 4e9);
  EXPECT_NEAR(combined->pairs[1].latency_seconds, 2e-6 * 1.2, rel);
  EXPECT_NEAR(combined->pairs[0].half_rtt[1], (1e-6 + 1024 / 8e9) * 1.2, rel);
  EXPECT_NEAR(combined->all_to_all[0].seconds, 1.2e-3, rel);
  EXPECT_NEAR(combined->ranks[2].optimizer.seconds, 0.007 * 1.2, rel);
  EXPECT_EQ(combined->ranks[0].gemm_rate_runs.size(), 3u);
  EXPECT_NEAR(combined->ranks[0].gemm_rate_runs[1], 10e9 / 1.5, rel * 10e9);
  EXPECT_EQ(combined->combined_from,
            (std::vector<std::string>{"one.json", "two.json", "three.json"}));
  // An even number of runs: the mean of the two middle times.
  auto two = CombineCalibrations({Slower(1.0), Slower(1.5)}, {"a", "b"});
  ASSERT_TRUE(two.has_value());
  EXPECT_NEAR(two->ranks[0].gemm_rate, 10e9 / 1.25, rel * 10e9);
  // The combined sidecar says what it combined, and the cluster file says it is a median.
  const auto json = nlohmann::json::parse(CalibrationJson(*combined));
  EXPECT_EQ(json["combined_from"].size(), 3u);
  EXPECT_EQ(json["ranks"][0]["gemm_flops_per_second_runs"].size(), 3u);
  EXPECT_NE(ClusterYaml(*combined, Options(4096), "m").find("the median of 3 calibrations"),
            std::string::npos);
}

TEST(CalibrateCombine, RunsOfAnotherJobAreRefused) {
  Calibration other_seq = Slower(1.0);
  other_seq.seq_len = 8192;
  Calibration other_slowdown = Slower(1.0);
  other_slowdown.ranks[1].slowdown = 2;
  Calibration other_sizes = Slower(1.0);
  other_sizes.ranks[2].attention[0].tokens = 256;
  const std::vector<std::pair<Calibration, std::string>> cases = {
      {other_seq, "b.json: seq_len = 8192 differs from a.json"},
      {other_slowdown, "b.json: ranks[1].slowdown = 2 differs from a.json"},
      {other_sizes, "b.json: ranks[2].attention_curve (other sizes or FLOPs) differs"}};
  for (const auto& [run, want] : cases) {
    auto combined = CombineCalibrations({Slower(1.0), run}, {"a.json", "b.json"});
    ASSERT_FALSE(combined.has_value()) << want;
    EXPECT_EQ(combined.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(combined.error().message.find(want), std::string::npos) << combined.error().message;
    EXPECT_NE(combined.error().message.find("rule: --combine takes calibrations of one job"),
              std::string::npos);
  }
}

TEST(CalibrateSidecar, BadFilesAreClearErrors) {
  auto not_json = ParseCalibrationJson("{ nope", "x.json");
  ASSERT_FALSE(not_json.has_value());
  EXPECT_NE(not_json.error().message.find("x.json: not a JSON object"), std::string::npos);
  nlohmann::json document = nlohmann::json::parse(CalibrationJson(Slower(1.0)));
  document["format"] = "something/2";
  auto format = ParseCalibrationJson(document.dump(), "x.json");
  ASSERT_FALSE(format.has_value());
  EXPECT_NE(format.error().message.find("x.json: format = \"something/2\": must be "
                                        "\"hexiseq.calibration/1\""),
            std::string::npos)
      << format.error().message;
  document = nlohmann::json::parse(CalibrationJson(Slower(1.0)));
  document["ranks"][1]["attention_curve"][0].erase("seconds");
  auto missing = ParseCalibrationJson(document.dump(), "x.json");
  ASSERT_FALSE(missing.has_value());
  EXPECT_NE(missing.error().message.find(
                "x.json: ranks[1].attention_curve[0].seconds is missing or not a number"),
            std::string::npos)
      << missing.error().message;
  document = nlohmann::json::parse(CalibrationJson(Slower(1.0)));
  document.erase("host_memory_bytes");  // a sidecar of an older build
  auto old = ParseCalibrationJson(document.dump(), "x.json");
  ASSERT_FALSE(old.has_value());
  EXPECT_NE(old.error().message.find("host_memory_bytes is missing or not a number"),
            std::string::npos);
  EXPECT_NE(old.error().message.find("hint: rerun calibrate with this build"), std::string::npos);
  document = nlohmann::json::parse(CalibrationJson(Slower(1.0)));
  document["pairs"][0]["ranks"] = {0, 7};  // no rank 7 in a 3-rank calibration
  auto stray = ParseCalibrationJson(document.dump(), "x.json");
  ASSERT_FALSE(stray.has_value());
  EXPECT_NE(stray.error().message.find("x.json: pairs[0].ranks = [0, 7]: must be two different "
                                       "ranks below num_ranks = 3"),
            std::string::npos)
      << stray.error().message;
  document = nlohmann::json::parse(CalibrationJson(Slower(1.0)));
  document["ranks"][2]["gemm_curve"][0]["tokens"] = 1366;  // no point at the even split
  auto no_even = ParseCalibrationJson(document.dump(), "x.json");
  ASSERT_FALSE(no_even.has_value());
  EXPECT_NE(no_even.error().message.find("x.json: ranks[2].gemm_curve has no point at 1365 tokens: "
                                         "must hold one at even_shard_tokens"),
            std::string::npos)
      << no_even.error().message;
  auto absent = ReadCalibrationFile("/nonexistent/x.measurements.json");
  ASSERT_FALSE(absent.has_value());
  EXPECT_NE(absent.error().message.find("/nonexistent/x.measurements.json"), std::string::npos);
}

}  // namespace
}  // namespace hexiseq::calibrate
