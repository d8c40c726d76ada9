#pragma once
// A Connect unary client over libcurl: JSON bodies, to the agent's Unix socket or its
// mTLS listener. One POST per call; Connect error bodies become kib::Error.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "agent/common/result.h"

namespace kib::ctl {

struct Endpoint {
  std::string unix_socket;  // used when server is empty
  std::string server;       // host:port of the TLS listener
  std::string cert, key, ca;
  uint32_t timeout_seconds = 30;
  uint32_t max_time_ms = 0;  // caps the whole exchange (shell completion); 0: timeout_seconds + 5 s
};

// The error a Connect response carries: its JSON body's code and message when it has
// them, else the code Connect assigns to the bare HTTP status.
Error error_from_response(long http_status, std::string_view body);

class ConnectClient {
 public:
  explicit ConnectClient(Endpoint endpoint);
  ~ConnectClient();
  ConnectClient(const ConnectClient&) = delete;
  ConnectClient& operator=(const ConnectClient&) = delete;

  // `method` is "kibotos.ctrl.v1.EgressService.CreateEgress"; returns the JSON body.
  Result<std::string> call(std::string_view method, const std::string& json_body);

 private:
  struct Curl;
  Endpoint endpoint_;
  std::unique_ptr<Curl> curl_;
};

}  // namespace kib::ctl
