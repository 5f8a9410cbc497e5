// Test helpers for the report: a hand-made two-group plan on a 2 x 2 GPU cluster (geometry
// small enough to compute every coordinate by hand), clusters parsed from YAML text, counting
// of SVG elements and attribute values in generated markup.
#pragma once

#include <memory>
#include <set>
#include <string>

#include "cost/cost_model.h"
#include "plan/plan.h"
#include "spec/cluster.h"
#include "spec/model.h"

namespace hexiseq::reporttest {

// 2 nodes x 2 GPUs (node 0: H100-SXM, node 1: A100-SXM-80G), named `name`.
Cluster TwoByTwo(const std::string& name = "two-by-two");
// `nodes` nodes of 8 GPUs, half H100-SXM and half A100-SXM-80G.
Cluster EightGpuNodes(int nodes);
// One H100-SXM.
Cluster OneGpu();
// 2 layers, 4 heads, 2 KV heads.
ModelSpec Tiny();
std::unique_ptr<CostModel> Model(const Cluster& cluster, const ModelSpec& model, int64_t seq_len);

// S = 100, H = 4. Group 0 = ranks {0, 1}, tokens [0, 25) + [75, 100) (zigzag head + tail):
// rank 0 holds [0, 25) and heads {0, 1}, rank 1 holds [75, 100) and heads {2, 3}.
// Group 1 = ranks {2, 3}, tokens [25, 75): rank 2 holds [25, 50) and heads {0, 1, 2},
// rank 3 holds [50, 75) and head {3}.
Plan TwoGroupPlan();
// On TwoByTwo, batch 3: replica 0 = one group of ranks {0, 1} (rank 0 [0, 50) heads {0, 1},
// rank 1 [50, 100) heads {2, 3}) taking 2 sequences; replica 1 = rank 2 alone, every token and
// head, taking 1 sequence; rank 3 left out.
Plan TwoReplicaPlan();

// Occurrences of `needle` in `text`.
int Count(const std::string& text, const std::string& needle);
// The fill="..." values of elements whose markup contains `marker` (e.g. class="cell").
std::set<std::string> Fills(const std::string& svg, const std::string& marker);

}  // namespace hexiseq::reporttest
