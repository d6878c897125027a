// trace.json: the Chrome / Perfetto trace-event format (the "JSON Object
// Format" of the Trace Event Format document), written as events arrive.
//
//   {"displayTimeUnit":"ms","traceEvents":[
//   {"ph":"M",...},
//   {"ph":"X","name":"micro-batch","pid":1,"tid":1,"ts":1234.5,"dur":80.2,"args":{...}},
//   ...
//   ],"otherData":{...}}
//
// Times are microseconds, written to the nanosecond. flush() writes the events given since the last
// flush over the old closing part and then a new closing part, so the file
// on disk is a whole JSON document after every flush: a run that ends, is
// stopped by a signal or is killed between two flushes leaves a file that
// parses. Names and string values are escaped; a value that is not finite
// is written as null (JSON has no infinity).
#pragma once

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace dctrain {

struct TraceArg {
  std::string key;
  std::variant<double, std::string> value;
};
using TraceArgList = std::vector<TraceArg>;

class TraceWriter {
 public:
  // Creates (or empties) `path` and writes an empty, valid document.
  // Throws std::runtime_error naming the file when it cannot be written.
  explicit TraceWriter(std::filesystem::path path);

  // Track names: a process per track group ("coordinator", "worker 0 (w0)"),
  // shown in `sort_index` order, and its threads.
  void process_name(int pid, std::string_view name, int sort_index);
  void thread_name(int pid, int tid, std::string_view name);

  // A complete event ("ph":"X"): a slice from ts for dur.
  void complete(int pid, int tid, std::string_view name, double ts_us, double dur_us,
                const TraceArgList& args = {});
  // An instant event ("ph":"i", thread scope): a mark at ts.
  void instant(int pid, int tid, std::string_view name, double ts_us,
               const TraceArgList& args = {});
  // A counter event ("ph":"C"): each numeric arg is a series of the counter.
  void counter(int pid, std::string_view name, double ts_us, const TraceArgList& args);

  // The value of the top-level "otherData" key (a JSON object's text),
  // written with the next flush.
  void set_other_data(std::string json_object);

  // Writes what was given since the last flush; the file is whole after it.
  // Throws std::runtime_error naming the file when the write fails.
  void flush();

  size_t events() const { return events_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  void begin_event(std::string_view phase, int pid, int tid, std::string_view name, double ts_us);
  void end_event(const TraceArgList& args);

  struct Close {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::filesystem::path path_;
  std::unique_ptr<std::FILE, Close> file_;
  std::string pending_;  // events not yet on disk
  std::string other_data_ = "{}";
  long tail_position_ = 0;  // where the closing part starts on disk
  size_t events_ = 0;
};

// `text` as a JSON string literal, quotes included.
std::string json_string(std::string_view text);
// `value` as a JSON number, or null when it is not finite.
std::string json_number(double value);
// Microseconds to the nanosecond (the precision of the clocks), or null.
std::string json_micros(double us);

}  // namespace dctrain
