// The agreement of flags across ranks (agreement.h).
#include "runtime/agreement.h"

#include <cstdint>
#include <cstdio>

namespace hexiseq::runtime {
namespace {

constexpr size_t kShownChars = 64;  // a differing value is shown up to this many characters

uint64_t Fnv1a(const std::string& text) {
  uint64_t hash = 1469598103934665603ull;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  return hash;
}

// "ranks 0, 1 use 7; rank 2 uses 9", groups in the order of their first rank.
std::string DescribeDisagreement(const std::vector<std::string>& values) {
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  for (int rank = 0; rank < static_cast<int>(values.size()); ++rank) {
    auto group = groups.begin();
    while (group != groups.end() && group->first != values[rank]) ++group;
    if (group == groups.end()) group = groups.insert(groups.end(), {values[rank], {}});
    group->second.push_back(rank);
  }
  std::string text;
  for (const auto& [value, ranks] : groups) {
    std::string list;
    for (int rank : ranks) list += (list.empty() ? "" : ", ") + std::to_string(rank);
    text += (text.empty() ? "" : "; ") + std::string(ranks.size() > 1 ? "ranks " : "rank ") + list +
            (ranks.size() > 1 ? " use " : " uses ") + (value.empty() ? "(none)" : value);
  }
  return text;
}

}  // namespace

Result<void> CheckFlagsAgree(Comm& world, const std::string& command,
                             const std::vector<FlagValue>& flags, const std::string& rule) {
  std::vector<uint64_t> mine;
  for (const FlagValue& flag : flags) mine.push_back(Fnv1a(flag.value));
  std::vector<uint64_t> all(mine.size() * world.size());
  world.Allgather(mine.data(), mine.size() * sizeof(uint64_t), all.data());
  for (size_t index = 0; index < flags.size(); ++index) {
    bool same = true;
    for (int rank = 1; rank < world.size(); ++rank)
      same = same && all[rank * flags.size() + index] == all[index];
    if (same) continue;
    // Every rank found the same flag: gather its values to name them.
    char shown[kShownChars + 1] = {};
    std::snprintf(shown, sizeof shown, "%s", flags[index].value.c_str());
    std::vector<char> texts((kShownChars + 1) * world.size());
    world.Allgather(shown, sizeof shown, texts.data());
    std::vector<std::string> values;
    for (int rank = 0; rank < world.size(); ++rank)
      values.emplace_back(texts.data() + rank * (kShownChars + 1));
    return InvalidArgument(command + ": " + flags[index].flag +
                           " differs across ranks: " + DescribeDisagreement(values) +
                           " (rule: " + rule + "; hint: give every rank the same flags)");
  }
  return {};
}

}  // namespace hexiseq::runtime
