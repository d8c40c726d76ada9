#include "agent/api/http/connection.h"

#include <algorithm>
#include <string_view>

#include "agent/api/http/http1_session.h"
#include "agent/api/http/http2_session.h"

namespace kib::api {

void serve_connection(ByteStream& stream, const HttpHandler& handler, const std::string& peer,
                      std::shared_ptr<SessionWaker> waker) {
  static constexpr std::string_view kPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
  std::string initial;
  char buf[4096];
  // Read until the bytes either are the preface or cannot become it.
  while (initial.size() < kPreface.size()) {
    ssize_t n = stream.read(buf, sizeof buf);
    if (n <= 0) return;
    initial.append(buf, static_cast<size_t>(n));
    size_t common = std::min(initial.size(), kPreface.size());
    if (std::string_view(initial).substr(0, common) != kPreface.substr(0, common)) break;
  }
  if (std::string_view(initial).starts_with(kPreface)) {
    Http2Session(stream, handler, peer, std::move(waker)).serve(initial);
  } else {
    Http1Session(stream, handler, peer).serve(initial);
  }
}

}  // namespace kib::api
