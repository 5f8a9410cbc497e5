// Blocked causal GQA attention (forward and backward) and the naive double-precision references.
// The optimized kernels tile queries x keys, classify each tile by the min/max global positions
// of its rows (skip / fully visible / partially masked), run the tile GEMMs through cblas_sgemm
// and the softmax row math through AVX2+FMA code when the CPU has it (a portable path otherwise).
#include "runtime/attention_kernels.h"

#include <cblas.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "spec/error.h"

extern "C" void openblas_set_num_threads(int num_threads) __attribute__((weak));

namespace hexiseq::runtime {
namespace {

// Tile sizes, chosen by bench/runtime on an AMD EPYC (Zen 3, AVX2) with d = 64 and 128: about
// 256 stacked query rows x 128 keys keeps the score tile (128 KiB) in L2; 128 to 512 rows and
// 64 to 256 keys were within measurement noise of each other.
constexpr int64_t kTileRows = 256;  // stacked query rows (heads x rows) per tile
constexpr int64_t kBlockK = 128;    // key rows per tile
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// ---- Row math: max, exp(x - shift) with sum. -inf (and anything below -87) maps to exactly 0.

float RowMaxPortable(const float* x, int64_t n) {
  float best = kNegInf;
  for (int64_t col = 0; col < n; ++col) best = std::max(best, x[col]);
  return best;
}

float ExpShiftSumPortable(float* x, int64_t n, float shift) {
  float sum = 0;
  for (int64_t col = 0; col < n; ++col) {
    const float value = x[col] - shift;
    x[col] = value < -87.0f ? 0.0f : std::exp(value);
    sum += x[col];
  }
  return sum;
}

__attribute__((target("avx2,fma"))) inline __m256 Exp256(__m256 x) {
  // Cephes expf: exp(x) = 2^n * exp(r), r = x - n ln2, |r| <= ln2 / 2, degree-6 polynomial.
  const __m256 lo = _mm256_set1_ps(-87.0f);
  const __m256 underflow = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_min_ps(_mm256_max_ps(x, lo), _mm256_set1_ps(88.0f));
  const __m256 n = _mm256_floor_ps(
      _mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f)));
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  const __m256 r2 = _mm256_mul_ps(r, r);
  __m256 y = _mm256_fmadd_ps(p, r2, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i exponent =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  y = _mm256_mul_ps(y, _mm256_castsi256_ps(exponent));
  return _mm256_andnot_ps(underflow, y);
}

__attribute__((target("avx2,fma"))) float RowMaxAvx2(const float* x, int64_t n) {
  __m256 best8 = _mm256_set1_ps(kNegInf);
  int64_t col = 0;
  for (; col + 8 <= n; col += 8) best8 = _mm256_max_ps(best8, _mm256_loadu_ps(x + col));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, best8);
  float best = kNegInf;
  for (float lane : lanes) best = std::max(best, lane);
  for (; col < n; ++col) best = std::max(best, x[col]);
  return best;
}

__attribute__((target("avx2,fma"))) float ExpShiftSumAvx2(float* x, int64_t n, float shift) {
  const __m256 shift8 = _mm256_set1_ps(shift);
  __m256 sum8 = _mm256_setzero_ps();
  int64_t col = 0;
  for (; col + 8 <= n; col += 8) {
    const __m256 y = Exp256(_mm256_sub_ps(_mm256_loadu_ps(x + col), shift8));
    _mm256_storeu_ps(x + col, y);
    sum8 = _mm256_add_ps(sum8, y);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, sum8);
  float sum = 0;
  for (float lane : lanes) sum += lane;
  return sum + ExpShiftSumPortable(x + col, n - col, shift);
}

struct RowOps {
  float (*row_max)(const float*, int64_t);
  float (*exp_shift_sum)(float*, int64_t, float);
};

const RowOps& Ops() {
  static const RowOps ops = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
      return RowOps{RowMaxAvx2, ExpShiftSumAvx2};
    }
    return RowOps{RowMaxPortable, ExpShiftSumPortable};
  }();
  return ops;
}

// ---- Tiling by global positions.

struct Block {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t min_pos = 0;
  int64_t max_pos = 0;
  int64_t size() const { return end - begin; }
};

std::vector<Block> Blocks(std::span<const int64_t> positions, int64_t block) {
  std::vector<Block> blocks;
  const int64_t n = static_cast<int64_t>(positions.size());
  for (int64_t begin = 0; begin < n; begin += block) {
    Block b{begin, std::min(n, begin + block), positions[begin], positions[begin]};
    for (int64_t row = b.begin; row < b.end; ++row) {
      b.min_pos = std::min(b.min_pos, positions[row]);
      b.max_pos = std::max(b.max_pos, positions[row]);
    }
    blocks.push_back(b);
  }
  return blocks;
}

enum class TileKind { kSkip, kFull, kPartial };

TileKind Classify(const Block& q, const Block& k) {
  if (k.min_pos > q.max_pos) return TileKind::kSkip;
  if (k.max_pos <= q.min_pos) return TileKind::kFull;
  return TileKind::kPartial;
}

// Sets s[row][col] = -inf where key col is after query row.
void ApplyCausalMask(float* s, int64_t ld, const int64_t* q_pos, int64_t rows, const int64_t* k_pos,
                     int64_t cols) {
  for (int64_t row = 0; row < rows; ++row) {
    float* s_row = s + row * ld;
    for (int64_t col = 0; col < cols; ++col) {
      if (k_pos[col] > q_pos[row]) s_row[col] = kNegInf;
    }
  }
}

void CheckShapes(const AttentionInputs& in) {
  HEXISEQ_CHECK(in.head_dim > 0, "attention head_dim must be positive");
  HEXISEQ_CHECK(in.kv_index.size() == in.q.size(), "one kv_index per query head");
  HEXISEQ_CHECK(in.k.size() == in.v.size(), "as many K as V heads");
  for (int index : in.kv_index) {
    HEXISEQ_CHECK(index >= 0 && index < static_cast<int>(in.k.size()), "kv_index out of range");
  }
}

}  // namespace

void SetBlasThreads(int threads) {
  if (openblas_set_num_threads != nullptr) openblas_set_num_threads(threads);
}

double AttentionForwardFlops(const AttentionInputs& in) {
  std::vector<int64_t> keys(in.k_positions.begin(), in.k_positions.end());
  std::sort(keys.begin(), keys.end());
  double pairs = 0;
  for (int64_t q : in.q_positions) {
    pairs += static_cast<double>(std::upper_bound(keys.begin(), keys.end(), q) - keys.begin());
  }
  return 4.0 * in.head_dim * static_cast<double>(in.q.size()) * pairs;
}

namespace {

// Query heads that share a KV head are stacked as extra rows of one tile (GQA): the tile GEMMs
// get nh times more rows and K/V tiles are read once for all of them. Rows are ordered
// (head, row) inside a tile; tile_rows = heads * rows.
struct KvGroup {
  int kv = 0;
  std::vector<int> heads;  // query-head indices using this KV head
};

std::vector<KvGroup> GroupByKv(const AttentionInputs& in) {
  std::vector<KvGroup> groups;
  for (size_t kv = 0; kv < in.k.size(); ++kv) {
    KvGroup group{static_cast<int>(kv), {}};
    for (size_t head = 0; head < in.q.size(); ++head) {
      if (in.kv_index[head] == static_cast<int>(kv)) group.heads.push_back(static_cast<int>(head));
    }
    if (!group.heads.empty()) groups.push_back(std::move(group));
  }
  return groups;
}

// Query rows per tile for `heads` stacked heads: about kTileRows stacked rows in all.
int64_t QueryBlock(size_t heads) {
  return std::clamp<int64_t>(kTileRows / static_cast<int64_t>(heads), 16, kTileRows);
}

// Causal mask on a stacked tile: stacked row r is query row (r % rows).
void MaskStacked(float* s, int64_t ld, const int64_t* q_pos, int64_t rows, int64_t heads,
                 const int64_t* k_pos, int64_t cols) {
  for (int64_t head = 0; head < heads; ++head) {
    ApplyCausalMask(s + head * rows * ld, ld, q_pos, rows, k_pos, cols);
  }
}

}  // namespace

void AttentionForward(const AttentionInputs& in, const ForwardOutputs& out, bool accumulate) {
  CheckShapes(in);
  HEXISEQ_CHECK(out.o.size() == in.q.size() && out.lse.size() == in.q.size(),
                "one output per query head");
  const RowOps& ops = Ops();
  const int64_t d = in.head_dim;
  const std::vector<Block> k_blocks = Blocks(in.k_positions, kBlockK);
  for (const KvGroup& group : GroupByKv(in)) {
    const int64_t nh = static_cast<int64_t>(group.heads.size());
    const int64_t block_q = QueryBlock(group.heads.size());
    const std::vector<Block> q_blocks = Blocks(in.q_positions, block_q);
    const float* k = in.k[group.kv];
    const float* v = in.v[group.kv];
    std::vector<float> q_tile(nh * block_q * d);
    std::vector<float> s(nh * block_q * kBlockK);
    std::vector<float> acc(nh * block_q * d);
    std::vector<float> m(nh * block_q);
    std::vector<float> l(nh * block_q);
    for (const Block& qb : q_blocks) {
      const int64_t rows = qb.size();
      const int64_t tile_rows = nh * rows;
      // Pack Q and set the running state (m, l, acc), with o = acc / l and lse = m + log(l).
      for (int64_t hi = 0; hi < nh; ++hi) {
        const int head = group.heads[hi];
        std::copy_n(in.q[head] + qb.begin * d, rows * d, q_tile.data() + hi * rows * d);
        for (int64_t row = 0; row < rows; ++row) {
          const int64_t global_row = qb.begin + row;
          const int64_t t = hi * rows + row;
          float* acc_row = acc.data() + t * d;
          const float lse = out.lse[head][global_row];
          if (accumulate && lse != kNegInf) {
            m[t] = lse;
            l[t] = 1.0f;
            std::copy_n(out.o[head] + global_row * d, d, acc_row);
          } else {
            m[t] = kNegInf;
            l[t] = 0.0f;
            std::fill_n(acc_row, d, 0.0f);
          }
        }
      }
      for (const Block& kb : k_blocks) {
        const TileKind kind = Classify(qb, kb);
        if (kind == TileKind::kSkip) continue;
        const int64_t cols = kb.size();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, tile_rows, cols, d, in.scale,
                    q_tile.data(), d, k + kb.begin * d, d, 0.0f, s.data(), kBlockK);
        if (kind == TileKind::kPartial) {
          MaskStacked(s.data(), kBlockK, in.q_positions.data() + qb.begin, rows, nh,
                      in.k_positions.data() + kb.begin, cols);
        }
        for (int64_t t = 0; t < tile_rows; ++t) {
          float* s_row = s.data() + t * kBlockK;
          const float m_new = std::max(m[t], ops.row_max(s_row, cols));
          if (m_new == kNegInf) {  // no visible key yet: the row contributes nothing
            std::fill_n(s_row, cols, 0.0f);
            continue;
          }
          const float sum = ops.exp_shift_sum(s_row, cols, m_new);
          const float alpha = m[t] == kNegInf ? 0.0f : std::exp(m[t] - m_new);
          if (alpha != 1.0f) {
            float* acc_row = acc.data() + t * d;
            for (int64_t col = 0; col < d; ++col) acc_row[col] *= alpha;
          }
          l[t] = l[t] * alpha + sum;
          m[t] = m_new;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, tile_rows, d, cols, 1.0f, s.data(),
                    kBlockK, v + kb.begin * d, d, 1.0f, acc.data(), d);
      }
      for (int64_t hi = 0; hi < nh; ++hi) {
        const int head = group.heads[hi];
        for (int64_t row = 0; row < rows; ++row) {
          const int64_t global_row = qb.begin + row;
          const int64_t t = hi * rows + row;
          float* o_row = out.o[head] + global_row * d;
          const float* acc_row = acc.data() + t * d;
          if (l[t] > 0.0f) {
            const float inv = 1.0f / l[t];
            for (int64_t col = 0; col < d; ++col) o_row[col] = acc_row[col] * inv;
            out.lse[head][global_row] = m[t] + std::log(l[t]);
          } else {
            std::fill_n(o_row, d, 0.0f);
            out.lse[head][global_row] = kNegInf;
          }
        }
      }
    }
  }
}

void AttentionBackward(const AttentionInputs& in, const BackwardArgs& args) {
  CheckShapes(in);
  HEXISEQ_CHECK(args.o.size() == in.q.size() && args.d_o.size() == in.q.size() &&
                    args.lse.size() == in.q.size() && args.dq.size() == in.q.size(),
                "one o, d_o, lse and dq per query head");
  HEXISEQ_CHECK(args.dk.size() == in.k.size() && args.dv.size() == in.k.size(),
                "one dk and dv per KV head");
  const RowOps& ops = Ops();
  const int64_t d = in.head_dim;
  const std::vector<Block> k_blocks = Blocks(in.k_positions, kBlockK);
  for (const KvGroup& group : GroupByKv(in)) {
    const int64_t nh = static_cast<int64_t>(group.heads.size());
    const int64_t block_q = QueryBlock(group.heads.size());
    const std::vector<Block> q_blocks = Blocks(in.q_positions, block_q);
    const float* k = in.k[group.kv];
    const float* v = in.v[group.kv];
    float* dk = args.dk[group.kv];
    float* dv = args.dv[group.kv];
    std::vector<float> q_tile(nh * block_q * d), do_tile(nh * block_q * d),
        dq_tile(nh * block_q * d);
    std::vector<float> p(nh * block_q * kBlockK), dp(nh * block_q * kBlockK);
    std::vector<float> delta(nh * block_q), lse(nh * block_q);
    for (const Block& qb : q_blocks) {
      const int64_t rows = qb.size();
      const int64_t tile_rows = nh * rows;
      for (int64_t hi = 0; hi < nh; ++hi) {
        const int head = group.heads[hi];
        std::copy_n(in.q[head] + qb.begin * d, rows * d, q_tile.data() + hi * rows * d);
        std::copy_n(args.d_o[head] + qb.begin * d, rows * d, do_tile.data() + hi * rows * d);
        std::copy_n(args.lse[head] + qb.begin, rows, lse.data() + hi * rows);
        for (int64_t row = 0; row < rows; ++row) {
          const float* o_row = args.o[head] + (qb.begin + row) * d;
          const float* do_row = args.d_o[head] + (qb.begin + row) * d;
          float dot = 0;
          for (int64_t col = 0; col < d; ++col) dot += o_row[col] * do_row[col];
          delta[hi * rows + row] = dot;
        }
      }
      std::fill_n(dq_tile.begin(), tile_rows * d, 0.0f);
      bool touched = false;
      for (const Block& kb : k_blocks) {
        const TileKind kind = Classify(qb, kb);
        if (kind == TileKind::kSkip) continue;
        touched = true;
        const int64_t cols = kb.size();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, tile_rows, cols, d, in.scale,
                    q_tile.data(), d, k + kb.begin * d, d, 0.0f, p.data(), kBlockK);
        if (kind == TileKind::kPartial) {
          MaskStacked(p.data(), kBlockK, in.q_positions.data() + qb.begin, rows, nh,
                      in.k_positions.data() + kb.begin, cols);
        }
        for (int64_t t = 0; t < tile_rows; ++t) {
          float* p_row = p.data() + t * kBlockK;
          if (lse[t] == kNegInf) {
            std::fill_n(p_row, cols, 0.0f);
          } else {
            ops.exp_shift_sum(p_row, cols, lse[t]);
          }
        }
        // dV += P^T dO (summed over the stacked heads by the GEMM's inner dimension)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, d, tile_rows, 1.0f, p.data(),
                    kBlockK, do_tile.data(), d, 1.0f, dv + kb.begin * d, d);
        // dP = dO V^T
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, tile_rows, cols, d, 1.0f,
                    do_tile.data(), d, v + kb.begin * d, d, 0.0f, dp.data(), kBlockK);
        // dS = scale * P * (dP - delta), stored over dp.
        for (int64_t t = 0; t < tile_rows; ++t) {
          const float* p_row = p.data() + t * kBlockK;
          float* ds_row = dp.data() + t * kBlockK;
          const float row_delta = delta[t];
          for (int64_t col = 0; col < cols; ++col) {
            ds_row[col] = in.scale * p_row[col] * (ds_row[col] - row_delta);
          }
        }
        // dQ += dS K ; dK += dS^T Q
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, tile_rows, d, cols, 1.0f, dp.data(),
                    kBlockK, k + kb.begin * d, d, 1.0f, dq_tile.data(), d);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, d, tile_rows, 1.0f, dp.data(),
                    kBlockK, q_tile.data(), d, 1.0f, dk + kb.begin * d, d);
      }
      if (!touched) continue;
      for (int64_t hi = 0; hi < nh; ++hi) {
        float* dq = args.dq[group.heads[hi]] + qb.begin * d;
        const float* from = dq_tile.data() + hi * rows * d;
        for (int64_t index = 0; index < rows * d; ++index) dq[index] += from[index];
      }
    }
  }
}

// ---- Naive references: O(num_q * num_k) per head, every product and sum in double.

void AttentionForwardReference(const AttentionInputs& in, const ForwardOutputs& out,
                               bool accumulate) {
  CheckShapes(in);
  const int64_t d = in.head_dim;
  const int64_t nq = in.num_q();
  const int64_t nk = in.num_k();
  std::vector<double> scores(nk);
  std::vector<double> acc(d);
  for (size_t head = 0; head < in.q.size(); ++head) {
    const float* q = in.q[head];
    const float* k = in.k[in.kv_index[head]];
    const float* v = in.v[in.kv_index[head]];
    for (int64_t row = 0; row < nq; ++row) {
      double best = -std::numeric_limits<double>::infinity();
      for (int64_t col = 0; col < nk; ++col) {
        if (in.k_positions[col] > in.q_positions[row]) continue;
        double dot = 0;
        for (int64_t dim = 0; dim < d; ++dim) {
          dot += static_cast<double>(q[row * d + dim]) * k[col * d + dim];
        }
        scores[col] = dot * in.scale;
        best = std::max(best, scores[col]);
      }
      double sum = 0;
      std::fill(acc.begin(), acc.end(), 0.0);
      if (best != -std::numeric_limits<double>::infinity()) {
        for (int64_t col = 0; col < nk; ++col) {
          if (in.k_positions[col] > in.q_positions[row]) continue;
          const double weight = std::exp(scores[col] - best);
          sum += weight;
          for (int64_t dim = 0; dim < d; ++dim) acc[dim] += weight * v[col * d + dim];
        }
      }
      // This block's result: o_b = acc / sum, lse_b = best + log(sum) (-inf when empty).
      double lse_b = sum > 0 ? best + std::log(sum) : -std::numeric_limits<double>::infinity();
      float* o_row = out.o[head] + row * d;
      float& lse_row = out.lse[head][row];
      double lse_prev =
          accumulate ? static_cast<double>(lse_row) : -std::numeric_limits<double>::infinity();
      const double lse_new = std::max(lse_prev, lse_b) == -std::numeric_limits<double>::infinity()
                                 ? -std::numeric_limits<double>::infinity()
                                 : std::max(lse_prev, lse_b) +
                                       std::log(std::exp(lse_prev - std::max(lse_prev, lse_b)) +
                                                std::exp(lse_b - std::max(lse_prev, lse_b)));
      for (int64_t dim = 0; dim < d; ++dim) {
        double value = 0;
        if (lse_new != -std::numeric_limits<double>::infinity()) {
          if (sum > 0) value += acc[dim] / sum * std::exp(lse_b - lse_new);
          if (lse_prev != -std::numeric_limits<double>::infinity()) {
            value += static_cast<double>(o_row[dim]) * std::exp(lse_prev - lse_new);
          }
        }
        o_row[dim] = static_cast<float>(value);
      }
      lse_row = static_cast<float>(lse_new);
    }
  }
}

void AttentionBackwardReference(const AttentionInputs& in, const BackwardArgs& args) {
  CheckShapes(in);
  const int64_t d = in.head_dim;
  const int64_t nq = in.num_q();
  const int64_t nk = in.num_k();
  std::vector<std::vector<double>> dk(in.k.size(), std::vector<double>(nk * d));
  std::vector<std::vector<double>> dv(in.k.size(), std::vector<double>(nk * d));
  std::vector<double> dq_row(d);
  for (size_t head = 0; head < in.q.size(); ++head) {
    const int kv = in.kv_index[head];
    const float* q = in.q[head];
    const float* k = in.k[kv];
    const float* v = in.v[kv];
    for (int64_t row = 0; row < nq; ++row) {
      const double lse = args.lse[head][row];
      if (lse == -std::numeric_limits<double>::infinity()) continue;
      const float* o_row = args.o[head] + row * d;
      const float* do_row = args.d_o[head] + row * d;
      const float* q_row = q + row * d;
      double delta = 0;
      for (int64_t dim = 0; dim < d; ++dim) delta += static_cast<double>(o_row[dim]) * do_row[dim];
      std::fill(dq_row.begin(), dq_row.end(), 0.0);
      for (int64_t col = 0; col < nk; ++col) {
        if (in.k_positions[col] > in.q_positions[row]) continue;
        const float* k_row = k + col * d;
        const float* v_row = v + col * d;
        double score = 0;
        double dp = 0;
        for (int64_t dim = 0; dim < d; ++dim) {
          score += static_cast<double>(q_row[dim]) * k_row[dim];
          dp += static_cast<double>(do_row[dim]) * v_row[dim];
        }
        const double prob = std::exp(score * in.scale - lse);
        const double ds = prob * (dp - delta) * in.scale;
        for (int64_t dim = 0; dim < d; ++dim) {
          dv[kv][col * d + dim] += prob * do_row[dim];
          dk[kv][col * d + dim] += ds * q_row[dim];
          dq_row[dim] += ds * k_row[dim];
        }
      }
      float* dq = args.dq[head] + row * d;
      for (int64_t dim = 0; dim < d; ++dim) dq[dim] += static_cast<float>(dq_row[dim]);
    }
  }
  for (size_t kv = 0; kv < in.k.size(); ++kv) {
    for (int64_t index = 0; index < nk * d; ++index) {
      args.dk[kv][index] += static_cast<float>(dk[kv][index]);
      args.dv[kv][index] += static_cast<float>(dv[kv][index]);
    }
  }
}

}  // namespace hexiseq::runtime
