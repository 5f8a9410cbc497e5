// The sub-ring's block chains as a steady-state recurrence: the cost model's floor on the ring
// phases (CostModel::RingChainBounds builds the ChainRing from a plan; this file runs it).
// Models: each K/V block leaves its owner when the owner starts its ring phase and is forwarded
// along its chain (the layer schedule's: groups with no causal pair are skipped) as soon as it is
// received; a link (group to group) sends the blocks that cross it one after another in the order
// they reach its sender (ring distance, then origin); a hop waits for its receiver to be in the
// phase (the runtime's rendezvous); each group computes its own block first, then the visiting
// ones in arrival order. Backward, each block's dK/dV sum follows the chain, leaving a group once
// that group has computed the block, and returns to the owner. Each group starts a layer's phase
// when it has finished the previous phase and its local phase; the bound is the steady per-layer
// period. Forward layers follow each other; backward layers too, or under full recompute each
// backward follows its layer's recompute forward, which follows the previous layer's backward.
// Ignores: contention between different links of one port (the per-port terms of
// CostModel::EvaluateGroup charge it). Cost: O(ring groups^2) index checks to build, then per
// layer and direction one pass over the hops (the (block, group) pairs with causal work) in send
// order; a group whose blocks arrive out of send order is sorted (rare: a link is FIFO).
#pragma once

#include <vector>

namespace hexiseq {

struct ChainRing {
  // One ring group (a plan group with tokens), in ring order.
  struct Group {
    double tokens = 0;                     // its block's tokens
    double seconds_per_pair = 0;           // its slowest member's forward seconds per causal pair
    double replica_seconds_per_token = 0;  // copying a visiting block to its slowest-fed replica
    double own_pairs = 0;                  // causal pairs of its own block with its own queries
  };
  // One hop of a block's chain: to group `to` over link `link`, the whole block's wire seconds
  // and the link latency; `pairs`: the causal pairs `to` computes with the block (0 on the home
  // hop, which carries the dK/dV total back to the owner).
  struct Hop {
    int to = 0, link = 0;
    double seconds = 0, latency = 0, pairs = 0;
  };
  std::vector<Group> groups;
  // Origin o's chain is hops[begin[o], begin[o + 1]): the groups it visits in ring order, then
  // (when it visits any) the home hop. begin has groups.size() + 1 entries.
  std::vector<int> begin;
  std::vector<Hop> hops;
  std::vector<int> origin_of;   // per hop: the origin whose chain it is on
  std::vector<int> send_order;  // the visiting hops (no home hop) by ring distance, then origin
  int num_links = 0;            // distinct (from, to) group pairs of the visiting hops
};

struct ChainBounds {
  double fwd = 0, bwd = 0;  // the ring phases' floor per layer (0 for a ring of one group)
  // Full recompute (then bwd is 0): the floor on a recompute forward's and its backward's ring
  // phases together. Each recompute forward starts with the skew between groups that the previous
  // layer's backward left, and each backward with the recompute's.
  double recompute_and_bwd = 0;
  double latest_arrival = 0;  // forward, steady layer: the last K/V block's arrival after start
};

// REQUIRES: `ring` is well formed (begin, hops, origin_of and send_order consistent, every
// visiting hop's link < num_links); local_fwd and local_bwd have one entry per ring group.
// `backward_factor`: attention backward over forward work. `full_recompute`: the backward passes
// alternate with recompute forwards (recompute_and_bwd), otherwise they follow each other (bwd).
ChainBounds SteadyChainBounds(const ChainRing& ring, const std::vector<double>& local_fwd,
                              const std::vector<double>& local_bwd, double backward_factor,
                              bool full_recompute);

}  // namespace hexiseq
