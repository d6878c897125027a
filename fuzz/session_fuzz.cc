// The worker's session (WorkerSession::handle, on_event, on_signal, tick,
// through its public interface only) and its compute side (the real
// Trainer on a replica of the fuzz run's model) fed a script of arbitrary
// multipart messages from the coordinator, connection events, signals and
// ticks, on a manual clock with a recording link, as
// tests/worker/session_test.cc drives them. The jobs the session hands to
// the compute side run at once, their outputs go back to the session. A
// fresh session and trainer per input. What must hold: nothing throws,
// crashes or trips a sanitizer; whatever the worker sent decodes.
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "fuzz/frames.h"
#include "fuzz/harness.h"
#include "runtime/setup.h"
#include "tests/testing/fake_cluster.h"

namespace dctrain::fuzz {
namespace {

struct Fixture {
  v1::RunConfig config = run_config();
  std::unique_ptr<Dataset> train = open_dataset(config, Split::kTrain, "");
  std::shared_ptr<spdlog::logger> log = quiet_logger();
};

// The test parts, but a welcome whose config names another model is
// refused as a worker refuses a model it cannot build: this harness has
// only the softmax model of the fuzz run (a fuzzed size would only measure
// how much memory a huge model takes).
TrainerParts parts_for(const Fixture& fixture) {
  TrainerParts parts = testing::softmax_parts(*fixture.train);
  parts.make_model = [&fixture](const v1::RunConfig& config, const Dataset&) {
    const v1::ModelConfig& want = fixture.config.model();
    const v1::ModelConfig& got = config.model();
    if (got.image_channels() != want.image_channels() ||
        got.image_height() != want.image_height() || got.image_width() != want.image_width() ||
        got.num_classes() != want.num_classes()) {
      throw std::runtime_error("the welcome's model is not the fuzz run's");
    }
    return testing::softmax_for(config);
  };
  return parts;
}

void check_sent(testing::RecordingLink& link) {
  for (Message& m : link.take()) {
    Message decoded;
    if (const auto problem = decode(encode(std::move(m)), decoded)) {
      std::fprintf(stderr, "the worker sent a message that does not decode: %s\n",
                   problem->c_str());
      std::abort();
    }
  }
}

}  // namespace
}  // namespace dctrain::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dctrain;
  static const fuzz::Fixture fixture;  // once per process: config, data
  WorkerOptions options;
  options.name = "a";
  options.connect = "tcp://127.0.0.1:0";  // never dialled: the link is a recorder
  testing::ManualClock clock;
  testing::RecordingLink link;
  testing::JobRecorder jobs;
  Trainer trainer(options, fuzz::parts_for(fixture), clock, fixture.log);
  WorkerSession session(options, v1::BlasInfo(), link, jobs, fixture.log, clock.time);
  fuzz::Reader in(data, size);
  for (int actions = 0; !in.done() && !session.done() && actions < 512; ++actions) {
    fuzz::Action a = fuzz::read_action(in);
    clock.time += a.advance;
    switch (a.kind) {
      case fuzz::Kind::kMessage:
        session.handle(fuzz::to_messages(a.parts), clock.time);
        break;
      case fuzz::Kind::kTick:
        session.tick(clock.time);
        break;
      case fuzz::Kind::kEvent:
        session.on_event(static_cast<ConnectionEvent>(a.peer % 4), clock.time);
        break;
      case fuzz::Kind::kCompute:
        session.on_signal(a.peer, clock.time);
        break;
    }
    // The compute thread's part: every job handed over, in order.
    while (!jobs.jobs.empty()) {
      ComputeJob job = std::move(jobs.jobs.front());
      jobs.jobs.pop_front();
      for (ComputeOutput& out : trainer.handle(std::move(job))) {
        session.on_compute(std::move(out), clock.time);
      }
    }
    fuzz::check_sent(link);
  }
  return 0;
}
