#include "agent/api/services/stored_resources.h"

#include "agent/api/conventions/quoted.h"

namespace kib::api {
namespace {

template <typename M>
Result<std::optional<M>> load(store::Transaction& txn, store::Kind kind, const std::string& id) {
  KIB_TRY_ASSIGN(auto row, txn.get(kind, id));
  if (!row.has_value()) return std::optional<M>();
  KIB_TRY_ASSIGN(auto m, decode_stored<M>(*row));
  return std::optional<M>(std::move(m));
}

}  // namespace

google::protobuf::Timestamp next_updated_at(const google::protobuf::Timestamp& previous,
                                            std::chrono::system_clock::time_point now) {
  google::protobuf::Timestamp ts = to_timestamp(now);
  const bool earlier =
      ts.seconds() < previous.seconds() || (ts.seconds() == previous.seconds() && ts.nanos() < previous.nanos());
  return earlier ? previous : ts;
}

google::protobuf::Timestamp to_timestamp(std::chrono::system_clock::time_point t) {
  using namespace std::chrono;
  auto ns = duration_cast<nanoseconds>(t.time_since_epoch()).count();
  google::protobuf::Timestamp ts;
  int64_t secs = ns / 1000000000;
  int64_t nanos = ns % 1000000000;
  if (nanos < 0) {
    secs -= 1;
    nanos += 1000000000;
  }
  ts.set_seconds(secs);
  ts.set_nanos(static_cast<int32_t>(nanos));
  return ts;
}

Result<std::optional<ctrl::Egress>> load_egress(store::Transaction& txn, const std::string& id) {
  return load<ctrl::Egress>(txn, store::Kind::egress, id);
}

Result<std::optional<ctrl::Workspace>> load_workspace(store::Transaction& txn, const std::string& id) {
  return load<ctrl::Workspace>(txn, store::Kind::workspace, id);
}

ctrl::Egress without_password(ctrl::Egress e) {
  if (e.spec().has_socks5()) e.mutable_spec()->mutable_socks5()->clear_password();
  return e;
}

Error egress_not_found(const std::string& id) { return Error{Code::not_found, "egress " + quoted(id) + " not found"}; }
Error workspace_not_found(const std::string& id) {
  return Error{Code::not_found, "workspace " + quoted(id) + " not found"};
}

}  // namespace kib::api
