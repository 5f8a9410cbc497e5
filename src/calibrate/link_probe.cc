// Link probes of calibrate: ping-pong between every pair of ranks (one pair at a time, the others
// wait at a barrier) and all-to-alls of all ranks at once.
#include <algorithm>
#include <chrono>

#include "calibrate/calibrate_internal.h"

namespace hexiseq::calibrate::internal {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t kLatencyBytes = 8;             // the latency probe's message
constexpr int kBlockFractions[] = {16, 4, 1};    // block / 16, block / 4, block
constexpr int64_t kMinBandwidthBytes = 4 << 10;  // smallest bandwidth probe
constexpr int64_t kSmallMessageBytes = int64_t{64} << 10;
constexpr int kSmallMessageRoundTrips = 40;  // small messages are cheap: more repeats
constexpr int kLargeMessageRoundTrips = 8;
constexpr int kAllToAllRepeats = 5;
constexpr int kTag = 1;

double Seconds(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Median one-way seconds of `bytes` between this rank and `peer`; `first` sends first.
double PingPong(runtime::Comm& world, int peer, bool first, int64_t bytes, int round_trips) {
  std::vector<char> buffer(bytes, 1);
  std::vector<double> half_round_trips;
  auto send = [&] {
    auto request = world.Isend(buffer.data(), bytes, peer, kTag);
    world.Wait(*request);
  };
  auto receive = [&] {
    auto request = world.Irecv(buffer.data(), bytes, peer, kTag);
    world.Wait(*request);
  };
  for (int trip = -1; trip < round_trips; ++trip) {  // trip -1 warms the path up
    const Clock::time_point start = Clock::now();
    if (first) {
      send();
      receive();
    } else {
      receive();
      send();
    }
    if (trip >= 0) half_round_trips.push_back(Seconds(start) / 2);
  }
  return Median(half_round_trips);
}

std::vector<int64_t> MessageSizes(int64_t block_bytes) {
  std::vector<int64_t> sizes = {kLatencyBytes};
  for (int fraction : kBlockFractions) {
    sizes.push_back(std::max(kMinBandwidthBytes, block_bytes / fraction));
  }
  return sizes;
}

PairMeasurement MeasurePair(runtime::Comm& world, int a, int b, int64_t block_bytes) {
  PairMeasurement pair;
  pair.a = a;
  pair.b = b;
  const int me = world.rank();
  for (int64_t bytes : MessageSizes(block_bytes)) {
    pair.bytes.push_back(bytes);
    if (me != a && me != b) continue;
    const int trips =
        bytes <= kSmallMessageBytes ? kSmallMessageRoundTrips : kLargeMessageRoundTrips;
    pair.half_rtt.push_back(PingPong(world, me == a ? b : a, me == a, bytes, trips));
  }
  if (pair.half_rtt.empty()) return pair;
  pair.latency_seconds = pair.half_rtt.front();
  pair.bytes_per_second = PairBandwidth(pair);
  return pair;
}

}  // namespace

double PairBandwidth(const PairMeasurement& pair) {
  std::vector<double> rates;
  for (size_t size = 1; size < pair.bytes.size(); ++size) {
    const double transfer = pair.half_rtt[size] - pair.latency_seconds;
    if (transfer > 0) rates.push_back(pair.bytes[size] / transfer);
  }
  if (!rates.empty()) return Median(rates);
  // Every size took no longer than the latency probe: the latency is lost in the noise (ranks
  // sharing a core), so the largest message's whole time counts as transfer, a lower bound.
  return pair.bytes.back() / pair.half_rtt.back();
}

int64_t KvBlockBytes(const ModelSpec& model, int64_t shard) {
  return 2 * shard * model.kv_heads * model.head_dim * static_cast<int64_t>(sizeof(float));
}

std::vector<PairMeasurement> MeasurePairs(runtime::Comm& world, int64_t block_bytes) {
  std::vector<PairMeasurement> pairs;
  for (int a = 0; a < world.size(); ++a) {
    for (int b = a + 1; b < world.size(); ++b) {
      world.Barrier();
      pairs.push_back(MeasurePair(world, a, b, block_bytes));
      // Rank a measured; every rank gets its figures (latency, bandwidth, curve).
      const size_t sizes = pairs.back().bytes.size();
      std::vector<double> figures(2 + sizes, 0.0);
      if (world.rank() == a) {
        figures[0] = pairs.back().latency_seconds;
        figures[1] = pairs.back().bytes_per_second;
        std::copy(pairs.back().half_rtt.begin(), pairs.back().half_rtt.end(), figures.begin() + 2);
      }
      world.AllreduceSum(std::span<double>(figures));
      pairs.back().latency_seconds = figures[0];
      pairs.back().bytes_per_second = figures[1];
      pairs.back().half_rtt.assign(figures.begin() + 2, figures.end());
    }
  }
  return pairs;
}

std::vector<AllToAllMeasurement> MeasureAllToAll(runtime::Comm& world,
                                                 const std::vector<PairMeasurement>& pairs,
                                                 int64_t block_bytes) {
  const int size = world.size();
  std::vector<AllToAllMeasurement> results;
  for (int64_t bytes : MessageSizes(block_bytes / size)) {
    if (bytes == kLatencyBytes) continue;
    const int64_t floats = bytes / static_cast<int64_t>(sizeof(float));
    std::vector<float> send(floats * size, 1.0f), recv(floats * size);
    std::vector<int64_t> counts(size, floats), displs(size);
    for (int rank = 0; rank < size; ++rank) displs[rank] = rank * floats;
    std::vector<double> slowest;
    for (int repeat = -1; repeat < kAllToAllRepeats; ++repeat) {
      world.Barrier();
      const Clock::time_point start = Clock::now();
      world.Alltoallv(send.data(), counts, displs, recv.data(), counts, displs);
      double seconds = Seconds(start);
      std::vector<double> all(size);
      world.Allgather(&seconds, sizeof seconds, all.data());
      if (repeat >= 0) slowest.push_back(*std::max_element(all.begin(), all.end()));
    }
    AllToAllMeasurement result;
    result.bytes_per_peer = bytes;
    result.seconds = Median(slowest);
    std::vector<double> per_rank(size, 0.0);  // alpha-beta: every rank sends to every peer
    for (const PairMeasurement& pair : pairs) {
      if (pair.bytes_per_second <= 0) continue;
      const double seconds = pair.latency_seconds + bytes / pair.bytes_per_second;
      per_rank[pair.a] += seconds;
      per_rank[pair.b] += seconds;
    }
    result.predicted_seconds = *std::max_element(per_rank.begin(), per_rank.end());
    results.push_back(result);
  }
  return results;
}

}  // namespace hexiseq::calibrate::internal
