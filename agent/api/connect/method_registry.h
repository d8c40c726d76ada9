#pragma once
// The table of unary RPCs the Connect server dispatches to. Services register typed
// handlers; the Connect codec decodes requests into the registered type and encodes
// the returned message or Error.
#include <google/protobuf/message.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "agent/api/http/call_waker.h"
#include "agent/common/result.h"

namespace kib::api {

struct CallContext {
  // From Connect-Timeout-Ms; time_point::max() when absent.
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  // Who called, for logs only: "unix:uid=0" or "tls:CN=operator".
  std::string peer;
  // Wakes the session serving the call, for a server stream's events; null where the
  // transport cannot be woken (HTTP/1.1).
  std::shared_ptr<const CallWaker> waker;
};

using MessagePtr = std::unique_ptr<google::protobuf::Message>;

// The source of a server stream's response messages. The call asks it when the stream
// opens and each time its session is woken; it lives as long as the stream.
class ServerStream {
 public:
  virtual ~ServerStream() = default;
  // The messages to send now (none: nothing new), or the error that ends the stream.
  virtual Result<std::vector<MessagePtr>> poll() = 0;
};

struct Method {
  // An empty request message of the method's request type, for decoding.
  const google::protobuf::Message* request_prototype = nullptr;
  // A bidirectional stream answering each request message with one response message
  // (server reflection); served by the length-prefixed protocols only.
  bool streaming = false;
  std::function<Result<MessagePtr>(const google::protobuf::Message&, const CallContext&)> call;
  // Set for a server stream (health Watch; `streaming` too): its one request message
  // opens the source of its responses, and the stream stays open until the client
  // cancels or the agent stops. `call` is then unset.
  std::function<Result<std::unique_ptr<ServerStream>>(const google::protobuf::Message&, const CallContext&)>
      open_stream;
};

class MethodRegistry {
 public:
  // path is "kibotos.ctrl.v1.EgressService/CreateEgress" (no leading slash).
  template <typename Req, typename Resp>
  void add(const std::string& path, std::function<Result<Resp>(const Req&, const CallContext&)> fn) {
    Method m;
    m.request_prototype = &Req::default_instance();
    m.call = [fn = std::move(fn)](const google::protobuf::Message& req, const CallContext& ctx) -> Result<MessagePtr> {
      KIB_TRY_ASSIGN(auto r, fn(static_cast<const Req&>(req), ctx));
      return MessagePtr(new Resp(std::move(r)));
    };
    methods_[path] = std::move(m);
  }

  // A bidirectional stream: `fn` answers each request message; the stream ends with
  // the request side, or with the first error.
  template <typename Req, typename Resp>
  void add_stream(const std::string& path, std::function<Result<Resp>(const Req&, const CallContext&)> fn) {
    add<Req, Resp>(path, std::move(fn));
    methods_[path].streaming = true;
  }

  // A server stream: `fn` answers the one request message with the stream's source.
  template <typename Req>
  void add_server_stream(const std::string& path,
                         std::function<Result<std::unique_ptr<ServerStream>>(const Req&, const CallContext&)> fn) {
    Method m;
    m.request_prototype = &Req::default_instance();
    m.streaming = true;
    m.open_stream = [fn = std::move(fn)](const google::protobuf::Message& req, const CallContext& ctx) {
      return fn(static_cast<const Req&>(req), ctx);
    };
    methods_[path] = std::move(m);
  }

  // The services with a registered method, by full name ("kibotos.ctrl.v1.AgentService").
  std::vector<std::string> services() const {
    std::vector<std::string> out;
    for (const auto& [path, m] : methods_) {
      std::string service = path.substr(0, path.find('/'));
      if (out.empty() || out.back() != service) out.push_back(service);
    }
    return out;
  }

  const Method* find(const std::string& path) const {
    auto it = methods_.find(path);
    return it == methods_.end() ? nullptr : &it->second;
  }

 private:
  std::map<std::string, Method> methods_;
};

}  // namespace kib::api
