// The BLAS core decision on a table of (reported core, CPU, OPENBLAS_CORETYPE)
// cases, and the report the programs log and record.
#include "common/blas_core.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

namespace dctrain {
namespace {

CpuFeatures sse_only() {
  CpuFeatures f;
  f.sse3 = f.ssse3 = f.sse4_1 = f.sse4_2 = true;
  return f;
}

CpuFeatures avx_only() {
  CpuFeatures f = sse_only();
  f.avx = true;
  return f;
}

CpuFeatures avx2() {
  CpuFeatures f = avx_only();
  f.avx2 = f.fma = true;
  return f;
}

CpuFeatures avx512() {
  CpuFeatures f = avx2();
  f.avx512f = f.avx512bw = f.avx512vl = f.avx512dq = f.avx512cd = true;
  return f;
}

// AVX-512 Foundation and Conflict Detection only, as on Knights Landing: not
// enough for the SkylakeX kernels.
CpuFeatures avx512_f_cd_only() {
  CpuFeatures f = avx2();
  f.avx512f = f.avx512cd = true;
  return f;
}

struct Case {
  std::string name;
  std::string reported;
  CpuFeatures cpu;
  std::optional<std::string> user;
  bool override;
  std::string core;  // override: the OPENBLAS_CORETYPE value
  std::string why;
};

TEST(BlasCore, ChoiceTable) {
  const std::vector<Case> cases = {
      {"Prescott fallback on an AVX-512 CPU (unknown new Intel model)", "Prescott", avx512(),
       std::nullopt, true, "SkylakeX", "the library reported Prescott on an AVX-512 CPU"},
      {"names compare case-insensitively", "prescott", avx512(), std::nullopt, true, "SkylakeX",
       "the library reported prescott on an AVX-512 CPU"},
      {"Nehalem on an AVX2 CPU", "Nehalem", avx2(), std::nullopt, true, "Haswell",
       "the library reported Nehalem on an AVX2 CPU"},
      {"Core2 on an AVX CPU", "Core2", avx_only(), std::nullopt, true, "Sandybridge",
       "the library reported Core2 on an AVX CPU"},
      {"Penryn on AVX-512F without BW/VL/DQ: AVX2 kernels", "Penryn", avx512_f_cd_only(),
       std::nullopt, true, "Haswell", "the library reported Penryn on an AVX2 CPU"},
      {"Unknown on an AVX-512 CPU", "Unknown", avx512(), std::nullopt, true, "SkylakeX",
       "the library reported Unknown on an AVX-512 CPU"},
      {"generic build on an AVX2 CPU", "generic", avx2(), std::nullopt, true, "Haswell",
       "the library reported generic on an AVX2 CPU"},
      {"Atom on AVX2", "Atom", avx2(), std::nullopt, true, "Haswell",
       "the library reported Atom on an AVX2 CPU"},
      {"Dunnington on AVX-512", "Dunnington", avx512(), std::nullopt, true, "SkylakeX",
       "the library reported Dunnington on an AVX-512 CPU"},
      {"Zen on AVX2: as detected", "Zen", avx2(), std::nullopt, false, "", "as detected"},
      {"Haswell on AVX-512 (Zen 4 here): kept, only generic/SSE cores are overridden", "Haswell",
       avx512(), std::nullopt, false, "", "as detected"},
      {"Sandybridge on AVX2: kept", "Sandybridge", avx2(), std::nullopt, false, "", "as detected"},
      {"SkylakeX on AVX-512", "SkylakeX", avx512(), std::nullopt, false, "", "as detected"},
      {"Cooperlake on AVX-512", "Cooperlake", avx512(), std::nullopt, false, "", "as detected"},
      {"a core name this code does not know is kept", "Zen5", avx512(), std::nullopt, false, "",
       "as detected"},
      {"Prescott on an SSE-only CPU: nothing wider to run", "Prescott", sse_only(), std::nullopt,
       false, "", "as detected"},
      {"Prescott on a bare x86-64 CPU", "Prescott", CpuFeatures{}, std::nullopt, false, "",
       "as detected"},
      {"the user's Prescott on an AVX-512 CPU is kept", "Prescott", avx512(),
       std::optional<std::string>("Prescott"), false, "", "set by OPENBLAS_CORETYPE=Prescott"},
      {"the user's value is kept even when the library ignored it", "Prescott", avx512(),
       std::optional<std::string>("SkylakeX"), false, "", "set by OPENBLAS_CORETYPE=SkylakeX"},
      {"an empty OPENBLAS_CORETYPE is the user's too", "Prescott", avx512(),
       std::optional<std::string>(""), false, "", "set by OPENBLAS_CORETYPE="},
  };
  for (const Case& c : cases) {
    const BlasCoreChoice choice = choose_blas_core(c.reported, c.cpu, c.user);
    EXPECT_EQ(choice.override, c.override) << c.name;
    EXPECT_EQ(choice.core, c.core) << c.name;
    EXPECT_EQ(choice.why, c.why) << c.name;
  }
}

TEST(BlasCore, SseCoresAndCpuClasses) {
  for (const char* core : {"Prescott", "Core2", "Penryn", "Nehalem", "Atom", "Dunnington",
                           "generic", "unknown", "Barcelona", "Opteron(SSE3)", "NANO"}) {
    EXPECT_TRUE(is_sse_blas_core(core)) << core;
  }
  for (const char* core : {"Sandybridge", "Haswell", "Zen", "SkylakeX", "Cooperlake",
                           "SapphireRapids", "Bulldozer", "Excavator", "", "Prescott2"}) {
    EXPECT_FALSE(is_sse_blas_core(core)) << core;
  }
  EXPECT_EQ(describe(avx512()), "AVX-512");
  EXPECT_EQ(describe(avx512_f_cd_only()), "AVX2");
  EXPECT_EQ(describe(avx_only()), "AVX");
  EXPECT_EQ(describe(sse_only()), "SSE4.2");
  EXPECT_EQ(describe(CpuFeatures{}), "baseline x86-64");
  EXPECT_TRUE(same_blas_core("SkylakeX", "skylakex"));
  EXPECT_FALSE(same_blas_core("SkylakeX", "Skylake"));
}

BlasProbe probe(const std::string& reported, std::optional<std::string> coretype,
                std::optional<std::string> detected) {
  BlasProbe p;
  p.reported_core = reported;
  p.config = "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH NO_AFFINITY " + reported + " MAX_THREADS=64";
  p.threads = 1;
  p.coretype = std::move(coretype);
  p.detected_core = std::move(detected);
  p.cpu = avx512();
  p.cpu_model = "Intel(R) Xeon(R) Processor";
  return p;
}

TEST(BlasCore, ReportSaysHowTheCoreWasChosen) {
  const BlasReport detected = make_blas_report(probe("Haswell", std::nullopt, std::nullopt));
  EXPECT_EQ(detected.source, BlasCoreSource::kDetected);
  EXPECT_EQ(describe(detected),
            "OpenBLAS 0.3.21, core Haswell (as detected), 1 thread; CPU Intel(R) Xeon(R) "
            "Processor (AVX-512)");
  EXPECT_EQ(detected.coretype, "");
  EXPECT_TRUE(detected.warning.empty());

  const BlasReport user = make_blas_report(probe("Prescott", "Prescott", std::nullopt));
  EXPECT_EQ(user.source, BlasCoreSource::kEnvironment);
  EXPECT_STREQ(to_string(user.source), "environment");
  EXPECT_EQ(describe(user),
            "OpenBLAS 0.3.21, core Prescott (set by OPENBLAS_CORETYPE=Prescott), 1 thread; CPU "
            "Intel(R) Xeon(R) Processor (AVX-512)");
  EXPECT_TRUE(user.warning.empty());

  // The re-executed image: the variable this program set and the core the
  // library had picked before.
  const BlasReport chosen = make_blas_report(probe("SkylakeX", "SkylakeX", "Prescott"));
  EXPECT_EQ(chosen.source, BlasCoreSource::kChosen);
  EXPECT_STREQ(to_string(chosen.source), "chosen");
  EXPECT_EQ(chosen.core, "SkylakeX");
  EXPECT_EQ(chosen.detected_core, "Prescott");
  EXPECT_EQ(describe(chosen),
            "OpenBLAS 0.3.21, core SkylakeX (chosen: the library reported Prescott on an AVX-512 "
            "CPU), 1 thread; CPU Intel(R) Xeon(R) Processor (AVX-512)");
  EXPECT_TRUE(chosen.warning.empty());

  // A library that ignores the variable (no DYNAMIC_ARCH) or a name it does
  // not know: the report says what runs and warns.
  const BlasReport ignored = make_blas_report(probe("Prescott", "SkylakeX", "Prescott"));
  EXPECT_EQ(ignored.core, "Prescott");
  EXPECT_NE(ignored.warning.find("OPENBLAS_CORETYPE=SkylakeX but the library runs its Prescott"),
            std::string::npos)
      << ignored.warning;
  const BlasReport unknown = make_blas_report(probe("Cooperlake", "bogus", std::nullopt));
  EXPECT_EQ(unknown.source, BlasCoreSource::kEnvironment);
  EXPECT_NE(unknown.warning.find("OPENBLAS_CORETYPE=bogus"), std::string::npos) << unknown.warning;

  // Lower case from the user is the same core.
  EXPECT_TRUE(make_blas_report(probe("SkylakeX", "skylakex", std::nullopt)).warning.empty());
}

TEST(BlasCore, SgemmFigureIsDescribedOnlyWhenMeasured) {
  BlasReport r = make_blas_report(probe("Haswell", std::nullopt, std::nullopt));
  EXPECT_EQ(describe_sgemm(r), "");
  r.sgemm_size = 512;
  r.sgemm_threads = 1;
  r.sgemm_gflops = 101.24;
  r.sgemm_seconds = 0.048;
  EXPECT_EQ(describe_sgemm(r), "sgemm 512^3, 1 thread: 101.2 GFLOP/s (measured in 48 ms)");
}

}  // namespace
}  // namespace dctrain
