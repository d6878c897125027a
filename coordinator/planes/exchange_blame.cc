#include "coordinator/planes/exchange_blame.h"

#include <algorithm>
#include <bit>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include "exchange/schedule.h"

namespace dctrain {

namespace {

bool contains(const std::vector<uint32_t>& v, uint32_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// More members than this in the complaints (a run where most links fail at
// once): every named suspect is out, as each report says.
constexpr size_t kMostMembersWeighed = 20;

// Whether `rank`'s report names `other` among those it lacked something from.
bool names(const RoundReport& rank, uint32_t other) {
  return contains(rank.suspects, other) || contains(rank.missing_contributions, other) ||
         contains(rank.missing_sums, other);
}

// Whether member `a` gets pieces from member `b` in the round's schedule.
using Hears = std::function<bool(uint32_t a, uint32_t b)>;

// Whether a member that reported, other than `except`, got every part of
// `rank` (it would hear from it, and names it nowhere).
bool heard_in_full(const std::vector<RoundReport>& reports, uint32_t rank, uint32_t except,
                   const Hears& hears) {
  for (const RoundReport& r : reports) {
    if (r.rank != rank && r.rank != except && hears(r.rank, rank) && !names(r, rank)) return true;
  }
  return false;
}

// The strikes of a blame whose `out` is set (see the header).
void weigh_strikes(const std::vector<RoundReport>& reports, RoundBlame& blame, const Hears& hears) {
  std::map<uint32_t, const RoundReport*> by_rank;
  for (const RoundReport& r : reports) by_rank[r.rank] = &r;
  std::set<uint32_t> struck, unfounded;
  for (const auto& [from, to] : blame.links) {
    auto accused = by_rank.find(to);
    if (accused == by_rank.end()) continue;
    if (!names(*accused->second, from) && heard_in_full(reports, to, from, hears)) {
      unfounded.insert(from);
    }
  }
  for (uint32_t rank : blame.out) {
    std::set<uint32_t> counterparts;
    for (const auto& [from, to] : blame.links) {
      if (to == rank && from != rank) counterparts.insert(from);
      if (from == rank && to != rank) counterparts.insert(to);
    }
    if (counterparts.size() >= 2 && !heard_in_full(reports, rank, rank, hears)) {
      struck.insert(rank);
    }
  }
  struck.insert(unfounded.begin(), unfounded.end());
  std::set<uint32_t> out(blame.out.begin(), blame.out.end());
  out.insert(unfounded.begin(), unfounded.end());
  blame.out.assign(out.begin(), out.end());
  blame.struck.assign(struck.begin(), struck.end());
  blame.unfounded.assign(unfounded.begin(), unfounded.end());
}

// Every smallest set of members touching each link, as blame.out.
void take_out(RoundBlame& blame) {
  std::vector<uint32_t> members;
  for (const auto& [from, to] : blame.links) {
    members.push_back(from);
    members.push_back(to);
  }
  std::sort(members.begin(), members.end());
  members.erase(std::unique(members.begin(), members.end()), members.end());
  if (members.empty()) return;
  if (members.size() > kMostMembersWeighed) {
    std::set<uint32_t> named;
    for (const auto& link : blame.links) named.insert(link.second);
    blame.out.assign(named.begin(), named.end());
    return;
  }
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
}

// The direct schedule's complaints as links (see the header).
void direct_links(const std::vector<RoundReport>& reports, const std::set<uint32_t>& silent,
                  RoundBlame& blame) {
  std::map<uint32_t, const RoundReport*> by_rank;
  for (const RoundReport& r : reports) by_rank[r.rank] = &r;
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
}

// The halving schedule's complaints as links: a complaint against a partner
// that waited on an earlier stage itself is left out (see the header).
void halving_links(const std::vector<RoundReport>& reports, const std::set<uint32_t>& silent,
                   const std::vector<uint32_t>& members, RoundBlame& blame) {
  const HalvingLayout layout(members.size());
  const auto position = [&](uint32_t rank) -> std::optional<size_t> {
    auto it = std::lower_bound(members.begin(), members.end(), rank);
    if (it == members.end() || *it != rank) return std::nullopt;
    return static_cast<size_t>(it - members.begin());
  };
  // When `from` waited on `on` for pieces coming in (or the sum going out).
  const auto when = [&](uint32_t from, uint32_t on, bool gathering) -> std::optional<size_t> {
    const auto a = position(from), b = position(on);
    if (!a || !b) return std::nullopt;
    const auto stage = layout.stage_between(*a, *b);
    if (!stage) return std::nullopt;
    return layout.wait_order(*stage, gathering);
  };
  std::map<uint32_t, size_t> first_wait;  // of each member that reported a failure
  for (const RoundReport& r : reports) {
    if (r.ok) continue;
    for (const bool gathering : {false, true}) {
      for (uint32_t s : gathering ? r.missing_sums : r.missing_contributions) {
        if (const auto t = when(r.rank, s, gathering)) {
          auto [it, fresh] = first_wait.emplace(r.rank, *t);
          if (!fresh) it->second = std::min(it->second, *t);
        }
      }
    }
  }
  for (const RoundReport& r : reports) {
    if (r.ok) continue;
    std::set<uint32_t> named;
    for (const bool gathering : {false, true}) {
      for (uint32_t s : gathering ? r.missing_sums : r.missing_contributions) {
        if (s == r.rank || silent.contains(s) || !named.insert(s).second) continue;
        const auto t = when(r.rank, s, gathering);
        const auto waited = first_wait.find(s);
        if (t && waited != first_wait.end() && waited->second < *t) continue;
        blame.links.emplace_back(r.rank, s);
      }
    }
    // Members named for what else went wrong (conflicting, not reading).
    for (uint32_t s : r.suspects) {
      if (s == r.rank || silent.contains(s) || named.contains(s)) continue;
      if (contains(r.missing_contributions, s) || contains(r.missing_sums, s)) continue;
      blame.links.emplace_back(r.rank, s);
    }
  }
}

}  // namespace

RoundBlame blame_exchange_round(const std::vector<RoundReport>& reports,
                                const std::set<uint32_t>& silent,
                                const std::vector<uint32_t>& halving_members) {
  RoundBlame blame;
  Hears hears = [](uint32_t, uint32_t) { return true; };
  if (halving_members.empty()) {
    direct_links(reports, silent, blame);
  } else {
    halving_links(reports, silent, halving_members, blame);
    const HalvingLayout layout(halving_members.size());
    hears = [&halving_members, layout](uint32_t a, uint32_t b) {
      const auto at = [&](uint32_t rank) {
        return static_cast<size_t>(
            std::lower_bound(halving_members.begin(), halving_members.end(), rank) -
            halving_members.begin());
      };
      const size_t pa = at(a), pb = at(b);
      if (pa == halving_members.size() || pb == halving_members.size()) return false;
      return layout.stage_between(pa, pb).has_value();
    };
  }
  take_out(blame);
  weigh_strikes(reports, blame, hears);
  return blame;
}

}  // namespace dctrain
