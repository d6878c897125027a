// The coordinator's logic: membership, the ledger and planner, the reduce,
// the reference replica, evaluation, stop criteria, metrics and checkpoints.
//
// It is driven from outside: handle() for every message that arrives and
// tick() every few milliseconds, both given the time on the caller's clock;
// it answers through an Outbox. It also holds that clock, to read the time
// after its own work (reduce, update, evaluation, checkpoint): a step's clock
// and deadline start when its plans go out, never before. Wall time (stamps
// other processes read) comes from the setup's wall clock. The same code runs
// over ZeroMQ across processes (coordinator/program/main.cc) and, with fake clocks
// and outbox, in one process in the tests. A bad message is logged and
// dropped; it never throws.
//
// This header is the contract; the state and the phases behind it are in
// coordinator/coordinator_impl.h.
#pragma once

#include <spdlog/logger.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "comm/message.h"
#include "common/wall_clock.h"
#include "coordinator/exit_codes.h"
#include "coordinator/ledger.h"
#include "proto/checkpoint.pb.h"
#include "proto/config.pb.h"
#include "proto/wire.pb.h"

namespace dctrain {

class CoordinatorImpl;
class EvaluationThread;
class Evaluator;
class Replica;
struct LiveSnapshot;

// Seconds on a monotonic clock: the process's steady clock, or a test's.
using CoordinatorClock = std::function<double()>;

struct CoordinatorSetup {
  v1::RunConfig config;           // finalized
  uint64_t train_size = 0;        // samples in the (limited) training set
  std::filesystem::path run_dir;  // metrics, summary, checkpoints
  // Resuming: the checkpoint's header (its ledger, counters and next step).
  std::optional<v1::CheckpointHeader> resume;
  // This process's BLAS (common/blas_runtime.h), for summary.json's "blas".
  std::optional<v1::BlasInfo> blas;
  // The sizes the model took from the data, for the checkpoints (with the
  // config they rebuild the model: dctrain-export).
  v1::ModelInput model_input{};
  // Evaluation off the step loop (coordinator/evaluation_thread.h), on a
  // snapshot of the replica; null: evaluations run in the step loop.
  EvaluationThread* evaluation_thread = nullptr;
  // Live metrics: called on the step loop's thread with a fresh snapshot
  // after every step and evaluation (coordinator/program/metrics_server.h).
  std::function<void(std::shared_ptr<const LiveSnapshot>)> publish_metrics{};
  // What the exchange's round checks draw (coordinator/planes/round_check.h:
  // the sketches' seeds, the sum checks' keys, 64 bits a call): no member
  // may know one before it is drawn. Unset: std::random_device. A fixed one
  // only where a recorded run must replay (the fuzz harness).
  std::function<uint64_t()> draw_round_check{};
  // Unix microseconds (heartbeats' stamps, the exchange's run id). Unset:
  // the system's.
  WallClock wall_clock{};
  // The host's 1-minute load average, recorded with every step (a loaded
  // host shows in the report, not as the method's effect). Unset: not read
  // (a simulated run's host is not the run's).
  std::function<double()> host_load{};
  // A completed run writes its model (RUN_DIR/model.safetensors); not a
  // simulated one, whose model is a stand-in.
  bool write_model = true;
};

class Coordinator {
 public:
  // `replica` holds the initial (or restored) state; `evaluator` may be null.
  // Both, and `outbox`, outlive the coordinator.
  Coordinator(CoordinatorSetup setup, Replica& replica, Evaluator* evaluator, Outbox& outbox,
              std::shared_ptr<spdlog::logger> log, CoordinatorClock clock);
  ~Coordinator();
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  // A message from a peer (a bad one is counted, logged and dropped).
  void handle(Received message, double now);
  // Deadlines, liveness, heartbeats, progress; every few milliseconds.
  void tick(double now);
  // The connection `peer`'s messages came on closed (the transport's socket
  // monitor saw it): a worker is declared dead at once, its slot free for a
  // replacement at the next step.
  void on_disconnected(const std::string& peer, double now);

  // Ends the run now (e.g. on Ctrl-C): workers get a bye, the summary is
  // written; exit_code() becomes `exit_code`.
  void stop(const std::string& reason, int exit_code, double now);

  bool finished() const;
  // coordinator/exit_codes.h: kCoordinatorDone when the run ended
  // normally (a stop criterion), else why not.
  int exit_code() const;
  const std::string& stop_reason() const;

  uint64_t step() const;  // the open step, or the next to open
  const Ledger& ledger() const;
  const v1::RunTotals& totals() const;
  // The threshold in force for the next step.
  double tau() const;
  double epochs() const;

 private:
  std::unique_ptr<CoordinatorImpl> impl_;
};

}  // namespace dctrain
