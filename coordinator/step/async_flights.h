// Policy "async" (asynchronous SGD, the coordinator as the parameter
// server): the plans in flight, each computing on the parameters of the
// version (updates applied) it was sent with, and the bound on staleness.
//
// A contribution is applied as it arrives; its staleness is the updates
// applied between its plan and its own. The bound max_staleness S holds for
// every update because a plan goes out only when no plan in flight could
// then end up more than S updates old: with F the plans in flight, a new
// plan at version v is admitted when v - base(u) + |F| <= S for each u in F
// (each of the |F| - 1 others, and the new one, may land before u). An
// update keeps v - base(u) + |F| - 1 (v up by one, F down by one), and a
// lost plan lowers it, so the bound is an invariant: the fast workers wait
// for a slow one instead of outrunning it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "coordinator/step/step_book.h"

namespace dctrain {

struct Flight {
  Planned planned;        // what the worker was planned
  uint64_t version = 0;   // the updates applied when it was sent (its envelope's step)
  uint64_t checksum = 0;  // of the parameters it carried
  double sent = 0.0;      // on the coordinator's clock
  double deadline = 0.0;  // it is lost after this (inf: only by liveness)
};

class AsyncFlights {
 public:
  explicit AsyncFlights(uint32_t max_staleness) : max_staleness_(max_staleness) {}

  uint32_t max_staleness() const { return max_staleness_; }
  // Whether one more plan may go out at `version`.
  bool admits(uint64_t version) const;
  // A plan went out to `rank` (which has none in flight).
  Flight& send(uint32_t rank, Flight flight);
  Flight* find(uint32_t rank);
  // The flight of `rank` ends (its contribution landed, or it was lost).
  std::optional<Flight> end(uint32_t rank);
  // The ranks whose flights are past their deadline at `now`.
  std::vector<uint32_t> past_deadline(double now) const;
  bool empty() const { return flights_.empty(); }
  size_t size() const { return flights_.size(); }
  const std::map<uint32_t, Flight>& flights() const { return flights_; }

 private:
  uint32_t max_staleness_;
  std::map<uint32_t, Flight> flights_;  // by rank
};

}  // namespace dctrain
