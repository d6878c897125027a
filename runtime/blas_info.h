// The BLAS report of a process (common/blas_core.h) as it travels in a
// worker's hello and lands in summary.json.
#pragma once

#include "common/blas_core.h"
#include "proto/wire.pb.h"

namespace dctrain {

v1::BlasInfo to_proto(const BlasReport& report);

}  // namespace dctrain
