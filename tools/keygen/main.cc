// dctrain-keygen: makes CURVE key pairs for dctrain's coordinator and
// workers (comm/security.h): NAME.key (secret, mode 0600) and NAME.pub.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "comm/security.h"
#include "common/cli.h"
#include "common/exit_codes.h"

int main(int argc, char** argv) try {
  CLI::App app{
      "dctrain-keygen: writes CURVE key pairs, NAME.key (the secret key, mode 0600: keep it on the "
      "host that uses it) and NAME.pub (the public key, followed by NAME as a comment)"};
  std::vector<std::string> names;
  std::string out_dir = ".", allowed;
  std::string log_level = "info";
  bool force = false;
  dctrain::add_common_options(app, "dctrain-keygen", log_level);
  app.add_option("names", names, "One key pair per NAME (e.g. coordinator worker-0 worker-1)")
      ->required();
  app.add_option("--dir", out_dir, "Folder for the key files (made if missing)")
      ->capture_default_str();
  app.add_flag("--force", force, "Replace existing key files");
  app.add_option("--allowed", allowed,
                 "Also add each public key made to this allow-list file (one key per line, "
                 "made if missing): the coordinator's --allowed-keys");
  app.footer(
      "Then:\n"
      "  dctrain-coordinator --secret-key coordinator.key --allowed-keys ALLOWED ...\n"
      "      ALLOWED: a folder holding the workers' NAME.pub, or one file of their lines\n"
      "      (--allowed writes one)\n"
      "  dctrain-worker --secret-key worker-0.key --coordinator-key coordinator.pub ...\n"
      "Only .pub files travel between hosts; a .key never leaves the host that uses it.");
  dctrain::add_examples(app,
                        {"dctrain-keygen --dir keys coordinator",
                         "dctrain-keygen --dir keys --allowed keys/allowed worker-0 worker-1"});
  if (const std::optional<int> status = dctrain::parse_command_line(app, argc, argv))
    return *status;
  std::filesystem::create_directories(out_dir);
  for (const std::string& name : names) {
    if (name.empty() || name.find('/') != std::string::npos) {
      std::fprintf(stderr, "dctrain-keygen: '%s' is not a plain name (no '/'; use --dir)\n",
                   name.c_str());
      return dctrain::kExitUsage;
    }
    const std::filesystem::path stem = std::filesystem::path(out_dir) / name;
    const dctrain::CurveKeyPair keys = dctrain::generate_curve_keypair();
    dctrain::write_key_pair(stem, keys, name, force);
    // The public key only: the secret stays in its file.
    std::printf("%s.key, %s.pub: %s\n", stem.c_str(), stem.c_str(), keys.public_key.c_str());
    if (!allowed.empty()) {
      std::ofstream list(allowed, std::ios::app);
      list << keys.public_key << ' ' << name << '\n';
      if (!list.flush()) {
        std::fprintf(stderr, "dctrain-keygen: cannot add to the allow-list %s\n", allowed.c_str());
        return dctrain::kExitFailed;
      }
    }
  }
  return dctrain::kExitDone;
} catch (const std::exception& e) {
  std::fprintf(stderr, "dctrain-keygen: %s\n", e.what());
  return dctrain::kExitFailed;
}
