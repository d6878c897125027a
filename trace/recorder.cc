#include "trace/recorder.h"

namespace dctrain {

void TraceRecorder::begin_step(uint64_t step, const v1::Plan& plan, double received) {
  step_ = step;
  requested_ = plan.has_trace();
  recording_ = requested_ && plan.trace().record();
  plan_sent_ = plan.trace().sent_seconds();
  plan_received_ = received;
}

void TraceRecorder::span(std::string_view name, double begin, double end, TraceArgs args) {
  if (recording_) add(name, begin, end > begin ? end - begin : 0.0, false, args);
}

void TraceRecorder::instant(std::string_view name, double at, TraceArgs args) {
  if (recording_) add(name, at, 0.0, true, args);
}

void TraceRecorder::add(std::string_view name, double begin, double duration, bool instant,
                        TraceArgs args) {
  if (pending_.size() >= kMaxPendingEvents) {
    ++lost_;
    return;
  }
  v1::TraceEvent& e = pending_.emplace_back();
  e.set_step(step_);
  e.set_name(std::string(name));
  e.set_begin_seconds(begin);
  e.set_duration_seconds(duration);
  e.set_instant(instant);
  for (const TraceArgValue& a : args) (*e.mutable_args())[a.key] = a.value;
}

void TraceRecorder::report_into(v1::Contribution& contribution, double built) {
  if (!requested_) return;
  v1::TraceReport& r = *contribution.mutable_trace();
  r.set_plan_sent_seconds(plan_sent_);
  r.set_plan_received_seconds(plan_received_);
  r.set_built_seconds(built);
  r.set_sent_seconds(built);  // until stamp_trace_sent says when it left
  for (v1::TraceEvent& e : pending_) *r.add_events() = std::move(e);
  r.set_events_lost(r.events_lost() + lost_);  // a second call adds to the same report
  pending_.clear();
  lost_ = 0;
}

void stamp_trace_sent(v1::Envelope& envelope, double now) {
  if (envelope.has_contribution() && envelope.contribution().has_trace()) {
    envelope.mutable_contribution()->mutable_trace()->set_sent_seconds(now);
  }
}

}  // namespace dctrain
