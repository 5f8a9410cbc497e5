// Blocked attention kernels against the naive double-precision reference: random shapes, GQA,
// arbitrary (unsorted, gapped) global positions, fully masked rows, empty blocks, and the
// accumulate mode (merging key blocks in any order gives attention over their union).
#include "runtime/attention_kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

namespace hexiseq::runtime {
namespace {

struct Problem {
  int d = 0;
  int q_heads = 0;
  int kv_heads = 0;
  std::vector<int64_t> q_pos, k_pos;
  std::vector<float> q, k, v, d_o;
  AttentionInputs Inputs() const {
    AttentionInputs in;
    in.head_dim = d;
    in.scale = 1.0f / std::sqrt(static_cast<float>(d));
    in.q_positions = q_pos;
    in.k_positions = k_pos;
    const int64_t nq = q_pos.size(), nk = k_pos.size();
    for (int head = 0; head < q_heads; ++head) {
      in.q.push_back(q.data() + head * nq * d);
      in.kv_index.push_back(head / (q_heads / kv_heads));
    }
    for (int kv = 0; kv < kv_heads; ++kv) {
      in.k.push_back(k.data() + kv * nk * d);
      in.v.push_back(v.data() + kv * nk * d);
    }
    return in;
  }
};

Problem MakeProblem(std::mt19937_64& rng, int64_t nq, int64_t nk, int d, int q_heads, int kv_heads,
                    bool shuffle_positions) {
  Problem p;
  p.d = d;
  p.q_heads = q_heads;
  p.kv_heads = kv_heads;
  std::uniform_int_distribution<int64_t> pos(0, 3 * std::max(nq, nk));
  for (int64_t row = 0; row < nq; ++row)
    p.q_pos.push_back(shuffle_positions ? pos(rng) : row + nk / 2);
  for (int64_t row = 0; row < nk; ++row) p.k_pos.push_back(shuffle_positions ? pos(rng) : row);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  auto fill = [&](std::vector<float>& data, int64_t count) {
    data.resize(count);
    for (float& x : data) x = value(rng);
  };
  fill(p.q, nq * d * q_heads);
  fill(p.d_o, nq * d * q_heads);
  fill(p.k, nk * d * kv_heads);
  fill(p.v, nk * d * kv_heads);
  return p;
}

struct Outputs {
  std::vector<float> o, lse, dq, dk, dv;
};

Outputs RunBoth(const Problem& p, bool reference) {
  const AttentionInputs in = p.Inputs();
  const int64_t nq = p.q_pos.size(), nk = p.k_pos.size();
  Outputs out;
  out.o.assign(nq * p.d * p.q_heads, 7.0f);  // garbage: overwritten when accumulate = false
  out.lse.assign(nq * p.q_heads, 7.0f);
  out.dq.assign(nq * p.d * p.q_heads, 0.0f);
  out.dk.assign(nk * p.d * p.kv_heads, 0.0f);
  out.dv.assign(nk * p.d * p.kv_heads, 0.0f);
  ForwardOutputs fo;
  BackwardArgs ba;
  for (int head = 0; head < p.q_heads; ++head) {
    fo.o.push_back(out.o.data() + head * nq * p.d);
    fo.lse.push_back(out.lse.data() + head * nq);
    ba.o.push_back(out.o.data() + head * nq * p.d);
    ba.d_o.push_back(p.d_o.data() + head * nq * p.d);
    ba.lse.push_back(out.lse.data() + head * nq);
    ba.dq.push_back(out.dq.data() + head * nq * p.d);
  }
  for (int kv = 0; kv < p.kv_heads; ++kv) {
    ba.dk.push_back(out.dk.data() + kv * nk * p.d);
    ba.dv.push_back(out.dv.data() + kv * nk * p.d);
  }
  if (reference) {
    AttentionForwardReference(in, fo, false);
    AttentionBackwardReference(in, ba);
  } else {
    AttentionForward(in, fo, false);
    AttentionBackward(in, ba);
  }
  return out;
}

// max |a - b| / max |b|, with -inf == -inf; reports the first worst index.
void ExpectClose(const std::vector<float>& a, const std::vector<float>& b, double tolerance,
                 const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  double max_abs = 0, max_ref = 0;
  size_t worst = 0;
  for (size_t index = 0; index < a.size(); ++index) {
    if (std::isfinite(b[index])) max_ref = std::max(max_ref, std::abs(double{b[index]}));
    const double diff = a[index] == b[index] ? 0.0 : std::abs(double{a[index]} - b[index]);
    if (!(diff <= max_abs)) {
      max_abs = std::isnan(diff) ? INFINITY : diff;
      worst = index;
    }
  }
  const double rel = max_ref > 0 ? max_abs / max_ref : max_abs;
  EXPECT_LE(rel, tolerance) << what << ": max abs " << max_abs << " rel " << rel << " at index "
                            << worst << " (got " << a[worst] << ", want " << b[worst] << ")";
}

void ExpectAllClose(const Outputs& got, const Outputs& want, double tolerance) {
  ExpectClose(got.o, want.o, tolerance, "O");
  ExpectClose(got.lse, want.lse, tolerance, "LSE");
  ExpectClose(got.dq, want.dq, tolerance, "dQ");
  ExpectClose(got.dk, want.dk, tolerance, "dK");
  ExpectClose(got.dv, want.dv, tolerance, "dV");
}

TEST(AttentionKernels, MatchesReferenceOnRandomShapes) {
  std::mt19937_64 rng(11);
  const struct {
    int64_t nq, nk;
    int d, q_heads, kv_heads;
    bool shuffle;
  } cases[] = {{1, 1, 8, 1, 1, false},     {127, 131, 16, 4, 2, false}, {257, 300, 32, 2, 1, false},
               {300, 257, 24, 3, 3, true}, {61, 389, 64, 4, 1, true},   {401, 53, 8, 6, 2, true}};
  for (const auto& c : cases) {
    SCOPED_TRACE(::testing::Message() << "nq=" << c.nq << " nk=" << c.nk << " d=" << c.d);
    const Problem p = MakeProblem(rng, c.nq, c.nk, c.d, c.q_heads, c.kv_heads, c.shuffle);
    ExpectAllClose(RunBoth(p, false), RunBoth(p, true), 2e-6);
  }
}

// A rank's rows are its token pieces in order (a plan's front and back chunks): tiles end where
// a piece ends, once they hold 16 rows. Pieces longer and shorter than a tile and than 16 rows,
// as queries and as keys, against the reference. The key piece at 516 starts a key tile at the
// last position of a query tile (300-516 is split 300-427, 428-516): that pair must be computed.
TEST(AttentionKernels, MatchesReferenceOnTokenPieces) {
  std::mt19937_64 rng(12);
  const std::vector<std::pair<int64_t, int64_t>> query_pieces = {
      {0, 21}, {300, 517}, {900, 905}, {1200, 1460}, {1470, 1480}};
  const std::vector<std::pair<int64_t, int64_t>> key_pieces = {{5, 160}, {516, 533}, {890, 1300}};
  Problem p = MakeProblem(rng, 0, 0, 16, 4, 2, false);
  for (const auto& [begin, end] : query_pieces)
    for (int64_t pos = begin; pos < end; ++pos) p.q_pos.push_back(pos);
  for (const auto& [begin, end] : key_pieces)
    for (int64_t pos = begin; pos < end; ++pos) p.k_pos.push_back(pos);
  const Problem sized =
      MakeProblem(rng, p.q_pos.size(), p.k_pos.size(), p.d, p.q_heads, p.kv_heads, false);
  p.q = sized.q;
  p.k = sized.k;
  p.v = sized.v;
  p.d_o = sized.d_o;
  ExpectAllClose(RunBoth(p, false), RunBoth(p, true), 2e-6);
}

TEST(AttentionKernels, FullyMaskedRowsGiveZeroOutputAndMinusInfLse) {
  std::mt19937_64 rng(3);
  Problem p = MakeProblem(rng, 200, 150, 16, 2, 1, false);
  for (int64_t row = 0; row < 200; ++row) p.q_pos[row] = row;        // queries 0..199
  for (int64_t row = 0; row < 150; ++row) p.k_pos[row] = 100 + row;  // keys 100..249
  const Outputs got = RunBoth(p, false);
  const Outputs want = RunBoth(p, true);
  for (int64_t row = 0; row < 100; ++row) {
    EXPECT_EQ(got.lse[row], -std::numeric_limits<float>::infinity()) << row;
    for (int dim = 0; dim < 16; ++dim) EXPECT_EQ(got.o[row * 16 + dim], 0.0f);
  }
  ExpectAllClose(got, want, 2e-6);
  for (float x : got.dq) ASSERT_FALSE(std::isnan(x));
}

TEST(AttentionKernels, EmptyQueriesOrKeys) {
  std::mt19937_64 rng(5);
  for (auto [nq, nk] : {std::pair<int64_t, int64_t>{0, 10}, {10, 0}, {0, 0}}) {
    const Problem p = MakeProblem(rng, nq, nk, 8, 2, 1, false);
    const Outputs got = RunBoth(p, false);
    ExpectAllClose(got, RunBoth(p, true), 0);
    for (float lse : got.lse) EXPECT_EQ(lse, -std::numeric_limits<float>::infinity());
  }
}

TEST(AttentionKernels, AccumulatingKeyBlocksInAnyOrderEqualsOnePass) {
  std::mt19937_64 rng(9);
  const Problem whole = MakeProblem(rng, 333, 500, 16, 2, 1, true);
  const Outputs want = RunBoth(whole, true);
  // Split keys into 4 uneven blocks, processed in a shuffled order.
  const std::vector<int64_t> cuts = {0, 17, 240, 241, 500};
  std::vector<int> order = {2, 0, 3, 1};
  const int64_t nq = 333, d = 16;
  std::vector<float> o(nq * d * 2, 0.0f), lse(nq * 2, -INFINITY);
  std::vector<float> dq(nq * d * 2, 0.0f), dk(500 * d, 0.0f), dv(500 * d, 0.0f);
  for (bool reference : {false, true}) {
    std::fill(o.begin(), o.end(), 0.0f);
    std::fill(lse.begin(), lse.end(), -INFINITY);
    for (int block : order) {
      AttentionInputs in = whole.Inputs();
      in.k_positions =
          std::span<const int64_t>(whole.k_pos).subspan(cuts[block], cuts[block + 1] - cuts[block]);
      in.k = {whole.k.data() + cuts[block] * d};
      in.v = {whole.v.data() + cuts[block] * d};
      ForwardOutputs fo{{o.data(), o.data() + nq * d}, {lse.data(), lse.data() + nq}};
      if (reference) {
        AttentionForwardReference(in, fo, true);
      } else {
        AttentionForward(in, fo, true);
      }
    }
    ExpectClose(o, want.o, 2e-6, reference ? "O (reference merge)" : "O");
    ExpectClose(lse, want.lse, 2e-6, reference ? "LSE (reference merge)" : "LSE");
  }
  // Backward per block with the final O and LSE adds up to the whole gradient.
  for (int block : order) {
    AttentionInputs in = whole.Inputs();
    const int64_t begin = cuts[block], size = cuts[block + 1] - cuts[block];
    in.k_positions = std::span<const int64_t>(whole.k_pos).subspan(begin, size);
    in.k = {whole.k.data() + begin * d};
    in.v = {whole.v.data() + begin * d};
    BackwardArgs args{{o.data(), o.data() + nq * d}, {whole.d_o.data(), whole.d_o.data() + nq * d},
                      {lse.data(), lse.data() + nq}, {dq.data(), dq.data() + nq * d},
                      {dk.data() + begin * d},       {dv.data() + begin * d}};
    AttentionBackward(in, args);
  }
  ExpectClose(dq, want.dq, 2e-6, "dQ");
  ExpectClose(dk, want.dk, 2e-6, "dK");
  ExpectClose(dv, want.dv, 2e-6, "dV");
}

TEST(AttentionKernels, ForwardFlopsCountCausalPairs) {
  std::vector<int64_t> q_pos = {0, 1, 2, 3}, k_pos = {0, 1, 2, 3};
  AttentionInputs in;
  in.head_dim = 8;
  in.q_positions = q_pos;
  in.k_positions = k_pos;
  in.q = {nullptr, nullptr};
  EXPECT_EQ(AttentionForwardFlops(in), 4.0 * 8 * 2 * 10);  // 10 pairs with k <= q
}

}  // namespace
}  // namespace hexiseq::runtime
