#pragma once
// The command-ID protocol every write RPC runs under (API.md): a retry with the same
// ID and the same request returns the first outcome again without acting twice (also
// after a restart, also when that outcome was an error); the same ID with a
// different request is invalid_argument and changes nothing; the same ID while its
// first request still runs is aborted. The outcome is recorded in the same
// transaction as the change it reports.
#include <google/protobuf/message.h>

#include <chrono>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <string_view>

#include "agent/common/result.h"
#include "agent/store/store.h"

namespace kib::api {

class CommandRunner {
 public:
  using Now = std::function<std::chrono::system_clock::time_point()>;
  CommandRunner(store::Store& store, Now now, std::chrono::seconds retention)
      : store_(store), now_(std::move(now)), retention_(retention) {}

  // precheck runs outside the store's lock (it may resolve names); apply runs in the
  // write transaction and returns the response. Callers act on the runtime only after
  // run() succeeds, and only if apply ran (a replay does not call apply).
  template <typename Resp>
  Result<Resp> run(std::string_view method, const google::protobuf::Message& request, const std::string& command_id,
                   const std::function<Status()>& precheck,
                   const std::function<Result<Resp>(store::Transaction&)>& apply) {
    auto bytes = run_serialized(method, request, command_id, precheck,
                                [&](store::Transaction& txn) -> Result<std::string> {
                                  auto r = apply(txn);
                                  if (!r.ok()) return std::move(r).error();
                                  return r->SerializeAsString();
                                });
    if (!bytes.ok()) return std::move(bytes).error();
    Resp resp;
    if (!resp.ParseFromString(*bytes)) return Error{Code::internal, "command log: unreadable stored response"};
    return resp;
  }

 private:
  Result<std::string> run_serialized(std::string_view method, const google::protobuf::Message& request,
                                     const std::string& command_id, const std::function<Status()>& precheck,
                                     const std::function<Result<std::string>(store::Transaction&)>& apply);
  Result<std::string> replay(std::string_view method, const std::string& command_id, const std::string& fingerprint,
                             bool& found);

  store::Store& store_;
  Now now_;
  std::chrono::seconds retention_;
  std::mutex mu_;
  std::set<std::string> in_flight_;
};

}  // namespace kib::api
