// "Did you mean": the names closest to a mistyped one (a config field, a
// flag), by edit distance with adjacent swaps (optimal string alignment:
// `globel_batch` is 1 from `global_batch`, `--wokrers` 1 from `--workers`).
#pragma once

#include <string>
#include <vector>

namespace dctrain {

// Insertions, deletions, substitutions and swaps of two adjacent characters
// that turn `a` into `b`.
size_t edit_distance(const std::string& a, const std::string& b);

// The candidates nearest to `word`, nearest first (ties in the candidates'
// order), among those within max(2, size / 3) edits of it, or that extend
// or shorten it by a suffix (`--worker` for `--workers`). None when nothing
// is that near.
std::vector<std::string> closest(const std::string& word,
                                 const std::vector<std::string>& candidates);

// " (did you mean 'global_batch'?)", " (did you mean 'a' or 'b'?)", or ""
// when nothing is near; at most three names, each between `quote`s.
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates,
                         const std::string& quote = "'");

}  // namespace dctrain
