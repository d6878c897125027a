// The ledger's invariant under random drops and worker deaths, over several
// epochs: with requeue every sample is completed exactly once per epoch; without,
// the audit names exactly the samples that were lost. Checkpoints restore the
// state so that the run continues identically.
#include "coordinator/ledger.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <numeric>
#include <set>

#include "common/random.h"

namespace dctrain {
namespace {

TEST(Ledger, EachEpochIsASeededPermutation) {
  auto epoch_order = [](uint64_t seed, int epochs) {
    Ledger ledger(1000, seed, true);
    std::vector<std::vector<uint64_t>> orders;
    for (int e = 0; e < epochs; ++e) {
      const PlannedMicroBatch all = ledger.take(5000, 0, 0);
      EXPECT_EQ(all.epoch, static_cast<uint64_t>(e));
      EXPECT_EQ(ledger.take(1, 0, 0).id, 0u);  // nothing pending, no mixing of epochs
      ledger.complete(all.id);
      EXPECT_TRUE(ledger.epoch_complete());
      orders.push_back(all.samples);
      ledger.start_next_epoch();
    }
    return orders;
  };
  const auto a = epoch_order(7, 2), b = epoch_order(7, 2), c = epoch_order(8, 1);
  std::vector<uint64_t> sorted = a[0];
  std::sort(sorted.begin(), sorted.end());
  std::vector<uint64_t> identity(1000);
  std::iota(identity.begin(), identity.end(), uint64_t{0});
  EXPECT_EQ(sorted, identity);
  EXPECT_NE(a[0], identity);
  EXPECT_EQ(a, b);
  EXPECT_NE(a[0], a[1]);
  EXPECT_NE(a[0], c[0]);
}

TEST(Ledger, DroppedMicroBatchesReturnWholeToTheHeadInEpochOrder) {
  Ledger ledger(100, 1, true);
  const PlannedMicroBatch a = ledger.take(10, 0, 0);
  const PlannedMicroBatch b = ledger.take(10, 0, 1);
  const PlannedMicroBatch c = ledger.take(10, 0, 1);
  EXPECT_EQ(ledger.pending(), 70u);
  ledger.complete(b.id);
  ledger.drop(c.id);  // drops arrive in any order ...
  ledger.drop(a.id);
  EXPECT_EQ(ledger.pending(), 90u);
  // ... and come back in the epoch's order, whole, before any fresh sample.
  const PlannedMicroBatch again_a = ledger.take(32, 1, 2);
  EXPECT_EQ(again_a.samples, a.samples);
  EXPECT_NE(again_a.id, a.id);
  // A requeued micro-batch larger than asked for is split at its head.
  const PlannedMicroBatch c_head = ledger.take(4, 1, 2);
  const PlannedMicroBatch c_tail = ledger.take(32, 1, 2);
  EXPECT_EQ(std::vector<uint64_t>(c.samples.begin(), c.samples.begin() + 4), c_head.samples);
  EXPECT_EQ(std::vector<uint64_t>(c.samples.begin() + 4, c.samples.end()), c_tail.samples);
  const PlannedMicroBatch fresh = ledger.take(5, 1, 2);
  EXPECT_EQ(fresh.samples.size(), 5u);
  EXPECT_TRUE(std::find(c.samples.begin(), c.samples.end(), fresh.samples[0]) == c.samples.end());

  EXPECT_THROW(ledger.complete(b.id), std::out_of_range);  // already completed
  EXPECT_THROW(ledger.drop(a.id), std::out_of_range);      // already dropped
  EXPECT_THROW(ledger.complete(12345), std::out_of_range);
  EXPECT_THROW(ledger.start_next_epoch(), std::logic_error);
  EXPECT_TRUE(ledger.is_in_flight(fresh.id));
  ledger.orphan_worker(2);
  EXPECT_FALSE(ledger.is_in_flight(fresh.id));
  EXPECT_EQ(ledger.pending(), 90u);
}

// Random take / complete / drop / orphan_worker sequences; the test keeps its
// own record of what was completed and lost and holds the ledger to it.
struct Simulation {
  uint64_t size;
  bool requeue;
  Rng rng;
  Ledger ledger;
  std::vector<int> completed;  // this epoch, per sample (the test's own count)
  std::set<uint64_t> lost;     // this epoch
  uint64_t step = 0;
  int epochs_checked = 0;
  uint64_t total_lost = 0;  // over the checked epochs

  Simulation(uint64_t n, bool with_requeue, uint64_t seed)
      : size(n),
        requeue(with_requeue),
        rng({seed, 99}),
        ledger(n, seed, with_requeue),
        completed(n, 0) {}

  // One step: 4 workers each take up to 3 micro-batches; each micro-batch is
  // then completed or dropped, and now and then a worker dies first.
  void run_step() {
    std::vector<std::pair<uint32_t, PlannedMicroBatch>> planned;
    for (uint32_t w = 0; w < 4; ++w) {
      const auto count = 1 + rng.below(3);
      for (uint64_t k = 0; k < count; ++k) {
        PlannedMicroBatch mb = ledger.take(1 + rng.below(24), step, w);
        if (mb.id == 0) break;
        ASSERT_EQ(mb.epoch, ledger.epoch());
        planned.emplace_back(w, std::move(mb));
      }
    }
    // Resolve in a random order (contributions arrive in any order).
    for (size_t i = planned.size(); i > 1; --i) std::swap(planned[i - 1], planned[rng.below(i)]);
    std::set<uint32_t> dead;
    for (auto& [worker, mb] : planned) {
      if (dead.contains(worker)) continue;
      const double u = rng.uniform_double();
      if (u < 0.05) {  // the worker dies: all it holds goes back
        for (const auto& [w2, other] : planned) {
          if (w2 == worker && ledger.is_in_flight(other.id) && !requeue) {
            lost.insert(other.samples.begin(), other.samples.end());
          }
        }
        ledger.orphan_worker(worker);
        dead.insert(worker);
      } else if (u < 0.25) {
        ledger.drop(mb.id);
        if (!requeue) lost.insert(mb.samples.begin(), mb.samples.end());
      } else {
        ledger.complete(mb.id);
        for (uint64_t s : mb.samples) ++completed[s];
      }
    }
    ++step;
    if (ledger.epoch_complete()) check_epoch_and_advance();
  }

  void check_epoch_and_advance() {
    const EpochAudit audit = ledger.audit();
    EXPECT_TRUE(audit.complete);
    EXPECT_TRUE(audit.ok()) << "duplicated " << audit.duplicated.size() << " missing "
                            << audit.missing.size();
    const std::vector<uint64_t> expected_lost(lost.begin(), lost.end());
    EXPECT_EQ(audit.lost, expected_lost);
    EXPECT_EQ(audit.done + audit.lost.size(), size);
    for (uint64_t s = 0; s < size; ++s) {
      const int expected = lost.contains(s) ? 0 : 1;
      ASSERT_EQ(completed[s], expected) << "sample " << s << " epoch " << ledger.epoch();
    }
    if (requeue) {
      EXPECT_TRUE(lost.empty());
    }
    total_lost += lost.size();
    ledger.start_next_epoch();
    std::fill(completed.begin(), completed.end(), 0);
    lost.clear();
    ++epochs_checked;
  }
};

TEST(LedgerProperty, WithRequeueEverySampleIsDoneExactlyOncePerEpoch) {
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    Simulation sim(500 + seed * 37, true, seed);
    while (sim.epochs_checked < 3) {
      sim.run_step();
      ASSERT_FALSE(::testing::Test::HasFatalFailure());
      ASSERT_LT(sim.step, 10000u);
    }
  }
}

TEST(LedgerProperty, WithoutRequeueTheAuditListsExactlyTheLostSamples) {
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    Simulation sim(500 + seed * 37, false, seed);
    while (sim.epochs_checked < 3) {
      sim.run_step();
      ASSERT_FALSE(::testing::Test::HasFatalFailure());
    }
    EXPECT_GT(sim.total_lost, 0u);  // drops happened, so the check above had something to check
  }
}

TEST(LedgerProperty, AuditCatchesAnIncompleteEpoch) {
  Ledger ledger(50, 3, true);
  const PlannedMicroBatch mb = ledger.take(20, 0, 0);
  ledger.complete(mb.id);
  const EpochAudit audit = ledger.audit();
  EXPECT_FALSE(audit.complete);
  EXPECT_FALSE(audit.ok());
  EXPECT_EQ(audit.done, 20u);
  EXPECT_EQ(audit.missing.size(), 30u);
}

TEST(LedgerCheckpoint, RestoreMidEpochContinuesIdentically) {
  for (bool requeue : {true, false}) {
    Simulation sim(613, requeue, 11);
    // Run into the second epoch, leaving micro-batches in flight and requeued.
    while (sim.epochs_checked < 1 || sim.step % 7 != 3) sim.run_step();
    const PlannedMicroBatch open1 = sim.ledger.take(9, sim.step, 1);
    const PlannedMicroBatch open2 = sim.ledger.take(9, sim.step, 2);
    sim.ledger.drop(open1.id);
    const v1::LedgerState state = sim.ledger.state();
    // What the test is about: a mid-epoch state with work in every place.
    EXPECT_EQ(state.epoch(), 1u);
    EXPECT_GT(state.cursor(), 0u);
    EXPECT_LT(state.cursor(), 613u);
    EXPECT_EQ(state.in_flight_size(), 1);
    EXPECT_EQ(state.requeued_size() > 0, requeue);
    EXPECT_EQ(state.lost_size() > 0, !requeue);
    // Through the wire format, as a checkpoint stores it.
    v1::LedgerState stored;
    ASSERT_TRUE(stored.ParseFromString(state.SerializeAsString()));
    Ledger restored = Ledger::restore(stored);
    EXPECT_EQ(restored.state().SerializeAsString(), state.SerializeAsString());
    EXPECT_EQ(restored.epoch(), sim.ledger.epoch());
    EXPECT_EQ(restored.pending(), sim.ledger.pending());
    EXPECT_TRUE(restored.is_in_flight(open2.id));
    EXPECT_FALSE(restored.is_in_flight(open1.id));
    // The same operations on both give the same micro-batches.
    Rng ops({5, requeue ? 1u : 0u});
    for (int i = 0; i < 4000; ++i) {
      const uint64_t max = 1 + ops.below(30);
      const PlannedMicroBatch a = sim.ledger.take(max, 100, 0);
      const PlannedMicroBatch b = restored.take(max, 100, 0);
      ASSERT_EQ(a.id, b.id);
      ASSERT_EQ(a.epoch, b.epoch);
      ASSERT_EQ(a.samples, b.samples);
      if (a.id != 0) {
        if (ops.below(5) == 0) {
          sim.ledger.drop(a.id);
          restored.drop(b.id);
        } else {
          sim.ledger.complete(a.id);
          restored.complete(b.id);
        }
      }
      if (i == 50) {
        sim.ledger.complete(open2.id);
        restored.complete(open2.id);
      }
      if (sim.ledger.epoch_complete()) {
        ASSERT_TRUE(restored.epoch_complete());
        const EpochAudit x = sim.ledger.audit(), y = restored.audit();
        EXPECT_TRUE(x.ok());
        EXPECT_EQ(x.lost, y.lost);
        EXPECT_EQ(x.done, y.done);
        sim.ledger.start_next_epoch();
        restored.start_next_epoch();
      }
    }
    EXPECT_EQ(sim.ledger.state().SerializeAsString(), restored.state().SerializeAsString());
    EXPECT_GE(sim.ledger.epoch(), 3u);
  }
}

TEST(LedgerCheckpoint, StateHoldsEveryPartOfTheLedger) {
  Ledger ledger(40, 9, true);
  const PlannedMicroBatch a = ledger.take(6, 3, 0);
  const PlannedMicroBatch b = ledger.take(5, 3, 7);
  const PlannedMicroBatch c = ledger.take(4, 3, 1);
  ledger.complete(c.id);
  ledger.drop(a.id);
  const v1::LedgerState state = ledger.state();
  EXPECT_EQ(state.dataset_size(), 40u);
  EXPECT_EQ(state.seed(), 9u);
  EXPECT_TRUE(state.requeue());
  EXPECT_EQ(state.cursor(), 15u);
  EXPECT_EQ(state.next_microbatch_id(), 4u);
  ASSERT_EQ(state.requeued_size(), 1);
  EXPECT_EQ(state.requeued(0).position(), 0u);
  EXPECT_EQ(
      std::vector<uint64_t>(state.requeued(0).samples().begin(), state.requeued(0).samples().end()),
      a.samples);
  ASSERT_EQ(state.in_flight_size(), 1);
  EXPECT_EQ(state.in_flight(0).id(), b.id);
  EXPECT_EQ(state.in_flight(0).step(), 3u);
  EXPECT_EQ(state.in_flight(0).worker(), 7u);
  EXPECT_EQ(state.in_flight(0).position(), 6u);
  ASSERT_EQ(state.completions().size(), 40u);
  for (uint64_t s = 0; s < 40; ++s) {
    const bool done = std::find(c.samples.begin(), c.samples.end(), s) != c.samples.end();
    EXPECT_EQ(state.completions()[s], done ? 1 : 0) << "sample " << s;
  }
  // The restored ledger plans the requeued micro-batch first, then fresh samples.
  Ledger restored = Ledger::restore(state);
  EXPECT_EQ(restored.take(10, 4, 0).samples, a.samples);
  EXPECT_EQ(restored.take(1, 4, 0).id, 5u);
  restored.orphan_worker(7);
  EXPECT_FALSE(restored.is_in_flight(b.id));
}

TEST(LedgerCheckpoint, InconsistentStatesAreRefusedNamingTheProblem) {
  Ledger ledger(64, 2, true);
  const PlannedMicroBatch a = ledger.take(10, 0, 0);
  ledger.take(10, 0, 1);
  ledger.drop(a.id);
  const v1::LedgerState good = ledger.state();
  ASSERT_EQ(good.requeued_size(), 1);
  ASSERT_EQ(good.in_flight_size(), 1);
  auto refusal = [&](const std::function<void(v1::LedgerState&)>& spoil) {
    v1::LedgerState bad = good;
    spoil(bad);
    try {
      Ledger::restore(bad);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("restored");
  };
  auto refused_with = [](const std::string& what, const std::string& part) {
    return what.find(part) != std::string::npos && what.find("corrupt") != std::string::npos;
  };
  std::string what = refusal([](v1::LedgerState& s) { s.set_dataset_size(0); });
  EXPECT_TRUE(refused_with(what, "dataset size is 0")) << what;
  what = refusal([](v1::LedgerState& s) { s.set_dataset_size(1ULL << 60); });
  EXPECT_TRUE(refused_with(what, "64 completion counts")) << what;
  what = refusal([](v1::LedgerState& s) { s.set_cursor(65); });
  EXPECT_TRUE(refused_with(what, "cursor 65")) << what;
  what = refusal([](v1::LedgerState& s) { s.set_next_microbatch_id(0); });
  EXPECT_TRUE(refused_with(what, "ids start at 1")) << what;
  what = refusal([](v1::LedgerState& s) { s.set_seed(3); });  // another permutation
  EXPECT_TRUE(refused_with(what, "does not match epoch 0's permutation")) << what;
  what = refusal([](v1::LedgerState& s) { s.mutable_requeued(0)->set_samples(0, 63); });
  EXPECT_TRUE(refused_with(what, "does not match")) << what;
  what = refusal([](v1::LedgerState& s) { s.mutable_in_flight(0)->set_position(5); });
  EXPECT_TRUE(refused_with(what, "two micro-batches hold permutation position 5")) << what;
  what = refusal([](v1::LedgerState& s) { s.mutable_in_flight(0)->set_position(15); });
  EXPECT_TRUE(refused_with(what, "outside the handed-out 20 positions")) << what;
  what = refusal([](v1::LedgerState& s) { s.mutable_requeued(0)->clear_samples(); });
  EXPECT_TRUE(refused_with(what, "of 0 samples")) << what;
  what = refusal([](v1::LedgerState& s) { s.mutable_in_flight(0)->set_id(3); });
  EXPECT_TRUE(refused_with(what, "id 3 is not in 1..2")) << what;
  what = refusal([](v1::LedgerState& s) { *s.add_in_flight() = s.in_flight(0); });
  EXPECT_FALSE(what == "restored") << "the same micro-batch twice";
  what = refusal([](v1::LedgerState& s) { s.add_lost(64); });
  EXPECT_TRUE(refused_with(what, "lost sample id 64")) << what;
  EXPECT_EQ(refusal([](v1::LedgerState&) {}), "restored");

  Ledger restored = Ledger::restore(good);
  restored.drop_all_in_flight();
  EXPECT_EQ(restored.pending(), 64u);
}

}  // namespace
}  // namespace dctrain
