// The coordinator's message handling (Coordinator::handle and tick, through
// its public interface only) fed a script of arbitrary multipart messages
// from four peers, ticks and a stop, on a fake clock with a recording
// outbox, as tests/coordinator/coordinator_test.cc drives it. A fresh
// coordinator per input (its run folder is reused). What must hold: it
// never throws, crashes or trips a sanitizer; whatever it sent decodes.
// The input's first byte picks the run: the star data plane, the exchange
// (whose reports, digests, sums and blame the script then reaches), or the
// exchange with its norm guard (sketch requests, answers and judgement; the
// guard's seed fixed, so that recorded answers replay).
// The seeds are real runs (fuzz/seeds.cc): hellos, readies and contributions
// with their gradient frames on the star; on the exchange, hellos with
// endpoints and tokens, readies, round reports and sums; so mutations start
// deep in a run.
#include <cstdio>
#include <cstdlib>

#include "coordinator/coordinator.h"
#include "fuzz/frames.h"
#include "fuzz/harness.h"
#include "runtime/setup.h"
#include "tests/testing/fake_cluster.h"

namespace dctrain::fuzz {
namespace {

struct Fixture {
  v1::RunConfig star = run_config();
  v1::RunConfig exchange = exchange_run_config();
  v1::RunConfig guarded = guarded_exchange_run_config();
  std::unique_ptr<Dataset> train = open_dataset(star, Split::kTrain, "");
  uint64_t train_size = train_samples(star, *train);
  std::filesystem::path run_dir = scratch_dir("coordinator");
  std::shared_ptr<spdlog::logger> log = quiet_logger();
};

// What the coordinator sent must be a message its workers can decode.
void check_sent(testing::RecordingOutbox& outbox) {
  for (auto& [peer, queue] : outbox.inbox) {
    for (Message& m : queue) {
      Message decoded;
      if (const auto problem = decode(encode(std::move(m)), decoded)) {
        std::fprintf(stderr, "the coordinator sent '%s' a message that does not decode: %s\n",
                     peer.c_str(), problem->c_str());
        std::abort();
      }
    }
  }
  outbox.inbox.clear();
}

}  // namespace
}  // namespace dctrain::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dctrain;
  static fuzz::Fixture fixture;  // once per process: config, data, run folder
  if (size == 0) return 0;
  const auto plane = static_cast<fuzz::Plane>(data[0]);
  ++data;
  --size;
  v1::RunConfig config = plane == fuzz::Plane::kExchange          ? fixture.exchange
                         : plane == fuzz::Plane::kGuardedExchange ? fixture.guarded
                                                                  : fixture.star;
  resolve_step_budget(config, fixture.train_size);  // as the program does
  Replica replica(testing::softmax_for(config), config.optimizer());
  testing::RecordingOutbox outbox;
  double now = 0.0;
  CoordinatorSetup setup{config, fixture.train_size, fixture.run_dir, std::nullopt, std::nullopt};
  setup.draw_round_check = [] { return fuzz::kSketchSeed; };
  setup.wall_clock = [] { return fuzz::kWallClockMicros; };
  Coordinator coordinator(setup, replica, nullptr, outbox, fixture.log, [&now] { return now; });
  fuzz::Reader in(data, size);
  // A bound on the actions keeps one input's time bounded.
  for (int actions = 0; !in.done() && !coordinator.finished() && actions < 512; ++actions) {
    fuzz::Action a = fuzz::read_action(in);
    now += a.advance;
    switch (a.kind) {
      case fuzz::Kind::kMessage:
        coordinator.handle(Received{fuzz::peer_name(a.peer), fuzz::to_messages(a.parts)}, now);
        break;
      case fuzz::Kind::kTick:
      case fuzz::Kind::kEvent:
        coordinator.tick(now);
        break;
      case fuzz::Kind::kCompute:
        if (a.peer == 0xff)
          coordinator.stop("stopped by the script", 1, now);
        else
          coordinator.tick(now);
        break;
    }
    fuzz::check_sent(outbox);
  }
  return 0;
}
