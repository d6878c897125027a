#include "tools/report/report_json.h"

#include <cmath>

#include "metrics/metrics_json.h"

namespace dctrain {

namespace {

// A number of report.json: null when missing or not finite (number_or_null).
google::protobuf::Value number(std::optional<double> value) {
  return number_or_null(value);
}
google::protobuf::Value mean(const std::optional<Aggregate>& a) {
  return number_or_null(a ? std::optional<double>(a->mean) : std::nullopt);
}

v1::ReportSpeedup speedup_of(const Speedup& s) {
  v1::ReportSpeedup out;
  *out.mutable_ratio() = number(s.ratio);
  // Null without an interval or a test (one seed; the baseline).
  if (s.interval) {
    *out.mutable_low() = number(s.interval->low);
    *out.mutable_high() = number(s.interval->high);
  } else {
    *out.mutable_low() = number(std::nullopt);
    *out.mutable_high() = number(std::nullopt);
  }
  *out.mutable_p() = number(s.test ? std::optional(s.test->p) : std::nullopt);
  out.set_basis(s.basis + (s.paired ? ", paired by seed" : ""));
  out.set_verdict(verdict(s));
  return out;
}

void fill_predicted(const Experiment& e, const PredictedCurves& p, v1::PredictedSpeedups& out) {
  out.set_model("i.i.d. workers drawn from the tau = inf baseline's pooled worker steps");
  out.set_speedup_basis("samples/s");
  out.set_recorded_workers(p.recorded_workers);
  out.set_worker_steps(static_cast<uint32_t>(p.worker_steps));
  out.set_steps(static_cast<uint32_t>(p.steps));
  out.set_runs(static_cast<uint32_t>(p.runs));
  *out.mutable_overhead_seconds() = number(p.overhead_seconds);
  *out.mutable_max_drop_rate() = number(e.max_drop_rate);
  for (const SpeedupCurve& c : p.curves) {
    v1::PredictedCurve& curve = *out.add_curves();
    curve.set_label(c.label);
    curve.set_tau_policy(c.tau_policy);
    for (uint32_t n : reported_worker_counts()) {
      const CurvePoint* at = curve_point(c, n);
      if (at == nullptr) continue;
      v1::PredictedPoint& point = *curve.add_points();
      point.set_workers(n);
      *point.mutable_tau_seconds() = number(at->tau);
      *point.mutable_speedup() = number(at->speedup);
      *point.mutable_drop_rate() = number(at->drop_rate);
      *point.mutable_step_seconds() = number(at->step_seconds);
      *point.mutable_baseline_step_seconds() = number(at->baseline_step_seconds);
    }
  }
}

}  // namespace

v1::ReportFile report_file(const Report& report) {
  v1::ReportFile file;
  for (const Experiment& e : report.experiments) {
    v1::ReportExperiment& x = *file.add_experiments();
    x.set_model(e.model);
    x.set_workers(e.workers);
    x.set_delay(e.delay);
    for (const CaseRow& row : e.rows) {
      v1::ReportRow& r = *x.add_rows();
      r.set_label(row.label);
      r.set_tau_policy(row.tau_policy);
      r.set_requeue(row.requeue);
      for (size_t i : row.runs) r.add_runs(e.runs[i].dir.string());
      *r.mutable_accuracy() = mean(row.accuracy);
      *r.mutable_time_to_target_seconds() = mean(row.time_to_target);
      *r.mutable_samples_per_second() = number(row.samples_per_second.mean);
      if (const std::optional<Speedup>& s = row.speedup()) {
        const v1::ReportSpeedup one = speedup_of(*s);
        *r.mutable_speedup() = one.ratio();
        r.set_speedup_basis(one.basis());
        *r.mutable_speedup_low() = one.low();
        *r.mutable_speedup_high() = one.high();
        *r.mutable_speedup_p() = one.p();
        r.set_verdict(one.verdict());
      } else {
        *r.mutable_speedup() = number(std::nullopt);
      }
      *r.mutable_drop_rate() = number(row.drop_rate.mean);
      *r.mutable_samples_lost() = number(row.samples_lost.mean);
      *r.mutable_tau_seconds() = number(row.tau_seconds.mean);
      *r.mutable_predicted_speedup() =
          number(row.predicted ? std::optional(row.predicted->speedup) : std::nullopt);
      *r.mutable_predicted_drop_rate() =
          number(row.predicted ? std::optional(row.predicted->drop_rate) : std::nullopt);
      *r.mutable_time_to_target_resolution_seconds() = number(row.target_resolution);
      r.set_seeds_reached_target(
          static_cast<uint32_t>(row.time_to_target ? row.time_to_target->count : 0));
      if (row.samples_speedup)
        *r.mutable_samples_per_second_speedup() = speedup_of(*row.samples_speedup);
      for (const CaseRow::NearTarget& n : row.near_target) {
        v1::ReportNearTarget& near = *r.add_near_target();
        *near.mutable_target() = number(n.target);
        *near.mutable_speedup() = speedup_of(n.speedup);
      }
      r.set_verdict_warning(row.verdict_warning);
      *r.mutable_host_load() = mean(row.host_load);
      *r.mutable_step_time_spread() = mean(row.step_spread);
      r.set_host_warning(row.host_warning);
    }
    if (e.predicted) fill_predicted(e, *e.predicted, *x.mutable_predicted());
  }
  return file;
}

std::string report_json(const Report& report) {
  return json_text(report_file(report), false);
}

}  // namespace dctrain
