#pragma once
// What the agent's last table write left in each Workspace namespace, kept in a file
// of the state dir so that an agent started again (after a crash, kill -9, restart or
// upgrade) can adopt a namespace nobody touched since instead of writing its table
// again: the table stays, the new listeners bind the ports it points at. A write
// costs ~3 ms through libnftables; an adoption ~0.5 ms, which is what brings 2,000
// Workspaces back within the restart target of issue 26.
//
// Trust comes from the kernel, not from the file. A note is used only when the
// namespace is the very one written (its netns cookie, unique since boot; the file
// names the boot), nftables there is still at the generation right after that write
// (any transaction by anyone since moves it), and the table the agent would write now
// is the text written then (same policy, ports, mark and agent version: a digest).
// Anything else, and a file that is missing, torn or from another version, means a
// full attach. So the file needs no fsync: losing it costs only time.
//
// The file is a log: a header naming the version and the boot, then one line per
// change (a note set or dropped), appended at once, so a kill -9 right after a write
// loses nothing the next start could use. It is rewritten whole (a temporary file
// renamed over it) when opened and when dropped lines outnumber the live ones.
#include <cstdint>
#include <map>
#include <string>

#include "agent/common/result.h"
#include "agent/common/unique_fd.h"
#include "netns/ruleset_spec.h"

namespace kib::netns {

struct AttachNote {
  uint64_t netns_cookie = 0;  // SO_NETNS_COOKIE of the namespace written
  uint32_t generation = 0;    // its nftables generation right after the write
  TproxyPorts ports;          // the listener ports the table points at
  uint64_t ruleset_digest = 0;
  bool operator==(const AttachNote&) const = default;
};

// By Workspace ID.
using AttachNotes = std::map<std::string, AttachNote>;

// The digest a note keeps of a table's text (FNV-1a, 64 bits: it tells our own
// texts apart, nobody chooses them).
uint64_t ruleset_digest(const std::string& text);

// This boot's ID (/proc/sys/kernel/random/boot_id): cookies are unique within it.
Result<std::string> current_boot_id();

// The notes in the memo at `path` written during boot `boot_id`: empty when the file
// is missing or from another boot; invalid_argument naming the line when it is not a
// memo of this version. A last line cut short (the writer died in it) is skipped.
Result<AttachNotes> load_attach_notes(const std::string& path, const std::string& boot_id);

class AttachMemo {
 public:
  // Writes a memo holding `notes` at `path` (replacing what is there) and opens it
  // for appending.
  static Result<AttachMemo> create(const std::string& path, const std::string& boot_id, const AttachNotes& notes);

  Status put(const std::string& workspace_id, const AttachNote& note);
  Status drop(const std::string& workspace_id);
  // Whether the lines appended since the last rewrite outnumber the `live` notes
  // (those still set) 4 to 1 (and 1,024): then rewrite() them.
  bool long_for(size_t live) const { return lines_ >= 1024 && lines_ >= 4 * live; }
  // Rewrites it with `notes` now (also after a failed append, which may have left
  // part of a line).
  Status rewrite(const AttachNotes& notes);

 private:
  AttachMemo(std::string path, std::string boot_id) : path_(std::move(path)), boot_id_(std::move(boot_id)) {}
  Status append(const std::string& line);

  std::string path_;
  std::string boot_id_;
  UniqueFd fd_;
  size_t lines_ = 0;  // appended since the last rewrite
};

}  // namespace kib::netns
