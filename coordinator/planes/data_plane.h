// How a step's contributions become its update: the coordinator's phases
// (coordinator_impl.h) call the data plane at the points where the two
// planes differ, and nowhere else ask which plane the run uses.
//
//   star      every worker sends its contribution to the coordinator, which
//             sums them (comm/rank_order_sum.h's tree), guards the sum, and sends the update
//             (coordinator/planes/star_plane.h)
//   exchange  the workers sum among themselves in rounds the coordinator
//             names; it collects their reports, commits or redoes each
//             round, and applies the sum one member forwards
//             (coordinator/planes/exchange_plane.h)
//
// A step goes open_step -> add_to_plan (each plan) -> accept (each
// contribution) and tick -> hold_open -> settle -> record -> apply, then
// apply_pending once the next plans are out. A plane owns its reduce
// (coordinator/step/reducer.h), and with it who the step still awaits; what it
// may read and ask of the coordinator is coordinator/planes/plane_host.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "comm/message.h"
#include "coordinator/step/reducer.h"
#include "coordinator/step/step_book.h"
#include "coordinator/step/update_guard.h"
#include "proto/metrics.pb.h"
#include "proto/wire.pb.h"

namespace dctrain {

class DataPlane {
 public:
  virtual ~DataPlane() = default;
  DataPlane(const DataPlane&) = delete;
  DataPlane& operator=(const DataPlane&) = delete;

  // The plane in words, for the log at the start.
  virtual std::string_view description() const = 0;
  // What a worker's hello lacks for this plane, if anything (the hello is
  // refused with it).
  virtual std::optional<std::string> hello_problem(const v1::Hello& hello) const = 0;
  // A worker was welcomed under `rank`.
  virtual void joined(uint32_t rank, const v1::Hello& hello) = 0;

  // A step opens among `ranks` (ascending) at `now`, under `tau`.
  virtual void open_step(const std::vector<uint32_t>& ranks, double now, double tau) = 0;
  // The plane's part of each worker's plan of the opening step.
  virtual void add_to_plan(v1::Plan& plan) const = 0;
  // When the step stops waiting for a contribution, its plans sent at `now`.
  virtual double deadline(double now, double tau) const = 0;

  // Why a contribution is not of the step's current round (it is dropped
  // with that, not counted against its sender), if so.
  virtual std::optional<std::string> out_of_round(const v1::Contribution& c) const = 0;
  // What is wrong with a contribution's message (its tensors, or its
  // report of the round), if anything.
  virtual std::optional<std::string> contribution_problem(const Message& message) const = 0;
  // A checked contribution of `rank`, a member of the open step.
  virtual void accept(uint32_t rank, Message message, double now) = 0;
  // Whether the open step still waits for `rank`: a member that has neither
  // contributed (or reported its round) nor been forgotten.
  bool awaits(uint32_t rank) const { return reducer_.expects(rank); }
  // Nothing more is awaited.
  bool all_in() const { return reducer_.complete(); }
  // `rank` will not contribute to the open step (it is out of it).
  void forget(uint32_t rank) { reducer_.forget(rank); }
  // A live member's ExchangeSum and RoundCheckAnswer.
  virtual void on_sum(uint32_t rank, Message message, double now) = 0;
  virtual void on_round_check(uint32_t rank, const Message& message, double now) = 0;

  // The open step's liveness, before its deadline is checked.
  virtual void tick(double now) = 0;
  // After a message or a lost member: a round in flight without a member
  // it waits for is ended at once.
  virtual void members_lost(double now) = 0;
  // Once nothing more is awaited: true while the step stays open (it waits
  // for more, or its round was redone).
  virtual bool hold_open(double now) = 0;
  // The guards' verdict, before the contributions settle into the ledger
  // (what it refuses is out of the step, its micro-batches requeued).
  virtual GuardedStep settle() = 0;
  // The plane's fields of the step's record.
  virtual void record(v1::StepRecord& record) const = 0;
  // The update of the settled step to every live worker and to the
  // coordinator's replica (record.lr() set); sets the record's reduce and
  // apply times. Returns the checksum of the replica's parameters once the
  // update is in it; nothing while it waits for apply_pending().
  virtual std::optional<uint64_t> apply(ClosedStep& closed) = 0;
  // An update the workers have that the coordinator's replica has not yet:
  // applied now (before a welcome, an evaluation, a checkpoint, the end).
  // Returns the replica's checksum after it, when there was one.
  virtual std::optional<uint64_t> apply_pending() = 0;
  // The run stops with the workers one update past the coordinator's
  // replica (an update they applied whose sum never arrived).
  virtual bool workers_ahead() const = 0;

 protected:
  // The reduce of gradients of `parameters` and statistics of `buffers`
  // floats.
  DataPlane(size_t parameters, size_t buffers) : reducer_(parameters, buffers) {}

  // The step's awaited members (begun by open_step), and the sum.
  Reducer reducer_;
};

}  // namespace dctrain
