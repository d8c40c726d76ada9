#include "agent/api/services/command_runner.h"

#include <optional>

#include "agent/api/conventions/command_id.h"

namespace kib::api {
namespace {

// Outcomes that say something about the request are remembered; failures of the
// agent itself (storage, a resolver that cannot run) are not, so a retry can succeed.
bool remembered(Code c) {
  return c != Code::internal && c != Code::unavailable && c != Code::deadline_exceeded && c != Code::unknown &&
         c != Code::data_loss;
}

int64_t to_ms(std::chrono::system_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

// Marks a command ID as running for the lifetime of the guard.
class InFlight {
 public:
  InFlight(std::mutex& mu, std::set<std::string>& set, const std::string& id) : mu_(mu), set_(set), id_(id) {
    std::lock_guard<std::mutex> g(mu_);
    inserted_ = set_.insert(id_).second;
  }
  ~InFlight() {
    if (!inserted_) return;
    std::lock_guard<std::mutex> g(mu_);
    set_.erase(id_);
  }
  bool inserted() const { return inserted_; }

 private:
  std::mutex& mu_;
  std::set<std::string>& set_;
  const std::string& id_;
  bool inserted_ = false;
};

}  // namespace

Result<std::string> CommandRunner::replay(std::string_view method, const std::string& command_id,
                                          const std::string& fingerprint, bool& found) {
  std::optional<store::CommandRecord> rec;
  KIB_TRY(store_.read([&](store::Transaction& txn) -> Status {
    KIB_TRY_ASSIGN(auto r, txn.find_command(command_id));
    rec = std::move(r);
    return {};
  }));
  // A record older than the retention may still be in the file until the next prune;
  // it is forgotten all the same.
  found = rec.has_value() && rec->created_ms >= to_ms(now_() - retention_);
  if (!found) return std::string();
  if (rec->method != method || rec->fingerprint != fingerprint)
    return Error{Code::invalid_argument, "command_id \"" + command_id + "\" was already used for a different request"};
  if (rec->code != 0) return Error{static_cast<Code>(rec->code), rec->message};
  return std::move(rec->response);
}

Result<std::string> CommandRunner::run_serialized(std::string_view method, const google::protobuf::Message& request,
                                                  const std::string& command_id,
                                                  const std::function<Status()>& precheck,
                                                  const std::function<Result<std::string>(store::Transaction&)>& apply,
                                                  const std::function<void()>& committed,
                                                  const std::function<std::string()>& apply_key) {
  KIB_TRY(validate_command_id(command_id));
  InFlight guard(mu_, in_flight_, command_id);
  if (!guard.inserted())
    return Error{Code::aborted, "command_id \"" + command_id + "\" is still running; retry once it has finished"};

  std::string fingerprint = request_fingerprint(method, request);
  bool found = false;
  auto previous = replay(method, command_id, fingerprint, found);
  if (found || !previous.ok()) return previous;

  Status pre = precheck();
  if (!pre.ok() && !remembered(pre.error().code)) return pre.error();

  std::optional<Result<std::string>> outcome;
  std::unique_lock<std::mutex> order(order_mu_);
  auto stored = store_.write_deferred([&](store::Transaction& txn) -> Status {
    auto now = now_();
    KIB_TRY(txn.prune_commands(to_ms(now - retention_)));
    // (An expired record with this ID, ignored by replay(), is gone after this prune.)
    if (pre.ok()) {
      Status applied = txn.savepoint([&]() -> Status {
        auto r = apply(txn);
        bool ok = r.ok();
        outcome.emplace(std::move(r));
        if (ok) return {};
        return outcome->error();
      });
      if (!applied.ok() && !remembered(applied.error().code)) return applied;
    } else {
      outcome.emplace(pre.error());
    }
    store::CommandRecord rec;
    rec.command_id = command_id;
    rec.method = std::string(method);
    rec.fingerprint = fingerprint;
    rec.created_ms = to_ms(now);
    if (outcome->ok()) {
      rec.response = outcome->value();
    } else {
      rec.code = static_cast<int>(outcome->error().code);
      rec.message = outcome->error().message;
    }
    return txn.record_command(rec);
  });
  if (!stored.ok()) return std::move(stored).error();
  if (outcome->ok() && committed) {
    auto ticket = apply_order_.take(apply_key ? apply_key() : std::string());
    order.unlock();
    ticket.wait();
    committed();
  } else {
    order.unlock();
  }
  // The next write commits and applies while this one waits for the disk, and
  // shares its fdatasync when it gets there first (group_sync.h).
  KIB_TRY(store_.durable(*stored));
  return std::move(*outcome);
}

}  // namespace kib::api
