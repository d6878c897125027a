// The coordinator's side of the data plane "exchange" in one process, with
// the members' messages written by hand: the commit goes out on the reports
// alone, the step closes (and the next plans go out) once the round's sum is
// in, another member stands in for a lowest member that died before its sum
// arrived, and a committed step whose sum no member can send is dropped with
// its work requeued; a member taken out of its rounds step after step is
// released when it comes back, as one that misses its deadlines. On the
// failure path: a member that dies or goes silent while another waits in
// the round ends the round at once (the next attempt's plan), the round
// deadline follows measured rounds, an overdue member is asked to end its
// round and report, and is taken out when it cannot.
#include <gtest/gtest.h>

#include <deque>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "comm/envelope.h"
#include "comm/framing.h"
#include "comm/validation.h"
#include "coordinator/step/peer_limits.h"
#include "exchange/sum_digest.h"
#include "exchange/sum_sketch.h"
#include "tests/coordinator/coordinator_fixture.h"
#include "tests/testing/exchange_script.h"

namespace dctrain {
namespace {

using testing::as_received;

const char* kConfig = R"(
name: "exchange-commit"
seed: 5
workers: 2
model { name: "mlp" image_channels: 1 image_height: 8 image_width: 8 }
dataset { kind: "synthetic" synthetic_samples: 600 train_limit: 240 }
optimizer { kind: "sgd" lr: 0.1 momentum: 0.9 }
step { global_batch: 24 micro_batch: 4 tau: inf }
data_plane { kind: "exchange" timeout_seconds: 2 }
liveness { heartbeat_seconds: 0.5 silence_seconds: 10 grace_seconds: 0.5 join_timeout_seconds: 120 }
stop { max_steps: 4 }
guard { norm_multiple: 0 }  # rounds scripted without sketches; the norm guard's tests set it
)";

// The same run with three members: "a", "b", "c" (ranks 0, 1, 2).
const std::string kThreeMembers = [] {
  std::string config = kConfig;
  config.replace(config.find("workers: 2"), 10, "workers: 3");
  return config;
}();

class ExchangeCommitTest : public testing::CoordinatorFixture {
 protected:
  ExchangeCommitTest() : ExchangeCommitTest(kConfig, {"a", "b"}) {}
  ExchangeCommitTest(const char* config_text, std::vector<std::string> members)
      : CoordinatorFixture(config_text, "exchange-commit") {
    order = std::move(members);
  }

  // "a" (rank 0) and "b" (rank 1) join with an exchange endpoint each and
  // take their welcomes; returns each one's plan of step 0.
  std::map<std::string, Message> join() {
    start();
    for (const std::string& name : order) {
      Message hello = workers.at(name).hello();
      hello.envelope.mutable_hello()->set_exchange_endpoint("tcp://127.0.0.1:9");
      hello.envelope.mutable_hello()->set_exchange_token(std::string(16, 't'));
      for (v1::SumDigestKind k : offered) hello.envelope.mutable_hello()->add_sum_digests(k);
      coordinator->handle(as_received(name, std::move(hello)), now);
    }
    for (const std::string& name : order) {
      Message ready = workers.at(name).on_welcome(only(name, v1::Envelope::kWelcome));
      coordinator->handle(as_received(name, std::move(ready)), now);
    }
    std::map<std::string, Message> out;
    for (const std::string& name : order) out[name] = only(name, v1::Envelope::kPlan);
    return out;
  }

  // Every message queued for `name`, taken.
  std::vector<Message> take(const std::string& name) {
    std::vector<Message> out;
    std::deque<Message>& queue = outbox.inbox[name];
    while (!queue.empty()) {
      out.push_back(roundtrip(std::move(queue.front())));
      queue.pop_front();
    }
    return out;
  }
  Message only(const std::string& name, v1::Envelope::BodyCase kind) {
    std::vector<Message> of_kind;
    for (Message& m : take(name)) {
      if (m.envelope.body_case() == kind) of_kind.push_back(std::move(m));
    }
    EXPECT_EQ(of_kind.size(), 1u) << name;
    return of_kind.empty() ? Message() : std::move(of_kind.front());
  }
  static size_t count(const std::vector<Message>& messages, v1::Envelope::BodyCase kind) {
    size_t n = 0;
    for (const Message& m : messages) n += m.envelope.body_case() == kind ? 1 : 0;
    return n;
  }

  // A member's report of a round that succeeded: every planned micro-batch
  // completed, the digests of the round's sum (summed, statistics).
  Message report(const std::string& name, const Message& plan, bool sends_sum) {
    Message m = testing::round_report(name, plan, sends_sum, whole_sum(),
                                      plan.envelope.plan().parameter_checksum());
    m.envelope.mutable_contribution()->mutable_exchange()->set_samples(24);
    return m;
  }

  // The same report under the redo's attempt: the contribution as computed
  // for `first`, the digests of a round of the redo's members.
  Message redo_report(const std::string& name, const Message& first, const Message& redo) {
    Message m = report(name, first, true);
    m.envelope.mutable_contribution()->mutable_exchange()->set_attempt(
        redo.envelope.plan().exchange().attempt());
    set_digests(m, static_cast<size_t>(redo.envelope.plan().exchange().member_ranks_size()));
    return m;
  }

  // The digests of the round's sum in a round of `members`, as every member
  // holds it.
  void set_digests(Message& report, size_t members, SumDigestKind kind = SumDigestKind::kBlake2b) {
    v1::ExchangeReport& x = *report.envelope.mutable_contribution()->mutable_exchange();
    x.clear_sum_digests();
    for (std::string& d : shard_digests(whole_sum(), members, kind)) {
      x.add_sum_digests(std::move(d));
    }
  }
  // [summed | statistics], filled on first use.
  std::vector<float> whole_sum() {
    if (summed.empty()) fill_sum();
    std::vector<float> whole = summed;
    whole.insert(whole.end(), statistics.begin(), statistics.end());
    return whole;
  }

  // A member's report of a round that failed: it did not get the
  // contribution of `missing`.
  Message failed_report(const std::string& name, const Message& plan, uint32_t missing) {
    Message m = report(name, plan, false);
    v1::ExchangeReport& x = *m.envelope.mutable_contribution()->mutable_exchange();
    x.set_ok(false);
    x.add_suspects(missing);
    x.add_missing_contributions(missing);
    x.set_error("no contribution from a member");
    return m;
  }

  // The round's sum as `name` sends it.
  Message sum(const std::string& name, uint64_t step, uint32_t attempt = 0) {
    return testing::round_sum(name, step, attempt, whole_sum(), summed.size());
  }

  void receive(const std::string& name, Message m) {
    coordinator->handle(as_received(name, std::move(m)), now);
  }
  void heartbeat(const std::string& name) {
    Message m;
    m.envelope = make_envelope(0, name);
    m.envelope.mutable_heartbeat()->set_sent_unix_micros(1);
    receive(name, std::move(m));
  }
  // Both members report the round of their `latest` plans ok after 20 ms
  // of round time, a sends the sum; `latest` becomes each one's next plan.
  void healthy_step(std::map<std::string, Message>& latest) {
    for (const std::string& name : order) {
      Message r = report(name, latest[name], name == "a");
      on_current_parameters(r);
      v1::ExchangeReport& x = *r.envelope.mutable_contribution()->mutable_exchange();
      x.set_heard_from_all(true);
      x.set_round_seconds(0.02);
      receive(name, std::move(r));
    }
    receive("a", sum("a", latest["a"].envelope.step()));
    for (const std::string& name : order) latest[name] = only(name, v1::Envelope::kPlan);
  }
  // A report computed on the coordinator's parameters as they are now: from
  // step 1 on, a plan's checksum is the one before the previous step's update
  // (checksum_follows), which the coordinator applies after the plans.
  void on_current_parameters(Message& report) {
    report.envelope.mutable_contribution()->set_parameter_checksum(replica->parameter_checksum());
  }
  // The samples of a plan's micro-batches.
  static std::multiset<uint64_t> samples_of(const Message& plan) {
    std::multiset<uint64_t> out;
    for (const v1::MicroBatch& mb : plan.envelope.plan().micro_batches()) {
      out.insert(mb.samples().begin(), mb.samples().end());
    }
    return out;
  }

  // The coordinator's replica as it should be after step 0's commit: a
  // replica of the same seed given the same sum, divisor and rate.
  uint64_t expected_checksum(const v1::Update& commit) {
    Replica expected(testing::softmax_for(config), config.optimizer());
    std::vector<float> gradient = summed;
    std::vector<float> averaged = statistics;
    for (float& s : averaged) s /= static_cast<float>(commit.statistics_divisor());
    return expected.apply_summed_update(gradient, static_cast<float>(commit.gradient_divisor()),
                                        averaged, commit.learning_rate());
  }

  void fill_sum() {
    summed.resize(replica->parameter_count());
    for (size_t i = 0; i < summed.size(); ++i) summed[i] = 0.001f * static_cast<float>(i % 97);
    statistics.assign(replica->buffer_count(), 24.0f);
  }

  std::vector<float> summed;      // the round's gradient sum
  std::vector<float> statistics;  // and its statistics' (the model's buffers)
  // What the members' hellos offer: BLAKE2b first, so the choice is BLAKE2b
  // unless forced.
  std::vector<v1::SumDigestKind> offered{v1::SUM_DIGEST_BLAKE2B, v1::SUM_DIGEST_SHA256,
                                         v1::SUM_DIGEST_GMAC};
};

TEST_F(ExchangeCommitTest, TheCommitGoesOutOnTheReportsAndTheNextPlansOnceTheSumIsIn) {
  std::map<std::string, Message> first = join();
  fill_sum();
  const uint64_t before = replica->parameter_checksum();
  receive("a", report("a", first["a"], true));
  receive("b", report("b", first["b"], false));
  std::map<std::string, v1::Update> commits;
  for (const std::string& name : order) {
    const std::vector<Message> got = take(name);
    ASSERT_EQ(count(got, v1::Envelope::kUpdate), 1u) << name;
    EXPECT_EQ(count(got, v1::Envelope::kPlan), 0u) << name << ": no plan before the sum";
    for (const Message& m : got) {
      if (m.envelope.body_case() == v1::Envelope::kUpdate) commits[name] = m.envelope.update();
    }
    EXPECT_TRUE(commits[name].commit());
    EXPECT_TRUE(commits[name].applied());
  }
  EXPECT_EQ(commits["a"].SerializeAsString(), commits["b"].SerializeAsString());
  EXPECT_EQ(coordinator->step(), 0u) << "the step stays open for its sum";
  coordinator->tick(now);  // nothing to do while the sum is on its way
  EXPECT_EQ(count(take("a"), v1::Envelope::kUpdate), 0u) << "the commit goes out once";

  receive("a", sum("a", 0));
  EXPECT_EQ(coordinator->step(), 1u) << log.text.str();
  for (const std::string& name : order) {
    const std::vector<Message> got = take(name);
    EXPECT_EQ(count(got, v1::Envelope::kUpdate), 0u) << name << ": the commit went out already";
    ASSERT_EQ(count(got, v1::Envelope::kPlan), 1u) << name;
  }
  EXPECT_NE(replica->parameter_checksum(), before);
  EXPECT_EQ(replica->parameter_checksum(), expected_checksum(commits["a"]));
}

TEST_F(ExchangeCommitTest, ARoundInWhichNoMemberComputedASampleSettlesWithoutItsSumAsDropped) {
  // Both members stopped before their first micro-batch (tau): the round
  // succeeds, nothing is applied, no sum is awaited, and the micro-batches
  // count as dropped (and requeued), not as orphans of a failed exchange.
  std::map<std::string, Message> first = join();
  const uint64_t before = replica->parameter_checksum();
  uint64_t planned = 0;
  for (const std::string& name : order) {
    Message r = report(name, first[name], name == "a");
    v1::Contribution& c = *r.envelope.mutable_contribution();
    for (const v1::MicroBatchTime& t : c.completed()) c.add_dropped(t.id());
    planned += static_cast<uint64_t>(c.completed_size());
    c.clear_completed();
    c.set_samples(0);
    c.set_loss_terms(0);
    c.set_loss_sum(0.0);
    c.mutable_exchange()->set_samples(0);
    receive(name, std::move(r));
  }
  EXPECT_EQ(coordinator->step(), 1u) << "closed without a sum: " << log.text.str();
  for (const std::string& name : order) {
    const std::vector<Message> got = take(name);
    ASSERT_EQ(count(got, v1::Envelope::kUpdate), 1u) << name;
    ASSERT_EQ(count(got, v1::Envelope::kPlan), 1u) << name;
    for (const Message& m : got) {
      if (m.envelope.body_case() != v1::Envelope::kUpdate) continue;
      EXPECT_TRUE(m.envelope.update().commit());
      EXPECT_FALSE(m.envelope.update().applied());
    }
  }
  EXPECT_EQ(replica->parameter_checksum(), before);
  EXPECT_FALSE(log.contains("did not succeed")) << log.text.str();
  EXPECT_EQ(coordinator->totals().microbatches_dropped(), planned);
  EXPECT_EQ(coordinator->totals().microbatches_orphaned(), 0u);
}

TEST_F(ExchangeCommitTest, ARunThatAppliedNoUpdateEndsWithAnErrorAtItsStop) {
  // Every member drops every micro-batch of the only step (an attacker, or
  // tau below any micro-batch): max steps is reached, but nothing trained.
  config.mutable_stop()->set_max_steps(1);
  std::map<std::string, Message> first = join();
  for (const std::string& name : order) {
    Message r = report(name, first[name], name == "a");
    v1::Contribution& c = *r.envelope.mutable_contribution();
    for (const v1::MicroBatchTime& t : c.completed()) c.add_dropped(t.id());
    c.clear_completed();
    c.set_samples(0);
    c.set_loss_terms(0);
    c.set_loss_sum(0.0);
    c.mutable_exchange()->set_samples(0);
    receive(name, std::move(r));
  }
  ASSERT_TRUE(coordinator->finished()) << log.text.str();
  EXPECT_EQ(coordinator->exit_code(), 1);
  EXPECT_NE(coordinator->stop_reason().find("max steps 1 reached, but no update was applied in 1 "
                                            "steps"),
            std::string::npos)
      << coordinator->stop_reason();
}

TEST_F(ExchangeCommitTest, AHelloRepeatedBeforeTheWelcomeIsTakenQueuesNoSecondCopyOfTheState) {
  start();
  const auto hello = [&] {
    Message m = workers.at("a").hello();
    m.envelope.mutable_hello()->set_exchange_endpoint("tcp://127.0.0.1:9");
    m.envelope.mutable_hello()->set_exchange_token(std::string(16, 't'));
    receive("a", std::move(m));
  };
  for (int i = 0; i < 200; ++i) {
    hello();
    now += 0.01;
  }
  EXPECT_EQ(count(take("a"), v1::Envelope::kWelcome), 1u)
      << "one copy of the state, whatever the hellos";
  // Past the silence (10 s) the welcome may have been lost: sent again.
  now += 10.0;
  hello();
  EXPECT_EQ(count(take("a"), v1::Envelope::kWelcome), 1u);
}

TEST_F(ExchangeCommitTest, RotatingPeerNamesCostTheLogABoundedNumberOfLines) {
  join();
  // 500 names, each sending 10 errors, within 5 s.
  for (int peer = 0; peer < 500; ++peer) {
    const std::string name = fmt::format("rotating-{}", peer);
    for (int i = 0; i < 10; ++i) {
      Message m;
      m.envelope = make_envelope(0, name);
      m.envelope.mutable_error()->set_message("noise");
      receive(name, std::move(m));
    }
    now += 0.01;
  }
  const std::string text = log.text.str();
  size_t lines = 0;
  for (size_t at = text.find("rotating-"); at != std::string::npos;
       at = text.find('\n', at), at = text.find("rotating-", at)) {
    ++lines;
  }
  // New names with lines of their own: 8 a period (10 s), 5 lines each,
  // and the rest share one entry (5 lines, then one a period).
  EXPECT_LE(lines, (PeerLog::kNewPeersPerPeriod + 1) * (PeerLog::kBurst + 1)) << text.size();
  EXPECT_LT(text.size(), size_t{32} << 10);
}

TEST_F(ExchangeCommitTest, TheWallClockGivenStampsTheRunOfTheRoundsAndTheHeartbeats) {
  // The coordinator reads wall time only from its setup's clock: the run id
  // of its exchange rounds (read once, at construction) and the heartbeats'
  // stamps (each read when sent).
  uint64_t wall = 1'700'000'000'000'000ULL;
  wall_clock = [&wall] { return wall; };
  std::map<std::string, Message> first = join();
  for (const std::string& name : order) {
    EXPECT_EQ(first[name].envelope.plan().exchange().run(), 1'700'000'000'000'000ULL) << name;
  }
  wall += 123;
  now += 0.6;  // past liveness.heartbeat_seconds
  coordinator->tick(now);
  for (const std::string& name : order) {
    const Message hb = only(name, v1::Envelope::kHeartbeat);
    EXPECT_EQ(hb.envelope.heartbeat().sent_unix_micros(), 1'700'000'000'000'123ULL) << name;
  }
}

TEST_F(ExchangeCommitTest, ALowestMemberThatDiesBeforeItsSumIsStoodInForByTheNext) {
  std::map<std::string, Message> first = join();
  fill_sum();
  receive("a", report("a", first["a"], true));
  receive("b", report("b", first["b"], false));
  const v1::Update commit = only("b", v1::Envelope::kUpdate).envelope.update();
  take("a");
  coordinator->on_disconnected("a", now);
  coordinator->tick(now);
  const Message request = only("b", v1::Envelope::kSumRequest);
  EXPECT_EQ(request.envelope.step(), 0u);
  EXPECT_EQ(request.envelope.sum_request().attempt(), 0u);
  EXPECT_NE(log.text.str().find("did not come from worker 'a' (rank 0): it died"),
            std::string::npos)
      << log.text.str();

  receive("b", sum("b", 0));
  EXPECT_EQ(coordinator->step(), 1u);
  EXPECT_EQ(count(take("b"), v1::Envelope::kPlan), 1u);
  EXPECT_EQ(replica->parameter_checksum(), expected_checksum(commit));
  EXPECT_EQ(coordinator->totals().samples_completed(), 24u);
}

TEST_F(ExchangeCommitTest, AMemberThatDoesNotAnswerWithinTheTimeoutIsPassedOver) {
  std::map<std::string, Message> first = join();
  fill_sum();
  receive("a", report("a", first["a"], true));
  receive("b", report("b", first["b"], false));
  take("a");
  take("b");
  // The run's first round: no round measured yet, so the wait is this
  // round's own time (its reports came at once) times 4, at least the floor
  // (0.5 s), not the timeout (2 s).
  now += 0.4;
  coordinator->tick(now);
  EXPECT_EQ(count(take("b"), v1::Envelope::kSumRequest), 0u) << "within the floor (0.5 s)";
  now += 0.2;
  coordinator->tick(now);
  EXPECT_EQ(count(take("b"), v1::Envelope::kSumRequest), 1u);
  EXPECT_NE(log.text.str().find("did not come from worker 'a' (rank 0): not within 0.5 s"),
            std::string::npos)
      << log.text.str();
  // Whichever sum comes first closes the step (the same bits from either):
  // here the late one of the member passed over; the one asked for, after
  // it, is dropped.
  const uint64_t before = replica->parameter_checksum();
  receive("a", sum("a", 0));
  EXPECT_EQ(coordinator->step(), 1u);
  const uint64_t after = replica->parameter_checksum();
  EXPECT_NE(after, before);
  receive("b", sum("b", 0));
  EXPECT_EQ(coordinator->step(), 1u);
  EXPECT_EQ(replica->parameter_checksum(), after) << "applied once";
  EXPECT_NE(log.text.str().find("dropped a sum of step 0 attempt 0 from worker 'b' (rank 1): not "
                                "awaited"),
            std::string::npos)
      << log.text.str();
}

TEST_F(ExchangeCommitTest, ACommittedStepWhoseSumNoMemberCanSendIsDroppedAndItsWorkRequeued) {
  std::map<std::string, Message> first = join();
  fill_sum();
  const uint64_t before = replica->parameter_checksum();
  std::multiset<uint64_t> planned_samples;
  for (const auto& [name, plan] : first) {
    for (const v1::MicroBatch& mb : plan.envelope.plan().micro_batches()) {
      planned_samples.insert(mb.samples().begin(), mb.samples().end());
    }
  }
  receive("a", report("a", first["a"], true));
  receive("b", report("b", first["b"], false));
  take("a");
  take("b");
  coordinator->on_disconnected("a", now);
  coordinator->tick(now);
  ASSERT_EQ(only("b", v1::Envelope::kSumRequest).envelope.step(), 0u);
  // As a member of a run that clips answers: its sum was changed in place.
  Message refused;
  refused.envelope = make_envelope(0, "b");
  refused.envelope.mutable_exchange_sum()->set_error("its sum was averaged and clipped in place");
  receive("b", std::move(refused));

  EXPECT_NE(log.text.str().find("no member of the committed round is left to send its sum"),
            std::string::npos)
      << log.text.str();
  EXPECT_EQ(coordinator->step(), 1u);
  EXPECT_EQ(replica->parameter_checksum(), before)
      << "the coordinator's replica goes on without it";
  const std::vector<Message> got = take("b");
  ASSERT_EQ(count(got, v1::Envelope::kWelcome), 1u) << "b applied the step: it gets the state";
  ASSERT_EQ(count(got, v1::Envelope::kPlan), 1u);
  EXPECT_EQ(got.front().envelope.body_case(), v1::Envelope::kWelcome) << "before the plan";
  // b, alone now, is planned the whole batch: the step's samples, requeued.
  std::multiset<uint64_t> replanned;
  for (const Message& m : got) {
    if (m.envelope.body_case() != v1::Envelope::kPlan) continue;
    EXPECT_EQ(m.envelope.plan().parameter_checksum(), before);
    for (const v1::MicroBatch& mb : m.envelope.plan().micro_batches()) {
      replanned.insert(mb.samples().begin(), mb.samples().end());
    }
  }
  EXPECT_EQ(replanned, planned_samples);
  const MetricsRecords records = metrics();
  ASSERT_EQ(records.steps.size(), 1u);
  EXPECT_FALSE(records.steps.front().applied());
  EXPECT_EQ(records.steps.front().samples(), 0u);
  EXPECT_EQ(coordinator->totals().samples_completed(), 0u);
}

TEST_F(ExchangeCommitTest, AMemberTakenOutOfItsRoundsStepAfterStepIsReleasedWhenItComesBack) {
  config.mutable_liveness()->set_release_after_missed_steps(2);
  config.mutable_stop()->set_max_steps(6);
  std::map<std::string, Message> latest = join();  // each one's plan
  fill_sum();
  // Step `step`: a does not get b's part, b never reports; after the
  // timeout b is out (presumed dead), and the round is redone with a alone.
  const auto fail_without_b = [&](uint64_t step) {
    receive("a", failed_report("a", latest["a"], 1));
    take("a");
    now += 2.1;
    coordinator->tick(now);
    const Message redo = only("a", v1::Envelope::kPlan);
    ASSERT_EQ(redo.envelope.step(), step);
    ASSERT_EQ(redo.envelope.plan().exchange().attempt(), 1u);
    // The contribution a computed, reported again under the redo's attempt.
    Message again = redo_report("a", latest["a"], redo);
    receive("a", std::move(again));
    receive("a", sum("a", step, 1));
    ASSERT_EQ(coordinator->step(), step + 1);
    latest["a"] = only("a", v1::Envelope::kPlan);
  };
  // b is heard again, asked to say hello, and says it.
  const auto b_comes_back = [&] {
    Message heartbeat;
    heartbeat.envelope = make_envelope(0, "b");
    heartbeat.envelope.mutable_heartbeat()->set_sent_unix_micros(1);
    receive("b", std::move(heartbeat));
    const Message asked = only("b", v1::Envelope::kError);
    EXPECT_TRUE(asked.envelope.error().rejoin());
    Message hello = workers.at("b").hello();
    hello.envelope.mutable_hello()->set_exchange_endpoint("tcp://127.0.0.1:9");
    hello.envelope.mutable_hello()->set_exchange_token(std::string(16, 't'));
    receive("b", std::move(hello));
  };

  fail_without_b(0);
  b_comes_back();
  // One step missed of the two allowed: welcomed, and planned from the
  // next step on.
  Message ready = workers.at("b").on_welcome(only("b", v1::Envelope::kWelcome));
  receive("b", std::move(ready));
  receive("a", report("a", latest["a"], true));
  receive("a", sum("a", 1));
  ASSERT_EQ(coordinator->step(), 2u);
  latest["a"] = only("a", v1::Envelope::kPlan);
  std::vector<Message> to_b = take("b");
  ASSERT_EQ(count(to_b, v1::Envelope::kPlan), 1u) << log.text.str();
  for (Message& m : to_b) {
    if (m.envelope.body_case() == v1::Envelope::kPlan) latest["b"] = std::move(m);
  }
  EXPECT_EQ(latest["b"].envelope.step(), 2u);

  // Out of its round again: the second step in a row it missed. It is
  // presumed dead, so it is released when it comes back, not welcomed.
  fail_without_b(2);
  EXPECT_EQ(coordinator->totals().workers_released(), 0u);
  b_comes_back();
  const std::vector<Message> got = take("b");
  EXPECT_EQ(count(got, v1::Envelope::kWelcome), 0u);
  ASSERT_EQ(count(got, v1::Envelope::kBye), 1u);
  for (const Message& m : got) {
    if (m.envelope.body_case() == v1::Envelope::kBye) {
      EXPECT_TRUE(m.envelope.bye().released());
    }
  }
  EXPECT_EQ(coordinator->totals().workers_released(), 1u);
  EXPECT_NE(log.text.str().find("worker 'b' (rank 1) released from the run at its return: it "
                                "missed its last 2 steps in a row"),
            std::string::npos)
      << log.text.str();
  // Nothing of b's two steps is lost: a computed them again.
  EXPECT_EQ(coordinator->totals().samples_lost(), 0u);
}

TEST_F(ExchangeCommitTest, AMemberThatDiesWhileTheOtherWaitsInTheRoundEndsTheRoundAtOnce) {
  std::map<std::string, Message> first = join();
  fill_sum();
  // b dies before it reports; a waits in the round for b's pieces. The
  // coordinator knows at once, and a's plan of the next attempt (the round
  // redone without b, on what a computed) ends the round it waits in.
  coordinator->on_disconnected("b", now);
  const Message redo = only("a", v1::Envelope::kPlan);
  EXPECT_EQ(redo.envelope.step(), 0u);
  EXPECT_EQ(redo.envelope.plan().exchange().attempt(), 1u);
  ASSERT_EQ(redo.envelope.plan().exchange().member_ranks_size(), 1);
  EXPECT_EQ(redo.envelope.plan().exchange().member_ranks(0), 0u);
  EXPECT_EQ(coordinator->step(), 0u);
  // What a reports of the round it was taken out of is dropped.
  Message ended = failed_report("a", first["a"], 1);
  ended.envelope.mutable_contribution()->mutable_exchange()->set_cancelled(true);
  receive("a", std::move(ended));
  EXPECT_EQ(coordinator->step(), 0u);
  EXPECT_EQ(count(take("a"), v1::Envelope::kPlan), 0u);
  // The redone round: a alone.
  Message again = redo_report("a", first["a"], redo);
  receive("a", std::move(again));
  receive("a", sum("a", 0, 1));
  ASSERT_EQ(coordinator->step(), 1u) << log.text.str();
  std::vector<Message> got = take("a");
  ASSERT_EQ(count(got, v1::Envelope::kPlan), 1u);
  // b's micro-batches come first in a's next plan: requeued, not lost.
  const std::multiset<uint64_t> next = samples_of(got.back());
  for (uint64_t id : samples_of(first["b"])) EXPECT_TRUE(next.contains(id)) << id;
  EXPECT_EQ(coordinator->totals().samples_completed(), samples_of(first["a"]).size());
  EXPECT_EQ(coordinator->totals().samples_lost(), 0u);
  EXPECT_EQ(coordinator->totals().exchange_rounds_redone(), 1u);
}

TEST_F(ExchangeCommitTest, AMemberSilentForThreeHeartbeatsDuringTheStepIsTakenOutThen) {
  std::map<std::string, Message> first = join();
  fill_sum();
  // a heartbeats while it waits in the round; b, stopped, says nothing.
  // liveness.silence_seconds is 10 s; 3 heartbeats are 1.5 s.
  for (double t : {0.5, 1.0, 1.5}) {
    now = t;
    heartbeat("a");
    coordinator->tick(now);
  }
  EXPECT_EQ(count(take("a"), v1::Envelope::kPlan), 0u)
      << "1.5 s of silence is not more than 3 heartbeats";
  now = 1.6;
  heartbeat("a");
  coordinator->tick(now);
  const Message redo = only("a", v1::Envelope::kPlan);
  EXPECT_EQ(redo.envelope.plan().exchange().attempt(), 1u);
  EXPECT_NE(log.text.str().find("worker 'b' (rank 1) silent for 1.60 s (3 heartbeats) while its "
                                "round waits on it: presumed dead"),
            std::string::npos)
      << log.text.str();
  EXPECT_NE(log.text.str().find("worker 'b' (rank 1) failed its exchange round (silent during "
                                "the step): 1 in a row"),
            std::string::npos)
      << log.text.str();
}

TEST_F(ExchangeCommitTest, TheRoundDeadlineFollowsMeasuredRoundsAndAnOverdueMemberIsAskedToEnd) {
  config.mutable_stop()->set_max_steps(8);
  std::map<std::string, Message> latest = join();
  fill_sum();
  // Before any round is measured, no limit after all were heard from; from
  // the first on, the rounds as this process's clock measured them (the
  // reports came 0.1 s after their plans, claiming 10 ms of compute each;
  // whatever they say of their rounds' times).
  EXPECT_EQ(latest["a"].envelope.plan().exchange().round_seconds(), 0.0);
  for (int step = 0; step < 5; ++step) {
    healthy_step(latest);
    // 4 x 0.09 s is under the floor, 0.5 s.
    EXPECT_DOUBLE_EQ(latest["a"].envelope.plan().exchange().round_seconds(), 0.5) << step;
    now += 0.1;
  }
  const uint64_t step = latest["a"].envelope.step();

  // a heard from b, then did not get b's part: it reports at its limit.
  // With tau = inf, b may compute until twice the longest committed span
  // (0.1 s), at least the timeout (2 s) after the plan (sent 0.1 s ago);
  // then it has the round deadline (0.5 s) to report.
  Message failed = failed_report("a", latest["a"], 1);
  failed.envelope.mutable_contribution()->mutable_exchange()->set_heard_from_all(true);
  on_current_parameters(failed);
  receive("a", std::move(failed));
  now += 2.35;
  heartbeat("b");
  coordinator->tick(now);
  EXPECT_EQ(count(take("b"), v1::Envelope::kExchangeCancel), 0u)
      << "inside the plan's compute bound and the round deadline after it";
  now += 0.1;
  heartbeat("b");
  coordinator->tick(now);
  const Message cancel = only("b", v1::Envelope::kExchangeCancel);
  EXPECT_EQ(cancel.envelope.step(), step);
  EXPECT_EQ(cancel.envelope.exchange_cancel().attempt(), 0u);
  // b ends its round and reports what it lacked: a's sum (a could not sum
  // without b's part). Weighed together, the link b -> a failed at b's end.
  Message answer = report("b", latest["b"], false);
  on_current_parameters(answer);
  v1::ExchangeReport& x = *answer.envelope.mutable_contribution()->mutable_exchange();
  x.set_ok(false);
  x.set_cancelled(true);
  x.set_heard_from_all(true);
  x.add_suspects(0);
  x.add_missing_sums(0);
  x.set_error("ended from outside");
  receive("b", std::move(answer));
  // Judged at once on both reports. One failed link between the only two
  // members cannot say which end failed: both are out of the step (presumed
  // dead), which is dropped with nothing lost; one member's word counts as
  // no failed round towards either one's release.
  const std::string text = log.text.str();
  EXPECT_NE(text.find("worker 'b' (rank 1) ended the round of step 5 when asked"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("worker 'b' (rank 1) is out of step 5"), std::string::npos) << text;
  EXPECT_NE(text.find("worker 'b' (rank 1): not counted as a failed round (its failed links are "
                      "one member's word"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("failed its exchange round"), std::string::npos) << text;
  EXPECT_EQ(coordinator->step(), step + 1) << "the step closed without waiting further";
  EXPECT_EQ(coordinator->totals().samples_lost(), 0u);
}

TEST_F(ExchangeCommitTest, AnOverdueMemberThatCannotAnswerIsTakenOutOneRoundDeadlineLater) {
  config.mutable_stop()->set_max_steps(8);
  std::map<std::string, Message> latest = join();
  fill_sum();
  for (int step = 0; step < 5; ++step) {
    healthy_step(latest);
    now += 0.1;
  }
  Message failed = failed_report("a", latest["a"], 1);
  failed.envelope.mutable_contribution()->mutable_exchange()->set_heard_from_all(true);
  on_current_parameters(failed);
  receive("a", std::move(failed));
  // Overdue 2.5 s after the plan (0.1 s ago): the compute bound and the
  // round deadline.
  for (int i = 0; i < 4; ++i) {
    now += 0.5;
    heartbeat("b");  // its session heartbeats; its compute thread is stuck
    coordinator->tick(now);
  }
  ASSERT_EQ(count(take("b"), v1::Envelope::kExchangeCancel), 0u);
  now += 0.5;
  heartbeat("b");
  coordinator->tick(now);
  ASSERT_EQ(count(take("b"), v1::Envelope::kExchangeCancel), 1u);
  now += 0.4;
  heartbeat("b");
  coordinator->tick(now);
  EXPECT_EQ(count(take("a"), v1::Envelope::kPlan), 0u) << "b has the round deadline to answer";
  now += 0.2;
  heartbeat("b");
  coordinator->tick(now);
  const Message redo = only("a", v1::Envelope::kPlan);
  EXPECT_EQ(redo.envelope.plan().exchange().attempt(), 1u);
  EXPECT_NE(log.text.str().find("worker 'b' (rank 1) is out of step 5 because it did not report "
                                "its exchange round"),
            std::string::npos)
      << log.text.str();
}

TEST_F(ExchangeCommitTest, AReportNamingRanksOutsideTheRoundIsRefusedAndTheRunGoesOn) {
  std::map<std::string, Message> first = join();
  fill_sum();
  // a names a rank the round does not have (the blame would look it up).
  Message forged = failed_report("a", first["a"], 1);
  forged.envelope.mutable_contribution()->mutable_exchange()->add_missing_sums(99);
  receive("a", std::move(forged));
  EXPECT_NE(log.text.str().find("rejected worker 'a' (rank 0)'s contribution for step 0: its "
                                "exchange report names rank 99 in missing_sums, which is no "
                                "member of the round"),
            std::string::npos)
      << log.text.str();
  // a is out of the step; b, which waits in the round, gets the next attempt.
  const Message redo = only("b", v1::Envelope::kPlan);
  EXPECT_EQ(redo.envelope.plan().exchange().attempt(), 1u);
  // A report naming more members than the round has (here b, alone in the
  // redo, twice) is refused the same way, before anything reads the names.
  Message twice = report("b", first["b"], true);
  v1::ExchangeReport& x = *twice.envelope.mutable_contribution()->mutable_exchange();
  x.set_attempt(1);
  x.set_ok(false);
  x.add_suspects(1);
  x.add_suspects(1);
  receive("b", std::move(twice));
  EXPECT_NE(log.text.str().find("its exchange report names 2 suspects in a round of 1 members"),
            std::string::npos)
      << log.text.str();
  EXPECT_EQ(coordinator->step(), 1u) << "the step was dropped, not the coordinator";
  EXPECT_EQ(coordinator->totals().samples_lost(), 0u);
}

TEST_F(ExchangeCommitTest, AReportOfAMebibyteOfSuspectsIsRefusedBeforeItsNamesAreRead) {
  // 1 MiB of suspects (one byte each as varints) once cost the coordinator's
  // only thread seconds of quadratic blame; its count is checked first.
  std::map<std::string, Message> first = join();
  Message huge = failed_report("a", first["a"], 1);
  v1::ExchangeReport& x = *huge.envelope.mutable_contribution()->mutable_exchange();
  for (int i = 0; i < (1 << 20); ++i) x.add_suspects(static_cast<uint32_t>(i % 2));
  receive("a", std::move(huge));
  EXPECT_NE(log.text.str().find("its exchange report names 1048577 suspects in a round of 2 "
                                "members"),
            std::string::npos)
      << log.text.str().substr(0, 4096);
  // b, still in the round, gets the next attempt without a.
  EXPECT_EQ(only("b", v1::Envelope::kPlan).envelope.plan().exchange().attempt(), 1u);
}

TEST_F(ExchangeCommitTest, APeersTextGoesToTheLogCutToItsLimit) {
  std::map<std::string, Message> first = join();
  fill_sum();
  Message failed = failed_report("a", first["a"], 1);
  failed.envelope.mutable_contribution()->mutable_exchange()->set_error(std::string(1 << 20, 'x'));
  receive("a", std::move(failed));
  const std::string text = log.text.str();
  EXPECT_NE(text.find(std::string(kPeerTextLimit, 'x') + "... (1048576 bytes in all)"),
            std::string::npos);
  EXPECT_EQ(text.find(std::string(kPeerTextLimit + 1, 'x')), std::string::npos);
  EXPECT_LT(text.size(), size_t{64} << 10) << "a 1 MB error adds at most its limit to the log";
  // Cut at a character's start, never inside one.
  EXPECT_EQ(peer_text("a\xc3\xa9"
                      "b",
                      2),
            "a... (4 bytes in all)");
  EXPECT_EQ(peer_text("short"), "short");
}

TEST_F(ExchangeCommitTest, APeerThatRepeatsItselfCostsTheLogABoundedNumberOfLines) {
  // 30 error reports of 1 MB each within a second, from a peer that never
  // joined: the first PeerLog::kBurst are logged (each cut to its limit),
  // the rest counted, and a period later one line says how many.
  join();
  auto error = [&](const std::string& text) {
    Message m;
    m.envelope = make_envelope(0, "stranger");
    m.envelope.mutable_error()->set_message(text);
    receive("stranger", std::move(m));
  };
  const std::string loud(1 << 20, 'y');
  for (int i = 0; i < 30; ++i) {
    error(loud);
    now += 0.03;
  }
  const std::string cut = std::string(kPeerTextLimit, 'y') + "... (1048576 bytes in all)";
  auto lines_with = [&](const std::string& what) {
    const std::string text = log.text.str();
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(lines_with(cut), PeerLog::kBurst);
  EXPECT_EQ(lines_with("peer 'stranger' sent 5 lines of its own text: from now on at most one "
                       "line per"),
            1u);
  EXPECT_LT(log.text.str().size(), size_t{16} << 10);
  now += 11.0;  // past guard.peer_log_seconds (10 s unset)
  error(loud);
  EXPECT_EQ(lines_with(cut), PeerLog::kBurst + 1);
  EXPECT_EQ(lines_with("(26 lines of its own text from peer 'stranger' in the last"), 1u)
      << log.text.str().substr(log.text.str().size() - 1024);
}

// A sum whose values are not the members' (finite: 1e6 everywhere), as a
// forger would forward it.
Message forged_sum(const std::string& name, uint64_t step, size_t gradient, size_t buffers) {
  return testing::round_sum(name, step, 0, std::vector<float>(gradient + buffers, 1e6f), gradient);
}

TEST_F(ExchangeCommitTest, ALowestMembersForgedSumIsRefusedAndTheNextMembersSumIsApplied) {
  std::map<std::string, Message> first = join();
  fill_sum();
  receive("a", report("a", first["a"], true));
  receive("b", report("b", first["b"], false));
  const v1::Update commit = only("b", v1::Envelope::kUpdate).envelope.update();
  take("a");
  receive("a", forged_sum("a", 0, summed.size(), statistics.size()));
  const std::string text = log.text.str();
  EXPECT_NE(text.find("worker 'a' (rank 0) sent no usable sum of the round: its sum differs from "
                      "the sum the round's members hold (the digests of 2 of 2 shards differ"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("worker 'a' (rank 0) failed its exchange round (it forwarded a sum that "
                      "differs from the one the members hold): 1 in a row"),
            std::string::npos)
      << text;
  EXPECT_EQ(coordinator->step(), 0u) << "the step waits for the members' sum";
  ASSERT_EQ(only("b", v1::Envelope::kSumRequest).envelope.sum_request().attempt(), 0u);

  receive("b", sum("b", 0));
  EXPECT_EQ(coordinator->step(), 1u);
  EXPECT_EQ(replica->parameter_checksum(), expected_checksum(commit)) << "the members' sum";
  EXPECT_EQ(coordinator->totals().samples_completed(), 24u);
  EXPECT_EQ(coordinator->totals().checksum_mismatches(), 0u);
}

TEST_F(ExchangeCommitTest, AForgedSumThatComesBeforeTheCommitIsRefusedAndTheNextMemberAskedAtIt) {
  std::map<std::string, Message> first = join();
  fill_sum();
  receive("a", report("a", first["a"], true));
  receive("a", forged_sum("a", 0, summed.size(), statistics.size()));
  take("a");
  receive("b", report("b", first["b"], false));
  // The commit, and at once the request: the lowest member's sum was refused.
  const std::vector<Message> to_b = take("b");
  EXPECT_EQ(count(to_b, v1::Envelope::kUpdate), 1u);
  EXPECT_EQ(count(to_b, v1::Envelope::kSumRequest), 1u);
  receive("b", sum("b", 0));
  EXPECT_EQ(coordinator->step(), 1u);
  EXPECT_EQ(coordinator->totals().samples_completed(), 24u);
}

// A run that forces SHA-256 (data_plane.sum_digest) with members whose
// hellos offer both hashes.
const std::string kSha256 = [] {
  std::string config = kConfig;
  config.replace(config.find("timeout_seconds: 2 }"), 20,
                 "timeout_seconds: 2 sum_digest: \"sha256\" }");
  return config;
}();

class ExchangeSumDigestTest : public ExchangeCommitTest {
 protected:
  ExchangeSumDigestTest() : ExchangeCommitTest(kSha256.c_str(), {"a", "b"}) {}
};

TEST_F(ExchangeSumDigestTest, AForcedHashIsPlannedCheckedOnTheForwardedSumAndRecorded) {
  std::map<std::string, Message> first = join();
  fill_sum();
  for (const std::string& name : order) {
    EXPECT_EQ(first[name].envelope.plan().exchange().sum_digest(), v1::SUM_DIGEST_SHA256) << name;
  }
  receive("a", report("a", first["a"], true));  // its digests by the plan's hash
  receive("b", report("b", first["b"], false));
  const v1::Update commit = only("b", v1::Envelope::kUpdate).envelope.update();
  take("a");
  receive("a", sum("a", 0));
  EXPECT_EQ(coordinator->step(), 1u) << log.text.str();
  EXPECT_EQ(replica->parameter_checksum(), expected_checksum(commit));
  EXPECT_EQ(coordinator->totals().sum_digest(), "sha256");
  EXPECT_NE(log.text.str().find("sum checks: the members check each round's sum with sha256 "
                                "from step 0 (as the config says"),
            std::string::npos)
      << log.text.str();
}

TEST_F(ExchangeSumDigestTest, DigestsOfTheOtherHashAreADisagreementNotACommit) {
  // A member that digests with BLAKE2b where the plan says SHA-256 holds, to
  // the coordinator, another sum than the member that follows the plan.
  std::map<std::string, Message> first = join();
  fill_sum();
  receive("a", report("a", first["a"], true));
  Message b = report("b", first["b"], false);
  set_digests(b, 2, SumDigestKind::kBlake2b);
  receive("b", std::move(b));
  const std::string text = log.text.str();
  EXPECT_NE(text.find("step 0: the members do not hold the same sum: the digest of the shard of "
                      "worker 'a' (rank 0) differs on ranks 1; it is not committed"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("the step is dropped"), std::string::npos) << text;
  EXPECT_EQ(coordinator->totals().samples_completed(), 0u) << "its samples are requeued";
}

TEST_F(ExchangeSumDigestTest, AWorkerThatDoesNotOfferTheForcedHashIsRefusedWithBothSides) {
  start();
  Message hello = workers.at("a").hello();
  v1::Hello& h = *hello.envelope.mutable_hello();
  h.set_exchange_endpoint("tcp://127.0.0.1:9");
  h.set_exchange_token(std::string(16, 't'));
  h.clear_sum_digests();
  h.add_sum_digests(v1::SUM_DIGEST_BLAKE2B);
  coordinator->handle(as_received("a", std::move(hello)), now);
  const Message refusal = only("a", v1::Envelope::kRefusal);
  EXPECT_NE(refusal.envelope.refusal().reason().find(
                "its exchange peer offers the sum digests [blake2b], and this run requires sha256 "
                "(data_plane.sum_digest)"),
            std::string::npos)
      << refusal.envelope.refusal().reason();
}

// A run whose sum check is keyed (data_plane.sum_digest: "gmac"): the
// members report without digests; once the forwarded sum is in, the
// coordinator draws a key and asks every member for the tags of the sum it
// holds, and commits when they agree with each other and with the tags it
// takes of the forwarded sum.
std::string keyed(std::string config) {
  config.replace(config.find("timeout_seconds: 2 }"), 20,
                 "timeout_seconds: 2 sum_digest: \"gmac\" }");
  return config;
}
const std::string kKeyed = keyed(kConfig);
const std::string kKeyedThree = keyed(kThreeMembers);

class ExchangeKeyedCheckTest : public ExchangeCommitTest {
 protected:
  ExchangeKeyedCheckTest() : ExchangeKeyedCheckTest(kKeyed.c_str(), {"a", "b"}) {}
  ExchangeKeyedCheckTest(const char* config_text, std::vector<std::string> members)
      : ExchangeCommitTest(config_text, std::move(members)) {}

  // Every member's round check request, once each; none carries a commit.
  std::map<std::string, Message> requests() {
    std::map<std::string, Message> out;
    for (const std::string& name : order) {
      std::vector<Message> got = take(name);
      EXPECT_EQ(count(got, v1::Envelope::kUpdate), 0u) << name << ": no commit before the check";
      EXPECT_EQ(count(got, v1::Envelope::kRoundCheckRequest), 1u) << name;
      for (Message& m : got) {
        if (m.envelope.body_case() == v1::Envelope::kRoundCheckRequest) out[name] = std::move(m);
      }
    }
    return out;
  }
};

TEST_F(ExchangeKeyedCheckTest, TheKeyIsDrawnOnceTheSumIsInAndAgreeingTagsAreCommitted) {
  std::map<std::string, Message> first = join();
  fill_sum();
  for (const std::string& name : order) {
    EXPECT_EQ(first[name].envelope.plan().exchange().sum_digest(), v1::SUM_DIGEST_GMAC) << name;
    Message r = report(name, first[name], name == "a");
    EXPECT_EQ(r.envelope.contribution().exchange().sum_digests_size(), 0) << "no digests";
    receive(name, std::move(r));
  }
  for (const std::string& name : order) {
    const std::vector<Message> got = take(name);
    EXPECT_EQ(count(got, v1::Envelope::kRoundCheckRequest), 0u)
        << name << ": no key before the forwarded sum is in";
    EXPECT_EQ(count(got, v1::Envelope::kUpdate), 0u) << name;
  }
  receive("a", sum("a", 0));
  std::map<std::string, Message> asked = requests();
  const v1::RoundCheckRequest& ra = asked["a"].envelope.round_check_request();
  EXPECT_EQ(ra.sum_key().size(), kSumKeyBytes);
  EXPECT_EQ(ra.buckets(), 0u) << "no sketches without the norm guard";
  EXPECT_EQ(ra.shards(), 2u);
  EXPECT_EQ(asked["b"].envelope.round_check_request().sum_key(), ra.sum_key()) << "one key";

  receive("a", testing::round_check_answer("a", asked["a"], whole_sum()));
  EXPECT_EQ(coordinator->step(), 0u) << "b's tags are still to come";
  receive("b", testing::round_check_answer("b", asked["b"], whole_sum()));
  EXPECT_EQ(coordinator->step(), 1u) << log.text.str();
  // The commit and the next plan, to each member.
  std::map<std::string, Message> next;
  v1::Update commit;
  for (const std::string& name : order) {
    std::vector<Message> got = take(name);
    ASSERT_EQ(count(got, v1::Envelope::kUpdate), 1u) << name;
    ASSERT_EQ(count(got, v1::Envelope::kPlan), 1u) << name;
    for (Message& m : got) {
      if (m.envelope.body_case() == v1::Envelope::kUpdate) commit = m.envelope.update();
      if (m.envelope.body_case() == v1::Envelope::kPlan) next[name] = std::move(m);
    }
  }
  EXPECT_TRUE(commit.commit());
  EXPECT_EQ(replica->parameter_checksum(), expected_checksum(commit));
  EXPECT_EQ(coordinator->totals().sum_digest(), "gmac");
  EXPECT_EQ(coordinator->totals().samples_completed(), 24u);

  // The next step's key is drawn afresh.
  for (const std::string& name : order) {
    Message r = report(name, next[name], name == "a");
    on_current_parameters(r);
    receive(name, std::move(r));
  }
  receive("a", sum("a", 1));
  EXPECT_NE(requests()["a"].envelope.round_check_request().sum_key(), ra.sum_key());
}

TEST_F(ExchangeKeyedCheckTest, AForwardedSumThatIsNotTheOneItsSenderHoldsIsRefused) {
  // a forwards a forged sum but answers with the tags of the sum it holds
  // (as b's): the tags this process takes of what it got differ from a's
  // own, which only a could have caused. The round is redone without it.
  std::map<std::string, Message> first = join();
  fill_sum();
  for (const std::string& name : order) receive(name, report(name, first[name], name == "a"));
  receive("a", forged_sum("a", 0, summed.size(), statistics.size()));
  std::map<std::string, Message> asked = requests();
  for (const std::string& name : order) {
    receive(name, testing::round_check_answer(name, asked[name], whole_sum()));
  }
  const std::string text = log.text.str();
  EXPECT_NE(text.find("step 0: worker 'a' (rank 0) forwarded a sum that is not the one it holds "
                      "(the tags of 2 of 2 shards differ, the first shard 0); it is not applied"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("worker 'a' (rank 0) failed its exchange round (it forwarded a sum that "
                      "differs from the one it holds): 1 in a row"),
            std::string::npos)
      << text;
  EXPECT_EQ(count(take("a"), v1::Envelope::kUpdate), 0u) << "nothing committed";
  const Message redo = only("b", v1::Envelope::kPlan);
  EXPECT_EQ(redo.envelope.plan().exchange().attempt(), 1u);
  ASSERT_EQ(redo.envelope.plan().exchange().member_ranks_size(), 1);
  EXPECT_EQ(redo.envelope.plan().exchange().member_ranks(0), 1u);
}

TEST_F(ExchangeKeyedCheckTest, TagsOfTheWrongSizeOrCountAreAFailedAnswer) {
  std::map<std::string, Message> first = join();
  fill_sum();
  for (const std::string& name : order) receive(name, report(name, first[name], name == "a"));
  receive("a", sum("a", 0));
  std::map<std::string, Message> asked = requests();
  receive("a", testing::round_check_answer("a", asked["a"], whole_sum()));
  Message b = testing::round_check_answer("b", asked["b"], whole_sum());
  b.envelope.mutable_round_check_answer()->mutable_sum_tags()->RemoveLast();
  receive("b", std::move(b));
  const std::string text = log.text.str();
  EXPECT_NE(text.find("worker 'b' (rank 1) sent no usable answer to the round's check: it gives 1 "
                      "tags of the sum, a round of 2 shards has 2"),
            std::string::npos)
      << text;
  EXPECT_EQ(count(take("b"), v1::Envelope::kUpdate), 0u) << "nothing committed";
  const Message redo = only("a", v1::Envelope::kPlan);
  EXPECT_EQ(redo.envelope.plan().exchange().attempt(), 1u);
}

TEST_F(ExchangeKeyedCheckTest, ASumThatDoesNotComeIsWaitedForAtMostTheAnswerTime) {
  std::map<std::string, Message> first = join();
  fill_sum();
  for (const std::string& name : order) receive(name, report(name, first[name], name == "a"));
  now += 0.4;
  coordinator->tick(now);
  EXPECT_EQ(count(take("b"), v1::Envelope::kPlan), 0u) << "within the floor (0.5 s)";
  now += 0.2;
  coordinator->tick(now);
  const std::string text = log.text.str();
  EXPECT_NE(text.find("worker 'a' (rank 0) is out of step 0 because its sum did not come within"),
            std::string::npos)
      << text;
  const Message redo = only("b", v1::Envelope::kPlan);
  EXPECT_EQ(redo.envelope.plan().exchange().attempt(), 1u);
}

class ExchangeKeyedThreeTest : public ExchangeKeyedCheckTest {
 protected:
  ExchangeKeyedThreeTest() : ExchangeKeyedCheckTest(kKeyedThree.c_str(), {"a", "b", "c"}) {}
};

TEST_F(ExchangeKeyedThreeTest, AMemberHoldingAnotherSumOfAShardIsOutWithTheShardsOwner) {
  // c holds another sum of b's shard (b sent it another, or c says so): as
  // with digests, both are out of the step and a redoes the round alone.
  std::map<std::string, Message> first = join();
  fill_sum();
  for (const std::string& name : order) receive(name, report(name, first[name], name == "a"));
  receive("a", sum("a", 0));
  std::map<std::string, Message> asked = requests();
  std::vector<float> other = whole_sum();
  const ExchangePlan shards(other.size(), 3, 1);
  other[shards.shard_begin(1)] += 1.0f;
  receive("a", testing::round_check_answer("a", asked["a"], whole_sum()));
  receive("b", testing::round_check_answer("b", asked["b"], whole_sum()));
  receive("c", testing::round_check_answer("c", asked["c"], other));
  const std::string text = log.text.str();
  EXPECT_NE(text.find("step 0: the members do not hold the same sum: the tag of the shard of "
                      "worker 'b' (rank 1) differs on ranks 2; it is not committed"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("failed its exchange round"), std::string::npos) << text;
  const Message redo = only("a", v1::Envelope::kPlan);
  EXPECT_EQ(redo.envelope.plan().exchange().attempt(), 1u);
  ASSERT_EQ(redo.envelope.plan().exchange().member_ranks_size(), 1);
  EXPECT_EQ(redo.envelope.plan().exchange().member_ranks(0), 0u);
}

TEST_F(ExchangeCommitTest, AReportOkWithoutADigestPerShardIsRefused) {
  std::map<std::string, Message> first = join();
  fill_sum();
  Message r = report("b", first["b"], false);
  r.envelope.mutable_contribution()->mutable_exchange()->mutable_sum_digests()->RemoveLast();
  receive("b", std::move(r));
  EXPECT_NE(log.text.str().find("its exchange report says ok with 1 sum digests in a round of 2 "
                                "shards"),
            std::string::npos)
      << log.text.str();
  EXPECT_EQ(coordinator->totals().samples_completed(), 0u);
}

TEST_F(ExchangeCommitTest, WithoutSumChecksReportsNeedNoDigestsAndTheSumIsTakenAsSent) {
  // data_plane.check_sums: false, for workers that are all trusted: the
  // members' rounds skip the digests and the coordinator what needs them.
  config.mutable_data_plane()->set_check_sums(false);
  std::map<std::string, Message> first = join();
  fill_sum();
  for (const std::string& name : order) {
    Message r = report(name, first[name], name == "a");
    r.envelope.mutable_contribution()->mutable_exchange()->clear_sum_digests();
    receive(name, std::move(r));
  }
  const v1::Update commit = only("b", v1::Envelope::kUpdate).envelope.update();
  receive("a", sum("a", 0));
  EXPECT_EQ(coordinator->step(), 1u) << log.text.str();
  EXPECT_EQ(replica->parameter_checksum(), expected_checksum(commit));
}

class ExchangeThreeMembersTest : public ExchangeCommitTest {
 protected:
  ExchangeThreeMembersTest() : ExchangeCommitTest(kThreeMembers.c_str(), {"a", "b", "c"}) {}

  // `name`'s report with its digest of `shard` changed: it holds (or says
  // it holds) another sum of that shard.
  Message report_with_other_shard(const std::string& name, const Message& plan, size_t shard) {
    Message r = report(name, plan, name == "a");
    std::string& d = (*r.envelope.mutable_contribution()
                           ->mutable_exchange()
                           ->mutable_sum_digests())[static_cast<int>(shard)];
    d[0] = static_cast<char>(d[0] ^ 1);
    return r;
  }
};

TEST_F(ExchangeThreeMembersTest,
       MembersThatHoldAnotherSumOfAShardAreNotCommittedAndTheRoundRedone) {
  // c (rank 2) sent b another sum of its shard than it sent a, or b says so:
  // one member's word cannot tell which, so both are out of the step, and
  // the round is redone by a alone; neither counts a failed round.
  std::map<std::string, Message> first = join();
  fill_sum();
  receive("a", report("a", first["a"], true));
  receive("b", report_with_other_shard("b", first["b"], 2));
  receive("c", report("c", first["c"], false));
  const std::string text = log.text.str();
  EXPECT_NE(text.find("step 0: the members do not hold the same sum: the digest of the shard of "
                      "worker 'c' (rank 2) differs on ranks 1; it is not committed"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("failed its exchange round"), std::string::npos) << text;
  EXPECT_EQ(count(take("b"), v1::Envelope::kUpdate), 0u) << "no commit";
  EXPECT_EQ(count(take("c"), v1::Envelope::kUpdate), 0u);
  const Message redo = only("a", v1::Envelope::kPlan);
  EXPECT_EQ(redo.envelope.plan().exchange().attempt(), 1u);
  ASSERT_EQ(redo.envelope.plan().exchange().member_ranks_size(), 1);
  EXPECT_EQ(redo.envelope.plan().exchange().member_ranks(0), 0u);

  receive("a", redo_report("a", first["a"], redo));
  receive("a", sum("a", 0, 1));
  EXPECT_EQ(coordinator->step(), 1u) << log.text.str();
  // Only a's work is in the step; b's and c's is requeued.
  EXPECT_EQ(coordinator->totals().samples_completed(), samples_of(first["a"]).size());
  EXPECT_EQ(coordinator->totals().samples_lost(), 0u);
}

TEST_F(ExchangeThreeMembersTest, AShardOwnerThatTwoMembersContradictCountsAFailedRound) {
  std::map<std::string, Message> first = join();
  fill_sum();
  receive("a", report_with_other_shard("a", first["a"], 2));
  receive("b", report_with_other_shard("b", first["b"], 2));
  receive("c", report("c", first["c"], false));
  const std::string text = log.text.str();
  EXPECT_NE(text.find("worker 'c' (rank 2) failed its exchange round (2 members hold another sum "
                      "of its shard): 1 in a row"),
            std::string::npos)
      << text;
  // Everyone is out of the step: it is dropped and its work requeued.
  EXPECT_EQ(coordinator->step(), 1u) << text;
  EXPECT_EQ(coordinator->totals().samples_completed(), 0u);
  EXPECT_EQ(coordinator->totals().samples_lost(), 0u);
}

// One member that lies about its round, among three honest ones, under a
// finite tau (1 s, grace 0.5 s): the coordinator's own clock and the
// members' corroborated reports decide, never its word.
const std::string kFourMembersTau = [] {
  std::string config = kConfig;
  config.replace(config.find("workers: 2"), 10, "workers: 4");
  config.replace(config.find("tau: inf"), 8, "tau: 1");
  return config;
}();

class ExchangeLiarTest : public ExchangeCommitTest {
 protected:
  ExchangeLiarTest() : ExchangeCommitTest(kFourMembersTau.c_str(), {"a", "b", "c", "d"}) {}

  void heartbeats(const std::vector<std::string>& names) {
    for (const std::string& name : names) heartbeat(name);
  }
  // Ticks every 0.25 s until `until`, every named member heartbeating;
  // returns the cancels sent meanwhile to `watched`.
  size_t cancels_until(double until, const std::vector<std::string>& alive,
                       const std::vector<std::string>& watched) {
    size_t cancels = 0;
    while (now + 0.25 <= until + 1e-9) {
      now += 0.25;
      heartbeats(alive);
      coordinator->tick(now);
      for (const std::string& name : watched) {
        cancels += count(take(name), v1::Envelope::kExchangeCancel);
      }
    }
    return cancels;
  }
  // `name` ends its round the moment its plan arrives, saying it heard
  // from every other member and that rounds take 100 s, and blames a.
  void lie(const std::string& name, const Message& plan) {
    Message m = failed_report(name, plan, 0);
    v1::ExchangeReport& x = *m.envelope.mutable_contribution()->mutable_exchange();
    x.set_heard_from_all(true);
    x.set_round_seconds(100.0);
    on_current_parameters(m);
    receive(name, std::move(m));
  }
  // The honest members' round, which never got the liar's parts.
  void lacking(const std::string& name, const Message& plan, uint32_t liar) {
    Message m = failed_report(name, plan, liar);
    on_current_parameters(m);
    receive(name, std::move(m));
  }
  // The redo among `members`, a sending its sum; the step closes.
  void redo(const std::vector<std::string>& members, std::map<std::string, Message>& latest) {
    std::map<std::string, Message> redo_plans;
    for (const std::string& name : members) redo_plans[name] = only(name, v1::Envelope::kPlan);
    for (const std::string& name : members) {
      Message r = redo_report(name, latest[name], redo_plans[name]);
      on_current_parameters(r);
      receive(name, std::move(r));
    }
    const Message& plan = redo_plans.at("a");
    receive("a", sum("a", plan.envelope.step(), plan.envelope.plan().exchange().attempt()));
  }
  // Whether the log says `name` (rank by its letter) failed a round: struck.
  bool struck(const std::string& name) const {
    return log.contains(
        fmt::format("worker '{}' (rank {}) failed its exchange round", name, name[0] - 'a'));
  }
  // `name`, presumed dead, is heard again and says hello; true when it was
  // welcomed (false: released).
  bool comes_back(const std::string& name) {
    heartbeat(name);
    const Message asked = only(name, v1::Envelope::kError);
    EXPECT_TRUE(asked.envelope.error().rejoin());
    Message hello = workers.at(name).hello();
    hello.envelope.mutable_hello()->set_exchange_endpoint("tcp://127.0.0.1:9");
    hello.envelope.mutable_hello()->set_exchange_token(std::string(16, 't'));
    receive(name, std::move(hello));
    std::vector<Message> got = take(name);
    for (Message& m : got) {
      if (m.envelope.body_case() != v1::Envelope::kWelcome) continue;
      receive(name, workers.at(name).on_welcome(m));
      return true;
    }
    return false;
  }
};

TEST_F(ExchangeLiarTest, AMemberEndingEveryRoundAtOnceIsReleasedAndNoHonestMemberIsStruck) {
  config.mutable_stop()->set_max_steps(12);
  std::map<std::string, Message> latest = join();
  fill_sum();
  const std::vector<std::string> honest = {"a", "b", "c"};
  for (int attack = 1; attack <= 3; ++attack) {
    const double planned = now;
    lie("d", latest["d"]);
    // a, b and c compute for 1.2 s and wait in the round for d's parts:
    // inside tau + grace nobody asks them to end it, whatever d said (the
    // round deadline counts from there).
    EXPECT_EQ(cancels_until(planned + 1.5, {"a", "b", "c", "d"}, honest), 0u) << attack;
    for (const std::string& name : honest) lacking(name, latest[name], 3);
    // Every other member lacked d's parts, none heard it in full: d is
    // out, and its failed round counts; the three redo the round.
    redo(honest, latest);
    ASSERT_EQ(coordinator->step(), static_cast<uint64_t>(2 * attack - 1)) << log.text.str();
    EXPECT_NE(log.text.str().find(fmt::format(
                  "worker 'd' (rank 3) failed its exchange round (worker 'a' (rank 0) did not get "
                  "its part of the exchange): {} in a row",
                  attack)),
              std::string::npos)
        << log.text.str();
    for (const std::string& name : honest) latest[name] = only(name, v1::Envelope::kPlan);
    const bool welcomed = comes_back("d");
    EXPECT_EQ(welcomed, attack < 3) << "released at its third failed round";
    // A healthy step among the honest members, d planned from the next.
    for (const std::string& name : honest) {
      Message r = report(name, latest[name], name == "a");
      on_current_parameters(r);
      receive(name, std::move(r));
    }
    receive("a", sum("a", latest["a"].envelope.step()));
    for (const std::string& name : honest) latest[name] = only(name, v1::Envelope::kPlan);
    if (welcomed) latest["d"] = only("d", v1::Envelope::kPlan);
    now += 0.25;
  }
  for (const std::string& name : honest) EXPECT_FALSE(struck(name)) << log.text.str();
  EXPECT_EQ(coordinator->totals().workers_released(), 1u);
  EXPECT_EQ(coordinator->totals().samples_lost(), 0u);
}

TEST_F(ExchangeLiarTest, TwoCollidersCannotGetAnHonestMemberStruckOnlyThemselves) {
  std::map<std::string, Message> first = join();
  fill_sum();
  // c and d say they never got a's contribution; a and b got everything.
  for (const char* name : {"a", "b"}) receive(name, report(name, first[name], false));
  lacking("c", first["c"], 0);
  lacking("d", first["d"], 0);
  const std::string text = log.text.str();
  EXPECT_FALSE(struck("a")) << text;
  EXPECT_NE(text.find("worker 'c' (rank 2) failed its exchange round (it blamed worker 'a' (rank "
                      "0), whom another member heard from in full and who does not blame it)"),
            std::string::npos)
      << text;
  EXPECT_TRUE(struck("d")) << text;
}

TEST_F(ExchangeLiarTest, TwoCollidersEndingTheRoundAtOnceCutHonestMembersButNeverCountAgainstThem) {
  config.mutable_step()->set_tau(std::numeric_limits<double>::infinity());
  std::map<std::string, Message> first = join();
  fill_sum();
  // c and d both claim at once that they heard from every member: two
  // words, so a and b (still computing) are asked to end the round a round
  // deadline later, and cut from the step when they cannot answer in time.
  lie("c", first["c"]);
  lie("d", first["d"]);
  EXPECT_EQ(cancels_until(2.0, order, {"a", "b"}), 0u);
  EXPECT_EQ(cancels_until(2.25, order, {"a", "b"}), 2u);
  cancels_until(4.5, order, {});
  const std::string text = log.text.str();
  for (const char* name : {"a", "b"}) {
    EXPECT_NE(text.find(fmt::format("worker '{}' (rank {}) did not answer within the round "
                                    "deadline when asked to end its round",
                                    name, name[0] - 'a')),
              std::string::npos)
        << text;
    EXPECT_FALSE(struck(name)) << text;
  }
  EXPECT_EQ(coordinator->totals().workers_released(), 0u);
  EXPECT_EQ(coordinator->totals().samples_lost(), 0u);
}

TEST_F(ExchangeLiarTest, AReportedRoundTimeMovesNoDeadline) {
  std::map<std::string, Message> latest = join();
  fill_sum();
  // Every member reports its round ok; d says the round took 100 s.
  for (const std::string& name : order) {
    Message r = report(name, latest[name], name == "a");
    on_current_parameters(r);
    v1::ExchangeReport& x = *r.envelope.mutable_contribution()->mutable_exchange();
    x.set_heard_from_all(true);
    x.set_round_seconds(name == "d" ? 100.0 : 0.02);
    receive(name, std::move(r));
  }
  receive("a", sum("a", 0));
  for (const std::string& name : order) latest[name] = only(name, v1::Envelope::kPlan);
  // Measured here: the floor (0.5 s), not the timeout (2 s) nor 4 x 100 s.
  EXPECT_DOUBLE_EQ(latest["a"].envelope.plan().exchange().round_seconds(), 0.5);
}

TEST_F(ExchangeLiarTest, AMemberHoldingTheRoundPastTauIsLateByTheCoordinatorsClock) {
  std::map<std::string, Message> first = join();
  fill_sum();
  // d holds its parts back (it waits 9.5 s before each round); the others
  // wait in the round for them. At tau + grace + the round deadline (3.5 s)
  // every member that has not reported is asked to end the round.
  EXPECT_EQ(cancels_until(3.5, order, order), 0u);
  EXPECT_EQ(cancels_until(3.75, order, order), 4u);
  for (const char* name : {"a", "b", "c"}) {
    Message m = failed_report(name, first[name], 3);
    m.envelope.mutable_contribution()->mutable_exchange()->set_cancelled(true);
    receive(name, std::move(m));
  }
  // d does not answer: at the step's deadline (tau + grace + the timeout +
  // grace, 4 s) it is out of the step as a late worker (its micro-batches
  // requeued), whatever it would report, and the others redo the round.
  cancels_until(4.0, order, {});
  EXPECT_EQ(count(take("a"), v1::Envelope::kPlan), 0u);
  cancels_until(4.25, order, {});
  EXPECT_NE(log.text.str().find("worker 'd' (rank 3) is out of step 0 because it missed the "
                                "deadline"),
            std::string::npos)
      << log.text.str();
  redo({"a", "b", "c"}, first);
  EXPECT_EQ(coordinator->step(), 1u) << log.text.str();
  EXPECT_EQ(coordinator->totals().samples_lost(), 0u);
  const MetricsRecords records = metrics();
  ASSERT_EQ(records.steps.size(), 1u);
  for (const v1::WorkerStep& w : records.steps.front().workers()) {
    EXPECT_EQ(w.missed(), w.rank() == 3) << w.rank();
  }
}

// The norm guard on the exchange (coordinator/planes/round_check.h): once the
// members agree on the sum, each is asked for a sketch of its own
// contribution, and the round is committed only when no member's
// contribution, as the sketches and the sum show it, is far beyond the
// others'. Each member's contribution is its own here, the sum theirs in
// rank order.
class ExchangeNormGuardTest : public ExchangeThreeMembersTest {
 protected:
  void SetUp() override {
    ExchangeThreeMembersTest::SetUp();
    config.mutable_guard()->set_norm_multiple(4.0);
  }

  // Each member's [gradient | statistics] (8 samples' statistics each).
  void fill_contributions() {
    const size_t n = replica->parameter_count();
    for (const std::string& name : order) {
      contributions[name].assign(n + replica->buffer_count(), 8.0f);
    }
    for (size_t i = 0; i < n; ++i) {
      contributions["a"][i] = 0.001f * static_cast<float>(i % 97) - 0.04f;
      contributions["b"][i] = 0.002f * static_cast<float>((i * 7) % 89) - 0.09f;
      contributions["c"][i] = 0.0015f * static_cast<float>((i * 13) % 83) - 0.06f;
    }
    sum_of({"a", "b", "c"});
  }
  // The round's sum of `members`' contributions, in rank order, as the
  // exchange makes it.
  void sum_of(const std::vector<std::string>& members) {
    std::vector<float> whole(replica->parameter_count() + replica->buffer_count(), 0.0f);
    for (const std::string& name : members) {
      for (size_t i = 0; i < whole.size(); ++i) whole[i] += contributions[name][i];
    }
    summed.assign(whole.begin(), whole.begin() + static_cast<std::ptrdiff_t>(summed_size()));
    statistics.assign(whole.begin() + static_cast<std::ptrdiff_t>(summed_size()), whole.end());
  }
  size_t summed_size() const { return replica->parameter_count(); }
  // `name`'s answer to `request`: the sketch of what it says it contributed.
  Message sketch(const std::string& name, const Message& request, std::span<const float> values) {
    const v1::RoundCheckRequest& r = request.envelope.round_check_request();
    const SketchShape shape{replica->parameter_count(), values.size(), r.shards(), r.buckets(),
                            r.seed()};
    const std::vector<double> sketch = sketch_shards(values, shape);
    Message m;
    m.envelope = make_envelope(request.envelope.step(), name);
    v1::RoundCheckAnswer& body = *m.envelope.mutable_round_check_answer();
    body.set_attempt(r.attempt());
    body.set_seed(r.seed());
    body.mutable_values()->Assign(sketch.begin(), sketch.end());
    return m;
  }

  std::map<std::string, std::vector<float>> contributions;
};

TEST_F(ExchangeNormGuardTest, AnHonestRoundIsSketchedAndThenCommitted) {
  std::map<std::string, Message> first = join();
  fill_contributions();
  for (const std::string& name : order) receive(name, report(name, first[name], name == "a"));
  receive("a", sum("a", 0));
  std::map<std::string, Message> requests;
  for (const std::string& name : order) {
    std::vector<Message> got = take(name);
    EXPECT_EQ(count(got, v1::Envelope::kUpdate), 0u) << name << ": no commit before the check";
    ASSERT_EQ(count(got, v1::Envelope::kRoundCheckRequest), 1u) << name;
    for (Message& m : got) {
      if (m.envelope.body_case() == v1::Envelope::kRoundCheckRequest) requests[name] = std::move(m);
    }
    EXPECT_EQ(requests[name].envelope.round_check_request().shards(), 3u);
    EXPECT_EQ(requests[name].envelope.round_check_request().attempt(), 0u);
  }
  receive("a", sketch("a", requests["a"], contributions["a"]));
  receive("b", sketch("b", requests["b"], contributions["b"]));
  EXPECT_EQ(coordinator->step(), 0u) << "one sketch is still to come";
  receive("c", sketch("c", requests["c"], contributions["c"]));
  const v1::Update commit = only("b", v1::Envelope::kUpdate).envelope.update();
  EXPECT_TRUE(commit.commit());
  EXPECT_EQ(coordinator->step(), 1u) << log.text.str();
  EXPECT_EQ(replica->parameter_checksum(), expected_checksum(commit));
  EXPECT_EQ(coordinator->totals().samples_completed(), 24u);
  EXPECT_EQ(coordinator->totals().contributions_refused_norm(), 0u);
}

TEST_F(ExchangeNormGuardTest, AShardOwnersForgedShardIsRefusedAndTheRoundRedoneWithoutIt) {
  // b (rank 1) owns shard 1 and sends every member the same forged sum of
  // it (finite, 1e3 added to each value): the digests agree. It reports the
  // sketch of its honest contribution; the sum implies another.
  std::map<std::string, Message> first = join();
  fill_contributions();
  const ExchangePlan shards(summed.size() + statistics.size(), 3, 1);
  for (uint64_t i = shards.shard_begin(1); i < shards.shard_end(1); ++i) summed[i] += 1e3f;
  for (const std::string& name : order) receive(name, report(name, first[name], name == "a"));
  receive("a", sum("a", 0));
  for (const std::string& name : order) {
    receive(name, sketch(name, only(name, v1::Envelope::kRoundCheckRequest), contributions[name]));
  }
  const std::string text = log.text.str();
  EXPECT_NE(
      text.find(
          "step 0: the contribution of worker 'b' (rank 1) is refused: its per-sample gradient "
          "norm"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("as the owner of shard 1, the sum it made of it implies a part of norm"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("the contribution of worker 'a'"), std::string::npos) << text;
  EXPECT_EQ(text.find("the contribution of worker 'c'"), std::string::npos) << text;
  EXPECT_EQ(count(take("b"), v1::Envelope::kUpdate), 0u) << "nothing committed";
  const Message redo = only("a", v1::Envelope::kPlan);
  EXPECT_EQ(redo.envelope.plan().exchange().attempt(), 1u);
  EXPECT_EQ(std::vector<uint32_t>(redo.envelope.plan().exchange().member_ranks().begin(),
                                  redo.envelope.plan().exchange().member_ranks().end()),
            (std::vector<uint32_t>{0, 2}));
  take("c");
  // a and c sum again, honestly; with two members the guard has no median.
  sum_of({"a", "c"});
  receive("a", redo_report("a", first["a"], redo));
  Message c_report = redo_report("c", first["c"], redo);
  c_report.envelope.mutable_contribution()->mutable_exchange()->set_sends_sum(false);
  receive("c", std::move(c_report));
  receive("a", sum("a", 0, 1));
  EXPECT_EQ(coordinator->step(), 1u) << log.text.str();
  EXPECT_EQ(coordinator->totals().contributions_refused_norm(), 1u);
  // b's work is requeued, a's and c's applied: every sample once.
  EXPECT_EQ(coordinator->totals().samples_completed(),
            samples_of(first["a"]).size() + samples_of(first["c"]).size());
  EXPECT_EQ(coordinator->totals().samples_lost(), 0u);
  // b stays in the run (the guard refuses a contribution, not a member),
  // and its samples come first in step 1's plans.
  std::multiset<uint64_t> next;
  for (const std::string& name : order) {
    for (const Message& m : take(name)) {
      if (m.envelope.body_case() == v1::Envelope::kPlan) next.merge(samples_of(m));
    }
  }
  for (uint64_t id : samples_of(first["b"])) EXPECT_TRUE(next.contains(id)) << id;
}

// The norm guard with the keyed sum check: one request carries the key and
// the sketch seed, each answer the tags and the sketch, and the round is
// committed once both agree.
class ExchangeKeyedNormGuardTest : public ExchangeNormGuardTest {
 protected:
  void SetUp() override {
    ExchangeNormGuardTest::SetUp();
    config.mutable_data_plane()->set_sum_digest("gmac");
  }
};

TEST_F(ExchangeKeyedNormGuardTest, OneRequestAsksForTagsAndSketchesAndAnHonestRoundIsCommitted) {
  std::map<std::string, Message> first = join();
  fill_contributions();
  for (const std::string& name : order) receive(name, report(name, first[name], name == "a"));
  receive("a", sum("a", 0));
  for (const std::string& name : order) {
    const Message request = only(name, v1::Envelope::kRoundCheckRequest);
    const v1::RoundCheckRequest& r = request.envelope.round_check_request();
    EXPECT_EQ(r.sum_key().size(), kSumKeyBytes) << name;
    EXPECT_EQ(r.buckets(), kSketchBuckets) << name;
    Message answer = sketch(name, request, contributions[name]);
    for (std::string& t : shard_tags(whole_sum(), 3, std::as_bytes(std::span(r.sum_key())))) {
      answer.envelope.mutable_round_check_answer()->add_sum_tags(std::move(t));
    }
    receive(name, std::move(answer));
  }
  EXPECT_EQ(coordinator->step(), 1u) << log.text.str();
  const v1::Update commit = only("b", v1::Envelope::kUpdate).envelope.update();
  EXPECT_EQ(replica->parameter_checksum(), expected_checksum(commit));
  EXPECT_EQ(coordinator->totals().sum_digest(), "gmac");
  EXPECT_EQ(coordinator->totals().contributions_refused_norm(), 0u);
}

TEST_F(ExchangeNormGuardTest, AMemberThatDoesNotAnswerTheRoundCheckRequestIsTakenOut) {
  std::map<std::string, Message> first = join();
  fill_contributions();
  for (const std::string& name : order) receive(name, report(name, first[name], name == "a"));
  receive("a", sum("a", 0));
  for (const std::string name : {"a", "b"}) {
    receive(name, sketch(name, only(name, v1::Envelope::kRoundCheckRequest), contributions[name]));
  }
  take("c");
  // The run's first round: the wait is 4 x its own measured time (its
  // reports came at once), at least the floor (0.5 s).
  now += 0.4;
  coordinator->tick(now);
  EXPECT_EQ(count(take("a"), v1::Envelope::kPlan), 0u) << "within the floor (0.5 s)";
  now += 0.2;
  coordinator->tick(now);
  const std::string text = log.text.str();
  EXPECT_NE(text.find("worker 'c' (rank 2) is out of step 0 because it did not answer the round's "
                      "check within 0.5 s"),
            std::string::npos)
      << text;
  const Message redo = only("a", v1::Envelope::kPlan);
  EXPECT_EQ(redo.envelope.plan().exchange().attempt(), 1u);
  EXPECT_EQ(redo.envelope.plan().exchange().member_ranks_size(), 2);
}

}  // namespace
}  // namespace dctrain
