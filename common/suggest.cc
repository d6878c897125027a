#include "common/suggest.h"

#include <algorithm>
#include <numeric>

namespace dctrain {

size_t edit_distance(const std::string& a, const std::string& b) {
  // d[i][j]: the distance between a's first i characters and b's first j.
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t change = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + change});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

std::vector<std::string> closest(const std::string& word,
                                 const std::vector<std::string>& candidates) {
  const size_t near = std::max<size_t>(2, word.size() / 3);
  std::vector<std::pair<size_t, size_t>> found;  // (distance, index)
  for (size_t i = 0; i < candidates.size(); ++i) {
    const std::string& c = candidates[i];
    if (c == word) continue;
    const size_t distance = edit_distance(word, c);
    const bool affix =
        word.size() >= 4 && c.size() >= 4 && (c.starts_with(word) || word.starts_with(c));
    if (distance <= near || affix) found.emplace_back(distance, i);
  }
  std::stable_sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (const auto& [distance, i] : found) {
    if (!out.empty() && distance > found.front().first) break;  // only the nearest
    out.push_back(candidates[i]);
  }
  return out;
}

std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates,
                         const std::string& quote) {
  std::vector<std::string> near = closest(word, candidates);
  if (near.empty()) return "";
  if (near.size() > 3) near.resize(3);
  std::string names;
  for (size_t i = 0; i < near.size(); ++i) {
    names += (i == 0 ? "" : i + 1 == near.size() ? " or " : ", ") + quote + near[i] + quote;
  }
  return " (did you mean " + names + "?)";
}

}  // namespace dctrain
