#include "cost/ring_chain.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <vector>

namespace hexiseq {
namespace {

// Layers the recurrence runs to reach its steady period (each group starts a layer when it has
// finished the previous one; the first layer's synchronised start is a transient).
constexpr int kChainLayers = 4;
// Relative difference below which two groups' start shifts over a round count as the same.
constexpr double kShiftTolerance = 1e-12;

// One visiting hop in the order links send (ring distance, then origin), with what the passes
// read of it, so that every pass streams through one array: its origin, receiver and link, the
// block's wire seconds, the link latency, the receiver's causal pairs with the block, and the
// origin's next hop (the next group of its chain, or home), which carries the dK/dV sum on.
struct SendHop {
  int origin = 0, to = 0, link = 0, next_to = 0;
  double seconds = 0, latency = 0, pairs = 0;
  double next_seconds = 0, next_latency = 0;
};

// A visiting block at a group when its blocks did not arrive in send order: when it arrived, the
// work on it, its origin (ties) and its send position. Ordered by arrival, then work, then origin
// (a strict total order: one block per origin and group).
struct Arrival {
  double arrival = 0, work = 0;
  int origin = 0, position = 0;
  bool operator<(const Arrival& other) const {
    if (arrival != other.arrival) return arrival < other.arrival;
    if (work != other.work) return work < other.work;
    return origin < other.origin;
  }
};

// Per-call work arrays, reused by the thread. Per group: start, end, last arrival, out of order;
// per origin: ready, sum; per link: free; per send position: arrival, done.
struct Workspace {
  std::vector<SendHop> send;
  std::vector<double> start, previous_start, end, last_arrival, ready, sum, link_free, arrival,
      done;
  std::vector<char> out_of_order;
  std::vector<int> position_begin, positions;  // per group: its send positions (built on demand)
  std::vector<Arrival> sorted;
};

void PrepareWorkspace(const ChainRing& ring, Workspace& ws) {
  const int size = static_cast<int>(ring.groups.size());
  ws.send.clear();
  for (int hop_index : ring.send_order) {
    const ChainRing::Hop& hop = ring.hops[hop_index];
    const ChainRing::Hop& next = ring.hops[hop_index + 1];  // every visiting hop has a successor
    ws.send.push_back({ring.origin_of[hop_index], hop.to, hop.link, next.to, hop.seconds,
                       hop.latency, hop.pairs, next.seconds, next.latency});
  }
  const size_t hops = ws.send.size();
  ws.arrival.assign(hops, 0.0);
  ws.done.assign(hops, 0.0);
  ws.end.assign(size, 0.0);
  ws.last_arrival.assign(size, 0.0);
  ws.out_of_order.assign(size, 0);
  ws.ready.assign(size, 0.0);
  ws.sum.assign(size, 0.0);
  ws.link_free.assign(ring.num_links, 0.0);
  ws.position_begin.clear();
}

// Per group, its send positions in send order (for groups whose blocks arrive out of order).
void IndexPositions(const ChainRing& ring, Workspace& ws) {
  if (!ws.position_begin.empty()) return;
  const int size = static_cast<int>(ring.groups.size());
  ws.position_begin.assign(size + 1, 0);
  for (const SendHop& hop : ws.send) ++ws.position_begin[hop.to + 1];
  for (int group = 0; group < size; ++group)
    ws.position_begin[group + 1] += ws.position_begin[group];
  std::vector<int> filled(ws.position_begin.begin(), ws.position_begin.end() - 1);
  ws.positions.assign(ws.send.size(), 0);
  for (int position = 0; position < static_cast<int>(ws.send.size()); ++position)
    ws.positions[filled[ws.send[position].to]++] = position;
}

// A group whose blocks did not arrive in send order: its blocks again, sorted by arrival.
void ComputeInArrivalOrder(const ChainRing& ring, int group, double factor, Workspace& ws) {
  IndexPositions(ring, ws);
  const ChainRing::Group& self = ring.groups[group];
  ws.sorted.clear();
  for (int index = ws.position_begin[group]; index < ws.position_begin[group + 1]; ++index) {
    const int position = ws.positions[index];
    const SendHop& hop = ws.send[position];
    ws.sorted.push_back(
        {ws.arrival[position], factor * self.seconds_per_pair * hop.pairs, hop.origin, position});
  }
  std::sort(ws.sorted.begin(), ws.sorted.end());
  double now = ws.start[group] + factor * self.seconds_per_pair * self.own_pairs;
  for (const Arrival& block : ws.sorted) {
    now = std::max(now, block.arrival) + block.work;
    ws.done[block.position] = now;
  }
  ws.end[group] = now;
}

// One layer's K/V blocks: each hop in send order, and each group computing its own block at its
// start and then the visiting ones in arrival order (ws.end; ws.done per send position). While a
// group's blocks arrive in send order it computes them as they come; otherwise it is redone in
// arrival order once all have arrived.
void SendAndCompute(const ChainRing& ring, double factor, Workspace& ws, double* latest_arrival) {
  const int size = static_cast<int>(ring.groups.size());
  ws.ready = ws.start;
  std::fill(ws.link_free.begin(), ws.link_free.end(), 0.0);
  std::fill(ws.out_of_order.begin(), ws.out_of_order.end(), 0);
  for (int group = 0; group < size; ++group) {
    const ChainRing::Group& self = ring.groups[group];
    ws.end[group] = ws.start[group] + factor * self.seconds_per_pair * self.own_pairs;
    ws.last_arrival[group] = -1.0;  // before any arrival (times are >= 0)
  }
  for (size_t position = 0; position < ws.send.size(); ++position) {
    const SendHop& hop = ws.send[position];
    const ChainRing::Group& receiver = ring.groups[hop.to];
    double& free = ws.link_free[hop.link];
    free = std::max({ws.ready[hop.origin], free, ws.start[hop.to]}) + hop.seconds;
    ws.ready[hop.origin] = free + hop.latency;
    const double arrival =
        ws.ready[hop.origin] + ring.groups[hop.origin].tokens * receiver.replica_seconds_per_token;
    *latest_arrival = std::max(*latest_arrival, arrival - ws.start[hop.to]);
    ws.arrival[position] = arrival;
    if (ws.out_of_order[hop.to]) continue;
    if (arrival <= ws.last_arrival[hop.to]) {  // ties too: their order is arrival, work, origin
      ws.out_of_order[hop.to] = 1;
      continue;
    }
    ws.last_arrival[hop.to] = arrival;
    ws.end[hop.to] =
        std::max(ws.end[hop.to], arrival) + factor * receiver.seconds_per_pair * hop.pairs;
    ws.done[position] = ws.end[hop.to];
  }
  for (int group = 0; group < size; ++group)
    if (ws.out_of_order[group]) ComputeInArrivalOrder(ring, group, factor, ws);
}

// Backward: each block's dK/dV sum along its chain and home (each origin's hops come in chain
// order in send order); a group's phase also waits for the sums it sends and receives.
void ReturnSums(Workspace& ws) {
  std::fill(ws.sum.begin(), ws.sum.end(), 0.0);
  for (size_t position = 0; position < ws.send.size(); ++position) {
    const SendHop& hop = ws.send[position];
    double& sum_at = ws.sum[hop.origin];
    sum_at = std::max(sum_at, ws.done[position]) + hop.next_seconds + hop.next_latency;
    ws.end[hop.to] = std::max(ws.end[hop.to], sum_at - hop.next_latency);
    ws.end[hop.next_to] = std::max(ws.end[hop.next_to], sum_at);
  }
}

// One ring phase of a layer: its attention work factor (backward: dK/dV sums too) and each
// group's local phase after it.
struct Phase {
  const std::vector<double>* local = nullptr;
  double factor = 1.0;
  bool sums = false;
};

// Whether every group's start moved by the same amount over the last round (to a relative
// kShiftTolerance): a round is the same function of the starts shifted by a constant, so every
// later round repeats it with the same period.
bool ShiftedUniformly(const std::vector<double>& start, const std::vector<double>& previous) {
  const double shift = start[0] - previous[0];
  for (size_t group = 1; group < start.size(); ++group)
    if (std::abs(start[group] - previous[group] - shift) > kShiftTolerance * std::abs(shift))
      return false;
  return true;
}

// The steady period of `phases` run in turn (one layer's forward; or a recompute forward and its
// backward): every group starts a phase when it has finished the previous one and its local phase;
// the largest end's growth over the last round (rounds stop early once periodic).
double SteadyPeriod(const ChainRing& ring, std::initializer_list<Phase> phases, Workspace& ws,
                    double* latest_arrival) {
  const int size = static_cast<int>(ring.groups.size());
  ws.start.assign(size, 0.0);
  double previous_last = 0, period = 0;
  for (int layer = 0; layer < kChainLayers; ++layer) {
    ws.previous_start = ws.start;
    double last = 0;  // the round's last phase's latest end, local phase included
    for (size_t index = 0; index < phases.size(); ++index) {
      const Phase& phase = phases.begin()[index];
      double arrival = 0;
      SendAndCompute(ring, phase.factor, ws, &arrival);
      if (phase.sums) ReturnSums(ws);
      last = 0;
      for (int group = 0; group < size; ++group) {
        ws.start[group] = ws.end[group] + (*phase.local)[group];
        last = std::max(last, ws.start[group]);
      }
      if (index == 0) *latest_arrival = arrival;
    }
    period = last - previous_last;
    previous_last = last;
    if (ShiftedUniformly(ws.start, ws.previous_start)) break;
  }
  return period;
}

}  // namespace

ChainBounds SteadyChainBounds(const ChainRing& ring, const std::vector<double>& local_fwd,
                              const std::vector<double>& local_bwd, double backward_factor,
                              bool full_recompute) {
  ChainBounds bounds;
  if (ring.groups.size() <= 1) return bounds;
  thread_local Workspace ws;
  PrepareWorkspace(ring, ws);
  const double most_local_fwd = *std::max_element(local_fwd.begin(), local_fwd.end());
  const double most_local_bwd = *std::max_element(local_bwd.begin(), local_bwd.end());
  const Phase forward{&local_fwd, 1.0, false}, backward{&local_bwd, backward_factor, true};
  double unused = 0;
  bounds.fwd = SteadyPeriod(ring, {forward}, ws, &bounds.latest_arrival) - most_local_fwd;
  if (full_recompute)
    bounds.recompute_and_bwd =
        SteadyPeriod(ring, {forward, backward}, ws, &unused) - most_local_fwd - most_local_bwd;
  else
    bounds.bwd = SteadyPeriod(ring, {backward}, ws, &unused) - most_local_bwd;
  return bounds;
}

}  // namespace hexiseq
