// Multi-process check of the distributed attention under mpirun (label `mpi`): for the world
// size N, random valid plans with prime lengths, the ring / Ulysses / USP shapes with N ranks,
// a plan mismatch (the last rank loads a different plan; every rank must get the error, no
// hang), and that the float all-reduces and the reduce-scatter give the same sums. Usage:
// mpi_attention_check [seed]. Exit 0 when every case matches the naive reference within 1e-5
// relative.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "runtime/attention_kernels.h"
#include "runtime/attn_check.h"
#include "runtime/mpi_comm.h"
#include "runtime/plan_gen_util.h"

namespace {

using namespace hexiseq;
using namespace hexiseq::runtime;

bool CheckCase(Comm& world, const std::string& name, const Plan& plan, int head_dim,
               uint64_t seed) {
  AttnCheckOptions options;
  options.head_dim = head_dim;
  options.seed = seed;
  options.tolerance = 1e-5;
  auto report = RunAttnCheck(plan, world, options);
  if (!report) {
    if (world.rank() == 0) {
      std::fprintf(stderr, "FAIL %s: %s\n", name.c_str(), report.error().message.c_str());
    }
    return false;
  }
  if (world.rank() == 0) {
    std::printf("%s %-28s S=%-5lld H=%-2d G=%-2d d=%-3d", report->passed ? "ok  " : "FAIL",
                name.c_str(), static_cast<long long>(plan.seq_len), plan.num_heads,
                plan.num_kv_heads, head_dim);
    for (const ErrorStats& stats : report->errors) {
      std::printf(" %s %.1e", stats.name.c_str(), stats.relative());
    }
    std::printf("\n");
  }
  return report->passed;
}

// The float collectives' sums: AllreduceSum, IallreduceSum and each rank's block of
// IreduceScatterSum (uneven blocks, one empty) must be the same bits (comm.h). Returns failures.
int CheckSumsAgree(Comm& world) {
  int failures = 0;
  for (const int64_t total : {int64_t{1000}, int64_t{20000}, int64_t{600000}}) {
    std::mt19937 rng(static_cast<unsigned>(world.rank() * 7919 + total));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> send(total);
    for (float& value : send) value = normal(rng) * std::exp(3.0f * normal(rng));
    std::vector<int64_t> counts(world.size(), 0);
    int64_t offset = 0, given = 0;
    for (int peer = 0; peer < world.size(); ++peer) {  // uneven; rank 1 of 3 or more: empty
      counts[peer] = peer + 1 == world.size() ? total - given
                     : peer == 1              ? 0
                                              : total / (2 * world.size()) + peer;
      if (peer < world.rank()) offset += counts[peer];
      given += counts[peer];
    }
    std::vector<float> gathered(counts[0] * world.size()), nonblocking(gathered.size());
    world.Allgather(send.data(), counts[0] * sizeof(float), gathered.data());
    RequestPtr gather =
        world.IallgatherBytes(send.data(), counts[0] * sizeof(float), nonblocking.data());
    world.Wait(*gather);
    std::vector<float> blocking = send, started = send, block(counts[world.rank()]);
    world.AllreduceSum(std::span<float>(blocking));
    RequestPtr all = world.IallreduceSum(std::span<float>(started));
    world.Wait(*all);
    RequestPtr scatter = world.IreduceScatterSum(send.data(), counts, block.data());
    world.Wait(*scatter);
    const bool same = gathered == nonblocking && blocking == started &&
                      std::equal(block.begin(), block.end(), started.begin() + offset);
    if (!same) {
      std::fprintf(stderr,
                   "FAIL rank %d: float sums of %lld elements differ between "
                   "AllreduceSum, IallreduceSum and IreduceScatterSum (or IallgatherBytes)\n",
                   world.rank(), static_cast<long long>(total));
    }
    failures += !same;
  }
  double failed[1] = {static_cast<double>(failures)};
  world.AllreduceSum(std::span<double>(failed, 1));
  if (world.rank() == 0 && failed[0] == 0) std::printf("ok   float sums bit-identical\n");
  return failed[0] > 0 ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  MpiSession session(&argc, &argv);
  SetBlasThreads(1);
  int failures = 0;
  {
    std::unique_ptr<Comm> world = MpiWorldComm();
    const int n = world->size();
    // argv[1]: optional seed (stress runs); default fixed per world size.
    const uint64_t seed = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1000;
    std::mt19937_64 rng(seed + n);
    const int64_t primes[] = {7, 61, 127, 251, 509};
    const std::pair<int, int> heads[] = {{4, 1}, {4, 2}, {6, 3}, {8, 2}, {8, 8}};
    for (int trial = 0; trial < 6; ++trial) {
      testing::RandomPlanOptions options;
      options.num_ranks = n;
      options.seq_len = primes[trial % 5];
      std::tie(options.num_heads, options.num_kv_heads) = heads[(trial + n) % 5];
      const Plan plan = testing::RandomPlan(rng, options);
      failures += !CheckCase(*world, "random-" + std::to_string(trial), plan, 16, trial);
    }
    failures += !CheckCase(*world, "ring-zigzag", testing::RingPlan(n, 1021, 4, 2, true), 32, 1);
    failures += !CheckCase(*world, "ulysses", testing::UlyssesPlan(n, 509, 8, 2), 32, 2);
    for (int cp = 2; cp < n; ++cp) {
      if (n % cp != 0) continue;
      failures += !CheckCase(*world, "usp-" + std::to_string(cp) + "x" + std::to_string(n / cp),
                             testing::UspPlan(cp, n / cp, 389, 8, 4), 32, 3);
    }
    failures += CheckSumsAgree(*world);
    if (n >= 2) {
      // The last rank loads a plan with two members' heads swapped.
      Plan plan = testing::UlyssesPlan(n, 64, 2 * n, 1);
      if (world->rank() == n - 1)
        std::swap(plan.groups[0].members[0].heads, plan.groups[0].members[1].heads);
      AttnCheckOptions options;
      auto report = RunAttnCheck(plan, *world, options);
      const bool ok =
          !report &&
          report.error().message.find("plan mismatch across ranks") != std::string::npos &&
          report.error().message.find("rank " + std::to_string(n - 1) + " loaded plan hash") !=
              std::string::npos;
      if (!ok) {
        std::fprintf(stderr, "FAIL rank %d: plan mismatch not reported as expected%s%s\n",
                     world->rank(), report ? "" : ": ",
                     report ? "" : report.error().message.c_str());
      } else if (world->rank() == 0) {
        std::printf("ok   plan-mismatch                 %s\n", report.error().message.c_str());
      }
      double failed[1] = {ok ? 0.0 : 1.0};
      world->AllreduceSum(std::span<double>(failed, 1));
      failures += failed[0] > 0 ? 1 : 0;
    }
    if (world->rank() == 0) {
      std::printf("%s: %d failure(s) on %d rank(s)\n", failures ? "FAIL" : "PASS", failures, n);
    }
  }
  return failures == 0 ? 0 : 1;
}
