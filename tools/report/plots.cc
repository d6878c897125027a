#include "tools/report/plots.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <stdexcept>

#include "common/child_process.h"
#include "common/files.h"
#include "tools/report/prediction.h"

namespace dctrain {

namespace fs = std::filesystem;

namespace {

// gnuplot single-quoted string: a quote is doubled.
std::string gp_string(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

// Runs `gnuplot script` in `dir`; returns its exit status (127 when it
// cannot be started, as a shell would), its messages in `log`.
int run_gnuplot(const std::string& gnuplot, const fs::path& dir, const std::string& script,
                std::string& log) {
  const fs::path log_path = dir / (script + ".log");
  ChildOptions options;
  options.argv = {gnuplot, script};
  options.working_directory = dir;
  options.output = ChildOutput::kFile;
  options.output_file = log_path;
  int status = 127;
  try {
    status = ChildProcess(std::move(options)).wait().shell_code();
  } catch (const std::exception& e) {
    log = e.what();
    return status;
  }
  log = read_file_if_present(log_path).value_or("");
  if (log.empty()) fs::remove(log_path);
  return status;
}

class PlotWriter {
 public:
  PlotWriter(fs::path out_dir, std::string gnuplot)
      : out_dir_(std::move(out_dir)),
        plots_dir_(out_dir_ / "plots"),
        gnuplot_(std::move(gnuplot)),
        terminal_(png_terminal(gnuplot_)) {
    fs::create_directories(plots_dir_);
  }

  // Writes name.dat and name.gp (the header, then `body`), runs gnuplot and
  // checks name.png.
  void draw(const std::string& section, const std::string& name, const std::string& title,
            const std::string& data, const std::string& body) {
    std::ofstream(plots_dir_ / (name + ".dat")) << data;
    const std::string script = fmt::format(
        "# {}: redraw with `gnuplot {}.gp` in this folder\n"
        "set terminal {} size 960,560 font 'sans,10'\n"
        "set output '{}.png'\n"
        "set termoption noenhanced\n"
        "set title {}\n"
        "set grid\n"
        "set key outside right top\n"
        "data = '{}.dat'\n"
        "{}\n",
        title, name, terminal_, name, gp_string(title), name, body);
    std::ofstream(plots_dir_ / (name + ".gp")) << script;
    std::string log;
    const int status = run_gnuplot(gnuplot_, plots_dir_, name + ".gp", log);
    const fs::path png = plots_dir_ / (name + ".png");
    if (status != 0 || !fs::exists(png) || fs::file_size(png) == 0) {
      throw std::runtime_error(fmt::format("gnuplot failed on {} (status {}):\n{}",
                                           (plots_dir_ / (name + ".gp")).string(), status, log));
    }
    plots_.push_back({section, title, fs::path("plots") / (name + ".png")});
  }

  std::vector<Plot> take() { return std::move(plots_); }

 private:
  fs::path out_dir_, plots_dir_;
  std::string gnuplot_, terminal_;
  std::vector<Plot> plots_;
};

// A run's line title: its row's label, with the seed when the row has several.
std::string run_title(const Experiment& e, const CaseRow& row, size_t run) {
  if (row.runs.size() == 1) return row.label;
  return fmt::format("{}, seed {}", row.label, e.runs[run].info.seed());
}

// "tau = p90, requeue": a row's policy without its resolved value, the same
// across worker counts.
std::string policy_key(const CaseRow& row) {
  const bool seconds =
      row.tau_policy != "auto" && row.tau_policy != "inf" && row.tau_policy[0] != 'p';
  return fmt::format("{}tau = {}{}, {}", row.policy.empty() ? "" : row.policy + ", ",
                     row.tau_policy, seconds ? " s" : "", row.requeue ? "requeue" : "no requeue");
}

void accuracy_plots(const Experiment& e, PlotWriter& writer) {
  std::string data;
  std::vector<std::string> titles;
  for (const CaseRow& row : e.rows) {
    for (size_t i : row.runs) {
      const RunFolder& run = e.runs[i];
      if (run.evals.empty()) continue;
      data += fmt::format("# {}\n# wall_seconds step accuracy\n", run.info.case_name());
      for (const v1::EvalRecord& p : run.evals)
        data += fmt::format("{} {} {}\n", p.wall_seconds(), p.step(), p.eval_accuracy());
      data += "\n\n";
      titles.push_back(run_title(e, row, i));
    }
  }
  if (titles.empty()) return;
  for (const bool by_step : {false, true}) {
    std::string plot = "plot ";
    for (size_t k = 0; k < titles.size(); ++k) {
      plot += fmt::format("{}data index {} using {}:3 with linespoints pt 7 ps 0.6 title {}",
                          k ? ", \\\n     " : "", k, by_step ? 2 : 1, gp_string(titles[k]));
    }
    const std::string name = e.slug + (by_step ? "_accuracy_step" : "_accuracy_wall");
    const std::string body = fmt::format("set xlabel '{}'\nset ylabel 'eval accuracy'\n{}",
                                         by_step ? "step" : "wall time (s)", plot);
    writer.draw(e.slug, name,
                fmt::format("{}, {} workers, {}: accuracy against {}", e.model, e.workers,
                            slowness_label(e), by_step ? "step" : "wall time"),
                data, body);
  }
}

// Accuracy against wall time, one curve per row (policy): the mean over
// its seeds of each seed's last evaluation by then, with the band from the
// lowest to the highest seed, on a grid up to the last evaluation of any
// run. Only for experiments whose rows have more than one seed.
void policy_accuracy_plot(const Experiment& e, PlotWriter& writer) {
  double end = 0.0;
  bool seeds = false;
  for (const CaseRow& row : e.rows) {
    seeds |= row.runs.size() > 1;
    for (size_t i : row.runs) {
      const RunFolder& run = e.runs[i];
      if (!run.evals.empty())
        end = std::max(end, run.evals.back().wall_seconds() + run.summary.startup_seconds());
    }
  }
  if (!seeds || !(end > 0.0)) return;
  constexpr int kPoints = 80;
  std::string data, plot = "plot ";
  size_t block = 0;
  for (const CaseRow& row : e.rows) {
    std::string rows;
    for (int k = 0; k <= kPoints; ++k) {
      const double t = end * k / kPoints;
      double sum = 0.0, lo = 1.0, hi = 0.0;
      size_t n = 0;
      for (size_t i : row.runs) {
        const std::optional<double> a = accuracy_at(e.runs[i], t);
        if (!a) continue;
        sum += *a;
        lo = std::min(lo, *a);
        hi = std::max(hi, *a);
        ++n;
      }
      // Drawn once every seed has an evaluation.
      if (n == row.runs.size() && n > 0) rows += fmt::format("{} {} {} {}\n", t, sum / n, lo, hi);
    }
    if (rows.empty()) continue;
    data += fmt::format("# {}: wall_seconds mean low high over {} seeds\n{}\n\n", row.label,
                        row.runs.size(), rows);
    plot += fmt::format(
        "{}data index {} using 1:3:4 with filledcurves fs transparent solid 0.15 lc {} notitle, "
        "\\\n     data index {} using 1:2 with lines lw 2 lc {} title {}",
        block ? ", \\\n     " : "", block, block + 1, block, block + 1, gp_string(row.label));
    ++block;
  }
  if (block == 0) return;
  writer.draw(e.slug, e.slug + "_accuracy_policies",
              fmt::format("{}, {} workers, {}: accuracy against wall time by policy "
                          "(mean over seeds; band: lowest to highest seed)",
                          e.model, e.workers, slowness_label(e)),
              data,
              "set key below\nset xlabel 'wall time from the process start (s)'\n"
              "set ylabel 'eval accuracy'\n" +
                  plot);
}

void compute_distribution_plot(const Experiment& e, PlotWriter& writer) {
  if (!e.baseline_row) return;
  std::vector<double> times;
  for (size_t i : e.rows[*e.baseline_row].runs) {
    const RunFolder& run = e.runs[i];
    const auto t = worker_compute_times(run.steps, warmup_steps(run.steps.size()));
    times.insert(times.end(), t.begin(), t.end());
  }
  if (times.empty()) return;
  const auto [lo_it, hi_it] = std::minmax_element(times.begin(), times.end());
  const double lo = *lo_it, hi = *hi_it;
  const size_t bins = std::clamp<size_t>(times.size() / 8, 10, 40);
  const double width = hi > lo ? (hi - lo) / static_cast<double>(bins) : std::max(lo * 0.05, 1e-4);
  std::vector<size_t> counts(bins, 0);
  for (double t : times) counts[std::min(bins - 1, static_cast<size_t>((t - lo) / width))]++;
  const size_t top = *std::max_element(counts.begin(), counts.end());
  std::string data = "# bin_center_seconds worker_steps\n";
  for (size_t b = 0; b < bins; ++b)
    data += fmt::format("{} {}\n", lo + (static_cast<double>(b) + 0.5) * width, counts[b]);
  data += "\n\n";
  std::string plot = fmt::format(
      "plot data index 0 using 1:2 with boxes lc rgb '#8da0cb' title 'tau = inf: {} worker steps'",
      times.size());
  double x_max = hi + width;
  size_t index = 1;
  std::map<std::string, double> marked;  // one line per tau policy (requeue does not change tau)
  for (const CaseRow& row : e.rows) {
    if (row.tau_policy == "inf" || !std::isfinite(row.tau_seconds.mean)) continue;
    const std::string label =
        row.tau_policy == "auto" ? "tau = auto (median)" : "tau = " + row.tau_policy;
    if (marked.count(label)) continue;
    marked[label] = row.tau_seconds.mean;
  }
  for (const auto& [label, tau] : marked) {
    data += fmt::format("# {}\n{} 0\n{} {}\n\n\n", label, tau, tau, top);
    plot += fmt::format(", \\\n     data index {} using 1:2 with lines lw 2 dt {} title {}", index,
                        index % 4 + 1, gp_string(fmt::format("{} = {:.4g} s", label, tau)));
    x_max = std::max(x_max, tau * 1.05);
    ++index;
  }
  const std::string body = fmt::format(
      "set style fill solid 0.6 border -1\nset boxwidth {} absolute\nset xrange [0:{}]\nset yrange "
      "[0:{}]\n"
      "set xlabel 'worker step compute time (s), injected delay included'\nset ylabel 'worker "
      "steps'\n{}",
      width * 0.95, x_max, static_cast<double>(top) * 1.1 + 1, plot);
  writer.draw(e.slug, e.slug + "_compute",
              fmt::format("{}, {} workers, {}: per-worker step compute time at tau = inf", e.model,
                          e.workers, slowness_label(e)),
              data, body);
}

void tau_plot(const Experiment& e, PlotWriter& writer) {
  std::string data, plot;
  size_t index = 0;
  for (const CaseRow& row : e.rows) {
    for (size_t i : row.runs) {
      const RunFolder& run = e.runs[i];
      bool varies = false;
      for (const v1::StepRecord& s : run.steps)
        varies = varies || tau_seconds(s.tau()) != tau_seconds(run.steps.front().tau());
      if (row.tau_policy != "auto" && !varies) continue;
      // Steps at tau = inf (the warm-up) have no point; a run that never
      // left it has no line (its table row says so).
      std::string points;
      for (const v1::StepRecord& s : run.steps) {
        const double tau = tau_seconds(s.tau());
        if (std::isfinite(tau)) points += fmt::format("{} {}\n", s.wall_seconds(), tau);
      }
      if (points.empty()) continue;
      data += fmt::format("# {}\n# wall_seconds tau_seconds\n{}\n\n", run.info.case_name(), points);
      plot += fmt::format("{}data index {} using 1:2 with steps lw 2 title {}",
                          index ? ", \\\n     " : "plot ", index, gp_string(run_title(e, row, i)));
      ++index;
    }
  }
  if (index == 0) return;
  writer.draw(
      e.slug, e.slug + "_tau",
      fmt::format("{}, {} workers, {}: tau over time", e.model, e.workers, slowness_label(e)), data,
      "set xlabel 'wall time (s)'\nset ylabel 'tau (s)'\nset yrange [0:*]\n" + plot);
}

// Distinct line colors, one per tau policy; the best tau is drawn in black.
constexpr const char* kPolicyColors[] = {"#1b9e77", "#d95f02", "#7570b3", "#e7298a",
                                         "#66a61e", "#e6ab02", "#a6761d", "#666666"};

// One speedup plot being assembled: its data blocks, its plot command, the
// y range its points span, and a colour per tau policy.
class SpeedupPlot {
 public:
  explicit SpeedupPlot(bool simulated) : simulated_(simulated) {
    const std::vector<uint32_t> counts = curve_worker_counts();
    worker_counts_.insert(counts.begin(), counts.end());
  }

  // The predicted curves of the experiments (none for a simulated family:
  // its cases run at every worker count a curve would stand in for).
  void add_predicted(const std::vector<const Experiment*>& experiments) {
    if (simulated_) return;
    size_t with_curves = 0;
    for (const Experiment* e : experiments) with_curves += e->predicted ? 1 : 0;
    size_t experiment_index = 0;
    for (const Experiment* e : experiments) {
      if (!e->predicted) continue;
      const std::string source =
          with_curves > 1 ? fmt::format(", from the {}-worker baseline", e->workers) : "";
      for (const SpeedupCurve& curve : e->predicted->curves) {
        add_curve(*e->predicted, curve, experiment_index, source);
      }
      ++experiment_index;
    }
  }

  // Measured at the worker counts that ran: each row's one speedup, as its
  // table gives it (CaseRow::speedup), with its 95% interval over seeds.
  void add_measured(const std::vector<const Experiment*>& experiments) {
    std::map<std::string, std::vector<Point>> series;  // by policy_key
    std::map<std::string, const CaseRow*> series_row;
    for (const Experiment* e : experiments) {
      if (!e->baseline_row) continue;
      for (const CaseRow& row : e->rows) {
        if (&row == &e->rows[*e->baseline_row] || !row.speedup()) continue;
        const Speedup& s = *row.speedup();
        Point m{e->workers, s.ratio, s.ratio, s.ratio, s.basis};
        if (s.interval) {
          m.low = s.interval->low;
          m.high = s.interval->high;
        }
        series[policy_key(row)].push_back(m);
        series_row.emplace(policy_key(row), &row);
      }
    }
    for (auto& [policy, points] : series) {
      std::sort(points.begin(), points.end());
      add_series(policy, *series_row.at(policy), points);
    }
  }

  bool empty() const { return blocks_ == 0; }
  const std::string& data() const { return data_; }

  // The gnuplot commands: axes, key, the line at 1, the plot.
  std::string body() const {
    std::string tics;
    for (uint32_t w : worker_counts_) tics += (tics.empty() ? "(" : ", ") + std::to_string(w);
    const double pad = std::max(0.02, 0.08 * (y_hi_ - y_lo_));
    return fmt::format(
        "set xlabel 'workers (log scale)'\n"
        "set ylabel \"speedup over tau = inf\\n"
        "(measured: basis in the key; curves: samples/s)\"\n"
        "set logscale x 2\nset xrange [0.8:{}]\nset xtics {})\nset yrange [{}:{}]\n"
        "set key default\nset key outside below center horizontal spacing 1.2\n"
        "set arrow from graph 0, first 1 to graph 1, first 1 nohead lc rgb '#999999'\n{}",
        *worker_counts_.rbegin() * 1.25, tics, y_lo_ - pad, y_hi_ + pad, plot_);
  }

 private:
  struct Point {
    uint32_t workers = 0;
    double measured = 0.0, low = 0.0, high = 0.0;
    std::string basis;  // "time to target" or "samples/s"
    bool operator<(const Point& o) const { return workers < o.workers; }
  };

  std::string color(const std::string& policy) {
    if (policy == "best") return "lc rgb '#000000'";
    const size_t n = colors_.emplace(policy, colors_.size()).first->second;
    return fmt::format("lc rgb '{}'", kPolicyColors[n % std::size(kPolicyColors)]);
  }
  void widen(double y) {
    if (!std::isfinite(y)) return;
    y_lo_ = std::min(y_lo_, y);
    y_hi_ = std::max(y_hi_, y);
  }
  void add(size_t block, const std::string& spec) {
    plot_ +=
        fmt::format("{}data index {} {}", plot_.empty() ? "plot " : ", \\\n     ", block, spec);
  }

  void add_curve(const PredictedCurves& p, const SpeedupCurve& curve, size_t experiment_index,
                 const std::string& source) {
    data_ += fmt::format(
        "# predicted, {}: i.i.d. workers drawn from the {}-worker baseline's {} worker steps, "
        "overhead {} s{}\n"
        "# workers tau_seconds predicted_speedup drop_rate step_seconds "
        "baseline_step_seconds\n",
        curve.label, p.recorded_workers, p.worker_steps, p.overhead_seconds,
        curve.tau_policy == "best" || curve.tau_policy == "bounded"
            ? ""
            : fmt::format("; at {} workers the baseline's own steps replayed under this tau, the "
                          "table's predicted column",
                          p.recorded_workers));
    for (const CurvePoint& c : curve.points) {
      data_ += fmt::format("{} {} {} {} {} {}\n", c.workers, tau_text(c.tau), c.speedup,
                           c.drop_rate, c.step_seconds, c.baseline_step_seconds);
      widen(c.speedup);
    }
    data_ += "\n\n";
    const bool best = curve.tau_policy == "best";
    add(blocks_++,
        fmt::format(
            "using 1:3 with linespoints lw {} pt 7 ps 0.6 dt {} {} title {}", best ? 3 : 2,
            experiment_index % 4 + 1, color(curve.tau_policy),
            gp_string(fmt::format("{}: predicted{}",
                                  best ? "best tau for each worker count" : curve.label, source))));
  }

  void add_series(const std::string& policy, const CaseRow& row, const std::vector<Point>& points) {
    data_ += fmt::format(
        "# {}: the table's speedup, on its basis\n# workers speedup interval_low interval_high "
        "(95%, over seeds)\n",
        policy);
    std::string bases;
    for (const Point& m : points) {
      data_ += fmt::format("# {} workers: on {}\n{} {} {} {}\n", m.workers, m.basis, m.workers,
                           m.measured, m.low, m.high);
      widen(m.low);
      widen(m.high);
      worker_counts_.insert(m.workers);
      if (bases.find(m.basis) == std::string::npos) bases += (bases.empty() ? "" : " / ") + m.basis;
    }
    data_ += "\n\n";
    // The colour of the predicted curve of its tau, when the replay models it.
    const bool even = row.policy.empty() || row.policy == "dropcompute" || row.policy == "sync";
    const std::string line_color = color(even ? row.tau_policy : row.policy + " " + row.tau_policy);
    add(blocks_++,
        fmt::format("using 1:2:3:4 with {} pt {} ps {} lw 2 {} title {}",
                    simulated_ ? "yerrorlines" : "yerrorbars", row.requeue ? 7 : 5,
                    simulated_ ? 1.2 : 1.6, line_color,
                    gp_string(fmt::format("{}: {} on {}, 95% interval", policy,
                                          simulated_ ? "simulated" : "measured", bases))));
  }

  bool simulated_;
  std::string data_, plot_;
  size_t blocks_ = 0;  // data blocks written
  double y_lo_ = 1.0, y_hi_ = 1.0;
  std::map<std::string, size_t> colors_;  // tau policy -> index into kPolicyColors
  std::set<uint32_t> worker_counts_;
};

// Speedup against worker count for each (model, delay), on a log-2 axis:
// the predicted curves over 1..256 workers from each worker count's
// baseline (i.i.d. workers drawn from its pooled worker steps; a case's
// curve at the baseline's own count is the table's predicted column), and
// at the worker counts that ran, each case's speedup as its table gives it. A simulated family
// (beside the real one) shows its cases alone, each policy a line through its worker counts with
// the seeds' interval.
void speedup_plots(const Report& report, PlotWriter& writer) {
  std::map<std::tuple<std::string, std::string, bool>, std::vector<const Experiment*>> families;
  for (const Experiment& e : report.experiments) {
    families[{e.model, e.delay, e.simulated}].push_back(&e);
  }
  for (const auto& [key, experiments] : families) {
    const auto& [model, delay, simulated] = key;
    SpeedupPlot plot(simulated);
    // The curves first, so the measured points are drawn over them.
    plot.add_predicted(experiments);
    plot.add_measured(experiments);
    if (plot.empty()) continue;
    writer.draw("", fmt::format("speedup_{}_{}{}", model, delay, simulated ? "_sim" : ""),
                simulated ? fmt::format("{}, {} delays (simulated): speedup against worker count, "
                                        "each policy, 95% intervals over seeds",
                                        model, delay)
                          : fmt::format("{}, {} delays: speedup against worker count, measured "
                                        "and predicted",
                                        model, delay),
                plot.data(), plot.body());
  }
}

}  // namespace

std::string find_gnuplot() {
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    const size_t end = std::min(dirs.find(':', start), dirs.size());
    const fs::path candidate = fs::path(dirs.substr(start, end - start)) / "gnuplot";
    if (!candidate.parent_path().empty() && ::access(candidate.c_str(), X_OK) == 0)
      return candidate.string();
    start = end + 1;
  }
  throw std::runtime_error(
      "gnuplot is not on PATH; the plots need it: install it with `apt-get install gnuplot-nox` "
      "(tools/setup.sh "
      "does), or pass --no-plots for tables only");
}

std::string png_terminal(const std::string& gnuplot) {
  std::string log;
  const fs::path dir = fs::temp_directory_path();
  const fs::path probe = dir / fmt::format("dctrain-report-probe-{}.gp", ::getpid());
  std::ofstream(probe) << "set terminal pngcairo\n";
  const int status = run_gnuplot(gnuplot, dir, probe.filename().string(), log);
  fs::remove(probe);
  fs::remove(dir / (probe.filename().string() + ".log"));
  return status == 0 ? "pngcairo" : "png";
}

std::vector<Plot> draw_plots(const Report& report, const fs::path& out_dir,
                             const std::string& gnuplot) {
  PlotWriter writer(out_dir, gnuplot);
  for (const Experiment& e : report.experiments) {
    accuracy_plots(e, writer);
    policy_accuracy_plot(e, writer);
    compute_distribution_plot(e, writer);
    tau_plot(e, writer);
  }
  speedup_plots(report, writer);
  return writer.take();
}

}  // namespace dctrain
