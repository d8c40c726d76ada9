#include "agent/api/connect/method_call.h"

#include <chrono>
#include <exception>

namespace kib::api {

Result<MessagePtr> call_method(const Method& method, Codec codec, const std::string& payload, const CallContext& ctx,
                               std::string_view timeout) {
  try {
    MessagePtr request(method.request_prototype->New());
    KIB_TRY(decode_message(codec, payload, *request));
    auto result = method.call(*request, ctx);
    if (std::chrono::steady_clock::now() > ctx.deadline)
      return Error{Code::deadline_exceeded, "the call exceeded " + std::string(timeout)};
    return result;
  } catch (const std::exception& e) {
    return Error{Code::internal, std::string("internal error: ") + e.what()};
  } catch (...) {
    return Error{Code::internal, "internal error"};
  }
}

Result<std::unique_ptr<ServerStream>> open_method_stream(const Method& method, Codec codec, const std::string& payload,
                                                         const CallContext& ctx) {
  try {
    MessagePtr request(method.request_prototype->New());
    KIB_TRY(decode_message(codec, payload, *request));
    return method.open_stream(*request, ctx);
  } catch (const std::exception& e) {
    return Error{Code::internal, std::string("internal error: ") + e.what()};
  } catch (...) {
    return Error{Code::internal, "internal error"};
  }
}

}  // namespace kib::api
