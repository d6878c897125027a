// The worker process: an I/O loop on the main thread (the DEALER to the
// coordinator, heartbeats, signals) and a compute thread that owns the
// replica and runs plans and updates in order. The two talk through a job
// queue one way and an inproc PAIR socket the other, so the DEALER is only
// ever touched by the main thread and heartbeats flow while a plan computes.
#pragma once

#include <memory>
#include <string>

#include <spdlog/logger.h>

#include "proto/wire.pb.h"
#include "worker/options.h"

namespace dctrain {

// Exit codes of dctrain-worker.
inline constexpr int kWorkerDone = 0;            // the run ended; replica identical to the coordinator's
inline constexpr int kWorkerFailed = 1;          // a fatal problem (logged)
inline constexpr int kWorkerRefused = 2;         // the coordinator refused this worker
inline constexpr int kWorkerDiverged = 3;        // the final replica differs from the coordinator's
inline constexpr int kWorkerNoCoordinator = 4;   // no answer from the coordinator within --connect-timeout
inline constexpr int kWorkerReleased = 5;        // released from the run (missed too many deadlines in a row)
inline constexpr int kWorkerInterrupted = 130;   // SIGINT / SIGTERM

// Runs until the coordinator says bye, refuses, or a signal arrives, or the
// coordinator has not answered for options.connect_timeout seconds. Until
// the coordinator first answers, the worker says hello on every connection
// ZeroMQ establishes (it retries refused or unreachable addresses by itself)
// and logs what it is waiting for every few seconds. `blas` (the core this
// process settled on, common/blas_runtime.h) travels in the hello.
int run_worker(const WorkerOptions& options, const v1::BlasInfo& blas,
               std::shared_ptr<spdlog::logger> log);

// host:pid, the default worker name.
std::string default_worker_name();

}  // namespace dctrain
