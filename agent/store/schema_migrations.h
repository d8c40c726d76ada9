#pragma once
// The store's schema, as an ordered list of forward migrations. Each one runs in its
// own transaction together with the row that records it in schema_migrations, so a
// crash leaves the file at a version boundary.
#include <cstdint>

#include "agent/store/sqlite_db.h"

namespace kib::store {

// The version this build writes and understands.
int latest_schema_version();
// The highest applied version (0 for a new file).
Result<int> current_schema_version(SqliteDb& db);
// Applies every missing step up to target (latest by default). A file written by a
// newer agent (a version above latest) is failed_precondition: never downgrade.
Status migrate(SqliteDb& db, int target = -1);

}  // namespace kib::store
