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

#include "agent/api/services/apply_order.h"
#include "agent/common/result.h"
#include "agent/store/store.h"

namespace kib::api {

class CommandRunner {
 public:
  using Now = std::function<std::chrono::system_clock::time_point()>;
  CommandRunner(store::Store& store, Now now, std::chrono::seconds retention)
      : store_(store), now_(std::move(now)), retention_(retention) {}

  // precheck runs outside the store's lock (it may resolve names); apply runs in the
  // write transaction and returns the response. committed runs once that transaction
  // is stored with apply's success: it tells the runtime, which so hears of changes
  // in the order they were stored (two updates on two connections must not leave the
  // data plane on the older revision). apply_key, read after apply, names what
  // committed touches (a Workspace ID): callbacks with different keys may run at
  // once, those with the same key run in store order, and one without a key runs
  // alone, after every earlier one and before every later one (apply_order.h). A
  // replay calls neither apply nor committed.
  template <typename Resp>
  Result<Resp> run(std::string_view method, const google::protobuf::Message& request, const std::string& command_id,
                   const std::function<Status()>& precheck,
                   const std::function<Result<Resp>(store::Transaction&)>& apply,
                   const std::function<void()>& committed = {}, const std::function<std::string()>& apply_key = {}) {
    auto bytes = run_serialized(
        method, request, command_id, precheck,
        [&](store::Transaction& txn) -> Result<std::string> {
          KIB_TRY_ASSIGN(auto r, apply(txn));
          return r.SerializeAsString();
        },
        committed, apply_key);
    if (!bytes.ok()) return std::move(bytes).error();
    Resp resp;
    if (!resp.ParseFromString(*bytes)) return Error{Code::internal, "command log: unreadable stored response"};
    return resp;
  }

  // Runs fn after every committed callback of the writes stored before it, with no
  // write committing until it returns (the start-up publish of everything stored,
  // the retries: ordered with the writes like they are).
  void in_store_order(const std::function<void()>& fn) {
    std::lock_guard<std::mutex> g(order_mu_);
    auto ticket = apply_order_.take({});
    ticket.wait();
    fn();
  }

 private:
  Result<std::string> run_serialized(std::string_view method, const google::protobuf::Message& request,
                                     const std::string& command_id, const std::function<Status()>& precheck,
                                     const std::function<Result<std::string>(store::Transaction&)>& apply,
                                     const std::function<void()>& committed,
                                     const std::function<std::string()>& apply_key);
  Result<std::string> replay(std::string_view method, const std::string& command_id, const std::string& fingerprint,
                             bool& found);

  store::Store& store_;
  Now now_;
  std::chrono::seconds retention_;
  std::mutex mu_;
  std::set<std::string> in_flight_;
  std::mutex order_mu_;  // held from a write's commit until it has its ticket
  ApplyOrder apply_order_;
};

}  // namespace kib::api
