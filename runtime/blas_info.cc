#include "runtime/blas_info.h"

namespace dctrain {

v1::BlasInfo to_proto(const BlasReport& report) {
  v1::BlasInfo info;
  info.set_library(report.library);
  info.set_core(report.core);
  info.set_how(to_string(report.source));
  info.set_detected_core(report.detected_core);
  info.set_coretype(report.coretype);
  info.set_cpu_model(report.cpu_model);
  info.set_cpu_features(report.cpu_features);
  info.set_threads(static_cast<uint32_t>(report.threads));
  info.set_sgemm_size(static_cast<uint32_t>(report.sgemm_size));
  info.set_sgemm_threads(static_cast<uint32_t>(report.sgemm_threads));
  info.set_sgemm_gflops(report.sgemm_gflops);
  info.set_warning(report.warning);
  return info;
}

}  // namespace dctrain
