#pragma once
// libprotobuf writes its own lines to stderr ("[libprotobuf ERROR …]"), one per string
// field that is not UTF-8 in a binary request: those go through our logger instead, so
// log.level and log.format hold, at most 10 a minute.

namespace kib::daemon {

// Installs the handler (before any thread uses protobuf: SetLogHandler is not
// thread-safe).
void route_protobuf_logs();

}  // namespace kib::daemon
