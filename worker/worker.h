// The worker process: an I/O loop on the main thread that polls the DEALER
// to the coordinator, the compute thread and the signals, and hands what
// arrives to the worker's session (worker/session.h), which decides what to
// send and when the worker is done; and a compute thread (worker/
// compute_thread.h) that owns the replica and runs plans and updates in
// order. The DEALER is only ever touched by the main thread, so heartbeats
// flow while a plan computes.
#pragma once

#include <spdlog/logger.h>

#include <memory>
#include <string>

#include "proto/wire.pb.h"
#include "worker/exit_codes.h"
#include "worker/options.h"

namespace dctrain {

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
