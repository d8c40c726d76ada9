#pragma once
// Egresses and Workspaces as the store keeps them: the whole message as a protobuf
// blob (an Egress with its password, since the data plane needs it after a restart; a
// Workspace without network_policy_status, which is live state), plus what
// responses show of them.
#include <google/protobuf/timestamp.pb.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "agent/common/result.h"
#include "agent/store/store.h"
#include "kibotos/ctrl/v1/egress.pb.h"
#include "kibotos/ctrl/v1/workspace.pb.h"

namespace kib::api {

namespace ctrl = ::kibotos::ctrl::v1;

google::protobuf::Timestamp to_timestamp(std::chrono::system_clock::time_point t);
// A change's updated_at: `now`, or the previous updated_at when the system clock was
// stepped back since, so updated_at never goes back nor precedes created_at.
google::protobuf::Timestamp next_updated_at(const google::protobuf::Timestamp& previous,
                                            std::chrono::system_clock::time_point now);

template <typename M>
Result<M> decode_stored(const store::ResourceRow& row) {
  M m;
  if (!m.ParseFromString(row.body)) return Error{Code::internal, "store: unreadable record " + row.id};
  return m;
}

// nullopt when unknown or deleted.
Result<std::optional<ctrl::Egress>> load_egress(store::Transaction& txn, const std::string& id);
Result<std::optional<ctrl::Workspace>> load_workspace(store::Transaction& txn, const std::string& id);

// "password is write-only: no read, list or response returns it".
ctrl::Egress without_password(ctrl::Egress e);

Error egress_not_found(const std::string& id);
Error workspace_not_found(const std::string& id);

// What differs between the stored kinds; the handlers below are written once for both.
template <typename R>
struct StoredKind;
template <>
struct StoredKind<ctrl::Egress> {
  static constexpr store::Kind kind = store::Kind::egress;
  static constexpr const char* id_field = "egress_id";
  static const std::string& id(const ctrl::Egress& e) { return e.egress_id(); }
  static Result<std::optional<ctrl::Egress>> load(store::Transaction& txn, const std::string& id) {
    return load_egress(txn, id);
  }
  static Error not_found(const std::string& id) { return egress_not_found(id); }
  // Into a response, as responses show it.
  template <typename Resp>
  static void put(Resp& resp, ctrl::Egress e) {
    *resp.mutable_egress() = without_password(std::move(e));
  }
};
template <>
struct StoredKind<ctrl::Workspace> {
  static constexpr store::Kind kind = store::Kind::workspace;
  static constexpr const char* id_field = "workspace_id";
  static const std::string& id(const ctrl::Workspace& w) { return w.workspace_id(); }
  static Result<std::optional<ctrl::Workspace>> load(store::Transaction& txn, const std::string& id) {
    return load_workspace(txn, id);
  }
  static Error not_found(const std::string& id) { return workspace_not_found(id); }
  template <typename Resp>
  static void put(Resp& resp, ctrl::Workspace w) {
    *resp.mutable_workspace() = std::move(w);
  }
};

// The request's ID field is set.
template <typename R>
Status require_id(const std::string& id) {
  if (id.empty()) return Error{Code::invalid_argument, std::string(StoredKind<R>::id_field) + " is required"};
  return {};
}

// Loads a non-deleted resource or fails with not_found.
template <typename R>
Result<R> must_load(store::Transaction& txn, const std::string& id) {
  KIB_TRY_ASSIGN(auto r, StoredKind<R>::load(txn, id));
  if (!r.has_value()) return StoredKind<R>::not_found(id);
  return std::move(*r);
}

template <typename R>
Status save(store::Transaction& txn, const R& r) {
  return txn.update(StoredKind<R>::kind, StoredKind<R>::id(r), r.SerializeAsString());
}

// Every stored (non-deleted) resource of the kind, in one read.
template <typename R>
Result<std::vector<R>> load_all(store::Store& store) {
  std::vector<R> all;
  Status failed;
  KIB_TRY(store.read([&](store::Transaction& txn) -> Status {
    return txn.scan(StoredKind<R>::kind, 0, [&](store::ResourceRow&& row) {
      auto r = decode_stored<R>(row);
      if (!r.ok()) {
        failed = std::move(r).error();
        return false;
      }
      all.push_back(std::move(r).value());
      return true;
    });
  }));
  if (!failed.ok()) return std::move(failed).error();
  return all;
}

}  // namespace kib::api
