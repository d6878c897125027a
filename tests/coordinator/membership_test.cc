// Membership: who holds which rank, and the name -> live member lookup every
// message makes (an index kept beside the slots, so it must follow every
// admission, death and takeover).
#include "coordinator/step/membership.h"

#include <gtest/gtest.h>

namespace dctrain {
namespace {

TEST(Membership, TheLiveMemberOfANameFollowsAdmissionsDeathsAndTakeovers) {
  Membership m(3);
  EXPECT_EQ(m.live_member("a"), nullptr);
  EXPECT_EQ(m.admit("a", 1, 0.0), std::optional<uint32_t>(0));
  EXPECT_EQ(m.admit("b", 1, 0.0), std::optional<uint32_t>(1));
  ASSERT_NE(m.live_member("a"), nullptr);
  EXPECT_EQ(m.live_member("a")->rank, 0u);
  EXPECT_EQ(m.live_member("b")->rank, 1u);

  // A hello again from a live member: its rank, still live.
  EXPECT_EQ(m.admit("a", 2, 1.0), std::optional<uint32_t>(0));
  EXPECT_EQ(m.live_member("a")->threads, 2u);

  // Dead: no longer found; back under its name: its old rank.
  m.mark_dead(1);
  EXPECT_EQ(m.live_member("b"), nullptr);
  EXPECT_EQ(m.admit("b", 1, 2.0), std::optional<uint32_t>(1));
  EXPECT_EQ(m.live_member("b")->rank, 1u);

  // A newcomer takes the never-used slot, then a dead holder's slot; the
  // dead holder's name finds nobody.
  EXPECT_EQ(m.admit("c", 1, 3.0), std::optional<uint32_t>(2));
  EXPECT_EQ(m.admit("d", 1, 3.0), std::nullopt) << "every slot held by a live worker";
  m.mark_dead(0);
  EXPECT_EQ(m.admit("d", 1, 4.0), std::optional<uint32_t>(0));
  EXPECT_EQ(m.live_member("d")->rank, 0u);
  EXPECT_EQ(m.live_member("a"), nullptr);
  EXPECT_EQ(m.live_count(), 3u);
  // Marking a dead member dead again changes nothing.
  m.mark_dead(2);
  m.mark_dead(2);
  EXPECT_EQ(m.live_member("c"), nullptr);
  EXPECT_EQ(m.live_member("d")->rank, 0u);
  EXPECT_EQ(m.live_ranks(), (std::vector<uint32_t>{0, 1}));
}

}  // namespace
}  // namespace dctrain
