#include "trace/trace_writer.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "common/files.h"

namespace dctrain {

namespace {

constexpr std::string_view kHead = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[";

}  // namespace

std::string json_string(std::string_view text) {
  std::string out = "\"";
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    switch (ch) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          out += fmt::format("\\u{:04x}", c);
        } else {
          out += ch;
        }
    }
  }
  return out + "\"";
}

std::string json_number(double value) {
  if (!std::isfinite(value)) return "null";
  return fmt::format("{}", value);
}

std::string json_micros(double us) {
  if (!std::isfinite(us)) return "null";
  return fmt::format("{:.3f}", us);
}

TraceWriter::TraceWriter(std::filesystem::path path) : path_(std::move(path)) {
  file_.reset(std::fopen(path_.c_str(), "w+"));
  if (!file_) throw FileWriteError(path_, errno, 0);
  pending_ = std::string(kHead);
  flush();
}

void TraceWriter::process_name(int pid, std::string_view name, int sort_index) {
  begin_event("M", pid, 0, "process_name", 0.0);
  end_event({{"name", std::string(name)}});
  begin_event("M", pid, 0, "process_sort_index", 0.0);
  end_event({{"sort_index", static_cast<double>(sort_index)}});
}

void TraceWriter::thread_name(int pid, int tid, std::string_view name) {
  begin_event("M", pid, tid, "thread_name", 0.0);
  end_event({{"name", std::string(name)}});
}

void TraceWriter::complete(int pid, int tid, std::string_view name, double ts_us, double dur_us,
                           const TraceArgList& args) {
  begin_event("X", pid, tid, name, ts_us);
  pending_ += ",\"dur\":" + json_micros(std::max(0.0, dur_us));
  end_event(args);
}

void TraceWriter::instant(int pid, int tid, std::string_view name, double ts_us,
                          const TraceArgList& args) {
  begin_event("i", pid, tid, name, ts_us);
  pending_ += ",\"s\":\"t\"";
  end_event(args);
}

void TraceWriter::counter(int pid, std::string_view name, double ts_us, const TraceArgList& args) {
  begin_event("C", pid, 0, name, ts_us);
  end_event(args);
}

void TraceWriter::set_other_data(std::string json_object) {
  other_data_ = std::move(json_object);
}

void TraceWriter::begin_event(std::string_view phase, int pid, int tid, std::string_view name,
                              double ts_us) {
  // The first event follows the head; every later one a comma.
  if (events_ > 0) pending_ += ",";
  pending_ += fmt::format("\n{{\"ph\":\"{}\",\"name\":{},\"pid\":{},\"tid\":{},\"ts\":{}", phase,
                          json_string(name), pid, tid, json_micros(ts_us));
  ++events_;
}

void TraceWriter::end_event(const TraceArgList& args) {
  if (!args.empty()) {
    pending_ += ",\"args\":{";
    for (size_t i = 0; i < args.size(); ++i) {
      if (i > 0) pending_ += ",";
      pending_ += json_string(args[i].key) + ":";
      if (const double* number = std::get_if<double>(&args[i].value)) {
        pending_ += json_number(*number);
      } else {
        pending_ += json_string(std::get<std::string>(args[i].value));
      }
    }
    pending_ += "}";
  }
  pending_ += "}";
}

void TraceWriter::flush() {
  std::FILE* f = file_.get();
  const std::string tail = "\n],\"otherData\":" + other_data_ + "}\n";
  if (const int injected = fault_at("write", path_)) {
    throw FileWriteError(path_, injected, pending_.size() + tail.size());
  }
  bool ok = std::fseek(f, tail_position_, SEEK_SET) == 0 &&
            std::fwrite(pending_.data(), 1, pending_.size(), f) == pending_.size();
  const long tail_position = ok ? std::ftell(f) : -1;
  ok = ok && tail_position >= 0 && std::fwrite(tail.data(), 1, tail.size(), f) == tail.size() &&
       std::fflush(f) == 0;
  // A shorter closing part than the last one leaves nothing of it behind.
  ok = ok && ::ftruncate(::fileno(f), tail_position + static_cast<long>(tail.size())) == 0;
  if (!ok) throw FileWriteError(path_, errno, pending_.size() + tail.size());
  tail_position_ = tail_position;
  pending_.clear();
}

}  // namespace dctrain
