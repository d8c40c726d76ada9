#pragma once
// One HTTP request and its response, independent of the wire version (HTTP/1.1 or
// HTTP/2). Header names are lower case, as HTTP/2 sends them.
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "agent/api/http/call_waker.h"

namespace kib::api {

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string method;  // "POST"
  std::string path;    // "/kibotos.ctrl.v1.AgentService/GetAgent" (query string removed)
  HttpHeaders headers;
  std::string body;
  // The body exceeded the transport's limit and was cut (or not read at all).
  bool body_too_large = false;
  std::string peer;  // "unix:uid=0" / "tls:CN=operator", for logs
  // Wakes the session serving the request from another thread; null where the
  // transport cannot be woken (HTTP/1.1, which answers whole requests).
  std::shared_ptr<const CallWaker> waker;

  // The first header of that (lower-case) name, or nullptr.
  const std::string* header(std::string_view name) const {
    for (const auto& [k, v] : headers)
      if (k == name) return &v;
    return nullptr;
  }
};

struct HttpResponse {
  int status = 200;
  HttpHeaders headers;  // lower-case names; content-length is added by the transport
  std::string body;
};

// What a call answered as its body arrives has for the transport to send so far. The
// transport sends the head once (the first time `head` is set), then `data`, and ends
// the response when `finished`: with `trailers` (HTTP/2) if any, else after the data.
struct StreamOutput {
  bool head = false;
  int status = 200;
  HttpHeaders headers;
  std::string data;
  bool finished = false;
  HttpHeaders trailers;
};

// A request answered while its body is still arriving: the length-prefixed protocols
// (gRPC, gRPC-Web, Connect streaming), whose messages are whole before the body ends.
class StreamingCall {
 public:
  virtual ~StreamingCall() = default;
  // Body bytes as they arrive (possibly none: the call starts with the headers), and
  // `end` once the request side ended. Adds what to send to `out`.
  virtual void on_body(std::string_view data, bool end, StreamOutput& out) = 0;
  // The session was woken (HttpRequest::waker): adds what there is to send now.
  virtual void on_wake(StreamOutput& out) { (void)out; }
  // The agent stops: a response that waits for events ends now.
  virtual void on_stop(StreamOutput& out) { (void)out; }
  // Whether the response waits for events of other threads rather than for the
  // client (a server stream such as a health Watch): the connection is not idle.
  virtual bool waiting() const { return false; }
};

// What answers the requests the transports parse.
class HttpHandler {
 public:
  // Never throws.
  virtual HttpResponse handle(const HttpRequest& request) const = 0;
  // The largest body it accepts; the transports stop reading beyond it.
  virtual size_t max_body_bytes() const = 0;
  // Whether `so_far` (headers in, body possibly still arriving) can be answered now,
  // before the request side ends: the headers already decide a refusal (unknown path,
  // content type, method), or the body already holds the whole message. A client that
  // keeps its side open waiting for an answer must not wait for the idle timeout.
  // HTTP/2 asks for requests open() declined; HTTP/1.1 asks once the headers are in
  // with a body to come (true there means a refusal: the body is left unread).
  virtual bool answerable(const HttpRequest& so_far) const {
    (void)so_far;
    return false;
  }
  // Called once the headers are in (body empty): a call taking the body as it arrives,
  // or nullptr to collect the whole body and call handle(). HTTP/2 only; HTTP/1.1
  // transports use handle(), which must answer these requests too.
  virtual std::unique_ptr<StreamingCall> open(const HttpRequest& head) const {
    (void)head;
    return nullptr;
  }

 protected:
  ~HttpHandler() = default;
};

// The reason phrase HTTP/1.1 puts after the status code.
inline const char* http_reason(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 413: return "Payload Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 499: return "Client Closed Request";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
  }
}

}  // namespace kib::api
