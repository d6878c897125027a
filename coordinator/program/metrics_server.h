// The coordinator's live metrics over HTTP: GET /metrics answers the latest
// snapshot (coordinator/live_metrics.h) as Prometheus text, format 0.0.4.
// GNU libmicrohttpd (Debian's libmicrohttpd-dev) serves it from a thread of
// its own; the step loop only swaps a pointer in publish(), so a scrape
// never holds up a step and a step never holds up a scrape.
#pragma once

#include <spdlog/logger.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "coordinator/live_metrics.h"

struct MHD_Daemon;

namespace dctrain {

class MetricsServer {
 public:
  // Listens on `address` (a numeric IPv4 or IPv6 address: 127.0.0.1 keeps
  // it on this host, 0.0.0.0 or :: opens it to every interface) and `port`
  // (0: a free one, see port()). Throws, saying what and how to fix, when it
  // cannot listen.
  MetricsServer(const std::string& address, uint16_t port, std::shared_ptr<spdlog::logger> log);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  uint16_t port() const { return port_; }
  // http://ADDRESS:PORT/metrics
  std::string url() const;
  // The snapshot every later scrape answers.
  void publish(std::shared_ptr<const LiveSnapshot> snapshot);
  // The snapshot now served (an empty one before the first publish()).
  std::shared_ptr<const LiveSnapshot> current() const;

 private:
  struct StopDaemon {
    void operator()(MHD_Daemon* daemon) const;
  };

  std::string address_;
  uint16_t port_ = 0;
  std::shared_ptr<spdlog::logger> log_;
  mutable std::mutex mutex_;  // guards snapshot_ (a pointer swap, never held while rendering)
  std::shared_ptr<const LiveSnapshot> snapshot_;
  std::unique_ptr<MHD_Daemon, StopDaemon> daemon_;  // last: stopped (and joined) first
};

}  // namespace dctrain
