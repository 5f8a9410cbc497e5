// Runtime benchmarks.
//   attention_bench kernel [--seq 4096,8192,16384,32768] [--heads 2] [--kv-heads 1]
//                          [--head-dim 64] [--repeats 3]
//     Effective FLOP rate of the blocked causal attention forward + backward (one thread)
//     against single-threaded OpenBLAS sgemm measured in the same run.
//   attention_bench layouts [--seq 2048] [--heads 8] [--kv-heads 8] [--head-dim 32] [--repeats 7]
//     One rank's share of a 2-rank ring (its queries against its own block, then the other
//     rank's) for token layouts of the measured testbeds: one contiguous run, or front and back
//     chunks. Rate per exact causal FLOP against the contiguous half measured in the same repeat.
//   mpirun -np N attention_bench dist --plan FILE [--head-dim 64] [--repeats 3]
//     Per-rank, per-phase breakdown (all-to-all, compute, ring wait, other) of the distributed
//     attention executing a plan; medians over repeats.
// Each mode checks its results against the naive reference before it reports a time.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "plan/plan.h"
#include "runtime/attention_kernels.h"
#include "runtime/attn_check.h"
#include "runtime/dist_attention.h"
#include "runtime/mpi_comm.h"

namespace {

using namespace hexiseq;
using namespace hexiseq::runtime;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

std::string Flag(int argc, char** argv, const std::string& name, const std::string& fallback) {
  for (int index = 2; index + 1 < argc; ++index) {
    if (argv[index] == name) return argv[index + 1];
  }
  return fallback;
}

std::string CpuName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

std::string Commit() {
  std::string text = "unknown";
  if (FILE* pipe = popen("git rev-parse --short HEAD 2>/dev/null", "r")) {
    char buffer[64] = {0};
    if (std::fgets(buffer, sizeof buffer, pipe) != nullptr) {
      text = buffer;
      text.erase(text.find_last_not_of("\n") + 1);
    }
    pclose(pipe);
  }
  return text;
}

void PrintHeader(const char* what) {
  std::printf("# %s\n# commit %s, build %s, compiler g++ %s, CPU %s, BLAS threads 1\n", what,
              Commit().c_str(), HEXISEQ_BUILD_TYPE, __VERSION__, CpuName().c_str());
}

double SgemmRate(int m, int n, int k, bool trans_b, int repeats) {
  std::vector<float> a(static_cast<size_t>(m) * k, 0.5f), b(static_cast<size_t>(k) * n, 0.25f),
      c(static_cast<size_t>(m) * n, 0.0f);
  // Enough calls per sample for at least ~0.2 s.
  const double flops = 2.0 * m * n * k;
  const int calls = std::max(1, static_cast<int>(2e9 / flops));
  std::vector<double> rates;
  for (int repeat = 0; repeat < repeats; ++repeat) {
    const Clock::time_point start = Clock::now();
    for (int call = 0; call < calls; ++call) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m, n, k, 1.0f,
                  a.data(), k, b.data(), trans_b ? k : n, 0.0f, c.data(), n);
    }
    rates.push_back(flops * calls / Seconds(start));
  }
  return Median(rates);
}

struct KernelProblem {
  int64_t s = 0;
  int heads = 0, kv_heads = 0, d = 0;
  std::vector<int64_t> pos;
  std::vector<float> q, k, v, d_o, o, lse, dq, dk, dv;
  AttentionInputs in;
  ForwardOutputs fo;
  BackwardArgs ba;

  KernelProblem(int64_t s_, int heads_, int kv_heads_, int d_)
      : s(s_), heads(heads_), kv_heads(kv_heads_), d(d_) {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
    pos.resize(s);
    for (int64_t row = 0; row < s; ++row) pos[row] = row;
    auto fill = [&](std::vector<float>& data, int64_t count) {
      data.resize(count);
      for (float& x : data) x = value(rng);
    };
    fill(q, s * heads * d);
    fill(d_o, s * heads * d);
    fill(k, s * kv_heads * d);
    fill(v, s * kv_heads * d);
    o.resize(s * heads * d);
    lse.resize(s * heads);
    dq.resize(s * heads * d);
    dk.resize(s * kv_heads * d);
    dv.resize(s * kv_heads * d);
    in.head_dim = d;
    in.scale = 1.0f / std::sqrt(static_cast<float>(d));
    in.q_positions = pos;
    in.k_positions = pos;
    for (int head = 0; head < heads; ++head) {
      in.q.push_back(q.data() + head * s * d);
      in.kv_index.push_back(head / (heads / kv_heads));
      fo.o.push_back(o.data() + head * s * d);
      fo.lse.push_back(lse.data() + head * s);
      ba.o.push_back(o.data() + head * s * d);
      ba.d_o.push_back(d_o.data() + head * s * d);
      ba.lse.push_back(lse.data() + head * s);
      ba.dq.push_back(dq.data() + head * s * d);
    }
    for (int kv = 0; kv < kv_heads; ++kv) {
      in.k.push_back(k.data() + kv * s * d);
      in.v.push_back(v.data() + kv * s * d);
      ba.dk.push_back(dk.data() + kv * s * d);
      ba.dv.push_back(dv.data() + kv * s * d);
    }
  }
  void ZeroGrads() {
    std::fill(dq.begin(), dq.end(), 0.0f);
    std::fill(dk.begin(), dk.end(), 0.0f);
    std::fill(dv.begin(), dv.end(), 0.0f);
  }
};

double RelError(const std::vector<float>& got, const std::vector<float>& want) {
  double max_abs = 0, max_ref = 0;
  for (size_t index = 0; index < got.size(); ++index) {
    max_abs = std::max(max_abs, std::abs(double{got[index]} - want[index]));
    max_ref = std::max(max_ref, std::abs(double{want[index]}));
  }
  return max_ref > 0 ? max_abs / max_ref : max_abs;
}

int KernelBench(int argc, char** argv) {
  const int heads = std::atoi(Flag(argc, argv, "--heads", "2").c_str());
  const int kv_heads = std::atoi(Flag(argc, argv, "--kv-heads", "1").c_str());
  const int d = std::atoi(Flag(argc, argv, "--head-dim", "64").c_str());
  const int repeats = std::atoi(Flag(argc, argv, "--repeats", "3").c_str());
  std::vector<int64_t> seqs;
  {
    const std::string list = Flag(argc, argv, "--seq", "4096,8192,16384,32768");
    size_t begin = 0;
    while (begin < list.size()) {
      size_t end = list.find(',', begin);
      if (end == std::string::npos) end = list.size();
      seqs.push_back(std::atoll(list.substr(begin, end - begin).c_str()));
      begin = end + 1;
    }
  }
  if (heads < 1 || kv_heads < 1 || heads % kv_heads != 0 || d < 1 || repeats < 1) {
    std::fprintf(stderr, "attention_bench kernel: bad --heads/--kv-heads/--head-dim/--repeats\n");
    return 2;
  }
  SetBlasThreads(1);
  PrintHeader("attention kernel forward + backward vs OpenBLAS sgemm (one thread)");

  // Correctness first: the blocked kernels against the naive double reference.
  {
    KernelProblem fast(1024, heads, kv_heads, d), ref(1024, heads, kv_heads, d);
    AttentionForward(fast.in, fast.fo, false);
    AttentionBackward(fast.in, fast.ba);
    AttentionForwardReference(ref.in, ref.fo, false);
    AttentionBackwardReference(ref.in, ref.ba);
    const double worst =
        std::max({RelError(fast.o, ref.o), RelError(fast.lse, ref.lse), RelError(fast.dq, ref.dq),
                  RelError(fast.dk, ref.dk), RelError(fast.dv, ref.dv)});
    std::printf("# check S=1024: max relative error over O, LSE, dQ, dK, dV = %.2e\n", worst);
    if (!(worst <= 1e-5)) {
      std::fprintf(stderr, "attention_bench: kernel check failed (%.3e > 1e-5)\n", worst);
      return 1;
    }
  }
  const double sgemm_qk = SgemmRate(128, 128, d, true, repeats);
  const double sgemm_pv = SgemmRate(256, d, 128, false, repeats);
  std::printf("# sgemm at tile shapes: 128x128x%d (QK^T) %.1f, 256x%dx128 (PV) %.1f GFLOP/s\n", d,
              sgemm_qk / 1e9, d, sgemm_pv / 1e9);
  std::printf(
      "# each repeat times sgemm 2048^3, then forward, then backward; ratio = median over "
      "repeats of (fwd+bwd rate / sgemm rate of the same repeat)\n\n");
  std::printf(
      "| S | heads (q/kv) | d | fwd s | bwd s | fwd GFLOP/s | bwd GFLOP/s | fwd+bwd "
      "GFLOP/s | sgemm GFLOP/s | fwd+bwd / sgemm |\n|---|---|---|---|---|---|---|---|---|---|\n");
  for (int64_t s : seqs) {
    KernelProblem p(s, heads, kv_heads, d);
    const double fwd_flops = AttentionForwardFlops(p.in);
    std::vector<double> fwd_times, bwd_times, sgemm_rates, ratios;
    for (int repeat = 0; repeat < repeats; ++repeat) {
      sgemm_rates.push_back(SgemmRate(2048, 2048, 2048, false, 1));
      Clock::time_point start = Clock::now();
      AttentionForward(p.in, p.fo, false);
      fwd_times.push_back(Seconds(start));
      p.ZeroGrads();
      start = Clock::now();
      AttentionBackward(p.in, p.ba);
      bwd_times.push_back(Seconds(start));
      ratios.push_back(3.5 * fwd_flops / (fwd_times.back() + bwd_times.back()) /
                       sgemm_rates.back());
    }
    for (float x : p.dk) {
      if (!std::isfinite(x)) {
        std::fprintf(stderr, "attention_bench: non-finite dK at S=%lld\n",
                     static_cast<long long>(s));
        return 1;
      }
    }
    const double tf = Median(fwd_times), tb = Median(bwd_times);
    std::printf("| %lld | %d/%d | %d | %.3f | %.3f | %.1f | %.1f | %.1f | %.1f | %.0f%% |\n",
                static_cast<long long>(s), heads, kv_heads, d, tf, tb, fwd_flops / tf / 1e9,
                2.5 * fwd_flops / tb / 1e9, 3.5 * fwd_flops / (tf + tb) / 1e9,
                Median(sgemm_rates) / 1e9, 100.0 * Median(ratios));
    std::fflush(stdout);
  }
  return 0;
}

// ---- layouts: one rank of a 2-rank ring, its pieces given as fractions of S.

struct Layout {
  const char* name;
  std::vector<std::pair<double, double>> pieces;  // [begin, end) as fractions of S
};

std::vector<int64_t> LayoutPositions(const std::vector<std::pair<double, double>>& pieces,
                                     int64_t seq, bool complement) {
  std::vector<bool> mine(seq, false);
  for (const auto& [begin, end] : pieces)
    for (int64_t pos = std::llround(begin * seq); pos < std::llround(end * seq); ++pos)
      mine[pos] = true;
  std::vector<int64_t> positions;
  for (int64_t pos = 0; pos < seq; ++pos)
    if (mine[pos] != complement) positions.push_back(pos);
  return positions;
}

// The rank's queries, its own K/V block and the other rank's, random data from one seed.
struct RingRank {
  int heads, kv_heads, d;
  std::vector<int64_t> q_pos;
  std::vector<std::vector<int64_t>> k_pos;  // [own, other]
  std::vector<float> q, d_o, o, lse, dq;
  std::vector<std::vector<float>> k, v, dk, dv;

  RingRank(const Layout& layout, int64_t seq, int heads_, int kv_heads_, int d_)
      : heads(heads_), kv_heads(kv_heads_), d(d_) {
    q_pos = LayoutPositions(layout.pieces, seq, false);
    k_pos = {q_pos, LayoutPositions(layout.pieces, seq, true)};
    std::mt19937 rng(9);
    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
    auto filled = [&](size_t count) {
      std::vector<float> data(count);
      for (float& x : data) x = value(rng);
      return data;
    };
    const size_t rows = q_pos.size();
    q = filled(rows * heads * d);
    d_o = filled(rows * heads * d);
    o.assign(rows * heads * d, 0.0f);
    lse.assign(rows * heads, 0.0f);
    dq.assign(rows * heads * d, 0.0f);
    for (const std::vector<int64_t>& keys : k_pos) {
      k.push_back(filled(keys.size() * kv_heads * d));
      v.push_back(filled(keys.size() * kv_heads * d));
      dk.emplace_back(keys.size() * kv_heads * d, 0.0f);
      dv.emplace_back(keys.size() * kv_heads * d, 0.0f);
    }
  }
  AttentionInputs Inputs(size_t block) const {
    AttentionInputs in;
    in.head_dim = d;
    in.scale = 1.0f / std::sqrt(static_cast<float>(d));
    in.q_positions = q_pos;
    in.k_positions = k_pos[block];
    const size_t rows = q_pos.size(), keys = k_pos[block].size();
    for (int head = 0; head < heads; ++head) {
      in.q.push_back(q.data() + head * rows * d);
      in.kv_index.push_back(head / (heads / kv_heads));
    }
    for (int kv = 0; kv < kv_heads; ++kv) {
      in.k.push_back(k[block].data() + kv * keys * d);
      in.v.push_back(v[block].data() + kv * keys * d);
    }
    return in;
  }
  double ForwardFlops() const {
    return AttentionForwardFlops(Inputs(0)) + AttentionForwardFlops(Inputs(1));
  }
  // Forward over both blocks (the second accumulated), then backward over both.
  void Run(bool reference) {
    const size_t rows = q_pos.size();
    ForwardOutputs forward;
    BackwardArgs backward;
    for (int head = 0; head < heads; ++head) {
      forward.o.push_back(o.data() + head * rows * d);
      forward.lse.push_back(lse.data() + head * rows);
      backward.o.push_back(o.data() + head * rows * d);
      backward.d_o.push_back(d_o.data() + head * rows * d);
      backward.lse.push_back(lse.data() + head * rows);
      backward.dq.push_back(dq.data() + head * rows * d);
    }
    for (size_t block = 0; block < k_pos.size(); ++block) {
      if (reference) AttentionForwardReference(Inputs(block), forward, block > 0);
      if (!reference) AttentionForward(Inputs(block), forward, block > 0);
    }
    for (size_t block = 0; block < k_pos.size(); ++block) {
      BackwardArgs args = backward;
      const size_t keys = k_pos[block].size();
      for (int kv = 0; kv < kv_heads; ++kv) {
        args.dk.push_back(dk[block].data() + kv * keys * d);
        args.dv.push_back(dv[block].data() + kv * keys * d);
      }
      if (reference) AttentionBackwardReference(Inputs(block), args);
      if (!reference) AttentionBackward(Inputs(block), args);
    }
  }
};

// The blocked kernels against the reference on one layout: O, LSE, dQ and the other block's dK.
double LayoutError(const Layout& layout, int64_t seq, int heads, int kv_heads, int d) {
  RingRank fast(layout, seq, heads, kv_heads, d), ref(layout, seq, heads, kv_heads, d);
  fast.Run(false);
  ref.Run(true);
  return std::max({RelError(fast.o, ref.o), RelError(fast.lse, ref.lse), RelError(fast.dq, ref.dq),
                   RelError(fast.dk[1], ref.dk[1])});
}

int LayoutBench(int argc, char** argv) {
  const int64_t seq = std::atoll(Flag(argc, argv, "--seq", "2048").c_str());
  const int heads = std::atoi(Flag(argc, argv, "--heads", "8").c_str());
  const int kv_heads = std::atoi(Flag(argc, argv, "--kv-heads", "8").c_str());
  const int d = std::atoi(Flag(argc, argv, "--head-dim", "32").c_str());
  const int repeats = std::atoi(Flag(argc, argv, "--repeats", "7").c_str());
  if (seq < 256 || heads < 1 || kv_heads < 1 || heads % kv_heads != 0 || d < 1 || repeats < 1) {
    std::fprintf(stderr,
                 "attention_bench layouts: bad --seq (>= 256)/--heads/--kv-heads/"
                 "--head-dim/--repeats\n");
    return 2;
  }
  // The first is the reference: the middle half, one run, as calibrate's probe sees a shard.
  const std::vector<Layout> layouts = {
      {"middle half (ring's rank 1)", {{0.25, 0.75}}},
      {"front + back quarters (ring's rank 0)", {{0.0, 0.25}, {0.75, 1.0}}},
      {"middle 0.417 (hetero-ring's slow rank)", {{0.2915, 0.7085}}},
      {"front + back, 0.583 (hetero-ring's fast rank)", {{0.0, 0.2915}, {0.7085, 1.0}}},
      {"front 0.157 + back 0.221 (a front/back plan's slow rank)", {{0.0, 0.157}, {0.779, 1.0}}},
      {"middle 0.622 (its fast rank)", {{0.157, 0.779}}},
  };
  SetBlasThreads(1);
  PrintHeader("attention kernels on one rank's token layout in a 2-rank ring (one thread)");
  double worst = 0;
  for (const Layout& layout : layouts)
    worst = std::max(worst, LayoutError(layout, std::min<int64_t>(seq, 1024), heads, kv_heads, d));
  std::printf("# check S=%lld, every layout: max relative error over O, LSE, dQ, dK = %.2e\n",
              static_cast<long long>(std::min<int64_t>(seq, 1024)), worst);
  if (!(worst <= 1e-5)) {
    std::fprintf(stderr, "attention_bench: layout check failed (%.3e > 1e-5)\n", worst);
    return 1;
  }
  std::vector<RingRank> ranks;
  for (const Layout& layout : layouts) ranks.emplace_back(layout, seq, heads, kv_heads, d);
  for (RingRank& rank : ranks) rank.Run(false);  // warm-up: pages and caches
  std::vector<std::vector<double>> seconds(layouts.size()), ratios(layouts.size());
  for (int repeat = 0; repeat < repeats; ++repeat) {
    for (size_t index = 0; index < ranks.size(); ++index) {
      const Clock::time_point start = Clock::now();
      ranks[index].Run(false);
      seconds[index].push_back(Seconds(start));
    }
    const double reference_rate = ranks[0].ForwardFlops() / seconds[0].back();
    for (size_t index = 0; index < ranks.size(); ++index)
      ratios[index].push_back(ranks[index].ForwardFlops() / seconds[index].back() / reference_rate);
  }
  std::printf(
      "# S = %lld, heads %d/%d, d = %d; forward + backward over both blocks; rate = "
      "3.5 x exact causal forward FLOPs / time; medians of %d repeats\n\n",
      static_cast<long long>(seq), heads, kv_heads, d, repeats);
  std::printf(
      "| layout | tokens | seconds | GFLOP/s | rate / middle half's |\n"
      "|---|---|---|---|---|\n");
  for (size_t index = 0; index < ranks.size(); ++index) {
    const double time = Median(seconds[index]);
    std::printf("| %s | %zu | %.4f | %.1f | %.2f |\n", layouts[index].name,
                ranks[index].q_pos.size(), time, 3.5 * ranks[index].ForwardFlops() / time / 1e9,
                Median(ratios[index]));
  }
  return 0;
}

int DistBench(int argc, char** argv) {
  MpiSession session(&argc, &argv);
  SetBlasThreads(1);
  int status = 0;
  {
    std::unique_ptr<Comm> world = MpiWorldComm();
    const int rank = world->rank();
    const std::string plan_path = Flag(argc, argv, "--plan", "");
    const int d = std::atoi(Flag(argc, argv, "--head-dim", "64").c_str());
    const int repeats = std::max(1, std::atoi(Flag(argc, argv, "--repeats", "3").c_str()));
    auto plan = LoadPlan(plan_path);
    if (!plan) {
      std::fprintf(stderr, "attention_bench: %s\n", plan.error().message.c_str());
      return 1;  // every rank reads the same file, so every rank fails alike
    }
    // Exactness of the distributed path on this plan (small head dim keeps the reference fast).
    AttnCheckOptions check;
    check.head_dim = 4;
    auto report = RunAttnCheck(*plan, *world, check);
    if (!report || !report->passed) {
      if (rank == 0) {
        std::fprintf(stderr, "attention_bench: check failed: %s\n",
                     report ? "error above tolerance" : report.error().message.c_str());
      }
      return 1;
    }
    auto attention = DistributedAttention::Create(*plan, *world, d);
    if (!attention) return 1;
    DistributedAttention& att = **attention;
    const AttentionLayout& lay = att.layout();
    const RankRole& role = lay.roles[rank];
    const LayoutGroup& group = lay.groups[role.group];
    const auto mine = std::span<const int64_t>(group.positions)
                          .subspan(group.member_offset[role.member], role.num_tokens);
    auto gen = [&](int tensor, int heads) {
      std::vector<float> data(mine.size() * heads * d);
      size_t index = 0;
      for (int64_t pos : mine) {
        for (int head = 0; head < heads; ++head) {
          for (int dim = 0; dim < d; ++dim) data[index++] = InputValue(5, tensor, pos, head, dim);
        }
      }
      return data;
    };
    const std::vector<float> q = gen(0, lay.num_heads), k = gen(1, lay.num_kv_heads),
                             v = gen(2, lay.num_kv_heads), d_o = gen(3, lay.num_heads);
    constexpr int kFields = 10;
    std::vector<std::vector<double>> samples(kFields);
    for (int repeat = 0; repeat <= repeats; ++repeat) {  // repeat 0 warms up
      world->Barrier();
      if (!att.Forward(q, k, v) || !att.Backward(d_o)) return 1;
      if (repeat == 0) continue;
      const PhaseTimes& f = att.forward_times();
      const PhaseTimes& b = att.backward_times();
      const double values[kFields] = {f.alltoall,        f.compute,        f.ring_wait, f.total,
                                      f.ring_bytes_sent, b.alltoall,       b.compute,   b.ring_wait,
                                      b.total,           b.ring_bytes_sent};
      for (int field = 0; field < kFields; ++field) samples[field].push_back(values[field]);
    }
    double medians[kFields];
    for (int field = 0; field < kFields; ++field) medians[field] = Median(samples[field]);
    std::vector<double> all(kFields * world->size());
    world->Allgather(medians, sizeof medians, all.data());
    if (rank == 0) {
      PrintHeader("distributed attention per-phase breakdown (medians)");
      std::printf("# plan %s: %d ranks, S = %lld, H = %d, G = %d, head_dim = %d, %d repeats\n\n",
                  plan_path.c_str(), plan->num_ranks, static_cast<long long>(plan->seq_len),
                  plan->num_heads, plan->num_kv_heads, d, repeats);
      std::printf(
          "| rank | group | tokens s_r | heads | pass | all-to-all s | compute s | ring wait s "
          "| other s | total s | p2p MB sent |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
      for (int r = 0; r < world->size(); ++r) {
        const double* t = all.data() + kFields * r;
        for (int pass = 0; pass < 2; ++pass) {
          const double* p = t + 5 * pass;
          std::printf("| %d | %d | %lld | %zu | %s | %.4f | %.4f | %.4f | %.4f | %.4f | %.2f |\n",
                      r, lay.roles[r].group, static_cast<long long>(lay.roles[r].num_tokens),
                      lay.roles[r].heads.size(), pass == 0 ? "fwd" : "bwd", p[0], p[1], p[2],
                      std::max(0.0, p[3] - p[0] - p[1] - p[2]), p[3], p[4] / 1e6);
        }
      }
    }
  }
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "kernel") return KernelBench(argc, argv);
  if (mode == "dist") return DistBench(argc, argv);
  if (mode == "layouts") return LayoutBench(argc, argv);
  std::fprintf(stderr,
               "usage: attention_bench kernel [--seq 4096,8192] [--heads 2] [--kv-heads 1] "
               "[--head-dim 64] [--repeats 3]\n"
               "       attention_bench layouts [--seq 2048] [--heads 8] [--kv-heads 8] "
               "[--head-dim 32] [--repeats 7]\n"
               "       mpirun -np N attention_bench dist --plan FILE [--head-dim 64] "
               "[--repeats 3]\n");
  return 2;
}
