// The chain recurrence (cost/ring_chain.h) against a plain reference written from its definition:
// per-origin chain lists, a map of links, per-group block lists sorted whole, a map of finished
// blocks; on random rings, including ones where blocks arrive far out of ring order.
#include "cost/ring_chain.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <tuple>
#include <vector>

namespace hexiseq {
namespace {

// A ring as the reference reads it: per origin, the groups it visits and each hop's seconds and
// latency (the last entry: home), and the causal pairs per visited group.
struct PlainRing {
  std::vector<ChainRing::Group> groups;
  std::vector<std::vector<int>> chains;
  std::vector<std::vector<double>> hop_seconds, hop_latency, pairs;
};

std::vector<double> PlainPass(const PlainRing& ring, const std::vector<double>& start,
                              double factor, bool sums, double* latest_arrival) {
  const int size = static_cast<int>(ring.groups.size());
  std::vector<double> end(size), ready(start);
  std::vector<int> hop_of(size, 0);
  std::map<std::pair<int, int>, double> link_free;
  std::vector<std::vector<std::tuple<double, double, int>>> blocks(size);
  for (int distance = 1; distance < size; ++distance)
    for (int origin = 0; origin < size; ++origin) {
      const std::vector<int>& chain = ring.chains[origin];
      const int hop = hop_of[origin];
      if (hop >= static_cast<int>(chain.size()) || chain[hop] != (origin + distance) % size)
        continue;
      const int to = chain[hop], from = hop == 0 ? origin : chain[hop - 1];
      double& free = link_free[{from, to}];
      free = std::max({ready[origin], free, start[to]}) + ring.hop_seconds[origin][hop];
      ready[origin] = free + ring.hop_latency[origin][hop];
      const double arrival =
          ready[origin] + ring.groups[origin].tokens * ring.groups[to].replica_seconds_per_token;
      *latest_arrival = std::max(*latest_arrival, arrival - start[to]);
      blocks[to].push_back(
          {arrival, factor * ring.groups[to].seconds_per_pair * ring.pairs[origin][hop], origin});
      ++hop_of[origin];
    }
  std::vector<std::map<int, double>> done(size);
  for (int group = 0; group < size; ++group) {
    std::sort(blocks[group].begin(), blocks[group].end());
    double now =
        start[group] + factor * ring.groups[group].seconds_per_pair * ring.groups[group].own_pairs;
    for (const auto& [arrival, work, origin] : blocks[group]) {
      now = std::max(now, arrival) + work;
      done[group][origin] = now;
    }
    end[group] = now;
  }
  if (!sums) return end;
  for (int origin = 0; origin < size; ++origin) {
    const std::vector<int>& chain = ring.chains[origin];
    double sum_at = 0;
    for (size_t hop = 0; hop < chain.size(); ++hop) {
      const int group = chain[hop];
      sum_at = std::max(sum_at, done[group][origin]) + ring.hop_seconds[origin][hop + 1] +
               ring.hop_latency[origin][hop + 1];
      end[group] = std::max(end[group], sum_at - ring.hop_latency[origin][hop + 1]);
      const int receiver = hop + 1 < chain.size() ? chain[hop + 1] : origin;
      end[receiver] = std::max(end[receiver], sum_at);
    }
  }
  return end;
}

// One phase of a round: each group's local phase after it, the work factor, dK/dV sums or not.
struct PlainPhase {
  std::vector<double> local;
  double factor = 1.0;
  bool sums = false;
};

// The phases in turn, round after round (a forward layer; a backward layer; or under full
// recompute a recompute forward and its backward); the period of one round. `latest_arrival`:
// the first phase's, last round. Four rounds, or with `stop_when_periodic` fewer once every
// group's start moved by the same amount (to 1e-12) over a round: the rounds after it repeat it.
double PlainPeriod(const PlainRing& ring, const std::vector<PlainPhase>& phases,
                   double* latest_arrival, bool stop_when_periodic = true) {
  const int size = static_cast<int>(ring.groups.size());
  std::vector<double> start(size, 0.0);
  double previous_last = 0, period = 0;
  for (int layer = 0; layer < 4; ++layer) {
    const std::vector<double> before = start;
    double last = 0;
    for (size_t index = 0; index < phases.size(); ++index) {
      const PlainPhase& phase = phases[index];
      double arrival = 0;
      const std::vector<double> end = PlainPass(ring, start, phase.factor, phase.sums, &arrival);
      last = 0;
      for (int group = 0; group < size; ++group) {
        last = std::max(last, end[group] + phase.local[group]);
        start[group] = end[group] + phase.local[group];
      }
      if (index == 0) *latest_arrival = arrival;
    }
    period = last - previous_last;
    previous_last = last;
    bool periodic = stop_when_periodic;
    for (int group = 1; group < size; ++group)
      periodic = periodic && std::abs((start[group] - before[group]) - (start[0] - before[0])) <=
                                 1e-12 * std::abs(start[0] - before[0]);
    if (periodic) break;
  }
  return period;
}

// The same ring in ChainRing's flat form.
ChainRing Flatten(const PlainRing& plain) {
  ChainRing ring;
  const int size = static_cast<int>(plain.groups.size());
  ring.groups = plain.groups;
  ring.begin.push_back(0);
  std::map<std::pair<int, int>, int> links;
  std::vector<std::pair<int, int>> visiting;  // (distance, hop)
  for (int origin = 0; origin < size; ++origin) {
    const std::vector<int>& chain = plain.chains[origin];
    for (size_t hop = 0; hop <= chain.size() && !chain.empty(); ++hop) {
      const bool home = hop == chain.size();
      const int to = home ? origin : chain[hop], from = hop == 0 ? origin : chain[hop - 1];
      int link = -1;
      if (!home) {
        auto [it, added] = links.insert({{from, to}, static_cast<int>(links.size())});
        link = it->second;
        visiting.push_back({(to - origin + size) % size, static_cast<int>(ring.hops.size())});
      }
      ring.hops.push_back({to, link, plain.hop_seconds[origin][hop], plain.hop_latency[origin][hop],
                           home ? 0.0 : plain.pairs[origin][hop]});
      ring.origin_of.push_back(origin);
    }
    ring.begin.push_back(static_cast<int>(ring.hops.size()));
  }
  std::stable_sort(visiting.begin(), visiting.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& entry : visiting) ring.send_order.push_back(entry.second);
  ring.num_links = static_cast<int>(links.size());
  return ring;
}

// A random ring of `size` groups; `skew` spreads hop speeds so that blocks overtake each other.
PlainRing RandomRing(std::mt19937_64& rng, int size, double skew) {
  std::uniform_real_distribution<double> unit(0.5, 1.5), spread(1.0, skew);
  std::bernoulli_distribution visits(0.7);
  PlainRing ring;
  ring.groups.resize(size);
  ring.chains.resize(size);
  ring.hop_seconds.resize(size);
  ring.hop_latency.resize(size);
  ring.pairs.resize(size);
  for (ChainRing::Group& group : ring.groups)
    group = {1000 * unit(rng), 1e-6 * unit(rng), visits(rng) ? 0.0 : 1e-7 * unit(rng),
             5e5 * unit(rng)};
  for (int origin = 0; origin < size; ++origin) {
    for (int distance = 1; distance < size; ++distance)
      if (visits(rng)) ring.chains[origin].push_back((origin + distance) % size);
    for (size_t hop = 0; hop <= ring.chains[origin].size() && !ring.chains[origin].empty(); ++hop) {
      ring.hop_seconds[origin].push_back(1e-2 * unit(rng) * spread(rng));
      ring.hop_latency[origin].push_back(1e-5 * unit(rng));
      ring.pairs[origin].push_back(hop < ring.chains[origin].size() ? 3e5 * unit(rng) : 0.0);
    }
  }
  return ring;
}

TEST(RingChain, EqualsThePlainRecurrenceOnRandomRings) {
  std::mt19937_64 rng(20261202);
  std::uniform_real_distribution<double> local(0.0, 0.05);
  int compared = 0;
  for (int size : {2, 3, 4, 5, 8, 13, 32, 64}) {
    for (double skew : {1.0, 10.0, 1000.0}) {
      for (int trial = 0; trial < 6; ++trial) {
        const PlainRing plain = RandomRing(rng, size, skew);
        std::vector<double> local_fwd(size), local_bwd(size);
        for (int group = 0; group < size; ++group) {
          local_fwd[group] = local(rng);
          local_bwd[group] = 2 * local(rng);
        }
        ChainBounds expected;
        double unused = 0;
        const PlainPhase forward{local_fwd, 1.0, false}, backward{local_bwd, 2.5, true};
        expected.fwd = PlainPeriod(plain, {forward}, &expected.latest_arrival) -
                       *std::max_element(local_fwd.begin(), local_fwd.end());
        expected.bwd = PlainPeriod(plain, {backward}, &unused) -
                       *std::max_element(local_bwd.begin(), local_bwd.end());
        const ChainBounds got = SteadyChainBounds(Flatten(plain), local_fwd, local_bwd, 2.5, false);
        // Stopping once periodic changes the figures only by rounding.
        double all_rounds_arrival = 0;
        const double all_rounds_fwd = PlainPeriod(plain, {forward}, &all_rounds_arrival, false) -
                                      *std::max_element(local_fwd.begin(), local_fwd.end());
        EXPECT_NEAR(expected.fwd, all_rounds_fwd, 1e-9 * all_rounds_fwd);
        EXPECT_NEAR(expected.latest_arrival, all_rounds_arrival, 1e-9 * all_rounds_arrival);
        // The same operations in the same order: equal, not merely close.
        EXPECT_EQ(got.fwd, expected.fwd) << "size " << size << " skew " << skew;
        EXPECT_EQ(got.bwd, expected.bwd) << "size " << size << " skew " << skew;
        EXPECT_EQ(got.latest_arrival, expected.latest_arrival) << "size " << size;
        EXPECT_GT(got.fwd, 0.0);
        const ChainBounds recompute =
            SteadyChainBounds(Flatten(plain), local_fwd, local_bwd, 2.5, true);
        EXPECT_EQ(recompute.fwd, expected.fwd);
        EXPECT_EQ(recompute.bwd, 0.0);
        EXPECT_EQ(recompute.recompute_and_bwd,
                  PlainPeriod(plain, {forward, backward}, &unused) -
                      *std::max_element(local_fwd.begin(), local_fwd.end()) -
                      *std::max_element(local_bwd.begin(), local_bwd.end()))
            << "size " << size << " skew " << skew;
        ++compared;
      }
    }
  }
  EXPECT_EQ(compared, 8 * 3 * 6);
}

TEST(RingChain, OneGroupHasNoBound) {
  ChainRing ring;
  ring.groups.push_back({100, 1e-6, 0, 5000});
  ring.begin = {0, 0};
  const ChainBounds bounds = SteadyChainBounds(ring, {0.1}, {0.2}, 2.5, true);
  EXPECT_EQ(bounds.fwd, 0.0);
  EXPECT_EQ(bounds.bwd, 0.0);
  EXPECT_EQ(bounds.recompute_and_bwd, 0.0);
}

}  // namespace
}  // namespace hexiseq
