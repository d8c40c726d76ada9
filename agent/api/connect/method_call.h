#pragma once
// One call of a registered method, as every protocol runs it: the request decoded with
// its codec, the handler called, its answer checked against the deadline.
#include <string>
#include <string_view>

#include "agent/api/connect/message_codec.h"
#include "agent/api/connect/method_registry.h"

namespace kib::api {

// A handler exception becomes `internal`; a handler that finishes after the deadline
// answers what the caller saw: deadline_exceeded, "the call exceeded <timeout>".
Result<MessagePtr> call_method(const Method& method, Codec codec, const std::string& payload, const CallContext& ctx,
                               std::string_view timeout);
// A server stream's opening (Method::open_stream), decoded and guarded alike.
Result<std::unique_ptr<ServerStream>> open_method_stream(const Method& method, Codec codec, const std::string& payload,
                                                         const CallContext& ctx);

}  // namespace kib::api
