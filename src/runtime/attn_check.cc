// attn-check driver: deterministic inputs, distributed forward + backward, gather to rank 0,
// naive double-precision reference there, error statistics, and an agreed pass/fail.
#include "runtime/attn_check.h"

#include <chrono>
#include <cmath>
#include <limits>
#include <optional>

#include "runtime/attention_kernels.h"

namespace hexiseq::runtime {
namespace {

enum Tensor : int { kQ = 0, kK = 1, kV = 2, kDO = 3 };
constexpr int kGatherTag = 4242;

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Token-layout rows [rows][heads][head_dim] of one tensor for the given global positions.
std::vector<float> Generate(uint64_t seed, int tensor, std::span<const int64_t> positions,
                            int heads, int head_dim) {
  std::vector<float> data(positions.size() * heads * head_dim);
  size_t index = 0;
  for (int64_t position : positions) {
    for (int head = 0; head < heads; ++head) {
      for (int dim = 0; dim < head_dim; ++dim) {
        data[index++] = InputValue(seed, tensor, position, head, dim);
      }
    }
  }
  return data;
}

void Compare(ErrorStats& stats, double value, double reference, int64_t index) {
  if (std::isfinite(reference)) stats.max_ref = std::max(stats.max_ref, std::abs(reference));
  double diff = value == reference ? 0.0 : std::abs(value - reference);
  if (std::isnan(diff)) diff = std::numeric_limits<double>::infinity();
  if (stats.worst < 0 || diff > stats.max_abs) {
    stats.worst = index;
    stats.max_abs = diff;
  }
}

}  // namespace

float InputValue(uint64_t seed, int tensor, int64_t position, int head, int dim) {
  uint64_t key = SplitMix64(seed);
  key = SplitMix64(key ^ static_cast<uint64_t>(tensor));
  key = SplitMix64(key ^ static_cast<uint64_t>(position));
  key = SplitMix64(key ^ (static_cast<uint64_t>(head) << 32 | static_cast<uint32_t>(dim)));
  return static_cast<float>(static_cast<double>(key >> 40) / static_cast<double>(1 << 23) - 1.0);
}

namespace {

// The five outputs on the whole sequence. Token layout [S][heads][width] for the distributed run;
// head-major [heads][S][width] for the reference.
struct FullOutputs {
  std::vector<float> o, lse, dq, dk, dv;
};

// Global positions of `rank`'s token-layout rows.
std::span<const int64_t> PositionsOf(const AttentionLayout& layout, int rank) {
  const RankRole& role = layout.roles[rank];
  const LayoutGroup& group = layout.groups[role.group];
  return std::span<const int64_t>(group.positions)
      .subspan(group.member_offset[role.member], role.num_tokens);
}

// Every rank's phase times, all-gathered into the report.
void GatherPhaseTimes(Comm& world, const DistributedAttention& attention, AttnCheckReport& report) {
  constexpr int kFields = 5;
  const PhaseTimes& forward = attention.forward_times();
  const PhaseTimes& backward = attention.backward_times();
  const double mine[2 * kFields] = {
      forward.alltoall,        forward.compute,         forward.ring_wait, forward.total,
      forward.ring_bytes_sent, backward.alltoall,       backward.compute,  backward.ring_wait,
      backward.total,          backward.ring_bytes_sent};
  std::vector<double> all(2 * kFields * world.size());
  world.Allgather(mine, sizeof(mine), all.data());
  for (int rank = 0; rank < world.size(); ++rank) {
    const double* fields = all.data() + 2 * kFields * rank;
    report.forward_times.push_back(
        PhaseTimes{fields[0], fields[1], fields[2], fields[3], fields[4]});
    report.backward_times.push_back(
        PhaseTimes{fields[5], fields[6], fields[7], fields[8], fields[9]});
  }
}

// Floats of one rank's gathered outputs: O, LSE, dQ, dK, dV of its rows.
int64_t PayloadFloats(const AttentionLayout& layout, int rank, int64_t head_dim) {
  const int64_t heads = layout.num_heads;
  const int64_t kv_heads = layout.num_kv_heads;
  return layout.roles[rank].num_tokens *
         (heads * head_dim + heads + heads * head_dim + 2 * kv_heads * head_dim);
}

// Rank 0 receives every rank's outputs (one message per rank, fixed layout) and places them at
// their global positions; other ranks send theirs and get nothing back.
std::optional<FullOutputs> GatherToRankZero(Comm& world, const AttentionLayout& layout,
                                            int64_t head_dim, const AttentionOutputs& outputs,
                                            const AttentionGradients& gradients) {
  std::vector<float> payload;
  for (const std::vector<float>* part :
       {&outputs.o, &outputs.lse, &gradients.dq, &gradients.dk, &gradients.dv}) {
    payload.insert(payload.end(), part->begin(), part->end());
  }
  if (world.rank() != 0) {
    RequestPtr request = world.Isend(payload.data(), payload.size() * sizeof(float), 0, kGatherTag);
    world.Wait(*request);
    return std::nullopt;
  }
  const int64_t seq_len = layout.seq_len;
  const int64_t query_width = layout.num_heads * head_dim;
  const int64_t kv_width = layout.num_kv_heads * head_dim;
  FullOutputs full{std::vector<float>(seq_len * query_width),
                   std::vector<float>(seq_len * layout.num_heads),
                   std::vector<float>(seq_len * query_width),
                   std::vector<float>(seq_len * kv_width), std::vector<float>(seq_len * kv_width)};
  for (int rank = 0; rank < world.size(); ++rank) {
    std::vector<float> received;
    if (rank == 0) {
      received = payload;
    } else {
      received.resize(PayloadFloats(layout, rank, head_dim));
      RequestPtr request =
          world.Irecv(received.data(), received.size() * sizeof(float), rank, kGatherTag);
      world.Wait(*request);
    }
    const std::span<const int64_t> positions = PositionsOf(layout, rank);
    const float* in = received.data();
    auto scatter = [&](std::vector<float>& target, int64_t width) {
      for (size_t row = 0; row < positions.size(); ++row) {
        std::copy_n(in + row * width, width, target.data() + positions[row] * width);
      }
      in += static_cast<int64_t>(positions.size()) * width;
    };
    scatter(full.o, query_width);
    scatter(full.lse, layout.num_heads);
    scatter(full.dq, query_width);
    scatter(full.dk, kv_width);
    scatter(full.dv, kv_width);
  }
  return full;
}

// The naive double-precision reference on positions 0..S-1, head-major.
FullOutputs ReferenceOutputs(const AttentionLayout& layout, const AttnCheckOptions& options) {
  const int64_t seq_len = layout.seq_len;
  const int64_t head_dim = options.head_dim;
  const int heads = layout.num_heads;
  const int kv_heads = layout.num_kv_heads;
  const int64_t head_floats = seq_len * head_dim;
  std::vector<int64_t> positions(seq_len);
  for (int64_t position = 0; position < seq_len; ++position) positions[position] = position;
  auto head_major = [&](int tensor, int tensor_heads) {
    std::vector<float> data(tensor_heads * head_floats);
    for (int head = 0; head < tensor_heads; ++head) {
      for (int64_t position = 0; position < seq_len; ++position) {
        for (int dim = 0; dim < head_dim; ++dim) {
          data[(head * seq_len + position) * head_dim + dim] =
              InputValue(options.seed, tensor, position, head, dim);
        }
      }
    }
    return data;
  };
  const std::vector<float> q = head_major(kQ, heads), k = head_major(kK, kv_heads),
                           v = head_major(kV, kv_heads), d_o = head_major(kDO, heads);
  FullOutputs reference{std::vector<float>(heads * head_floats),
                        std::vector<float>(heads * seq_len),
                        std::vector<float>(heads * head_floats, 0.0f),
                        std::vector<float>(kv_heads * head_floats, 0.0f),
                        std::vector<float>(kv_heads * head_floats, 0.0f)};
  AttentionInputs inputs;
  inputs.head_dim = options.head_dim;
  inputs.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  inputs.q_positions = positions;
  inputs.k_positions = positions;
  ForwardOutputs outputs;
  BackwardArgs args;
  for (int head = 0; head < heads; ++head) {
    inputs.q.push_back(q.data() + head * head_floats);
    inputs.kv_index.push_back(layout.kv_of(head));
    outputs.o.push_back(reference.o.data() + head * head_floats);
    outputs.lse.push_back(reference.lse.data() + head * seq_len);
    args.o.push_back(reference.o.data() + head * head_floats);
    args.d_o.push_back(d_o.data() + head * head_floats);
    args.lse.push_back(reference.lse.data() + head * seq_len);
    args.dq.push_back(reference.dq.data() + head * head_floats);
  }
  for (int kv = 0; kv < kv_heads; ++kv) {
    inputs.k.push_back(k.data() + kv * head_floats);
    inputs.v.push_back(v.data() + kv * head_floats);
    args.dk.push_back(reference.dk.data() + kv * head_floats);
    args.dv.push_back(reference.dv.data() + kv * head_floats);
  }
  AttentionForwardReference(inputs, outputs, /*accumulate=*/false);
  AttentionBackwardReference(inputs, args);
  return reference;
}

// Sets the worst place as (position, head, dim) from the flat token-layout index.
void Locate(ErrorStats& stats, int64_t heads, int64_t width) {
  if (stats.worst < 0) return;
  stats.worst_position = stats.worst / (heads * width);
  stats.worst_head = static_cast<int>(stats.worst / width % heads);
  stats.worst_dim = static_cast<int>(stats.worst % width);
}

// Error statistics of O, LSE, dQ, dK, dV (token layout against head-major reference).
std::vector<ErrorStats> CompareOutputs(const FullOutputs& distributed, const FullOutputs& reference,
                                       const AttentionLayout& layout, int64_t head_dim) {
  const int64_t seq_len = layout.seq_len;
  ErrorStats o_stats{"O"}, lse_stats{"LSE"}, dq_stats{"dQ"}, dk_stats{"dK"}, dv_stats{"dV"};
  for (int64_t position = 0; position < seq_len; ++position) {
    for (int head = 0; head < layout.num_heads; ++head) {
      const int64_t row = position * layout.num_heads + head;
      Compare(lse_stats, distributed.lse[row], reference.lse[head * seq_len + position], row);
      for (int dim = 0; dim < head_dim; ++dim) {
        const int64_t index = row * head_dim + dim;
        const int64_t reference_index = (head * seq_len + position) * head_dim + dim;
        Compare(o_stats, distributed.o[index], reference.o[reference_index], index);
        Compare(dq_stats, distributed.dq[index], reference.dq[reference_index], index);
      }
    }
    for (int kv = 0; kv < layout.num_kv_heads; ++kv) {
      for (int dim = 0; dim < head_dim; ++dim) {
        const int64_t index = (position * layout.num_kv_heads + kv) * head_dim + dim;
        const int64_t reference_index = (kv * seq_len + position) * head_dim + dim;
        Compare(dk_stats, distributed.dk[index], reference.dk[reference_index], index);
        Compare(dv_stats, distributed.dv[index], reference.dv[reference_index], index);
      }
    }
  }
  Locate(o_stats, layout.num_heads, head_dim);
  Locate(lse_stats, layout.num_heads, 1);
  Locate(dq_stats, layout.num_heads, head_dim);
  Locate(dk_stats, layout.num_kv_heads, head_dim);
  Locate(dv_stats, layout.num_kv_heads, head_dim);
  return {o_stats, lse_stats, dq_stats, dk_stats, dv_stats};
}

}  // namespace

Result<AttnCheckReport> RunAttnCheck(const Plan& plan, Comm& world,
                                     const AttnCheckOptions& options) {
  auto created = DistributedAttention::Create(plan, world, options.head_dim);
  if (!created) return std::unexpected(created.error());
  DistributedAttention& attention = **created;
  const AttentionLayout& layout = attention.layout();
  const std::span<const int64_t> mine = PositionsOf(layout, world.rank());
  const int head_dim = options.head_dim;
  const std::vector<float> q = Generate(options.seed, kQ, mine, layout.num_heads, head_dim);
  const std::vector<float> k = Generate(options.seed, kK, mine, layout.num_kv_heads, head_dim);
  const std::vector<float> v = Generate(options.seed, kV, mine, layout.num_kv_heads, head_dim);
  const std::vector<float> d_o = Generate(options.seed, kDO, mine, layout.num_heads, head_dim);
  auto forward = attention.Forward(q, k, v);
  if (!forward) return std::unexpected(forward.error());
  auto backward = attention.Backward(d_o);
  if (!backward) return std::unexpected(backward.error());

  AttnCheckReport report;
  GatherPhaseTimes(world, attention, report);
  double passed_flag = 1;
  if (std::optional<FullOutputs> distributed =
          GatherToRankZero(world, layout, head_dim, *forward, *backward)) {
    const auto start = std::chrono::steady_clock::now();
    const FullOutputs reference = ReferenceOutputs(layout, options);
    report.reference_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    report.errors = CompareOutputs(*distributed, reference, layout, head_dim);
    report.has_errors = true;
    for (const ErrorStats& stats : report.errors) {
      if (!(stats.relative() <= options.tolerance)) passed_flag = 0;
    }
  }
  // Everyone learns the verdict, so every rank exits with the same code.
  double verdict[1] = {world.rank() == 0 ? passed_flag : 0.0};
  world.AllreduceSum(std::span<double>(verdict, 1));
  report.passed = verdict[0] > 0.5;
  return report;
}

}  // namespace hexiseq::runtime
