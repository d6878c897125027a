// The worker's session in one process with a recording link and a manual
// clock: hello on connect, the connect timeout, welcome and Ready,
// heartbeats, silence and rejoin, bye and release, resync after a checksum
// mismatch, a plan computed under tau on the injected clock and its
// contribution sent; and the compute thread's typed outputs.
#include "worker/session.h"

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <limits>
#include <string>

#include "comm/envelope.h"
#include "comm/framing.h"
#include "common/source_version.h"
#include "common/version.h"
#include "tests/testing/fake_cluster.h"
#include "worker/compute_thread.h"
#include "worker/exit_codes.h"

namespace dctrain {
namespace {

using testing::CapturedLog;
using testing::JobRecorder;
using testing::ManualClock;
using testing::RecordingLink;

const char* kConfig = R"(
name: "session"
seed: 7
workers: 3
model { name: "mlp" image_channels: 1 image_height: 8 image_width: 8 }
dataset { kind: "synthetic" synthetic_samples: 600 train_limit: 240 }
optimizer { kind: "sgd" lr: 0.1 momentum: 0.9 }
step { global_batch: 24 micro_batch: 4 tau: inf }
liveness { heartbeat_seconds: 0.8 silence_seconds: 10 grace_seconds: 0.5 join_timeout_seconds: 120 }
stop { max_steps: 4 }
)";

const std::string kAddress = "tcp://127.0.0.1:0";

size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

class SessionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config = parse_run_config(kConfig, "session");
    finalize_run_config(config);
  }

  // Builds the coordinator's reference replica, the worker's trainer and
  // its session (the session logs its start at the clock's time).
  void start() {
    train = open_dataset(config, Split::kTrain, "");
    reference = std::make_unique<Replica>(testing::softmax_for(config), config.optimizer());
    options.name = "w";
    options.connect = kAddress;
    blas.set_core("Haswell");
    trainer = std::make_unique<Trainer>(options, testing::softmax_parts(*train), clock, log.logger);
    session = std::make_unique<WorkerSession>(options, blas, link, jobs, log.logger, clock.time);
  }

  Message from_coordinator(uint64_t step) const {
    Message m;
    m.envelope = make_envelope(step, "coordinator");
    return m;
  }

  // What the coordinator's welcome carries: rank, config, the whole state
  // and its checksum.
  Message welcome(uint64_t step = 0) {
    Message m = from_coordinator(step);
    v1::Welcome& w = *m.envelope.mutable_welcome();
    w.set_rank(1);
    *w.mutable_config() = config;
    w.set_optimizer_steps(static_cast<uint64_t>(reference->optimizer_steps()));
    w.set_parameter_checksum(reference->parameter_checksum());
    reference->add_state(m);
    return m;
  }

  // A plan of `n` micro-batches of 4 samples each (ids 1..n).
  Message plan(uint64_t step, double tau, int n) {
    Message m = from_coordinator(step);
    v1::Plan& p = *m.envelope.mutable_plan();
    p.set_tau(tau);
    p.set_parameter_checksum(reference->parameter_checksum());
    for (int id = 1; id <= n; ++id) {
      v1::MicroBatch& mb = *p.add_micro_batches();
      mb.set_id(static_cast<uint64_t>(id));
      for (uint64_t k = 0; k < 4; ++k) mb.add_samples(4 * static_cast<uint64_t>(id) + k);
    }
    return m;
  }

  Message bye(const std::string& reason, bool released, std::optional<uint64_t> checksum) {
    Message m = from_coordinator(4);
    v1::Bye& b = *m.envelope.mutable_bye();
    b.set_reason(reason);
    b.set_released(released);
    if (checksum) {
      b.set_parameter_checksum(*checksum);
      b.set_has_checksum(true);
    }
    return m;
  }

  Message rejoin_request() {
    Message m = from_coordinator(2);
    m.envelope.mutable_error()->set_message(
        "unknown worker: you are not a member of the run; say hello to rejoin");
    m.envelope.mutable_error()->set_rejoin(true);
    return m;
  }

  Message heartbeat() {
    Message m = from_coordinator(0);
    m.envelope.mutable_heartbeat()->set_sent_unix_micros(1);
    return m;
  }

  void deliver(Message m) { session->handle(encode(std::move(m)), clock.time); }

  // Runs the jobs the session queued through the trainer, as the compute
  // thread does, and hands what it returns back to the session.
  void compute() {
    while (!jobs.jobs.empty()) {
      ComputeJob job = std::move(jobs.jobs.front());
      jobs.jobs.pop_front();
      for (ComputeOutput& out : trainer->handle(std::move(job))) {
        session->on_compute(std::move(out), clock.time);
      }
    }
  }

  // Welcomed and Ready at the clock's time; what was sent is taken.
  void join() {
    session->on_event(ConnectionEvent::kConnected, clock.time);
    deliver(welcome());
    compute();
    link.take();
  }

  std::vector<v1::Envelope::BodyCase> sent_bodies() {
    std::vector<v1::Envelope::BodyCase> out;
    for (const Message& m : link.take()) out.push_back(m.envelope.body_case());
    return out;
  }

  v1::RunConfig config;
  std::unique_ptr<Dataset> train;
  std::unique_ptr<Replica> reference;
  WorkerOptions options;
  v1::BlasInfo blas;
  ManualClock clock;
  RecordingLink link;
  JobRecorder jobs;
  CapturedLog log;
  std::unique_ptr<Trainer> trainer;
  std::unique_ptr<WorkerSession> session;
};

using Body = v1::Envelope::BodyCase;

TEST_F(SessionTest, SaysHelloOnEveryConnectionUntilWelcomedAndAnswersTheWelcomeWithReady) {
  start();
  EXPECT_TRUE(log.contains(
      fmt::format("connecting to {} as 'w' (1 threads, data synthetic only)", kAddress)));
  session->on_event(ConnectionEvent::kConnected, clock.time);
  std::vector<Message> sent = link.take();
  ASSERT_EQ(sent.size(), 1u);
  ASSERT_EQ(sent[0].envelope.body_case(), Body::kHello);
  const v1::Hello& hello = sent[0].envelope.hello();
  EXPECT_EQ(hello.worker_name(), "w");
  EXPECT_EQ(sent[0].envelope.sender(), "w");
  EXPECT_EQ(hello.software_version(), source_version());  // the build, not only the release
  EXPECT_EQ(hello.threads(), 1u);
  EXPECT_FALSE(hello.has_data_dir());
  EXPECT_EQ(hello.blas().core(), "Haswell");

  // The connection drops before any answer: the next one says hello again.
  session->on_event(ConnectionEvent::kDisconnected, clock.time);
  EXPECT_FALSE(log.contains("lost the connection")) << "not answered yet: nothing was lost";
  session->on_event(ConnectionEvent::kConnected, clock.time);
  EXPECT_EQ(sent_bodies(), std::vector<Body>{Body::kHello});
  clock.time = 1.0;
  session->tick(clock.time);
  EXPECT_TRUE(link.sent.empty()) << "no heartbeat before the coordinator answers";
  EXPECT_EQ(session->poll_seconds(), 0.25);

  clock.time = 2.5;
  deliver(welcome());
  EXPECT_TRUE(session->answered());
  EXPECT_TRUE(log.contains(fmt::format("the coordinator at {} answered after 2.5 s", kAddress)))
      << log.text.str();
  ASSERT_EQ(jobs.jobs.size(), 1u);
  EXPECT_EQ(jobs.jobs.front().received, 2.5);
  EXPECT_EQ(session->poll_seconds(), 0.4) << "half the run's heartbeat interval";
  compute();
  sent = link.take();
  ASSERT_EQ(sent.size(), 1u);
  ASSERT_EQ(sent[0].envelope.body_case(), Body::kReady);
  EXPECT_EQ(sent[0].envelope.ready().parameter_checksum(), reference->parameter_checksum());
  ASSERT_NE(trainer->replica(), nullptr);
  EXPECT_EQ(trainer->replica()->parameter_checksum(), reference->parameter_checksum());
  EXPECT_TRUE(log.contains("welcomed as rank 1 of 3")) << log.text.str();

  // Once answered, a new connection is a reconnection: no hello.
  session->on_event(ConnectionEvent::kDisconnected, clock.time);
  EXPECT_TRUE(log.contains(
      fmt::format("lost the connection to the coordinator at {}; reconnecting", kAddress)));
  session->on_event(ConnectionEvent::kConnected, clock.time);
  EXPECT_TRUE(link.sent.empty());
  EXPECT_FALSE(session->done());
}

TEST_F(SessionTest, GivesUpAfterTheConnectTimeoutNamingTheAttempts) {
  options.connect_timeout = 3.0;
  start();
  clock.time = 1.0;
  session->tick(clock.time);
  EXPECT_FALSE(log.contains("waiting for the coordinator"));
  session->on_event(ConnectionEvent::kRetried, clock.time);
  session->on_event(ConnectionEvent::kRetried, clock.time);
  clock.time = 2.0;
  session->tick(clock.time);
  EXPECT_TRUE(log.contains(fmt::format(
      "waiting for the coordinator at {}: no answer yet (attempt 3, 2 s of 3 s)", kAddress)))
      << log.text.str();
  clock.time = 2.9;
  session->tick(clock.time);
  EXPECT_FALSE(session->done());
  clock.time = 3.0;
  session->tick(clock.time);
  ASSERT_TRUE(session->done());
  EXPECT_EQ(session->exit_code(), kWorkerNoCoordinator);
  EXPECT_TRUE(log.contains(fmt::format(
      "no answer from the coordinator at {} within 3 s (3 connection attempts): ", kAddress)))
      << log.text.str();
  EXPECT_TRUE(log.contains("(--connect-timeout sets how long to wait)"));
  EXPECT_TRUE(link.sent.empty()) << "never connected: no hello went out";
}

TEST_F(SessionTest, ConnectedButUnansweredIsSaidSoAndZeroWaitsForever) {
  options.connect_timeout = 3.0;
  start();
  session->on_event(ConnectionEvent::kConnected, clock.time);
  clock.time = 2.0;
  session->tick(clock.time);
  EXPECT_TRUE(log.contains("connected, no answer to the hello yet (attempt 1, 2 s of 3 s)"))
      << log.text.str();
  clock.time = 3.0;
  session->tick(clock.time);
  EXPECT_EQ(session->exit_code(), kWorkerNoCoordinator);
  EXPECT_TRUE(log.contains("(1 connection attempts; connected, but the hello got no answer)"))
      << log.text.str();

  // --connect-timeout 0: no limit.
  options.connect_timeout = 0.0;
  clock.time = 0.0;
  session = std::make_unique<WorkerSession>(options, blas, link, jobs, log.logger, clock.time);
  for (clock.time = 0.0; clock.time < 1000.0; clock.time += 0.5) session->tick(clock.time);
  EXPECT_FALSE(session->done());
  EXPECT_TRUE(log.contains("no answer yet (attempt 1, 998 s of no limit)")) << log.text.str();
}

TEST_F(SessionTest, HeartbeatsWhenItHasSentNothingForTheRunsInterval) {
  start();
  join();  // the Ready went out at 0
  clock.time = 0.7;
  session->tick(clock.time);
  EXPECT_TRUE(link.sent.empty());
  clock.time = 0.8;
  session->tick(clock.time);
  EXPECT_EQ(sent_bodies(), std::vector<Body>{Body::kHeartbeat});
  clock.time = 1.2;
  session->tick(clock.time);
  EXPECT_TRUE(link.sent.empty());
  clock.time = 1.7;
  session->tick(clock.time);
  EXPECT_EQ(sent_bodies(), std::vector<Body>{Body::kHeartbeat});
}

TEST_F(SessionTest, SilentCoordinatorMeansHelloAgainAndWaitingAsAtTheStart) {
  options.connect_timeout = 20.0;
  start();
  join();
  clock.time = 20.0;
  deliver(heartbeat());  // heard at 20
  // Patience: max(30 s, 3 x silence_seconds 10 s) = 30 s.
  for (clock.time = 20.5; clock.time <= 50.0; clock.time += 0.5) session->tick(clock.time);
  EXPECT_TRUE(session->answered());
  EXPECT_FALSE(log.contains("no word from the coordinator")) << log.text.str();
  link.take();
  clock.time = 50.1;
  session->tick(clock.time);
  EXPECT_TRUE(log.contains("no word from the coordinator for 30 s; saying hello again"))
      << log.text.str();
  EXPECT_FALSE(session->answered());
  std::vector<Message> sent = link.take();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].envelope.body_case(), Body::kHello);
  // Waiting again: no heartbeats, and the connect timeout counts from now.
  for (clock.time = 50.5; clock.time < 70.0; clock.time += 0.5) session->tick(clock.time);
  EXPECT_TRUE(link.sent.empty());
  EXPECT_FALSE(session->done());
  clock.time = 70.5;
  session->tick(clock.time);
  EXPECT_EQ(session->exit_code(), kWorkerNoCoordinator);
}

TEST_F(SessionTest, RestartedCoordinatorWelcomesTheRejoiningWorker) {
  config.mutable_liveness()->set_silence_seconds(20);  // patience 60 s
  start();
  join();
  for (clock.time = 0.5; clock.time <= 60.0; clock.time += 0.5) session->tick(clock.time);
  EXPECT_TRUE(session->answered());
  clock.time = 60.5;
  session->tick(clock.time);
  EXPECT_TRUE(log.contains("no word from the coordinator for 60 s; saying hello again"))
      << log.text.str();
  link.take();
  clock.time = 63.0;
  deliver(welcome(12));
  EXPECT_TRUE(log.contains(fmt::format("the coordinator at {} answered after 2.5 s", kAddress)))
      << log.text.str();
  compute();
  EXPECT_EQ(sent_bodies(), std::vector<Body>{Body::kReady});
}

TEST_F(SessionTest, RejoinRequestIsAnsweredWithHelloUntilTheCoordinatorSaysBye) {
  start();
  join();
  deliver(rejoin_request());
  EXPECT_TRUE(log.contains("say hello to rejoin; saying hello again")) << log.text.str();
  EXPECT_EQ(sent_bodies(), std::vector<Body>{Body::kHello});

  deliver(bye("max_steps reached", false, reference->parameter_checksum()));
  EXPECT_TRUE(log.contains("the coordinator ends the run: max_steps reached")) << log.text.str();
  deliver(rejoin_request());
  EXPECT_TRUE(link.sent.empty()) << "leaving: no hello after the bye";
  EXPECT_FALSE(session->done()) << "the compute side decides the exit code";
  compute();
  ASSERT_TRUE(session->done());
  EXPECT_EQ(session->exit_code(), kWorkerDone);
  EXPECT_TRUE(log.contains("final replica identical to the coordinator's")) << log.text.str();
}

TEST_F(SessionTest, ByeWithAnotherChecksumEndsDiverged) {
  start();
  join();
  deliver(bye("max_steps reached", false, reference->parameter_checksum() ^ 1));
  compute();
  EXPECT_EQ(session->exit_code(), kWorkerDiverged);
  EXPECT_TRUE(log.contains("final replica differs from the coordinator's")) << log.text.str();
}

TEST_F(SessionTest, ReleasedWorkerEndsWithTheReleasedStatus) {
  start();
  join();
  deliver(bye("missed 3 step deadlines in a row", true, std::nullopt));
  EXPECT_FALSE(log.contains("the coordinator ends the run"))
      << "the run goes on without this worker";
  compute();
  EXPECT_EQ(session->exit_code(), kWorkerReleased);
  EXPECT_TRUE(log.contains("released from the run: missed 3 step deadlines in a row"))
      << log.text.str();
  EXPECT_TRUE(link.sent.empty());
}

TEST_F(SessionTest, ResyncAfterAChecksumMismatchRestoresTheCoordinatorsState) {
  start();
  join();
  // The replica drifts (a bit flip, a bad update...).
  trainer->replica()->model().parameters().flat()[0] += 1e-3f;
  const uint64_t drifted = trainer->replica()->parameter_checksum();
  ASSERT_NE(drifted, reference->parameter_checksum());
  deliver(plan(0, std::numeric_limits<double>::infinity(), 2));
  compute();
  std::vector<Message> sent = link.take();
  ASSERT_EQ(sent.size(), 1u);
  ASSERT_EQ(sent[0].envelope.body_case(), Body::kContribution);
  EXPECT_EQ(sent[0].envelope.contribution().parameter_checksum(), drifted)
      << "the contribution tells the coordinator which parameters it was computed on";
  EXPECT_TRUE(log.contains(
      fmt::format("step 0: this replica differs from the coordinator's (checksum {:016x}, "
                  "coordinator {:016x})",
                  drifted, reference->parameter_checksum())))
      << log.text.str();

  // The coordinator drops it and resends its state: a welcome again.
  deliver(welcome(1));
  EXPECT_TRUE(session->answered());
  compute();
  sent = link.take();
  ASSERT_EQ(sent.size(), 1u) << "no hello: a resync is not a rejoin";
  ASSERT_EQ(sent[0].envelope.body_case(), Body::kReady);
  EXPECT_EQ(sent[0].envelope.step(), 1u);
  EXPECT_EQ(sent[0].envelope.ready().parameter_checksum(), reference->parameter_checksum());
  EXPECT_EQ(trainer->replica()->parameter_checksum(), reference->parameter_checksum());
  EXPECT_EQ(count(log.text.str(), "training data:"), 1u) << "the same data is not loaded twice";
}

TEST_F(SessionTest, PlanRunsUnderTauOnTheInjectedClockAndItsContributionGoesOut) {
  // 10 ms of injected delay after each micro-batch, tau 25 ms: micro-batches
  // start at 0, 10 and 20 ms on the step compute clock; the fourth would
  // start at 30 ms and is dropped. The manual clock only moves by the
  // delays, so the figures are exact.
  config.mutable_delay()->set_kind(v1::DELAY_CONSTANT);
  config.mutable_delay()->set_seconds(0.01);
  start();
  join();
  clock.time = 5.0;
  deliver(plan(0, 0.025, 4));
  ASSERT_EQ(jobs.jobs.size(), 1u);
  clock.time = 5.5;  // the compute thread starts on it half a second later
  compute();
  std::vector<Message> sent = link.take();
  ASSERT_EQ(sent.size(), 1u);
  const Message& m = sent[0];
  ASSERT_EQ(m.envelope.body_case(), Body::kContribution);
  EXPECT_EQ(m.envelope.sender(), "w");
  const v1::Contribution& c = m.envelope.contribution();
  ASSERT_EQ(c.completed_size(), 3);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(c.completed(i).id(), static_cast<uint64_t>(i + 1));
    EXPECT_NEAR(c.completed(i).compute_seconds(), 0.01, 1e-9);
    EXPECT_DOUBLE_EQ(c.completed(i).delay_seconds(), 0.01);
  }
  ASSERT_EQ(c.dropped_size(), 1);
  EXPECT_EQ(c.dropped(0), 4u);
  EXPECT_EQ(c.samples(), 12u);
  EXPECT_NEAR(c.compute_seconds(), 0.03, 1e-9);
  EXPECT_NEAR(c.overhead_seconds(), 0.5, 1e-9) << "from arrival to the compute's start";
  EXPECT_EQ(c.parameter_checksum(), reference->parameter_checksum());
  ASSERT_EQ(m.envelope.tensors_size(), 2);
  EXPECT_EQ(m.envelope.tensors(0).name(), "gradient");
  EXPECT_EQ(m.envelope.tensors(0).count(), reference->parameter_count());

  // Sending the contribution counts as traffic: the next heartbeat is due
  // a heartbeat interval after it.
  const double sent_at = clock.time;
  clock.time = sent_at + 0.7;
  session->tick(clock.time);
  EXPECT_TRUE(link.sent.empty());
  clock.time = sent_at + 0.85;
  session->tick(clock.time);
  EXPECT_EQ(sent_bodies(), std::vector<Body>{Body::kHeartbeat});
}

TEST_F(SessionTest, RefusalEndsTheSession) {
  start();
  session->on_event(ConnectionEvent::kConnected, clock.time);
  link.take();
  Message refusal = from_coordinator(0);
  refusal.envelope.set_protocol_version(kProtocolVersion +
                                        1);  // refusals are read whatever their version
  refusal.envelope.mutable_refusal()->set_reason("the run already has its 3 workers, all alive");
  deliver(std::move(refusal));
  ASSERT_TRUE(session->done());
  EXPECT_EQ(session->exit_code(), kWorkerRefused);
  EXPECT_TRUE(
      log.contains("the coordinator refused this worker: the run already has its 3 workers"))
      << log.text.str();
  session->tick(100.0);
  session->on_event(ConnectionEvent::kConnected, 100.0);
  EXPECT_TRUE(link.sent.empty()) << "a finished session sends nothing";
}

TEST_F(SessionTest, SignalSaysByeAndEndsInterrupted) {
  start();
  join();
  session->on_signal(15, clock.time);
  ASSERT_TRUE(session->done());
  EXPECT_EQ(session->exit_code(), kWorkerInterrupted);
  EXPECT_TRUE(log.contains("signal 15 received: leaving the run"));
  std::vector<Message> sent = link.take();
  ASSERT_EQ(sent.size(), 1u);
  ASSERT_EQ(sent[0].envelope.body_case(), Body::kBye);
  EXPECT_EQ(sent[0].envelope.bye().reason(), "worker interrupted by a signal");
  // What the compute side hands back afterwards is not sent.
  session->on_compute(ComputeOutput(heartbeat()), clock.time);
  EXPECT_TRUE(link.sent.empty());
}

TEST_F(SessionTest, BadMessagesAreLoggedAndDroppedAndDoNotCountAsAnAnswer) {
  start();
  std::vector<zmq::message_t> garbage;
  garbage.emplace_back(std::string("\x13\x37 not a protobuf at all \xff\xfe"));
  session->handle(std::move(garbage), clock.time);
  EXPECT_TRUE(log.contains("dropped a message from the coordinator: ")) << log.text.str();
  Message old = heartbeat();
  old.envelope.set_protocol_version(kProtocolVersion + 7);
  deliver(std::move(old));
  EXPECT_TRUE(log.contains("dropped a message: ")) << log.text.str();
  EXPECT_FALSE(session->answered());
  EXPECT_TRUE(jobs.jobs.empty());

  Message stray = from_coordinator(0);
  stray.envelope.mutable_contribution()->set_samples(1);
  deliver(std::move(stray));
  EXPECT_TRUE(log.contains("dropped a contribution from the coordinator")) << log.text.str();
  Message report = from_coordinator(0);
  report.envelope.mutable_error()->set_message("a warning");
  deliver(std::move(report));
  EXPECT_TRUE(log.contains("the coordinator reports: a warning"));
  EXPECT_TRUE(link.sent.empty());
  EXPECT_TRUE(jobs.jobs.empty());
  EXPECT_FALSE(session->done());
}

TEST_F(SessionTest, ComputeFailureIsReportedToTheCoordinatorAndEndsFailed) {
  start();
  session->on_event(ConnectionEvent::kConnected, clock.time);
  link.take();
  Message bad = welcome();
  bad.envelope.mutable_welcome()->set_parameter_checksum(reference->parameter_checksum() + 1);
  deliver(std::move(bad));
  compute();
  std::vector<Message> sent = link.take();
  ASSERT_EQ(sent.size(), 1u);
  ASSERT_EQ(sent[0].envelope.body_case(), Body::kError);
  EXPECT_EQ(sent[0].envelope.error().message(),
            "the welcome's parameters do not match their checksum");
  ASSERT_TRUE(session->done());
  EXPECT_EQ(session->exit_code(), kWorkerFailed);
  EXPECT_TRUE(trainer->finished());
}

// The compute thread for real: jobs in, typed outputs back, the PAIR only
// waking the poll.
std::optional<ComputeOutput> take_within(ComputeThread& thread, std::chrono::seconds limit) {
  std::vector<zmq::pollitem_t> items;
  thread.add_poll_item(items);
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (std::optional<ComputeOutput> out = thread.try_take()) return out;
    zmq::poll(items, std::chrono::milliseconds(100));
  }
  return std::nullopt;
}

TEST_F(SessionTest, ComputeThreadHandsBackMessagesAndThenItsStatus) {
  start();
  zmq::context_t context(1);
  ComputeThread thread(context, *trainer);
  thread.push(ComputeJob{welcome(), 0.0});
  std::optional<ComputeOutput> out = take_within(thread, std::chrono::seconds(20));
  ASSERT_TRUE(out.has_value());
  ASSERT_TRUE(std::holds_alternative<Message>(*out));
  EXPECT_EQ(std::get<Message>(*out).envelope.body_case(), Body::kReady);
  thread.push(ComputeJob{bye("done", false, reference->parameter_checksum()), 0.0});
  out = take_within(thread, std::chrono::seconds(20));
  ASSERT_TRUE(out.has_value());
  ASSERT_TRUE(std::holds_alternative<ComputeStatus>(*out));
  EXPECT_EQ(std::get<ComputeStatus>(*out).exit_code, kWorkerDone);
  // Finished: a later job is not taken.
  thread.push(ComputeJob{welcome(), 0.0});
  EXPECT_FALSE(take_within(thread, std::chrono::seconds(1)).has_value());
}

TEST_F(SessionTest, TheCoordinatorsWordEndsTheExchangeRoundsItMakesStale) {
  // What ends the round the compute thread may be waiting in (data plane
  // "exchange"): each message, in the order a step's failure brings them.
  start();
  RoundCancel rounds;
  session->set_round_cancel(&rounds);
  const uint64_t run = 7;
  const auto exchange_plan = [&](uint64_t step, uint32_t attempt) {
    Message m = plan(step, std::numeric_limits<double>::infinity(), 1);
    v1::ExchangePlan& x = *m.envelope.mutable_plan()->mutable_exchange();
    x.set_attempt(attempt);
    x.set_run(run);
    return m;
  };
  deliver(welcome(3));
  deliver(exchange_plan(3, 0));
  EXPECT_FALSE(rounds.ended({3, 0, run})) << "a welcome ends only rounds planned before it";
  // A member died: the redo's plan ends attempt 0, not itself.
  deliver(exchange_plan(3, 1));
  EXPECT_TRUE(rounds.ended({3, 0, run}));
  EXPECT_FALSE(rounds.ended({3, 1, run}));
  // The redo is overdue: the coordinator asks for what this member has.
  Message cancel = from_coordinator(3);
  cancel.envelope.mutable_exchange_cancel()->set_attempt(1);
  deliver(std::move(cancel));
  EXPECT_TRUE(rounds.ended({3, 1, run}));
  EXPECT_FALSE(rounds.ended({4, 0, run}));
  // A resync welcome at the step the coordinator plans next ends what was
  // planned before it, not that step.
  deliver(exchange_plan(4, 0));
  deliver(welcome(5));
  EXPECT_TRUE(rounds.ended({4, 0, run}));
  EXPECT_FALSE(rounds.ended({5, 0, run}));
  // A dropped step's update ends every attempt of it.
  deliver(exchange_plan(5, 0));
  Message dropped = from_coordinator(5);
  dropped.envelope.mutable_update()->set_commit(true);
  deliver(std::move(dropped));
  EXPECT_TRUE(rounds.ended({5, 3, run}));
  EXPECT_FALSE(rounds.ended({6, 0, run}));
  // A coordinator restarted from a checkpoint (a later run) starts afresh.
  EXPECT_FALSE(rounds.ended({0, 0, run + 1}));
  // The session's end (a signal here) ends whatever runs.
  session->on_signal(SIGTERM, clock.time);
  EXPECT_TRUE(rounds.ended({99, 0, run + 1}));
}

}  // namespace
}  // namespace dctrain
