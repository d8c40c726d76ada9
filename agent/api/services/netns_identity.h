#pragma once
// Which network namespace a path names: CreateWorkspace attaches "the path of an
// existing network namespace", at most one Workspace per namespace.
#include <string>

#include "agent/store/store.h"

namespace kib::api {

// The namespace's (st_dev, st_ino). failed_precondition when the path is missing or
// is not a network namespace (nsfs with type CLONE_NEWNET).
Result<store::NetnsKey> network_namespace_identity(const std::string& path);

}  // namespace kib::api
