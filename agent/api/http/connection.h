#pragma once
// Serves one accepted connection: HTTP/2 when the client opens with the HTTP/2
// preface ("PRI * HTTP/2.0", prior knowledge or after ALPN "h2"), HTTP/1.1 otherwise.
#include <string>

#include "agent/api/http/byte_stream.h"
#include "agent/api/http/http_message.h"

namespace kib::api {

void serve_connection(ByteStream& stream, const HttpHandler& handler, const std::string& peer);

}  // namespace kib::api
