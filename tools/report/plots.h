// The report's plots, drawn by gnuplot: for each, a data file (.dat) and a
// script (.gp) are written beside the image, so any plot can be redrawn or
// restyled by hand.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "tools/report/report.h"

namespace dctrain {

struct Plot {
  std::string section;  // an experiment's slug, or "" for plots across experiments
  std::string title;
  std::filesystem::path image;  // relative to the report folder ("plots/x.png")
};

// gnuplot on PATH; throws std::runtime_error saying how to install it.
std::string find_gnuplot();

// "pngcairo" when this gnuplot has it, else "png".
std::string png_terminal(const std::string& gnuplot);

// Writes every plot under `out_dir`/plots and runs gnuplot on each; throws
// when gnuplot fails or leaves an empty image, with its messages.
std::vector<Plot> draw_plots(const Report& report, const std::filesystem::path& out_dir,
                             const std::string& gnuplot);

}  // namespace dctrain
