#pragma once
// Egresses and Workspaces as the store keeps them: the whole message as a protobuf
// blob (an Egress with its password, since the data plane needs it after a restart; a
// Workspace without network_policy_status, which is live state), plus what
// responses show of them.
#include <google/protobuf/timestamp.pb.h>

#include <chrono>
#include <optional>
#include <string>

#include "agent/common/result.h"
#include "agent/store/store.h"
#include "kibotos/ctrl/v1/egress.pb.h"
#include "kibotos/ctrl/v1/workspace.pb.h"

namespace kib::api {

namespace ctrl = ::kibotos::ctrl::v1;

google::protobuf::Timestamp to_timestamp(std::chrono::system_clock::time_point t);

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

}  // namespace kib::api
