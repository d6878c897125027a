// A worker's side of the timeline (trace/README.md): the events of the
// steps the coordinator asks it to trace, on the worker's own clock, kept
// until the next contribution carries them to the coordinator. Recording an
// event is one call:
//
//   trace.span("exchange", begin, clock.now(), {{"bytes", 4.0e6}});
//
// and costs nothing in a step that is not traced. Events belong to the step
// of the latest plan (its update, apply and exchange come after the plan
// and before the next one). The wait for the update and the apply of a step
// travel with the next step's contribution: the run's last step has none.
// Not thread-safe: the compute thread owns it.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string_view>
#include <utility>
#include <vector>

#include "proto/wire.pb.h"

namespace dctrain {

// A number shown beside an event; any arithmetic value (an id, a count).
struct TraceArgValue {
  template <typename T>
  TraceArgValue(const char* k, T v) : key(k), value(static_cast<double>(v)) {}
  const char* key;
  double value;
};
using TraceArgs = std::initializer_list<TraceArgValue>;

class TraceRecorder {
 public:
  // At most this many events wait for a report; more are counted as lost,
  // so a worker never grows without bound whatever it is asked.
  static constexpr size_t kMaxPendingEvents = 4096;

  // A plan arrived at `received` (the worker's clock) for `step`.
  void begin_step(uint64_t step, const v1::Plan& plan, double received);

  // The step of the latest plan, and whether it is traced.
  uint64_t step() const { return step_; }
  bool recording() const { return recording_; }

  void span(std::string_view name, double begin, double end, TraceArgs args = {});
  void instant(std::string_view name, double at, TraceArgs args = {});

  // Fills a contribution's report (when the plan carried a request): the
  // round trip's timestamps so far (t2 is stamped by stamp_trace_sent when
  // it leaves) and every event recorded since the last report. Called again
  // on the same contribution (the exchange's span, recorded after the
  // compute's report), it adds the new events and moves `built` on.
  void report_into(v1::Contribution& contribution, double built);

 private:
  void add(std::string_view name, double begin, double duration, bool instant, TraceArgs args);

  bool requested_ = false;  // the latest plan carried a request
  bool recording_ = false;  // ... and asked for its step to be traced
  uint64_t step_ = 0;
  double plan_sent_ = 0.0;
  double plan_received_ = 0.0;
  std::vector<v1::TraceEvent> pending_;
  uint64_t lost_ = 0;
};

// The moment a message leaves the worker: t2 of the round trip, when it is
// a contribution that carries a report. The session calls it just before
// sending, on the same clock as the plan's arrival.
void stamp_trace_sent(v1::Envelope& envelope, double now);

}  // namespace dctrain
