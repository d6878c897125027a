// "Did you mean": edit distance with adjacent swaps, and the nearest names.
#include "common/suggest.h"

#include <gtest/gtest.h>

namespace dctrain {
namespace {

TEST(Suggest, EditDistanceCountsInsertionsDeletionsChangesAndSwaps) {
  EXPECT_EQ(edit_distance("", ""), 0u);
  EXPECT_EQ(edit_distance("abc", ""), 3u);
  EXPECT_EQ(edit_distance("globel_batch", "global_batch"), 1u);  // a change
  EXPECT_EQ(edit_distance("--wokrers", "--workers"), 1u);        // a swap
  EXPECT_EQ(edit_distance("--worker", "--workers"), 1u);         // an insertion
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(edit_distance("micro_batch", "global_batch"),
            edit_distance("global_batch", "micro_batch"));
}

TEST(Suggest, ClosestGivesTheNearestWithinReachOrNothing) {
  const std::vector<std::string> fields = {"global_batch", "micro_batch", "tau", "tau_policy",
                                           "requeue"};
  EXPECT_EQ(closest("globel_batch", fields), std::vector<std::string>{"global_batch"});
  EXPECT_EQ(closest("requeu", fields), std::vector<std::string>{"requeue"});
  EXPECT_EQ(closest("tau_polcy", fields), std::vector<std::string>{"tau_policy"});
  EXPECT_TRUE(closest("learning_rate", fields).empty());
  EXPECT_TRUE(closest("tau", fields).empty()) << "a name that exists is not a typo of another";
  EXPECT_EQ(did_you_mean("globel_batch", fields), " (did you mean 'global_batch'?)");
  EXPECT_EQ(did_you_mean("--worker", {"--workers", "--config"}, ""), " (did you mean --workers?)");
  EXPECT_EQ(did_you_mean("xyzzy", fields), "");
  // Ties: every nearest one.
  EXPECT_EQ(did_you_mean("bat", {"cat", "bar", "dog"}), " (did you mean 'cat' or 'bar'?)");
}

}  // namespace
}  // namespace dctrain
