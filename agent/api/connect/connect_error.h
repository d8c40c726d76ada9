#pragma once
// Connect error responses: a JSON body {"code":"…","message":"…"} with the HTTP status
// of Connect's code table (connectrpc.com/docs/protocol#error-codes).
#include "agent/api/http/http_message.h"
#include "agent/common/result.h"

namespace kib::api {

HttpResponse connect_error_response(const Error& error);
// The same body with another HTTP status (e.g. 404 for an unknown method).
HttpResponse connect_error_response(const Error& error, int http_status);

}  // namespace kib::api
