// Plans for runtime tests, built directly as Plan structs: random valid plans (prime lengths,
// zero-token ranks, ranks without heads, non-contiguous head sets, head sets cutting KV groups,
// groups of different sizes, idle groups, non-contiguous token ranges) and the shapes of the
// published baselines (ring with zigzag, Ulysses, USP).
#pragma once

#include <cstdint>
#include <random>

#include "plan/plan.h"

namespace hexiseq::testing {

struct RandomPlanOptions {
  int num_ranks = 4;
  int64_t seq_len = 97;
  int num_heads = 8;
  int num_kv_heads = 2;
  double idle_group_probability = 0.2;  // per group beyond the first token group
  double zero_token_probability = 0.2;  // per member of a token group
};

Plan RandomPlan(std::mt19937_64& rng, const RandomPlanOptions& options);

// One group per rank, all heads, sequence in 2N chunks, rank i holding chunks i and 2N-1-i
// (zigzag) or chunk i alone (contiguous).
Plan RingPlan(int num_ranks, int64_t seq_len, int num_heads, int num_kv_heads, bool zigzag);
// One group of all ranks; contiguous token shards; heads in contiguous blocks (uneven when H is
// not a multiple of the rank count).
Plan UlyssesPlan(int num_ranks, int64_t seq_len, int num_heads, int num_kv_heads);
// cp groups of hp ranks (ranks numbered group by group), zigzag across groups, contiguous
// shards and contiguous head blocks inside each group.
Plan UspPlan(int cp, int hp, int64_t seq_len, int num_heads, int num_kv_heads);

}  // namespace hexiseq::testing
