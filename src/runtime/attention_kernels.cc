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

constexpr int64_t kBlockQ = 128;  // query rows per tile
constexpr int64_t kBlockK = 128;  // key rows per tile
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
void ApplyCausalMask(float* s, int64_t ld, const int64_t* q_pos, int64_t rows,
                     const int64_t* k_pos, int64_t cols) {
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

void AttentionForward(const AttentionInputs& in, const ForwardOutputs& out, bool accumulate) {
  CheckShapes(in);
  HEXISEQ_CHECK(out.o.size() == in.q.size() && out.lse.size() == in.q.size(),
                "one output per query head");
  const RowOps& ops = Ops();
  const int64_t d = in.head_dim;
  const std::vector<Block> q_blocks = Blocks(in.q_positions, kBlockQ);
  const std::vector<Block> k_blocks = Blocks(in.k_positions, kBlockK);
  std::vector<float> s(kBlockQ * kBlockK);
  std::vector<float> acc(kBlockQ * d);
  std::vector<float> m(kBlockQ);
  std::vector<float> l(kBlockQ);

  for (size_t head = 0; head < in.q.size(); ++head) {
    const float* q = in.q[head];
    const float* k = in.k[in.kv_index[head]];
    const float* v = in.v[in.kv_index[head]];
    float* o = out.o[head];
    float* lse = out.lse[head];
    for (const Block& qb : q_blocks) {
      const int64_t rows = qb.size();
      // Running state (m, l, acc) with o = acc / l and lse = m + log(l).
      for (int64_t row = 0; row < rows; ++row) {
        const int64_t global_row = qb.begin + row;
        float* acc_row = acc.data() + row * d;
        if (accumulate && lse[global_row] != kNegInf) {
          m[row] = lse[global_row];
          l[row] = 1.0f;
          std::copy_n(o + global_row * d, d, acc_row);
        } else {
          m[row] = kNegInf;
          l[row] = 0.0f;
          std::fill_n(acc_row, d, 0.0f);
        }
      }
      for (const Block& kb : k_blocks) {
        const TileKind kind = Classify(qb, kb);
        if (kind == TileKind::kSkip) continue;
        const int64_t cols = kb.size();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, d, in.scale,
                    q + qb.begin * d, d, k + kb.begin * d, d, 0.0f, s.data(), kBlockK);
        if (kind == TileKind::kPartial) {
          ApplyCausalMask(s.data(), kBlockK, in.q_positions.data() + qb.begin, rows,
                          in.k_positions.data() + kb.begin, cols);
        }
        for (int64_t row = 0; row < rows; ++row) {
          float* s_row = s.data() + row * kBlockK;
          const float m_new = std::max(m[row], ops.row_max(s_row, cols));
          if (m_new == kNegInf) {  // no visible key yet: the row contributes nothing
            std::fill_n(s_row, cols, 0.0f);
            continue;
          }
          const float sum = ops.exp_shift_sum(s_row, cols, m_new);
          const float alpha = m[row] == kNegInf ? 0.0f : std::exp(m[row] - m_new);
          if (alpha != 1.0f) {
            float* acc_row = acc.data() + row * d;
            for (int64_t col = 0; col < d; ++col) acc_row[col] *= alpha;
          }
          l[row] = l[row] * alpha + sum;
          m[row] = m_new;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, d, cols, 1.0f, s.data(),
                    kBlockK, v + kb.begin * d, d, 1.0f, acc.data(), d);
      }
      for (int64_t row = 0; row < rows; ++row) {
        const int64_t global_row = qb.begin + row;
        float* o_row = o + global_row * d;
        const float* acc_row = acc.data() + row * d;
        if (l[row] > 0.0f) {
          const float inv = 1.0f / l[row];
          for (int64_t col = 0; col < d; ++col) o_row[col] = acc_row[col] * inv;
          lse[global_row] = m[row] + std::log(l[row]);
        } else {
          std::fill_n(o_row, d, 0.0f);
          lse[global_row] = kNegInf;
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
  const std::vector<Block> q_blocks = Blocks(in.q_positions, kBlockQ);
  const std::vector<Block> k_blocks = Blocks(in.k_positions, kBlockK);
  std::vector<float> p(kBlockQ * kBlockK);
  std::vector<float> dp(kBlockQ * kBlockK);
  std::vector<float> delta(kBlockQ);

  for (size_t head = 0; head < in.q.size(); ++head) {
    const int kv = in.kv_index[head];
    const float* q = in.q[head];
    const float* k = in.k[kv];
    const float* v = in.v[kv];
    const float* o = args.o[head];
    const float* d_o = args.d_o[head];
    const float* lse = args.lse[head];
    float* dq = args.dq[head];
    float* dk = args.dk[kv];
    float* dv = args.dv[kv];
    for (const Block& qb : q_blocks) {
      const int64_t rows = qb.size();
      for (int64_t row = 0; row < rows; ++row) {
        const float* o_row = o + (qb.begin + row) * d;
        const float* do_row = d_o + (qb.begin + row) * d;
        float dot = 0;
        for (int64_t col = 0; col < d; ++col) dot += o_row[col] * do_row[col];
        delta[row] = dot;
      }
      const float* q_tile = q + qb.begin * d;
      const float* do_tile = d_o + qb.begin * d;
      for (const Block& kb : k_blocks) {
        const TileKind kind = Classify(qb, kb);
        if (kind == TileKind::kSkip) continue;
        const int64_t cols = kb.size();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, d, in.scale, q_tile, d,
                    k + kb.begin * d, d, 0.0f, p.data(), kBlockK);
        if (kind == TileKind::kPartial) {
          ApplyCausalMask(p.data(), kBlockK, in.q_positions.data() + qb.begin, rows,
                          in.k_positions.data() + kb.begin, cols);
        }
        for (int64_t row = 0; row < rows; ++row) {
          float* p_row = p.data() + row * kBlockK;
          const float row_lse = lse[qb.begin + row];
          if (row_lse == kNegInf) {
            std::fill_n(p_row, cols, 0.0f);
          } else {
            ops.exp_shift_sum(p_row, cols, row_lse);
          }
        }
        // dV += P^T dO
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, d, rows, 1.0f, p.data(),
                    kBlockK, do_tile, d, 1.0f, dv + kb.begin * d, d);
        // dP = dO V^T
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, d, 1.0f, do_tile, d,
                    v + kb.begin * d, d, 0.0f, dp.data(), kBlockK);
        // dS = scale * P * (dP - delta), stored over dp.
        for (int64_t row = 0; row < rows; ++row) {
          const float* p_row = p.data() + row * kBlockK;
          float* ds_row = dp.data() + row * kBlockK;
          const float row_delta = delta[row];
          for (int64_t col = 0; col < cols; ++col) {
            ds_row[col] = in.scale * p_row[col] * (ds_row[col] - row_delta);
          }
        }
        // dQ += dS K ; dK += dS^T Q
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, d, cols, 1.0f, dp.data(),
                    kBlockK, k + kb.begin * d, d, 1.0f, dq + qb.begin * d, d);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, d, rows, 1.0f, dp.data(),
                    kBlockK, q_tile, d, 1.0f, dk + kb.begin * d, d);
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
      double lse_prev = accumulate ? static_cast<double>(lse_row)
                                   : -std::numeric_limits<double>::infinity();
      const double lse_new =
          std::max(lse_prev, lse_b) == -std::numeric_limits<double>::infinity()
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
