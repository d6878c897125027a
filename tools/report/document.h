// The report's files: report.md (tables, plots linked), report.html (the
// same, with the plots embedded so the file stands alone) and report.json
// (every row's figures as numbers).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "tools/report/plots.h"
#include "tools/report/report.h"

namespace dctrain {

std::string report_markdown(const Report& report, const std::vector<Plot>& plots);

// Plot images are read from `out_dir` and embedded as data: URIs.
std::string report_html(const Report& report, const std::vector<Plot>& plots,
                        const std::filesystem::path& out_dir);

// Writes report.md, report.html and report.json into `out_dir`.
void write_report(const Report& report, const std::vector<Plot>& plots,
                  const std::filesystem::path& out_dir);

}  // namespace dctrain
