// The ring-order search of the scheduler's refinement on small clusters (scheduler_internal.h):
// the order of the groups is both the sub-ring order and the zigzag placement of their chunks, so
// rotations and reflections change each group's causal work and the cost; the group-level
// candidates try only a few orders (by kind, by NIC, reversed) and the descent never reorders.
#include <algorithm>

#include "sched/scheduler_internal.h"

namespace hexiseq::sched_internal {
namespace {

constexpr size_t kOrderSearchMaxGroups = 4;  // every order of at most this many active groups
constexpr size_t kOrdersRefined = 2;         // the best few new orders are refined again

}  // namespace

Layout OrderSearch(const CostModel& model, const Layout& layout, int class_evaluations,
                   int64_t trials, const Clock& clock) {
  std::vector<size_t> active, idle;
  for (size_t g = 0; g < layout.size(); ++g) (layout[g].total() > 0 ? active : idle).push_back(g);
  if (active.size() < 3 || active.size() > kOrderSearchMaxGroups) return layout;
  // Every order but the given one, scored as it stands (tokens and member splits kept).
  std::vector<std::pair<Objective, Layout>> orders;
  std::vector<size_t> order = active;  // ascending: the first permutation
  do {
    if (order == active) continue;
    Layout permuted;
    for (size_t g : order) permuted.push_back(layout[g]);
    for (size_t g : idle) permuted.push_back(layout[g]);
    orders.emplace_back(PlanState(model, permuted).score(), std::move(permuted));
  } while (std::next_permutation(order.begin(), order.end()));
  std::stable_sort(orders.begin(), orders.end(),
                   [](const auto& a, const auto& b) { return Less(a.first, b.first); });
  Layout best = layout;
  Objective best_score = PlanState(model, layout).score();
  for (size_t index = 0; index < std::min(kOrdersRefined, orders.size()); ++index) {
    if (clock.Expired()) break;
    PlanState state(model, ClassSearch(model, orders[index].second, class_evaluations, clock));
    Descend(state, trials, [&] { return clock.Expired(); });
    if (Less(state.score(), best_score)) {
      best_score = state.score();
      best = state.layout();
    }
  }
  return best;
}

}  // namespace hexiseq::sched_internal
