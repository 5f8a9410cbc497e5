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
#include "spec/model.h"

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

// Consecutive rows of at most `block` rows. A block also ends before a row whose position does
// not follow the previous row's, once it holds kMinRunRows rows: rows carry a rank's token pieces
// in order, and a tile spanning two pieces (say 0-320 and 1596-2047) would be classified by its
// extreme positions, so every row of it would be computed against the keys only its later rows
// see. The minimum keeps tiles of scattered positions from shrinking to single rows.
constexpr int64_t kMinRunRows = 16;

std::vector<Block> Blocks(std::span<const int64_t> positions, int64_t block) {
  std::vector<Block> blocks;
  const int64_t n = static_cast<int64_t>(positions.size());
  int64_t begin = 0;
  while (begin < n) {
    Block b{begin, begin + 1, positions[begin], positions[begin]};
    for (; b.end < n && b.size() < block; ++b.end) {
      const bool follows = positions[b.end] == positions[b.end - 1] + 1;
      if (!follows && b.size() >= kMinRunRows) break;
      b.min_pos = std::min(b.min_pos, positions[b.end]);
      b.max_pos = std::max(b.max_pos, positions[b.end]);
    }
    blocks.push_back(b);
    begin = b.end;
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
  return hexiseq::AttentionForwardFlops(in.head_dim, static_cast<double>(in.q.size()), pairs);
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

// Scratch of one KV group's forward: the stacked query tile, the score tile and the running
// online-softmax state per stacked row (max, sum, unnormalized output).
struct ForwardTile {
  ForwardTile(int64_t stacked_heads, int64_t block_rows, int64_t head_dim)
      : queries(stacked_heads * block_rows * head_dim),
        scores(stacked_heads * block_rows * kBlockK),
        acc(stacked_heads * block_rows * head_dim),
        running_max(stacked_heads * block_rows),
        running_sum(stacked_heads * block_rows) {}
  std::vector<float> queries, scores, acc, running_max, running_sum;
};

// Packs Q of the query block and sets the running state from (o, lse) when accumulating, so that
// o = acc / sum and lse = max + log(sum) on entry.
void LoadForwardState(const AttentionInputs& in, const ForwardOutputs& out, bool accumulate,
                      const KvGroup& group, const Block& query_block, ForwardTile& tile) {
  const int64_t head_dim = in.head_dim;
  const int64_t rows = query_block.size();
  for (size_t stacked = 0; stacked < group.heads.size(); ++stacked) {
    const int head = group.heads[stacked];
    std::copy_n(in.q[head] + query_block.begin * head_dim, rows * head_dim,
                tile.queries.data() + stacked * rows * head_dim);
    for (int64_t row = 0; row < rows; ++row) {
      const int64_t global_row = query_block.begin + row;
      const int64_t tile_row = stacked * rows + row;
      float* acc_row = tile.acc.data() + tile_row * head_dim;
      const float lse = out.lse[head][global_row];
      if (accumulate && lse != kNegInf) {
        tile.running_max[tile_row] = lse;
        tile.running_sum[tile_row] = 1.0f;
        std::copy_n(out.o[head] + global_row * head_dim, head_dim, acc_row);
      } else {
        tile.running_max[tile_row] = kNegInf;
        tile.running_sum[tile_row] = 0.0f;
        std::fill_n(acc_row, head_dim, 0.0f);
      }
    }
  }
}

// Merges one key tile into the running state: S = scale Q K^T (masked), online softmax, acc += P V.
void ForwardKeyTile(const AttentionInputs& in, const KvGroup& group, const Block& query_block,
                    const Block& key_block, TileKind kind, ForwardTile& tile) {
  const RowOps& ops = Ops();
  const int64_t head_dim = in.head_dim;
  const int64_t stacked_heads = static_cast<int64_t>(group.heads.size());
  const int64_t rows = query_block.size();
  const int64_t tile_rows = stacked_heads * rows;
  const int64_t cols = key_block.size();
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, tile_rows, cols, head_dim, in.scale,
              tile.queries.data(), head_dim, in.k[group.kv] + key_block.begin * head_dim, head_dim,
              0.0f, tile.scores.data(), kBlockK);
  if (kind == TileKind::kPartial) {
    MaskStacked(tile.scores.data(), kBlockK, in.q_positions.data() + query_block.begin, rows,
                stacked_heads, in.k_positions.data() + key_block.begin, cols);
  }
  for (int64_t tile_row = 0; tile_row < tile_rows; ++tile_row) {
    float* score_row = tile.scores.data() + tile_row * kBlockK;
    float& running_max = tile.running_max[tile_row];
    const float new_max = std::max(running_max, ops.row_max(score_row, cols));
    if (new_max == kNegInf) {  // no visible key yet: the row contributes nothing
      std::fill_n(score_row, cols, 0.0f);
      continue;
    }
    const float sum = ops.exp_shift_sum(score_row, cols, new_max);
    const float rescale = running_max == kNegInf ? 0.0f : std::exp(running_max - new_max);
    if (rescale != 1.0f) {
      float* acc_row = tile.acc.data() + tile_row * head_dim;
      for (int64_t col = 0; col < head_dim; ++col) acc_row[col] *= rescale;
    }
    tile.running_sum[tile_row] = tile.running_sum[tile_row] * rescale + sum;
    running_max = new_max;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, tile_rows, head_dim, cols, 1.0f,
              tile.scores.data(), kBlockK, in.v[group.kv] + key_block.begin * head_dim, head_dim,
              1.0f, tile.acc.data(), head_dim);
}

// Writes o = acc / sum and lse = max + log(sum); rows that saw no key get o = 0, lse = -inf.
void StoreForwardOutputs(const AttentionInputs& in, const ForwardOutputs& out, const KvGroup& group,
                         const Block& query_block, const ForwardTile& tile) {
  const int64_t head_dim = in.head_dim;
  const int64_t rows = query_block.size();
  for (size_t stacked = 0; stacked < group.heads.size(); ++stacked) {
    const int head = group.heads[stacked];
    for (int64_t row = 0; row < rows; ++row) {
      const int64_t global_row = query_block.begin + row;
      const int64_t tile_row = stacked * rows + row;
      float* o_row = out.o[head] + global_row * head_dim;
      const float* acc_row = tile.acc.data() + tile_row * head_dim;
      const float sum = tile.running_sum[tile_row];
      if (sum > 0.0f) {
        const float inverse = 1.0f / sum;
        for (int64_t col = 0; col < head_dim; ++col) o_row[col] = acc_row[col] * inverse;
        out.lse[head][global_row] = tile.running_max[tile_row] + std::log(sum);
      } else {
        std::fill_n(o_row, head_dim, 0.0f);
        out.lse[head][global_row] = kNegInf;
      }
    }
  }
}

// Scratch of one KV group's backward: stacked Q, dO and dQ tiles, probabilities P and their
// gradient dP (reused for dS), and per stacked row LSE and delta = rowsum(dO * O).
struct BackwardTile {
  BackwardTile(int64_t stacked_heads, int64_t block_rows, int64_t head_dim)
      : queries(stacked_heads * block_rows * head_dim),
        grad_outputs(stacked_heads * block_rows * head_dim),
        grad_queries(stacked_heads * block_rows * head_dim),
        probs(stacked_heads * block_rows * kBlockK),
        grad_probs(stacked_heads * block_rows * kBlockK),
        delta(stacked_heads * block_rows),
        lse(stacked_heads * block_rows) {}
  std::vector<float> queries, grad_outputs, grad_queries, probs, grad_probs, delta, lse;
};

// Packs Q, dO and LSE of the query block, computes delta, clears the dQ tile.
void LoadBackwardTile(const AttentionInputs& in, const BackwardArgs& args, const KvGroup& group,
                      const Block& query_block, BackwardTile& tile) {
  const int64_t head_dim = in.head_dim;
  const int64_t rows = query_block.size();
  for (size_t stacked = 0; stacked < group.heads.size(); ++stacked) {
    const int head = group.heads[stacked];
    const int64_t tile_offset = stacked * rows * head_dim;
    std::copy_n(in.q[head] + query_block.begin * head_dim, rows * head_dim,
                tile.queries.data() + tile_offset);
    std::copy_n(args.d_o[head] + query_block.begin * head_dim, rows * head_dim,
                tile.grad_outputs.data() + tile_offset);
    std::copy_n(args.lse[head] + query_block.begin, rows, tile.lse.data() + stacked * rows);
    for (int64_t row = 0; row < rows; ++row) {
      const float* o_row = args.o[head] + (query_block.begin + row) * head_dim;
      const float* do_row = args.d_o[head] + (query_block.begin + row) * head_dim;
      float dot = 0;
      for (int64_t col = 0; col < head_dim; ++col) dot += o_row[col] * do_row[col];
      tile.delta[stacked * rows + row] = dot;
    }
  }
  std::fill_n(tile.grad_queries.begin(), group.heads.size() * rows * head_dim, 0.0f);
}

// One key tile of the backward: P = exp(S - LSE), dV += P^T dO, dP = dO V^T,
// dS = scale P (dP - delta), dQ += dS K, dK += dS^T Q.
void BackwardKeyTile(const AttentionInputs& in, const BackwardArgs& args, const KvGroup& group,
                     const Block& query_block, const Block& key_block, TileKind kind,
                     BackwardTile& tile) {
  const RowOps& ops = Ops();
  const int64_t head_dim = in.head_dim;
  const int64_t stacked_heads = static_cast<int64_t>(group.heads.size());
  const int64_t rows = query_block.size();
  const int64_t tile_rows = stacked_heads * rows;
  const int64_t cols = key_block.size();
  const int64_t key_offset = key_block.begin * head_dim;
  const float* keys = in.k[group.kv] + key_offset;
  const float* values = in.v[group.kv] + key_offset;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, tile_rows, cols, head_dim, in.scale,
              tile.queries.data(), head_dim, keys, head_dim, 0.0f, tile.probs.data(), kBlockK);
  if (kind == TileKind::kPartial) {
    MaskStacked(tile.probs.data(), kBlockK, in.q_positions.data() + query_block.begin, rows,
                stacked_heads, in.k_positions.data() + key_block.begin, cols);
  }
  for (int64_t tile_row = 0; tile_row < tile_rows; ++tile_row) {
    float* prob_row = tile.probs.data() + tile_row * kBlockK;
    if (tile.lse[tile_row] == kNegInf) {
      std::fill_n(prob_row, cols, 0.0f);
    } else {
      ops.exp_shift_sum(prob_row, cols, tile.lse[tile_row]);
    }
  }
  // dV += P^T dO (summed over the stacked heads by the GEMM's inner dimension)
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, head_dim, tile_rows, 1.0f,
              tile.probs.data(), kBlockK, tile.grad_outputs.data(), head_dim, 1.0f,
              args.dv[group.kv] + key_offset, head_dim);
  // dP = dO V^T
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, tile_rows, cols, head_dim, 1.0f,
              tile.grad_outputs.data(), head_dim, values, head_dim, 0.0f, tile.grad_probs.data(),
              kBlockK);
  // dS = scale * P * (dP - delta), stored over dP.
  for (int64_t tile_row = 0; tile_row < tile_rows; ++tile_row) {
    const float* prob_row = tile.probs.data() + tile_row * kBlockK;
    float* grad_score_row = tile.grad_probs.data() + tile_row * kBlockK;
    const float row_delta = tile.delta[tile_row];
    for (int64_t col = 0; col < cols; ++col) {
      grad_score_row[col] = in.scale * prob_row[col] * (grad_score_row[col] - row_delta);
    }
  }
  // dQ += dS K ; dK += dS^T Q
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, tile_rows, head_dim, cols, 1.0f,
              tile.grad_probs.data(), kBlockK, keys, head_dim, 1.0f, tile.grad_queries.data(),
              head_dim);
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, head_dim, tile_rows, 1.0f,
              tile.grad_probs.data(), kBlockK, tile.queries.data(), head_dim, 1.0f,
              args.dk[group.kv] + key_offset, head_dim);
}

}  // namespace

void AttentionForward(const AttentionInputs& in, const ForwardOutputs& out, bool accumulate) {
  CheckShapes(in);
  HEXISEQ_CHECK(out.o.size() == in.q.size() && out.lse.size() == in.q.size(),
                "one output per query head");
  const std::vector<Block> key_blocks = Blocks(in.k_positions, kBlockK);
  for (const KvGroup& group : GroupByKv(in)) {
    const int64_t block_rows = QueryBlock(group.heads.size());
    ForwardTile tile(static_cast<int64_t>(group.heads.size()), block_rows, in.head_dim);
    for (const Block& query_block : Blocks(in.q_positions, block_rows)) {
      LoadForwardState(in, out, accumulate, group, query_block, tile);
      for (const Block& key_block : key_blocks) {
        const TileKind kind = Classify(query_block, key_block);
        if (kind != TileKind::kSkip) ForwardKeyTile(in, group, query_block, key_block, kind, tile);
      }
      StoreForwardOutputs(in, out, group, query_block, tile);
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
  const int64_t head_dim = in.head_dim;
  const std::vector<Block> key_blocks = Blocks(in.k_positions, kBlockK);
  for (const KvGroup& group : GroupByKv(in)) {
    const int64_t block_rows = QueryBlock(group.heads.size());
    BackwardTile tile(static_cast<int64_t>(group.heads.size()), block_rows, head_dim);
    for (const Block& query_block : Blocks(in.q_positions, block_rows)) {
      LoadBackwardTile(in, args, group, query_block, tile);
      bool touched = false;
      for (const Block& key_block : key_blocks) {
        const TileKind kind = Classify(query_block, key_block);
        if (kind == TileKind::kSkip) continue;
        touched = true;
        BackwardKeyTile(in, args, group, query_block, key_block, kind, tile);
      }
      if (!touched) continue;
      const int64_t rows = query_block.size();
      for (size_t stacked = 0; stacked < group.heads.size(); ++stacked) {
        float* dq = args.dq[group.heads[stacked]] + query_block.begin * head_dim;
        const float* from = tile.grad_queries.data() + stacked * rows * head_dim;
        for (int64_t index = 0; index < rows * head_dim; ++index) dq[index] += from[index];
      }
    }
  }
}

// ---- Naive references: O(num_q * num_k) per head, every product and sum in double.

void AttentionForwardReference(const AttentionInputs& in, const ForwardOutputs& out,
                               bool accumulate) {
  CheckShapes(in);
  const int64_t head_dim = in.head_dim;
  const int64_t num_queries = in.num_q();
  const int64_t num_keys = in.num_k();
  std::vector<double> scores(num_keys);
  std::vector<double> acc(head_dim);
  for (size_t head = 0; head < in.q.size(); ++head) {
    const float* q = in.q[head];
    const float* k = in.k[in.kv_index[head]];
    const float* v = in.v[in.kv_index[head]];
    for (int64_t row = 0; row < num_queries; ++row) {
      double best = -std::numeric_limits<double>::infinity();
      for (int64_t col = 0; col < num_keys; ++col) {
        if (in.k_positions[col] > in.q_positions[row]) continue;
        double dot = 0;
        for (int64_t dim = 0; dim < head_dim; ++dim) {
          dot += static_cast<double>(q[row * head_dim + dim]) * k[col * head_dim + dim];
        }
        scores[col] = dot * in.scale;
        best = std::max(best, scores[col]);
      }
      double sum = 0;
      std::fill(acc.begin(), acc.end(), 0.0);
      if (best != -std::numeric_limits<double>::infinity()) {
        for (int64_t col = 0; col < num_keys; ++col) {
          if (in.k_positions[col] > in.q_positions[row]) continue;
          const double weight = std::exp(scores[col] - best);
          sum += weight;
          for (int64_t dim = 0; dim < head_dim; ++dim) acc[dim] += weight * v[col * head_dim + dim];
        }
      }
      // This block's result: o_b = acc / sum, lse_b = best + log(sum) (-inf when empty).
      double lse_b = sum > 0 ? best + std::log(sum) : -std::numeric_limits<double>::infinity();
      float* o_row = out.o[head] + row * head_dim;
      float& lse_row = out.lse[head][row];
      double lse_prev =
          accumulate ? static_cast<double>(lse_row) : -std::numeric_limits<double>::infinity();
      const double lse_new = std::max(lse_prev, lse_b) == -std::numeric_limits<double>::infinity()
                                 ? -std::numeric_limits<double>::infinity()
                                 : std::max(lse_prev, lse_b) +
                                       std::log(std::exp(lse_prev - std::max(lse_prev, lse_b)) +
                                                std::exp(lse_b - std::max(lse_prev, lse_b)));
      for (int64_t dim = 0; dim < head_dim; ++dim) {
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
  const int64_t head_dim = in.head_dim;
  const int64_t num_queries = in.num_q();
  const int64_t num_keys = in.num_k();
  std::vector<std::vector<double>> dk(in.k.size(), std::vector<double>(num_keys * head_dim));
  std::vector<std::vector<double>> dv(in.k.size(), std::vector<double>(num_keys * head_dim));
  std::vector<double> dq_row(head_dim);
  for (size_t head = 0; head < in.q.size(); ++head) {
    const int kv = in.kv_index[head];
    const float* q = in.q[head];
    const float* k = in.k[kv];
    const float* v = in.v[kv];
    for (int64_t row = 0; row < num_queries; ++row) {
      const double lse = args.lse[head][row];
      if (lse == -std::numeric_limits<double>::infinity()) continue;
      const float* o_row = args.o[head] + row * head_dim;
      const float* do_row = args.d_o[head] + row * head_dim;
      const float* q_row = q + row * head_dim;
      double delta = 0;
      for (int64_t dim = 0; dim < head_dim; ++dim)
        delta += static_cast<double>(o_row[dim]) * do_row[dim];
      std::fill(dq_row.begin(), dq_row.end(), 0.0);
      for (int64_t col = 0; col < num_keys; ++col) {
        if (in.k_positions[col] > in.q_positions[row]) continue;
        const float* k_row = k + col * head_dim;
        const float* v_row = v + col * head_dim;
        double score = 0;
        double grad_prob = 0;
        for (int64_t dim = 0; dim < head_dim; ++dim) {
          score += static_cast<double>(q_row[dim]) * k_row[dim];
          grad_prob += static_cast<double>(do_row[dim]) * v_row[dim];
        }
        const double prob = std::exp(score * in.scale - lse);
        const double grad_score = prob * (grad_prob - delta) * in.scale;
        for (int64_t dim = 0; dim < head_dim; ++dim) {
          dv[kv][col * head_dim + dim] += prob * do_row[dim];
          dk[kv][col * head_dim + dim] += grad_score * q_row[dim];
          dq_row[dim] += grad_score * k_row[dim];
        }
      }
      float* dq = args.dq[head] + row * head_dim;
      for (int64_t dim = 0; dim < head_dim; ++dim) dq[dim] += static_cast<float>(dq_row[dim]);
    }
  }
  for (size_t kv = 0; kv < in.k.size(); ++kv) {
    for (int64_t index = 0; index < num_keys * head_dim; ++index) {
      args.dk[kv][index] += static_cast<float>(dk[kv][index]);
      args.dv[kv][index] += static_cast<float>(dv[kv][index]);
    }
  }
}

}  // namespace hexiseq::runtime
