// The open step's book (coordinator/step/step_book.h): a worker leaves the
// step once, by take_out() with why, or has what it sent dropped by drop()
// without being out; the planned samples add up over the entries.
#include "coordinator/step/step_book.h"

#include <gtest/gtest.h>

namespace dctrain {
namespace {

StepBook two_workers() {
  StepBook book;
  for (uint32_t rank : {3u, 5u}) {
    Planned& p = book.plan(rank);
    p.micro_batches = {rank * 10, rank * 10 + 1};
    p.samples = 8 * rank;
    p.contribution.emplace().set_samples(p.samples);
  }
  return book;
}

TEST(StepBook, AWorkerIsTakenOutOnceWithWhyAndWhatItSentIsDropped) {
  StepBook book = two_workers();
  EXPECT_EQ(book.at(3).rank, 3u);
  EXPECT_TRUE(book.take_out(3, Removal::kCut));
  EXPECT_TRUE(book.at(3).out());
  EXPECT_EQ(book.at(3).removed, Removal::kCut);
  EXPECT_FALSE(book.at(3).contribution.has_value());
  EXPECT_FALSE(book.take_out(3, Removal::kLost)) << "out already";
  EXPECT_EQ(book.at(3).removed, Removal::kCut) << "the first reason stays";
  EXPECT_FALSE(book.take_out(4, Removal::kLost)) << "no entry";
  EXPECT_FALSE(book.at(5).out());
}

TEST(StepBook, ADroppedStepDropsWhatTheWorkerSentWithoutTakingItOut) {
  StepBook book = two_workers();
  book.drop(5);
  EXPECT_FALSE(book.at(5).contribution.has_value());
  EXPECT_FALSE(book.at(5).out());
  book.drop(7);  // no entry: nothing
  EXPECT_EQ(book.size(), 2u);
}

TEST(StepBook, ThePlannedSamplesAreEveryEntrysWhetherOutOrNot) {
  StepBook book = two_workers();
  EXPECT_EQ(book.planned_samples(), 64u);
  book.take_out(5, Removal::kLost);
  EXPECT_EQ(book.planned_samples(), 64u);
  book.clear();
  EXPECT_EQ(book.planned_samples(), 0u);
  EXPECT_FALSE(book.contains(3));
}

}  // namespace
}  // namespace dctrain
