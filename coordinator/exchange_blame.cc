#include "coordinator/exchange_blame.h"

#include <algorithm>
#include <bit>
#include <map>

namespace dctrain {

namespace {

bool contains(const std::vector<uint32_t>& v, uint32_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// More members than this in the complaints (a run where most links fail at
// once): every named suspect is out, as each report says.
constexpr size_t kMostMembersWeighed = 20;

}  // namespace

RoundBlame blame_exchange_round(const std::vector<RoundReport>& reports,
                                const std::set<uint32_t>& silent) {
  std::map<uint32_t, const RoundReport*> by_rank;
  for (const RoundReport& r : reports) by_rank[r.rank] = &r;
  RoundBlame blame;
  for (const RoundReport& r : reports) {
    if (r.ok) continue;
    for (uint32_t s : r.suspects) {
      if (s == r.rank || silent.contains(s)) continue;  // a silent member's links are its own
      const bool sum_only = r.missing_contributions.empty() && contains(r.missing_sums, s);
      if (sum_only) {
        auto owner = by_rank.find(s);
        if (owner != by_rank.end() && !owner->second->ok &&
            !owner->second->missing_contributions.empty()) {
          continue;  // the owner lacked a contribution: its own report names that link
        }
      }
      blame.links.emplace_back(r.rank, s);
    }
  }
  std::vector<uint32_t> members;
  for (const auto& [from, to] : blame.links) {
    members.push_back(from);
    members.push_back(to);
  }
  std::sort(members.begin(), members.end());
  members.erase(std::unique(members.begin(), members.end()), members.end());
  if (members.empty()) return blame;
  if (members.size() > kMostMembersWeighed) {
    std::set<uint32_t> named;
    for (const auto& link : blame.links) named.insert(link.second);
    blame.out.assign(named.begin(), named.end());
    return blame;
  }
  // Every smallest set of members touching each link.
  const size_t n = members.size();
  std::vector<std::pair<size_t, size_t>> edges;
  for (const auto& [from, to] : blame.links) {
    const auto at = [&](uint32_t m) {
      return static_cast<size_t>(std::lower_bound(members.begin(), members.end(), m) -
                                 members.begin());
    };
    edges.emplace_back(at(from), at(to));
  }
  // One pass over every set, keeping the union of the smallest that cover.
  uint64_t union_of_smallest = 0;
  int smallest = static_cast<int>(n) + 1;
  for (uint64_t set = 1; set < (uint64_t{1} << n); ++set) {
    const int size = std::popcount(set);
    if (size > smallest) continue;
    bool covers = true;
    for (const auto& [a, b] : edges) {
      if (((set >> a) & 1) == 0 && ((set >> b) & 1) == 0) {
        covers = false;
        break;
      }
    }
    if (!covers) continue;
    if (size < smallest) {
      smallest = size;
      union_of_smallest = 0;
    }
    union_of_smallest |= set;
  }
  for (size_t i = 0; i < n; ++i) {
    if ((union_of_smallest >> i) & 1) blame.out.push_back(members[i]);
  }
  return blame;
}

}  // namespace dctrain
