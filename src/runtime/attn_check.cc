// attn-check driver: deterministic inputs, distributed forward + backward, gather to rank 0,
// naive double-precision reference there, error statistics, and an agreed pass/fail.
#include "runtime/attn_check.h"

#include <chrono>
#include <cmath>
#include <limits>

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

// Token-layout rows [rows][heads][d] of one tensor for the given global positions.
std::vector<float> Generate(uint64_t seed, int tensor, std::span<const int64_t> positions,
                            int heads, int d) {
  std::vector<float> data(positions.size() * heads * d);
  size_t index = 0;
  for (int64_t pos : positions) {
    for (int head = 0; head < heads; ++head) {
      for (int dim = 0; dim < d; ++dim) data[index++] = InputValue(seed, tensor, pos, head, dim);
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

Result<AttnCheckReport> RunAttnCheck(const Plan& plan, Comm& world,
                                     const AttnCheckOptions& options) {
  auto created = DistributedAttention::Create(plan, world, options.head_dim);
  if (!created) return std::unexpected(created.error());
  DistributedAttention& attention = **created;
  const AttentionLayout& lay = attention.layout();
  const int rank = world.rank();
  const int d = options.head_dim;
  const int H = lay.num_heads;
  const int G = lay.num_kv_heads;

  auto positions_of = [&](int r) {
    const RankRole& role = lay.roles[r];
    const LayoutGroup& group = lay.groups[role.group];
    return std::span<const int64_t>(group.positions)
        .subspan(group.member_offset[role.member], role.num_tokens);
  };
  const std::span<const int64_t> mine = positions_of(rank);
  const std::vector<float> q = Generate(options.seed, kQ, mine, H, d);
  const std::vector<float> k = Generate(options.seed, kK, mine, G, d);
  const std::vector<float> v = Generate(options.seed, kV, mine, G, d);
  const std::vector<float> d_o = Generate(options.seed, kDO, mine, H, d);
  auto forward = attention.Forward(q, k, v);
  if (!forward) return std::unexpected(forward.error());
  auto backward = attention.Backward(d_o);
  if (!backward) return std::unexpected(backward.error());

  AttnCheckReport report;
  // Phase times of every rank.
  {
    const PhaseTimes& f = attention.forward_times();
    const PhaseTimes& b = attention.backward_times();
    const double mine_times[10] = {f.alltoall, f.compute, f.ring_wait, f.total, f.ring_bytes_sent,
                                   b.alltoall, b.compute, b.ring_wait, b.total, b.ring_bytes_sent};
    std::vector<double> all(10 * world.size());
    world.Allgather(mine_times, sizeof(mine_times), all.data());
    for (int r = 0; r < world.size(); ++r) {
      const double* t = all.data() + 10 * r;
      report.forward_times.push_back(PhaseTimes{t[0], t[1], t[2], t[3], t[4]});
      report.backward_times.push_back(PhaseTimes{t[5], t[6], t[7], t[8], t[9]});
    }
  }

  // Gather O, LSE, dQ, dK, dV to rank 0 (one message per rank, fixed layout).
  auto payload_floats = [&](int r) {
    const int64_t s = lay.roles[r].num_tokens;
    return s * (H * d + H + H * d + 2 * G * d);
  };
  std::vector<float> payload;
  payload.reserve(payload_floats(rank));
  for (const std::vector<float>* part :
       {&forward->o, &forward->lse, &backward->dq, &backward->dk, &backward->dv}) {
    payload.insert(payload.end(), part->begin(), part->end());
  }
  double passed_flag = 1;
  if (rank != 0) {
    RequestPtr request = world.Isend(payload.data(), payload.size() * sizeof(float), 0, kGatherTag);
    world.Wait(*request);
  } else {
    const int64_t S = lay.seq_len;
    std::vector<float> o(S * H * d), lse(S * H), dq(S * H * d), dk(S * G * d), dv(S * G * d);
    for (int r = 0; r < world.size(); ++r) {
      std::vector<float> received;
      if (r == 0) {
        received = payload;
      } else {
        received.resize(payload_floats(r));
        RequestPtr request =
            world.Irecv(received.data(), received.size() * sizeof(float), r, kGatherTag);
        world.Wait(*request);
      }
      const std::span<const int64_t> rows = positions_of(r);
      const int64_t s = static_cast<int64_t>(rows.size());
      const float* in = received.data();
      auto scatter = [&](std::vector<float>& full, int64_t width) {
        for (int64_t row = 0; row < s; ++row) {
          std::copy_n(in + row * width, width, full.data() + rows[row] * width);
        }
        in += s * width;
      };
      scatter(o, int64_t{H} * d);
      scatter(lse, H);
      scatter(dq, int64_t{H} * d);
      scatter(dk, int64_t{G} * d);
      scatter(dv, int64_t{G} * d);
    }

    // Reference: head-major [heads][S][d] on positions 0..S-1.
    const auto start = std::chrono::steady_clock::now();
    std::vector<int64_t> positions(S);
    for (int64_t pos = 0; pos < S; ++pos) positions[pos] = pos;
    auto head_major = [&](int tensor, int heads) {
      std::vector<float> data(static_cast<size_t>(heads) * S * d);
      for (int head = 0; head < heads; ++head) {
        for (int64_t pos = 0; pos < S; ++pos) {
          for (int dim = 0; dim < d; ++dim) {
            data[(head * S + pos) * d + dim] = InputValue(options.seed, tensor, pos, head, dim);
          }
        }
      }
      return data;
    };
    const std::vector<float> rq = head_major(kQ, H), rk = head_major(kK, G), rv = head_major(kV, G),
                             rdo = head_major(kDO, H);
    std::vector<float> ro(H * S * d), rlse(H * S), rdq(H * S * d, 0.0f), rdk(G * S * d, 0.0f),
        rdv(G * S * d, 0.0f);
    AttentionInputs in;
    in.head_dim = d;
    in.scale = 1.0f / std::sqrt(static_cast<float>(d));
    in.q_positions = positions;
    in.k_positions = positions;
    ForwardOutputs out;
    BackwardArgs args;
    for (int head = 0; head < H; ++head) {
      in.q.push_back(rq.data() + head * S * d);
      in.kv_index.push_back(lay.kv_of(head));
      out.o.push_back(ro.data() + head * S * d);
      out.lse.push_back(rlse.data() + head * S);
      args.o.push_back(ro.data() + head * S * d);
      args.d_o.push_back(rdo.data() + head * S * d);
      args.lse.push_back(rlse.data() + head * S);
      args.dq.push_back(rdq.data() + head * S * d);
    }
    for (int kv = 0; kv < G; ++kv) {
      in.k.push_back(rk.data() + kv * S * d);
      in.v.push_back(rv.data() + kv * S * d);
      args.dk.push_back(rdk.data() + kv * S * d);
      args.dv.push_back(rdv.data() + kv * S * d);
    }
    AttentionForwardReference(in, out, /*accumulate=*/false);
    AttentionBackwardReference(in, args);
    report.reference_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

    ErrorStats eo{"O"}, else_{"LSE"}, edq{"dQ"}, edk{"dK"}, edv{"dV"};
    for (int64_t pos = 0; pos < S; ++pos) {
      for (int head = 0; head < H; ++head) {
        Compare(else_, lse[pos * H + head], rlse[head * S + pos], pos * H + head);
        for (int dim = 0; dim < d; ++dim) {
          const int64_t index = (pos * H + head) * d + dim;
          Compare(eo, o[index], ro[(head * S + pos) * d + dim], index);
          Compare(edq, dq[index], rdq[(head * S + pos) * d + dim], index);
        }
      }
      for (int kv = 0; kv < G; ++kv) {
        for (int dim = 0; dim < d; ++dim) {
          const int64_t index = (pos * G + kv) * d + dim;
          Compare(edk, dk[index], rdk[(kv * S + pos) * d + dim], index);
          Compare(edv, dv[index], rdv[(kv * S + pos) * d + dim], index);
        }
      }
    }
    auto locate = [](ErrorStats& stats, int64_t heads, int64_t width) {
      if (stats.worst < 0) return;
      stats.worst_position = stats.worst / (heads * width);
      stats.worst_head = static_cast<int>(stats.worst / width % heads);
      stats.worst_dim = static_cast<int>(stats.worst % width);
    };
    locate(eo, H, d);
    locate(else_, H, 1);
    locate(edq, H, d);
    locate(edk, G, d);
    locate(edv, G, d);
    report.errors = {eo, else_, edq, edk, edv};
    report.has_errors = true;
    for (const ErrorStats& stats : report.errors) {
      if (!(stats.relative() <= options.tolerance)) passed_flag = 0;
    }
  }
  // Everyone learns the verdict, so every rank exits with the same code.
  double verdict[1] = {rank == 0 ? passed_flag : 0.0};
  world.AllreduceSum(std::span<double>(verdict, 1));
  report.passed = verdict[0] > 0.5;
  return report;
}

}  // namespace hexiseq::runtime
