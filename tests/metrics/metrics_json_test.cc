// metrics.jsonl and summary.json through metrics/metrics_json.h: records
// written by the coordinator before the schema was Protobuf still read,
// every record keeps the same keys whatever is filled in, counts stay JSON
// numbers, missing values are null, a threshold of infinity is "inf", and
// what is written reads back unchanged.
#include "metrics/metrics_json.h"

#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "common/random.h"

namespace dctrain {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Value;
using google::protobuf::util::MessageDifferencer;

constexpr double kInf = std::numeric_limits<double>::infinity();

// Lines as the coordinator wrote them before (a run with auto tau; a
// worker that missed the deadline has "arrival_seconds":null).
const char* kOldMetrics =
    R"({"type":"step","step":0,"epoch":0,"epochs":0.048,"wall_seconds":0.2849408259999997,"step_seconds":0.2849408259999997,"reduce_seconds":3.532699999997391e-05,"apply_seconds":0.0002689510000002393,"eval_seconds":0,"checkpoint_seconds":0,"tau":"inf","lr":0.05,"applied":true,"samples":96,"loss":2.335638081969258,"accuracy":0.10416666666666667,"planned":12,"completed":12,"dropped":0,"orphaned":0,"requeued":0,"lost_samples":0,"workers":[{"rank":0,"name":"worker-1","contributed":true,"missed":false,"compute_seconds":0.149887954,"overhead_seconds":0.06752434200000001,"completed":4,"dropped":0,"samples":32,"checksum_ok":true,"micro_batch_seconds":[0.05,0.03,0.04,0.029887954],"arrival_seconds":0.2849},{"rank":1,"name":"worker-2","contributed":false,"missed":true,"compute_seconds":0,"overhead_seconds":0,"completed":0,"dropped":0,"samples":0,"checksum_ok":true,"micro_batch_seconds":[],"arrival_seconds":null}]}
{"type":"eval","step":10,"epochs":0.48,"wall_seconds":0.71,"eval_loss":0.5206,"eval_accuracy":0.915,"samples":200,"seconds":0.004}
{"type":"epoch","step":21,"epoch":0,"wall_seconds":1.1,"audit_ok":true,"complete":true,"done":1800,"lost":0,"duplicated":0,"missing":0}
{"type":"tau","step":14,"wall_seconds":0.8,"why":"warm-up","changed":true,"old_tau":"inf","new_tau":0.0213,"best_tau":0.0213,"predicted_drop_rate":0.05,"predicted_speedup":1.12,"predicted_step_seconds":0.03,"predicted_baseline_step_seconds":0.034,"overhead_seconds":0.002,"steps":10,"old_tau_drop_rate":0,"old_tau_speedup":1}
)";

const char* kOldSummary = R"({
  "name": "cmp-fixed",
  "final_eval_accuracy": 0.733,
  "final_eval_loss": 0.7807912197794504,
  "final_eval_step": 10,
  "wall_seconds": 0.6004124719999999,
  "steps": 10,
  "samples": 336,
  "drop_rate": 0.65,
  "time_to_target_seconds": null,
  "target_accuracy": 0.3,
  "tau": "inf",
  "tau_policy": "fixed",
  "predicted_at_step": null,
  "predicted_tau": null,
  "requeue": true,
  "stop_reason": "target accuracy 30.00% reached",
  "blas": {"library": "OpenBLAS 0.3.21", "core": "Haswell", "how": "environment", "detected_core": "Haswell", "coretype": null, "cpu_model": "AMD EPYC", "cpu_features": "AVX-512", "threads": 1, "sgemm_size": 512, "sgemm_threads": 1, "sgemm_gflops": 104.02902506985379, "warning": null},
  "per_worker": [
    {"name": "worker-0", "rank": 0, "steps_planned": 10, "microbatches_dropped": 26, "mean_micro_batch_seconds": 0.0157, "blas": null}
  ],
  "slow_workers": [
    {"name": "worker-0", "rank": 0, "cause": "compute"}
  ],
  "released_workers": [
    {"name": "worker-2", "rank": 2, "step": 2, "missed_in_a_row": 3}
  ],
  "a_key_from_a_later_version": {"x": [1, 2]}
}
)";

TEST(MetricsJson, RecordsWrittenBeforeTheSchemaStillRead) {
  const MetricsRecords m = parse_metrics(kOldMetrics, "metrics.jsonl");
  ASSERT_EQ(m.steps.size(), 1u);
  ASSERT_EQ(m.evals.size(), 1u);
  ASSERT_EQ(m.epochs.size(), 1u);
  ASSERT_EQ(m.taus.size(), 1u);
  const v1::StepRecord& step = m.steps[0];
  EXPECT_EQ(step.samples(), 96u);
  EXPECT_EQ(step.loss(), 2.335638081969258);
  EXPECT_TRUE(std::isinf(tau_seconds(step.tau())));
  ASSERT_EQ(step.workers_size(), 2);
  EXPECT_EQ(step.workers(0).name(), "worker-1");
  EXPECT_EQ(step.workers(0).micro_batch_seconds_size(), 4);
  EXPECT_EQ(step.workers(0).micro_batch_seconds(3), 0.029887954);
  EXPECT_EQ(optional_number(step.workers(0).arrival_seconds()), 0.2849);
  EXPECT_FALSE(optional_number(step.workers(1).arrival_seconds()).has_value());
  EXPECT_TRUE(step.workers(1).missed());
  EXPECT_EQ(m.evals[0].eval_accuracy(), 0.915);
  EXPECT_EQ(m.evals[0].step(), 10u);
  EXPECT_EQ(m.epochs[0].done(), 1800u);
  EXPECT_TRUE(m.epochs[0].audit_ok());
  const v1::TauRecord& tau = m.taus[0];
  EXPECT_EQ(tau.why(), "warm-up");
  EXPECT_TRUE(std::isinf(tau_seconds(tau.old_tau())));
  EXPECT_EQ(tau_seconds(tau.new_tau()), 0.0213);
  EXPECT_EQ(tau.steps(), 10u);

  const v1::RunSummary s = parse_summary(kOldSummary, "summary.json");
  EXPECT_EQ(s.name(), "cmp-fixed");
  EXPECT_EQ(optional_number(s.final_eval_accuracy()), 0.733);
  EXPECT_EQ(optional_number(s.final_eval_step()), 10.0);
  EXPECT_FALSE(optional_number(s.time_to_target_seconds()).has_value());
  EXPECT_EQ(optional_number(s.target_accuracy()), 0.3);
  EXPECT_TRUE(std::isinf(tau_seconds(s.tau())));
  EXPECT_FALSE(optional_number(s.predicted_tau()).has_value());
  EXPECT_EQ(s.samples(), 336u);
  EXPECT_TRUE(s.requeue());
  EXPECT_EQ(s.blas().core(), "Haswell");
  EXPECT_EQ(s.blas().coretype(), "") << "null: not set";
  EXPECT_EQ(s.blas().sgemm_gflops(), 104.02902506985379);
  ASSERT_EQ(s.per_worker_size(), 1);
  EXPECT_EQ(s.per_worker(0).microbatches_dropped(), 26u);
  EXPECT_FALSE(s.per_worker(0).has_blas());
  EXPECT_FALSE(s.per_worker(0).has_cause());
  ASSERT_EQ(s.slow_workers_size(), 1);
  EXPECT_EQ(s.slow_workers(0).cause(), "compute");
  ASSERT_EQ(s.released_workers_size(), 1);
  EXPECT_EQ(s.released_workers(0).missed_in_a_row(), 3u);
}

TEST(MetricsJson, ALineStillBeingWrittenIsLeftOutAnyOtherBadLineThrows) {
  const std::string good = "{\"type\":\"eval\",\"step\":1,\"eval_accuracy\":0.5}\n";
  EXPECT_EQ(parse_metrics(good + "{\"type\":\"step\",\"step\":2,\"wal", "m").evals.size(), 1u);
  EXPECT_EQ(parse_metrics(good + "{\"type\":\"step\",\"step\":2}", "m").steps.size(), 1u)
      << "a whole last line without its newline counts";
  try {
    parse_metrics(good + "{\"type\":\"step\",\"step\":2,\"wal\n" + good, "run/metrics.jsonl");
    ADD_FAILURE() << "a cut line in the middle must throw";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("run/metrics.jsonl:2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_metrics("{\"type\":\"step\",\"samples\":\"many\"}\n", "m"),
               std::runtime_error);
  EXPECT_THROW(parse_summary("{\"name\": ", "summary.json"), std::runtime_error);
  const MetricsRecords other =
      parse_metrics("{\"type\":\"note\",\"text\":\"a record of a later version\"}\n" + good, "m");
  EXPECT_EQ(other.evals.size(), 1u) << "unknown record types are skipped";
}

// The names of the fields `type` always writes: all but message fields
// other than google.protobuf.Value (absent when not set, like a worker's
// BLAS before it said) and proto3 optional ones (a slow worker's cause).
std::vector<std::string> always_written(const Descriptor* type) {
  std::vector<std::string> names;
  for (int i = 0; i < type->field_count(); ++i) {
    const FieldDescriptor* f = type->field(i);
    if (f->has_optional_keyword()) continue;
    if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE && !f->is_repeated() &&
        f->message_type() != Value::descriptor()) {
      continue;
    }
    names.push_back(f->name());
  }
  return names;
}

TEST(MetricsJson, EveryRecordHasAllItsKeysEvenWhenNothingIsFilledIn) {
  v1::StepRecord step;
  step.add_workers();
  v1::RunSummary summary;
  summary.add_per_worker();
  summary.add_released_workers();
  const std::vector<std::pair<std::string, const Descriptor*>> written = {
      {metrics_line(step), v1::StepRecord::descriptor()},
      {metrics_line(step), v1::WorkerStep::descriptor()},
      {metrics_line(v1::EvalRecord()), v1::EvalRecord::descriptor()},
      {metrics_line(v1::EpochRecord()), v1::EpochRecord::descriptor()},
      {metrics_line(v1::TauRecord()), v1::TauRecord::descriptor()},
      {summary_text(summary), v1::RunSummary::descriptor()},
      {summary_text(summary), v1::PerWorkerTotals::descriptor()},
      {summary_text(summary), v1::ReleasedWorker::descriptor()},
  };
  for (const auto& [text, type] : written) {
    for (const std::string& name : always_written(type)) {
      EXPECT_NE(text.find("\"" + name + "\":"), std::string::npos)
          << type->name() << "." << name << " not in " << text;
    }
  }
  // Missing values are null, not left out.
  EXPECT_NE(metrics_line(step).find("\"arrival_seconds\":null"), std::string::npos);
  EXPECT_NE(summary_text(summary).find("\"time_to_target_seconds\": null"), std::string::npos);
  // One record per line.
  const std::string line = metrics_line(step);
  EXPECT_EQ(line.find('\n'), line.size() - 1) << line;
}

TEST(MetricsJson, CountsStayNumbersTauInfinityIsInfAndMissingIsNull) {
  v1::StepRecord step;
  step.set_type(kStepRecordType);
  step.set_step(4000000000u);
  step.set_samples(96);
  step.set_loss(0.1);
  *step.mutable_tau() = tau_value(kInf);
  v1::WorkerStep& w = *step.add_workers();
  *w.mutable_arrival_seconds() = number_or_null(std::nullopt);
  w.add_micro_batch_seconds(1.0 / 3.0);
  step.set_run_id("0123456789abcdef");
  const std::string line = metrics_line(step);
  EXPECT_EQ(
      line.rfind("{\"type\":\"step\",\"run_id\":\"0123456789abcdef\",\"step\":4000000000,", 0), 0u)
      << line;
  EXPECT_NE(line.find("\"samples\":96,"), std::string::npos) << line;
  EXPECT_NE(line.find("\"loss\":0.1,"), std::string::npos) << line;
  EXPECT_NE(line.find("\"tau\":\"inf\""), std::string::npos) << line;
  EXPECT_NE(line.find("\"arrival_seconds\":null"), std::string::npos) << line;

  EXPECT_EQ(tau_value(0.05).number_value(), 0.05);
  EXPECT_EQ(tau_value(kInf).string_value(), "inf");
  EXPECT_EQ(tau_value(-kInf).string_value(), "inf");
  Value infinity;
  infinity.set_string_value("Infinity");
  EXPECT_TRUE(std::isinf(tau_seconds(infinity)));
  EXPECT_TRUE(std::isinf(tau_seconds(Value())));
  EXPECT_TRUE(number_or_null(std::nan("")).has_null_value());
  EXPECT_TRUE(number_or_null(kInf).has_null_value());
  EXPECT_EQ(optional_number(number_or_null(2.5)), 2.5);
}

TEST(MetricsJson, WhatIsWrittenReadsBackUnchanged) {
  v1::StepRecord step;
  step.set_type(kStepRecordType);
  step.set_step(7);
  step.set_wall_seconds(12.345678901234567);
  step.set_loss(1.0 / 3.0);
  *step.mutable_tau() = tau_value(0.0421);
  for (const bool contributed : {true, false}) {
    v1::WorkerStep& w = *step.add_workers();
    w.set_name(contributed ? "w\"0\"" : "w1");
    w.set_contributed(contributed);
    if (contributed) {
      w.add_micro_batch_seconds(0.1);
      w.add_micro_batch_seconds(2e-7);
    }
    *w.mutable_arrival_seconds() = number_or_null(contributed ? std::optional(0.5) : std::nullopt);
  }
  const MetricsRecords back = parse_metrics(metrics_line(step), "m");
  ASSERT_EQ(back.steps.size(), 1u);
  EXPECT_TRUE(MessageDifferencer::Equals(back.steps[0], step)) << back.steps[0].DebugString();

  v1::RunSummary summary;
  summary.set_name("run");
  *summary.mutable_final_eval_accuracy() = number_or_null(0.9875);
  *summary.mutable_time_to_target_seconds() = number_or_null(std::nullopt);
  *summary.mutable_tau() = tau_value(kInf);
  summary.set_samples(1920);
  summary.mutable_blas()->set_core("SkylakeX");
  v1::PerWorkerTotals& slow = *summary.add_slow_workers();
  slow.set_name("w1");
  slow.set_cause("compute+communication");
  summary.add_per_worker()->set_name("w0");
  const std::string text = summary_text(summary);
  EXPECT_EQ(text.rfind("{\n \"name\": \"run\",\n", 0), 0u) << "pretty-printed: " << text;
  v1::RunSummary expected = summary;
  // Unset missing values are written as null, and read back as such.
  for (Value* v :
       {expected.mutable_final_eval_loss(), expected.mutable_final_eval_step(),
        expected.mutable_target_accuracy(), expected.mutable_predicted_at_step(),
        expected.mutable_predicted_tau(), expected.mutable_predicted_speedup(),
        expected.mutable_predicted_drop_rate(), expected.mutable_predicted_step_seconds(),
        expected.mutable_predicted_baseline_step_seconds(), expected.mutable_target_step()}) {
    v->set_null_value(google::protobuf::NULL_VALUE);
  }
  EXPECT_TRUE(MessageDifferencer::Equals(parse_summary(text, "summary.json"), expected)) << text;
}

// Fills every field of `m` (and of the messages it repeats) with values
// drawn from `rng`: the awkward doubles, strings with every character the
// printer escapes, every kind of Value or none, lists of 0 to 3.
void scramble(google::protobuf::Message& m, Rng& rng, int depth = 0) {
  using google::protobuf::FieldDescriptor;
  const auto* type = m.GetDescriptor();
  const auto* r = m.GetReflection();
  const double doubles[] = {0.0,
                            -0.0,
                            1.0,
                            0.1,
                            1e-5,
                            1e20,
                            0.30000000000000004,
                            5e-324,
                            123456789.123456789,
                            std::numeric_limits<double>::quiet_NaN(),
                            std::numeric_limits<double>::infinity(),
                            -std::numeric_limits<double>::infinity()};
  const auto a_double = [&] {
    return rng.below(3) == 0 ? doubles[rng.below(std::size(doubles))]
                             : (rng.uniform_double() - 0.3) * std::pow(10.0, rng.below(12) - 6.0);
  };
  const auto a_string = [&] {
    const std::string alphabet = std::string("ab Z09_-.:/<>&'\"\\\b\f\n\r\t\x01\x1f\x7f", 28);
    std::string text;
    for (uint64_t i = rng.below(8); i > 0; --i) text += alphabet[rng.below(alphabet.size())];
    return text;
  };
  for (int i = 0; i < type->field_count(); ++i) {
    const FieldDescriptor* f = type->field(i);
    const int n = f->is_repeated() ? static_cast<int>(rng.below(4)) : 1;
    for (int k = 0; k < n; ++k) {
      const bool rep = f->is_repeated();
      switch (f->cpp_type()) {
        case FieldDescriptor::CPPTYPE_DOUBLE:
          rep ? r->AddDouble(&m, f, a_double()) : r->SetDouble(&m, f, a_double());
          break;
        case FieldDescriptor::CPPTYPE_UINT32: {
          const auto v = static_cast<uint32_t>(rng.below(2) ? rng.below(100) : rng.next_u64());
          rep ? r->AddUInt32(&m, f, v) : r->SetUInt32(&m, f, v);
          break;
        }
        case FieldDescriptor::CPPTYPE_INT32: {
          const auto v = static_cast<int32_t>(rng.next_u64());
          rep ? r->AddInt32(&m, f, v) : r->SetInt32(&m, f, v);
          break;
        }
        case FieldDescriptor::CPPTYPE_BOOL:
          rep ? r->AddBool(&m, f, rng.below(2)) : r->SetBool(&m, f, rng.below(2));
          break;
        case FieldDescriptor::CPPTYPE_STRING:
          rep ? r->AddString(&m, f, a_string()) : r->SetString(&m, f, a_string());
          break;
        case FieldDescriptor::CPPTYPE_ENUM: {
          const auto* e =
              f->enum_type()->value(static_cast<int>(rng.below(f->enum_type()->value_count())));
          rep ? r->AddEnum(&m, f, e) : r->SetEnum(&m, f, e);
          break;
        }
        case FieldDescriptor::CPPTYPE_MESSAGE:
          if (f->message_type() == google::protobuf::Value::descriptor() && !rep) {
            google::protobuf::Value v;
            switch (rng.below(5)) {
              case 0:
                continue;  // unset: null
              case 1:
                v.set_null_value(google::protobuf::NULL_VALUE);
                break;
              case 2:
                v.set_number_value((rng.uniform_double() - 0.5) * 1e3);
                break;
              case 3:
                v.set_string_value(a_string());
                break;
              default:
                v.set_bool_value(rng.below(2));
                break;
            }
            r->MutableMessage(&m, f)->CopyFrom(v);
          } else if (depth < 3) {
            scramble(rep ? *r->AddMessage(&m, f) : *r->MutableMessage(&m, f), rng, depth + 1);
          }
          break;
        default:
          break;
      }
    }
  }
}

TEST(MetricsJson, TheLineIsProtobufsOwnPrintByteForByte) {
  // metrics_line writes records straight from their fields; protobuf's
  // printer is the reference for every key, order, number and escape.
  Rng rng(2026);
  for (int i = 0; i < 300; ++i) {
    v1::StepRecord step;
    v1::EvalRecord eval;
    v1::EpochRecord epoch;
    v1::TauRecord tau;
    for (google::protobuf::Message* m :
         std::initializer_list<google::protobuf::Message*>{&step, &eval, &epoch, &tau}) {
      scramble(*m, rng);
      ASSERT_EQ(metrics_line(*m), printer_metrics_line(*m)) << m->ShortDebugString();
    }
  }
  // A record the fast path leaves to the printer (a name beyond ASCII).
  v1::StepRecord step;
  step.add_workers()->set_name("w\xc3\xa9");
  EXPECT_EQ(metrics_line(step), printer_metrics_line(step));
  EXPECT_NE(metrics_line(step).find("\"name\":\"w\xc3\xa9\""), std::string::npos);
}

}  // namespace
}  // namespace dctrain
