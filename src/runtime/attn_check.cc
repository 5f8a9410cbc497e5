// attn-check driver: deterministic inputs, distributed forward + backward, gather to rank 0,
// naive double-precision reference there, error statistics, and an agreed pass/fail.
#include "runtime/attn_check.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <string>

#include "runtime/agreement.h"
#include "runtime/attention_kernels.h"
#include "runtime/replicas.h"
#include "spec/units.h"

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

// --- Checks before anything is allocated -------------------------------------------------------

// Every rank must use the same --seed, --head-dim and --tolerance: inputs generated with different
// seeds would make a correct plan fail (and a mismatched tolerance a different verdict per rank).
Result<void> CheckOptionAgreement(Comm& world, const AttnCheckOptions& options) {
  char tolerance[32];
  std::snprintf(tolerance, sizeof tolerance, "%g", options.tolerance);
  return CheckFlagsAgree(world, "attn-check",
                         {{"--seed", std::to_string(options.seed)},
                          {"--head-dim", std::to_string(options.head_dim)},
                          {"--tolerance", tolerance}},
                         "every rank runs the same check");
}

// Bytes of float tensors that `rank` holds at the peak (a lower bound: kernels' scratch space is
// not counted): its inputs and outputs in token layout, the gather payload, its heads over the
// group's tokens in head layout, two ring buffers of the largest group's KV, and on the first rank
// of each replica the reference (inputs and outputs on the whole sequence) next to the gathered
// outputs. A left-out rank holds nothing.
double PeakBytes(const Plan& plan, int rank, int64_t head_dim) {
  constexpr double kFloatBytes = sizeof(float);
  const double heads = plan.num_heads, kv_heads = plan.num_kv_heads, dim = head_dim;
  double largest_group = 0;
  for (const PlanGroup& group : plan.groups)
    largest_group = std::max(largest_group, static_cast<double>(TotalTokens(group.tokens)));
  double floats = 0;
  for (const PlanGroup& group : plan.groups) {
    for (const PlanMember& member : group.members) {
      if (member.rank != rank) continue;
      const double rows = static_cast<double>(TotalTokens(member.tokens));
      const double group_rows = static_cast<double>(TotalTokens(group.tokens));
      const double my_heads = static_cast<double>(member.heads.size());
      const double my_kv =
          static_cast<double>(KvHeadsOf(member.heads, plan.num_heads, plan.num_kv_heads).size());
      const double inputs = rows * (2 * heads + 2 * kv_heads) * dim;
      const double outputs = rows * ((2 * heads + 2 * kv_heads) * dim + heads);
      const double head_layout = group_rows * (4 * my_heads + 4 * my_kv) * dim;
      const double ring_buffers = 2 * 2 * largest_group * my_kv * dim;
      floats += inputs + 2 * outputs + head_layout + ring_buffers;
    }
  }
  const int replica = ReplicaOf(plan, rank);
  if (replica >= 0 && MakeLocalReplica(plan, replica).world_ranks.front() == rank) {
    const double seq = static_cast<double>(plan.seq_len);
    const double whole = seq * ((4 * heads + 4 * kv_heads) * dim + heads);
    floats += 2 * whole;  // the reference's inputs and outputs, and the gathered outputs
  }
  return floats * kFloatBytes;
}

// Memory this process can allocate: MemAvailable (Linux), bounded by the address-space limit.
double AvailableBytes() {
  double available = std::numeric_limits<double>::infinity();
  if (std::FILE* meminfo = std::fopen("/proc/meminfo", "r")) {
    char line[256];
    while (std::fgets(line, sizeof line, meminfo)) {
      unsigned long long kib = 0;
      if (std::sscanf(line, "MemAvailable: %llu kB", &kib) == 1) available = kib * 1024.0;
    }
    std::fclose(meminfo);
  }
  struct rlimit limit {};
  if (getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY)
    available = std::min(available, static_cast<double>(limit.rlim_cur));
  return available;
}

// Every rank checks, before allocating, that the ranks on its machine fit in what the machine can
// give them; any shortfall is the same error on every rank (instead of std::bad_alloc on some).
Result<void> CheckMemory(const Plan& plan, Comm& world, const AttnCheckOptions& options) {
  struct Entry {
    double need_bytes;
    double available_bytes;
    uint64_t host;
  };
  char hostname[256] = {};
  gethostname(hostname, sizeof hostname - 1);
  const Entry mine{PeakBytes(plan, world.rank(), options.head_dim), AvailableBytes(),
                   std::hash<std::string>()(hostname)};
  std::vector<Entry> all(world.size());
  world.Allgather(&mine, sizeof mine, all.data());
  std::map<uint64_t, std::vector<int>> ranks_by_host;
  for (int rank = 0; rank < world.size(); ++rank) ranks_by_host[all[rank].host].push_back(rank);
  for (const auto& [host, ranks] : ranks_by_host) {
    double need = 0, available = std::numeric_limits<double>::infinity();
    for (int rank : ranks) {
      need += all[rank].need_bytes;
      available = std::min(available, all[rank].available_bytes);
    }
    if (need <= available) continue;
    const int largest = *std::max_element(ranks.begin(), ranks.end(), [&](int a, int b) {
      return all[a].need_bytes < all[b].need_bytes;
    });
    return MakeError(
        ErrorCode::kInfeasible,
        "attn-check: not enough memory: the " + std::to_string(ranks.size()) +
            " rank(s) on one machine need at least " + FormatBytes(need) + " (rank " +
            std::to_string(largest) + " alone " + FormatBytes(all[largest].need_bytes) + " for " +
            std::to_string(plan.seq_len) + " tokens x " + std::to_string(plan.num_heads) +
            " heads x head_dim " + std::to_string(options.head_dim) +
            (ReplicaOf(plan, largest) >= 0 &&
                     MakeLocalReplica(plan, ReplicaOf(plan, largest)).world_ranks.front() == largest
                 ? ", with the whole-sequence reference"
                 : "") +
            "), but " + FormatBytes(available) +
            " can be allocated (hint: check a plan with a shorter seq_len, or a smaller "
            "--head-dim)");
  }
  return {};
}

}  // namespace

Result<AttnCheckReport> RunAttnCheck(const Plan& plan, Comm& world,
                                     const AttnCheckOptions& options) {
  auto phase = [&options](const char* name) {
    if (options.on_phase) options.on_phase(name);
  };
  phase("agreement");
  if (auto agreed = CheckOptionAgreement(world, options); !agreed)
    return std::unexpected(agreed.error());
  phase("memory check");
  if (auto fits = CheckMemory(plan, world, options); !fits) return std::unexpected(fits.error());
  phase("setup");
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
  phase("forward");
  auto forward = attention.Forward(q, k, v);
  if (!forward) return std::unexpected(forward.error());
  phase("backward");
  auto backward = attention.Backward(d_o);
  if (!backward) return std::unexpected(backward.error());

  phase("gather");
  AttnCheckReport report;
  GatherPhaseTimes(world, attention, report);
  double passed_flag = 1;
  if (std::optional<FullOutputs> distributed =
          GatherToRankZero(world, layout, head_dim, *forward, *backward)) {
    phase("reference");
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
  phase("verdict");
  // Everyone learns the verdict, so every rank exits with the same code.
  double verdict[1] = {world.rank() == 0 ? passed_flag : 0.0};
  world.AllreduceSum(std::span<double>(verdict, 1));
  report.passed = verdict[0] > 0.5;
  return report;
}

namespace {

// Collective over the participants: every replica's outcome (error or verdict) to all of them.
Result<ReplicaAttnCheck> AgreeOnReplicas(Comm& participants, int num_replicas,
                                         Result<AttnCheckReport> local, ReplicaAttnCheck check) {
  // Per participant: did its replica's check run, and did it pass (counted on replica leaders).
  double flags[2] = {local ? 0.0 : 1.0, local && local->has_errors && local->passed ? 1.0 : 0.0};
  participants.AllreduceSum(std::span<double>(flags, 2));
  if (!local) return std::unexpected(local.error());
  if (flags[0] > 0) {
    return InvalidArgument("attn-check: another replica's check failed (see its message)");
  }
  check.all_passed = flags[1] > num_replicas - 0.5;
  check.report = std::move(*local);
  return check;
}

}  // namespace

Result<ReplicaAttnCheck> RunReplicaAttnCheck(const Plan& plan, Comm& world,
                                             const AttnCheckOptions& options) {
  if (options.on_phase) options.on_phase("agreement");
  if (auto agreed = CheckOptionAgreement(world, options); !agreed)
    return std::unexpected(agreed.error());
  if (auto agreed = CheckPlanAgreement(world, plan, options.head_dim); !agreed)
    return std::unexpected(agreed.error());
  if (auto valid = ValidateStructure(plan); !valid) return std::unexpected(valid.error());
  if (options.on_phase) options.on_phase("memory check");
  if (auto fits = CheckMemory(plan, world, options); !fits) return std::unexpected(fits.error());
  ReplicaComms comms = SplitByReplica(world, plan);
  ReplicaAttnCheck check;
  check.replica = comms.replica;
  check.num_replicas = NumReplicas(plan);
  if (comms.left_out()) return check;
  check.world_ranks = comms.local.world_ranks;
  check.sequences = ReplicaSequences(plan, comms.replica);
  auto local = RunAttnCheck(comms.local.plan, *comms.replica_comm, options);
  return AgreeOnReplicas(*comms.participants, check.num_replicas, std::move(local),
                         std::move(check));
}

}  // namespace hexiseq::runtime
