// `hexiseq attn-check`: runs random inputs through the distributed attention of a plan (one MPI
// process per plan rank; without mpirun, a one-rank world) and compares O, LSE, dQ, dK, dV with
// the single-process double-precision reference on rank 0. Rank 0 prints; exit code 0 when every
// relative error is within the tolerance, 1 above it or on bad input. A plan with several
// replicas is checked replica by replica (each on its own ranks, the first of them printing its
// table in replica order); a rank the plan leaves out says so and exits 0 with the others.
#include <cinttypes>
#include <cstdio>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "cli/emulation_flags.h"
#include "cli/inputs.h"
#include "plan/plan.h"
#include "runtime/attention_kernels.h"
#include "runtime/attn_check.h"
#include "runtime/mpi_comm.h"

namespace hexiseq::cli {
namespace {

struct AttnCheckFlags {
  std::string plan;
  int head_dim = 32;
  uint64_t seed = 1;
  double tolerance = 1e-5;
  std::string format = "table";
  double timeout_seconds = 300;
  EmulationFlags emulation;
};

// `world_ranks` names the report's ranks (empty: the plan's own numbering); `title` is what was
// checked ("", or "replica 1 of 2 (world ranks 3; 1 sequence(s))").
void PrintTable(const Plan& plan, const AttnCheckFlags& flags,
                const runtime::AttnCheckReport& report, const std::vector<int>& world_ranks = {},
                const std::string& title = "") {
  const int ranks = world_ranks.empty() ? plan.num_ranks : static_cast<int>(world_ranks.size());
  std::printf("attn-check %s%s%s: %d ranks, S = %" PRId64
              ", H = %d, G = %d, head_dim = %d, seed = %" PRIu64 "\n\n",
              flags.plan.c_str(), title.empty() ? "" : " ", title.c_str(), ranks, plan.seq_len,
              plan.num_heads, plan.num_kv_heads, flags.head_dim, flags.seed);
  std::printf("%-6s %14s %14s %14s   %s\n", "tensor", "max_abs_err", "max_abs_ref", "rel_err",
              "worst at (position, head, dim)");
  for (const runtime::ErrorStats& stats : report.errors) {
    std::printf("%-6s %14.3e %14.3e %14.3e   (%lld, %d, %d)\n", stats.name.c_str(), stats.max_abs,
                stats.max_ref, stats.relative(), static_cast<long long>(stats.worst_position),
                stats.worst_head, stats.worst_dim);
  }
  std::printf(
      "\nrel_err = max|distributed - reference| / max|reference| per tensor; "
      "reference: naive attention in double precision\n");
  std::printf("\n%-4s %10s %10s %10s %10s %12s %10s %10s %10s %10s %12s\n", "rank", "fwd_a2a_s",
              "fwd_comp_s", "fwd_wait_s", "fwd_tot_s", "fwd_p2p_B", "bwd_a2a_s", "bwd_comp_s",
              "bwd_wait_s", "bwd_tot_s", "bwd_p2p_B");
  for (size_t rank = 0; rank < report.forward_times.size(); ++rank) {
    const runtime::PhaseTimes& f = report.forward_times[rank];
    const runtime::PhaseTimes& b = report.backward_times[rank];
    std::printf("%-4d %10.4f %10.4f %10.4f %10.4f %12.0f %10.4f %10.4f %10.4f %10.4f %12.0f\n",
                world_ranks.empty() ? static_cast<int>(rank) : world_ranks[rank], f.alltoall,
                f.compute, f.ring_wait, f.total, f.ring_bytes_sent, b.alltoall, b.compute,
                b.ring_wait, b.total, b.ring_bytes_sent);
  }
  std::printf("\n%s: %s (tolerance %.1e)\n", title.empty() ? "result" : "replica result",
              report.passed ? "PASS" : "FAIL", flags.tolerance);
}

// `replica` >= 0 adds "replica" and "world_ranks" (one object per replica).
void PrintJson(const Plan& plan, const AttnCheckFlags& flags,
               const runtime::AttnCheckReport& report, int replica = -1,
               const std::vector<int>& world_ranks = {}) {
  if (replica >= 0) {
    std::string ranks;
    for (int rank : world_ranks) ranks += (ranks.empty() ? "" : ", ") + std::to_string(rank);
    std::printf("{\"replica\": %d, \"world_ranks\": [%s], ", replica, ranks.c_str());
  } else {
    std::printf("{");
  }
  std::printf("\"plan\": \"%s\", \"num_ranks\": %d, \"seq_len\": %" PRId64
              ", \"num_heads\": %d, \"num_kv_heads\": %d, \"head_dim\": %d, \"seed\": %" PRIu64
              ", \"tolerance\": %.17g, \"passed\": %s, \"errors\": {",
              flags.plan.c_str(),
              world_ranks.empty() ? plan.num_ranks : static_cast<int>(world_ranks.size()),
              plan.seq_len, plan.num_heads, plan.num_kv_heads, flags.head_dim, flags.seed,
              flags.tolerance, report.passed ? "true" : "false");
  for (size_t index = 0; index < report.errors.size(); ++index) {
    const runtime::ErrorStats& stats = report.errors[index];
    std::printf("%s\"%s\": {\"max_abs\": %.17g, \"max_ref\": %.17g, \"rel\": %.17g}",
                index > 0 ? ", " : "", stats.name.c_str(), stats.max_abs, stats.max_ref,
                stats.relative());
  }
  std::printf("}}\n");
}

std::string RankList(const std::vector<int>& ranks) {
  std::string list;
  for (int rank : ranks) list += (list.empty() ? "" : ", ") + std::to_string(rank);
  return list;
}

// Each replica's first rank prints its table, replica by replica (one barrier over the world after
// each, which every rank, left-out ones too, passes); then the first participant prints the
// overall verdict.
void PrintReplicas(runtime::Comm& world, const Plan& plan, const AttnCheckFlags& flags,
                   const runtime::ReplicaAttnCheck& check) {
  const bool leader = check.replica >= 0 && check.world_ranks.front() == world.rank();
  for (int replica = 0; replica < NumReplicas(plan); ++replica) {
    if (leader && replica == check.replica) {
      const std::string title = "replica " + std::to_string(replica) + " of " +
                                std::to_string(check.num_replicas) + " (world ranks " +
                                RankList(check.world_ranks) + "; " +
                                std::to_string(check.sequences) + " sequence(s))";
      if (flags.format == "json") {
        PrintJson(plan, flags, check.report, replica, check.world_ranks);
      } else {
        PrintTable(plan, flags, check.report, check.world_ranks, title);
        std::printf("\n");
      }
      std::fflush(stdout);
    }
    world.Barrier();
  }
  if (check.replica == 0 && leader) {
    if (flags.format == "json") {
      std::printf("{\"replicas\": %d, \"left_out\": [%s], \"passed\": %s}\n", check.num_replicas,
                  RankList(plan.left_out).c_str(), check.all_passed ? "true" : "false");
    } else {
      std::printf("result: %s (%d replica(s), each against the reference; left out: [%s])\n",
                  check.all_passed ? "PASS" : "FAIL", check.num_replicas,
                  RankList(plan.left_out).c_str());
    }
    std::fflush(stdout);
  }
}

// attn-check of a plan with several replicas or left-out ranks.
int RunReplicaAttnCheck(runtime::Comm& world, const Plan& plan, const AttnCheckFlags& flags,
                        const runtime::AttnCheckOptions& options) {
  auto check = runtime::RunReplicaAttnCheck(plan, world, options);
  if (check && check->replica < 0) {
    std::fprintf(stderr,
                 "attn-check: rank %d is left out by the plan (left_out = [%s]): nothing to "
                 "check there; exiting\n",
                 world.rank(), RankList(plan.left_out).c_str());
  }
  // Every rank passes the same world barriers (one per replica's table, one at the end) on every
  // path, so that no rank leaves early and no watchdog sees a peer gone.
  if (!check) {
    // The same error on every participant (and on every rank when it came before the split).
    const std::vector<int> participants = ParticipatingRanks(plan);
    const bool first = world.rank() == (participants.empty() ? 0 : participants.front());
    const int code =
        first ? ReportError(check.error()) : (check.error().code == ErrorCode::kInternal ? 3 : 1);
    for (int barrier = 0; barrier <= NumReplicas(plan); ++barrier) world.Barrier();
    return code;
  }
  PrintReplicas(world, plan, flags, *check);
  world.Barrier();
  return check->replica < 0 || check->all_passed ? 0 : 1;
}

int RunAttnCheckCommand(const AttnCheckFlags& flags) {
  runtime::MpiSession session(nullptr, nullptr);
  runtime::MpiWatchdog watchdog("attn-check", flags.timeout_seconds);
  watchdog.SetPhase("load");
  runtime::SetBlasThreads(1);
  std::unique_ptr<runtime::Comm> world = runtime::MpiWorldComm();
  const int rank = world->rank();
  // Every rank loads; a rank that cannot must not leave the others waiting, so all agree first.
  auto plan = LoadPlan(flags.plan);
  std::vector<int> loaded(world->size());
  const int mine = plan.has_value() ? 1 : 0;
  world->Allgather(&mine, sizeof mine, loaded.data());
  std::string failed;
  for (int peer = 0; peer < world->size(); ++peer) {
    if (!loaded[peer]) failed += (failed.empty() ? "" : ", ") + std::to_string(peer);
  }
  if (!failed.empty()) {
    if (!plan) return ReportError(plan.error());
    if (rank == 0) {
      return ReportError(Error{ErrorCode::kInvalidArgument,
                               "attn-check: the plan could not be loaded on rank(s) " + failed});
    }
    return 1;
  }
  if (auto emulated = ApplyEmulation(flags.emulation, world); !emulated) {
    return rank == 0 ? ReportError(emulated.error()) : 1;  // the same error on every rank
  }
  runtime::AttnCheckOptions options;
  options.head_dim = flags.head_dim;
  options.seed = flags.seed;
  options.tolerance = flags.tolerance;
  options.on_phase = [&watchdog](const char* phase) { watchdog.SetPhase(phase); };
  if (NumReplicas(*plan) > 1 || !plan->left_out.empty()) {
    return RunReplicaAttnCheck(*world, *plan, flags, options);
  }
  auto report = runtime::RunAttnCheck(*plan, *world, options);
  if (!report) {
    // The same error on every rank: rank 0 prints it.
    if (rank == 0) return ReportError(report.error());
    return report.error().code == ErrorCode::kInternal ? 3 : 1;
  }
  if (rank == 0) {
    if (flags.format == "json") {
      PrintJson(*plan, flags, *report);
    } else {
      PrintTable(*plan, flags, *report);
    }
    std::fflush(stdout);
  }
  return report->passed ? 0 : 1;
}

}  // namespace

void AddRuntimeCommands(CLI::App& app, Actions& actions) {
  static AttnCheckFlags flags;
  CLI::App* check = app.add_subcommand(
      "attn-check",
      "Check the distributed attention of a plan against the single-process reference "
      "(run under mpirun -np <plan num_ranks>)");
  check->add_option("--plan", flags.plan, "Plan JSON file")->required();
  check->add_option("--head-dim", flags.head_dim, "Head dimension (default 32)")
      ->check(CLI::Range(1, 1024));
  check->add_option("--seed", flags.seed, "Seed of the random inputs (default 1)")
      ->check(SeedRange());
  check
      ->add_option("--tolerance", flags.tolerance,
                   "Largest relative error accepted on every output (default 1e-5)")
      ->check(FiniteRange(1e-300, 1.0));
  check
      ->add_option("--timeout", flags.timeout_seconds,
                   "Seconds without a heartbeat from a peer, or without progress on any rank, "
                   "before every rank reports it and exits (default 300)")
      ->check(FiniteRange(1, 86400));
  check->add_option("--format", flags.format, "table|json")
      ->check(CLI::IsMember({"table", "json"}));
  AddEmulationOptions(check, flags.emulation, "attention kernels");
  actions[check] = [] { return RunAttnCheckCommand(flags); };
}

}  // namespace hexiseq::cli
