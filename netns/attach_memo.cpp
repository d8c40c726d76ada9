#include "netns/attach_memo.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "agent/common/errno_error.h"

namespace kib::netns {
namespace {

// Version 1: a header line, then one line per change:
//   + <cookie> <generation> <tcp port> <dns udp port> <dns tcp port> <digest hex> <workspace id>
//   - <workspace id>
constexpr char kMagic[] = "kibotos-attach-memo";
constexpr int kVersion = 1;

Error bad_line(const std::string& path, size_t line) {
  return Error{Code::invalid_argument,
               path + ":" + std::to_string(line) + ": not an attach memo line of version " + std::to_string(kVersion)};
}

std::string header(const std::string& boot_id) {
  return std::string(kMagic) + ' ' + std::to_string(kVersion) + ' ' + boot_id + '\n';
}

std::string put_line(const std::string& id, const AttachNote& n) {
  char digest[17];
  std::snprintf(digest, sizeof digest, "%016llx", static_cast<unsigned long long>(n.ruleset_digest));
  return "+ " + std::to_string(n.netns_cookie) + ' ' + std::to_string(n.generation) + ' ' +
         std::to_string(n.ports.tcp) + ' ' + std::to_string(n.ports.dns_udp) + ' ' + std::to_string(n.ports.dns_tcp) +
         ' ' + digest + ' ' + id + '\n';
}

// One line without its newline into `notes`; false when it is not a line of ours.
bool apply_line(const std::string& line, AttachNotes& notes) {
  if (line.rfind("- ", 0) == 0) {
    notes.erase(line.substr(2));
    return line.size() > 2;
  }
  if (line.rfind("+ ", 0) != 0) return false;
  std::istringstream in(line.substr(2));
  AttachNote n;
  unsigned tcp = 0, dns_udp = 0, dns_tcp = 0;
  in >> n.netns_cookie >> n.generation >> tcp >> dns_udp >> dns_tcp >> std::hex >> n.ruleset_digest;
  if (!in || in.get() != ' ') return false;
  std::string id;
  std::getline(in, id);
  if (id.empty() || tcp > 65535 || dns_udp > 65535 || dns_tcp > 65535) return false;
  n.ports = TproxyPorts{static_cast<uint16_t>(tcp), static_cast<uint16_t>(dns_udp), static_cast<uint16_t>(dns_tcp)};
  notes[id] = n;
  return true;
}

Status write_all(int fd, const std::string& data, const std::string& path) {
  for (size_t off = 0; off < data.size();) {
    ssize_t n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno_error("writing " + path);
    off += static_cast<size_t>(n);
  }
  return {};
}

}  // namespace

uint64_t ruleset_digest(const std::string& text) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

Result<std::string> current_boot_id() {
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::string id;
  if (!std::getline(f, id) || id.empty()) return Error{Code::unavailable, "reading /proc/sys/kernel/random/boot_id"};
  return id;
}

Result<AttachNotes> load_attach_notes(const std::string& path, const std::string& boot_id) {
  std::ifstream f(path);
  if (!f) return AttachNotes{};
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  size_t end = text.find('\n');
  if (end == std::string::npos) return AttachNotes{};  // torn before its first line ended
  std::istringstream head(text.substr(0, end));
  std::string magic, boot;
  int version = 0;
  head >> magic >> version >> boot;
  if (magic != kMagic || version != kVersion) return bad_line(path, 1);
  if (boot != boot_id) return AttachNotes{};  // every namespace of that boot is gone
  AttachNotes notes;
  size_t line_no = 1;
  for (size_t pos = end + 1; pos < text.size(); pos = end + 1) {
    ++line_no;
    end = text.find('\n', pos);
    if (end == std::string::npos) break;  // the writer died in this line
    if (!apply_line(text.substr(pos, end - pos), notes)) return bad_line(path, line_no);
  }
  return notes;
}

Result<AttachMemo> AttachMemo::create(const std::string& path, const std::string& boot_id, const AttachNotes& notes) {
  AttachMemo memo(path, boot_id);
  KIB_TRY(memo.rewrite(notes));
  return memo;
}

Status AttachMemo::rewrite(const AttachNotes& notes) {
  const std::string tmp = path_ + ".tmp";
  std::string text = header(boot_id_);
  for (const auto& [id, n] : notes)
    if (id.find('\n') == std::string::npos) text += put_line(id, n);  // never an ID the API accepts
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!fd) return errno_error("opening " + tmp);
  KIB_TRY(write_all(fd.get(), text, tmp));
  if (std::rename(tmp.c_str(), path_.c_str()) != 0) return errno_error("renaming " + tmp + " to " + path_);
  // The open fd now names the renamed file; appends go on there.
  if (::fcntl(fd.get(), F_SETFL, O_APPEND) != 0) return errno_error("fcntl O_APPEND " + path_);
  fd_ = std::move(fd);
  lines_ = 0;
  return {};
}

Status AttachMemo::append(const std::string& line) {
  if (!fd_) return make_error(Code::failed_precondition, "attach memo " + path_ + " is not open");
  ++lines_;
  return write_all(fd_.get(), line, path_);
}

Status AttachMemo::put(const std::string& workspace_id, const AttachNote& note) {
  if (workspace_id.find('\n') != std::string::npos) return {};
  return append(put_line(workspace_id, note));
}

Status AttachMemo::drop(const std::string& workspace_id) {
  if (workspace_id.find('\n') != std::string::npos) return {};
  return append("- " + workspace_id + '\n');
}

}  // namespace kib::netns
