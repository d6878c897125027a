#include "tools/report/document.h"

#include <fmt/format.h>

#include <cctype>
#include <fstream>
#include <iterator>
#include <sstream>

#include "common/files.h"
#include "common/run_files.h"
#include "tools/report/markdown.h"
#include "tools/report/report_json.h"

namespace dctrain {

namespace fs = std::filesystem;

namespace {

std::string html_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string base64(const std::string& bytes) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t chunk = static_cast<uint8_t>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) chunk |= static_cast<uint8_t>(bytes[i + 1]) << 8;
    if (i + 2 < bytes.size()) chunk |= static_cast<uint8_t>(bytes[i + 2]);
    out += kAlphabet[(chunk >> 18) & 63];
    out += kAlphabet[(chunk >> 12) & 63];
    out += i + 1 < bytes.size() ? kAlphabet[(chunk >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? kAlphabet[chunk & 63] : '=';
  }
  return out;
}

size_t run_count(const Report& report) {
  size_t n = 0;
  for (const Experiment& e : report.experiments) n += e.runs.size();
  return n;
}

constexpr const char* kPredictionNote =
    "Measured points: each case's speedup as its table row gives it, on the basis the key names "
    "(time to target, else samples/s), with its 95% interval over seeds. Curves: the predicted "
    "samples/s speedup (Predicted in the notes below), (1 - drop rate) x T_inf / T_tau with the "
    "baseline's time outside compute (mean step wall time + update - slowest compute) in both "
    "step times. At the run's worker count a case's curve is the table's predicted column. "
    "Elsewhere (dropcompute/threshold_model.h, predict_step_time) N workers are drawn i.i.d. "
    "from the baseline's worker steps pooled over ranks, steps and seeds, each starting no "
    "micro-batch once its compute clock has reached tau; a step takes the slowest plus the "
    "baseline's time outside compute, whatever N; the best tau is the argmax for each N over 200 "
    "candidates, as the automatic threshold searches. A persistent straggler is not i.i.d.: the "
    "curves take a random worker to be slow as often as in the recording.";

constexpr const char* kTimelineNote =
    "Timelines (trace.json: open in https://ui.perfetto.dev or chrome://tracing):";

// The runs of `e` that recorded a timeline: folder name and trace.json's
// absolute path (the report may be opened from anywhere).
std::vector<std::pair<std::string, std::string>> timelines(const Experiment& e) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const RunFolder& run : e.runs) {
    const fs::path trace = run.dir / run_files::kTrace;
    std::error_code error;
    if (fs::is_regular_file(trace, error)) {
      out.emplace_back(run.dir.filename().string(), fs::absolute(trace).string());
    }
  }
  return out;
}

// A path as a file: URL (unreserved characters and '/' kept, the rest
// percent-encoded).
std::string file_url(const std::string& path) {
  std::string out = "file://";
  for (const char ch : path) {
    const auto c = static_cast<unsigned char>(ch);
    if (std::isalnum(c) || ch == '/' || ch == '-' || ch == '_' || ch == '.' || ch == '~') {
      out += ch;
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  return out;
}

}  // namespace

std::string report_markdown(const Report& report, const std::vector<Plot>& plots) {
  std::string out = fmt::format("# dctrain report\n\n{} runs in {} experiments.\n\n",
                                run_count(report), report.experiments.size());
  for (const Experiment& e : report.experiments) {
    out += experiment_markdown(e, "##");
    out += "Run folders:";
    for (const RunFolder& run : e.runs) out += " `" + run.dir.string() + "`";
    out += "\n\n";
    const auto traces = timelines(e);
    if (!traces.empty()) {
      out += kTimelineNote;
      for (const auto& [name, path] : traces) out += fmt::format(" [{}](<{}>)", name, path);
      out += "\n\n";
    }
    for (const Plot& p : plots) {
      if (p.section == e.slug) out += fmt::format("![{}]({})\n\n", p.title, p.image.string());
    }
  }
  bool across = false;
  for (const Plot& p : plots) {
    if (!p.section.empty()) continue;
    if (!across) out += "## Speedup against worker count\n\n";
    across = true;
    out += fmt::format("![{}]({})\n\n", p.title, p.image.string());
  }
  if (across) out += std::string(kPredictionNote) + "\n\n";
  const std::string twins = twin_table(report);
  if (!twins.empty()) out += twins + "\n";
  out += table_notes(report);
  return out;
}

std::string report_html(const Report& report, const std::vector<Plot>& plots,
                        const fs::path& out_dir) {
  auto image = [&](const Plot& p) {
    std::ifstream in(out_dir / p.image, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return fmt::format(
        "<figure><img alt=\"{0}\" "
        "src=\"data:image/png;base64,{1}\"><figcaption>{0}</figcaption></figure>\n",
        html_escape(p.title), base64(bytes));
  };
  std::string out =
      "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>dctrain report</title>\n"
      "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto;}"
      "table{border-collapse:collapse;margin:1em 0;}th,td{border:1px solid #ccc;padding:4px 8px;}"
      "td{text-align:right;}td:first-child{text-align:left;}th{background:#f0f0f0;}"
      "img{max-width:100%;}figure{margin:1em 0;}figcaption{color:#555;font-size:90%;}</style>\n"
      "</head><body>\n";
  out += fmt::format("<h1>dctrain report</h1>\n<p>{} runs in {} experiments.</p>\n",
                     run_count(report), report.experiments.size());
  for (const Experiment& e : report.experiments) {
    out += "<h2>" + html_escape(experiment_title(e)) + "</h2>\n<table>\n<tr>";
    for (const std::string& h : table_header()) out += "<th>" + html_escape(h) + "</th>";
    out += "</tr>\n";
    for (const CaseRow& row : e.rows) {
      out += "<tr>";
      for (const std::string& cell : table_cells(e, row))
        out += "<td>" + html_escape(cell) + "</td>";
      out += "</tr>\n";
    }
    out += "</table>\n";
    std::istringstream cautions(caution_lines(e));
    for (std::string line; std::getline(cautions, line);)
      out += "<p>" + html_escape(line) + "</p>\n";
    const std::string reading = reading_line(e);
    if (!reading.empty()) out += "<p>" + html_escape(reading) + "</p>\n";
    const std::string stats = statistics_table(e);
    if (!stats.empty()) out += "<pre>" + html_escape(stats) + "</pre>\n";
    const std::string predicted = predicted_line(e);
    if (!predicted.empty()) out += "<p>" + html_escape(predicted) + "</p>\n";
    const std::string mfu = mfu_line(e);
    if (!mfu.empty()) out += "<p>" + html_escape(mfu) + "</p>\n";
    out += "<p>Run folders:";
    for (const RunFolder& run : e.runs)
      out += " <code>" + html_escape(run.dir.string()) + "</code>";
    out += "</p>\n";
    const auto traces = timelines(e);
    if (!traces.empty()) {
      out += "<p>" + html_escape(kTimelineNote);
      for (const auto& [name, path] : traces) {
        out += " <a href=\"" + html_escape(file_url(path)) + "\">" + html_escape(name) + "</a>";
      }
      out += "</p>\n";
    }
    for (const Plot& p : plots) {
      if (p.section == e.slug) out += image(p);
    }
  }
  bool across = false;
  for (const Plot& p : plots) {
    if (!p.section.empty()) continue;
    if (!across) out += "<h2>Speedup against worker count</h2>\n";
    across = true;
    out += image(p);
  }
  if (across) out += "<p>" + html_escape(kPredictionNote) + "</p>\n";
  const std::string twins = twin_table(report);
  if (!twins.empty()) out += "<pre>" + html_escape(twins) + "</pre>\n";
  out += "<p>" + html_escape(table_notes(report)) + "</p>\n</body></html>\n";
  return out;
}

void write_report(const Report& report, const std::vector<Plot>& plots, const fs::path& out_dir) {
  fs::create_directories(out_dir);
  write_file_atomically(out_dir / "report.md", report_markdown(report, plots));
  write_file_atomically(out_dir / "report.html", report_html(report, plots, out_dir));
  write_file_atomically(out_dir / "report.json", report_json(report));
}

}  // namespace dctrain
