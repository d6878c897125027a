// The worker's command line. Everything else (model, data, optimizer, delays)
// comes from the coordinator in the welcome message.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace dctrain {

struct WorkerOptions {
  std::string connect = "tcp://127.0.0.1:5555";  // the coordinator's address
  std::string data_dir;                          // data root; empty: synthetic data
  int threads = 1;                               // compute threads
  std::string name;                              // empty: host:pid
  double connect_timeout = 60.0;  // seconds without an answer before giving up; 0: never
  std::string log_level = "info";
  bool blas_info = false;  // log the BLAS core and an sgemm figure, then exit
  // CURVE (comm/security.h): both or neither.
  std::string secret_key;       // this worker's NAME.key
  std::string coordinator_key;  // the coordinator's NAME.pub
  // Data plane "exchange": where this worker's peer listens, tcp://IP:PORT
  // (port * for any); empty: tcp://IP:* on the interface that reaches the
  // coordinator.
  std::string exchange_bind;
  // The endpoint the other workers connect to when it is not the bound one
  // (a container's published port, a NAT); empty: the bound endpoint.
  std::string exchange_advertise;
  // Not a flag: the endpoint advertised in the hello (exchange_advertise, or
  // the one bound from exchange_bind).
  std::string exchange_endpoint;
  std::string exchange_token;  // the data plane's connection token (ExchangePeer::token())
};

// Registers every flag, bound to `options`, with its default shown by --help.
void add_worker_options(CLI::App& app, WorkerOptions& options);

}  // namespace dctrain
