// report.json: the report's figures for programs.
#pragma once

#include <string>

#include "proto/report.pb.h"
#include "tools/report/report.h"

namespace dctrain {

// report.json (proto/report.proto): every row's figures as numbers, and
// each experiment's predicted curves at reported_worker_counts(); its text.
v1::ReportFile report_file(const Report& report);
std::string report_json(const Report& report);

}  // namespace dctrain
