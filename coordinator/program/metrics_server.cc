#include "coordinator/program/metrics_server.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <stdexcept>

namespace dctrain {

namespace {

constexpr const char* kContentType = "text/plain; version=0.0.4; charset=utf-8";

MHD_Result send_text(MHD_Connection* connection, unsigned int status, const std::string& body,
                     const char* content_type) {
  MHD_Response* response = MHD_create_response_from_buffer(
      body.size(), const_cast<char*>(body.data()), MHD_RESPMEM_MUST_COPY);
  if (response == nullptr) return MHD_NO;
  MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
  const MHD_Result queued = MHD_queue_response(connection, status, response);
  MHD_destroy_response(response);
  return queued;
}

// libmicrohttpd's own error messages, into the coordinator's log.
void log_from_library(void* cls, const char* format, va_list args) {
  char line[512];
  std::vsnprintf(line, sizeof line, format, args);
  std::string text(line);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  static_cast<spdlog::logger*>(cls)->warn("metrics server: {}", text);
}

}  // namespace

void MetricsServer::StopDaemon::operator()(MHD_Daemon* daemon) const {
  MHD_stop_daemon(daemon);
}

MetricsServer::MetricsServer(const std::string& address, uint16_t port,
                             std::shared_ptr<spdlog::logger> log)
    : address_(address), log_(std::move(log)), snapshot_(std::make_shared<LiveSnapshot>()) {
  sockaddr_in v4{};
  sockaddr_in6 v6{};
  const sockaddr* bind_to = nullptr;
  unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
  if (::inet_pton(AF_INET, address.c_str(), &v4.sin_addr) == 1) {
    v4.sin_family = AF_INET;
    v4.sin_port = htons(port);
    bind_to = reinterpret_cast<const sockaddr*>(&v4);
  } else if (::inet_pton(AF_INET6, address.c_str(), &v6.sin6_addr) == 1) {
    v6.sin6_family = AF_INET6;
    v6.sin6_port = htons(port);
    bind_to = reinterpret_cast<const sockaddr*>(&v6);
    flags |= MHD_USE_IPv6;
  } else {
    throw std::runtime_error(fmt::format(
        "--metrics-address '{}' is not a numeric IPv4 or IPv6 address: pass e.g. 127.0.0.1 "
        "(this host only, the default), 0.0.0.0 or ::",
        address));
  }
  auto answer = [](void* cls, MHD_Connection* connection, const char* url, const char* method,
                   const char*, const char*, size_t*, void**) -> MHD_Result {
    auto* self = static_cast<MetricsServer*>(cls);
    if (std::strcmp(method, MHD_HTTP_METHOD_GET) != 0 &&
        std::strcmp(method, MHD_HTTP_METHOD_HEAD) != 0) {
      return send_text(connection, MHD_HTTP_METHOD_NOT_ALLOWED,
                       "dctrain metrics: only GET /metrics is served\n", "text/plain");
    }
    if (std::strcmp(url, "/metrics") != 0) {
      return send_text(connection, MHD_HTTP_NOT_FOUND,
                       fmt::format("dctrain metrics: nothing at '{}'; scrape /metrics\n", url),
                       "text/plain");
    }
    // Rendered here, on the server's thread, from an immutable snapshot.
    return send_text(connection, MHD_HTTP_OK, prometheus_text(*self->current()), kContentType);
  };
  MHD_Daemon* daemon =
      // The logger first, so that the library's own messages go to it.
      MHD_start_daemon(flags, port, nullptr, nullptr, answer, this, MHD_OPTION_EXTERNAL_LOGGER,
                       &log_from_library, log_.get(), MHD_OPTION_SOCK_ADDR, bind_to,
                       MHD_OPTION_CONNECTION_LIMIT, static_cast<unsigned int>(16),
                       MHD_OPTION_CONNECTION_TIMEOUT, static_cast<unsigned int>(10),
                       MHD_OPTION_END);
  if (daemon == nullptr) {
    throw std::runtime_error(fmt::format(
        "cannot serve metrics on {}:{} (is the port in use, or the address not one of this "
        "host's?): pass another --metrics-port, or 0 for a free one",
        address, port));
  }
  daemon_.reset(daemon);
  const MHD_DaemonInfo* info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_BIND_PORT);
  port_ = info != nullptr ? info->port : port;
}

MetricsServer::~MetricsServer() = default;

std::string MetricsServer::url() const {
  const bool v6 = address_.find(':') != std::string::npos;
  return fmt::format("http://{}{}{}:{}/metrics", v6 ? "[" : "", address_, v6 ? "]" : "", port_);
}

void MetricsServer::publish(std::shared_ptr<const LiveSnapshot> snapshot) {
  std::lock_guard lock(mutex_);
  snapshot_ = std::move(snapshot);
}

std::shared_ptr<const LiveSnapshot> MetricsServer::current() const {
  std::lock_guard lock(mutex_);
  return snapshot_;
}

}  // namespace dctrain
