// What a data plane (coordinator/planes/data_plane.h) works on and may ask of the
// coordinator that runs it, and nothing else: the planes never see
// CoordinatorImpl.
//
//   PlaneRooms  the rooms a plane shares with the coordinator's phases,
//               each behind its own interface (the members, the replica,
//               the open step's book, the guard, the trace, the totals)
//   PlaneHost   the open step as the coordinator keeps it, and the only
//               ways a plane changes it: take a worker out of the step,
//               declare it dead, release it, move the step's deadline,
//               close the step
//
// A plane is tested alone against a fake host (tests/coordinator/
// plane_host_fake.h).
#pragma once

#include <spdlog/logger.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "comm/message.h"
#include "coordinator/step/membership.h"
#include "coordinator/step/peer_limits.h"
#include "coordinator/step/step_book.h"
#include "coordinator/step/update_guard.h"
#include "proto/config.pb.h"
#include "proto/metrics.pb.h"
#include "runtime/replica.h"
#include "trace/timeline.h"

namespace dctrain {

struct PlaneRooms {
  const v1::RunConfig& config;
  std::shared_ptr<spdlog::logger> log;
  const std::function<double()>& clock;  // this process's monotonic seconds
  Membership& membership;
  Replica& replica;                   // the coordinator's reference replica
  StepBook& book;                     // the open step's (step_book.h)
  UpdateGuard& guard;
  Timeline& timeline;
  v1::RunTotals& totals;
  PeerLog& peer_log;
};

class PlaneHost {
 public:
  virtual ~PlaneHost() = default;

  // The open step, or the next to open.
  virtual uint64_t step() const = 0;
  // Whether a step is open.
  virtual bool stepping() const = 0;
  // The checksum of the parameters the open step computes on.
  virtual uint64_t start_checksum() const = 0;
  // When the open step stops waiting for a contribution.
  virtual double deadline() const = 0;
  virtual void set_deadline(double deadline) = 0;
  // The divisor of the step's gradient sum (normalization, short steps:
  // the samples planned are the book's), and the learning rate of its
  // update.
  virtual double step_divisor(const ClosedStep& closed) const = 0;
  virtual double step_learning_rate() const = 0;

  virtual void send(const std::string& peer, Message message) = 0;
  // Takes `rank` out of the open step, once (step_book.h): what it sent is
  // dropped and its micro-batches requeued; a lost worker is logged with
  // `why`.
  virtual void remove(uint32_t rank, Removal removal, const std::string& why) = 0;
  // The open step is dropped for `rank` through no fault of its own: no
  // longer awaited, what it reported dropped, its micro-batches requeued.
  virtual void drop_from_step(uint32_t rank) = 0;
  // `rank` is presumed dead: out of the step if still awaited, its slot
  // free; heard again, it is asked to say hello.
  virtual void declare_dead(uint32_t rank, const std::string& why) = 0;
  // `rank` is released from the run (`why`, for the log and its bye).
  virtual void release(uint32_t rank, const std::string& why) = 0;
  // Nothing more is awaited: the step closes (or the plane holds it open).
  virtual void close_step(double now) = 0;
};

}  // namespace dctrain
