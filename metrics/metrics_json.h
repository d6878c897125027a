// The records of a run folder (schema: proto/metrics.proto) as JSON text:
// metrics.jsonl, one compact object per line, and summary.json,
// pretty-printed. Written with Protobuf's JSON printer (field names as in
// the schema, every field written), read with its parser (unknown keys
// ignored, so older and newer run folders read). The one place that turns
// these records into text and back: the coordinator writes through it; the
// report, the experiment runner, the benchmarks and the tests read through
// it. Depends on dctrain_proto only.
#pragma once

#include <google/protobuf/message.h>
#include <google/protobuf/struct.pb.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "proto/metrics.pb.h"

namespace dctrain {

// The "type" of each kind of metrics.jsonl record.
inline constexpr char kStepRecordType[] = "step";
inline constexpr char kEvalRecordType[] = "eval";
inline constexpr char kEpochRecordType[] = "epoch";
inline constexpr char kTauRecordType[] = "tau";

// One metrics.jsonl line of `record` (a StepRecord, EvalRecord, EpochRecord
// or TauRecord with its type set), with its newline.
std::string metrics_line(const google::protobuf::Message& record);
// The same line through protobuf's own JSON printer, which metrics_line
// matches byte for byte (its tests compare the two).
std::string printer_metrics_line(const google::protobuf::Message& record);

// summary.json's text.
std::string summary_text(const v1::RunSummary& summary);

// Any other schema message under the same mapping (e.g. report.json's
// v1::ReportFile, proto/report.proto), compact or pretty-printed, with its
// newline.
std::string json_text(const google::protobuf::Message& message, bool pretty);
// Parses such text into `message`; throws std::runtime_error naming `origin`.
void parse_json(const std::string& json, google::protobuf::Message& message,
                const std::string& origin);

// The records of a metrics.jsonl, in file order per kind.
struct MetricsRecords {
  std::vector<v1::StepRecord> steps;
  std::vector<v1::EvalRecord> evals;
  std::vector<v1::EpochRecord> epochs;
  std::vector<v1::TauRecord> taus;
};

// Parses metrics.jsonl text. A last line without its newline that does not
// parse is a record still being written (or cut short by a kill) and is
// left out; any other line that does not parse throws std::runtime_error
// naming `origin` and the line. Lines of an unknown type are skipped.
MetricsRecords parse_metrics(std::string_view jsonl, const std::string& origin);

// The type and step of one metrics.jsonl line; none when it does not parse.
std::optional<v1::RecordHeader> parse_record_header(const std::string& line);

// Parses summary.json text; throws std::runtime_error naming `origin`.
v1::RunSummary parse_summary(const std::string& json, const std::string& origin);

// A number that may be missing: null for none or a non-finite value.
google::protobuf::Value number_or_null(std::optional<double> value);
// The number it holds; none for null, absent or anything else.
std::optional<double> optional_number(const google::protobuf::Value& value);

// A threshold: its seconds, or "inf" for infinity.
google::protobuf::Value tau_value(double seconds);
// The seconds a threshold value holds: infinity for "inf" (and for
// "Infinity", null or absent: no threshold).
double tau_seconds(const google::protobuf::Value& value);

}  // namespace dctrain
