#pragma once
// Serves one accepted connection: HTTP/2 when the client opens with the HTTP/2
// preface ("PRI * HTTP/2.0", prior knowledge or after ALPN "h2"), HTTP/1.1 otherwise.
#include <memory>
#include <string>

#include "agent/api/http/byte_stream.h"
#include "agent/api/http/http_message.h"
#include "agent/api/http/session_waker.h"

namespace kib::api {

// waker: wakes an HTTP/2 session from other threads (none: streams that wait for
// events, a health Watch, are refused). HTTP/1.1 answers whole requests and ignores it.
void serve_connection(ByteStream& stream, const HttpHandler& handler, const std::string& peer,
                      std::shared_ptr<SessionWaker> waker = nullptr);

}  // namespace kib::api
