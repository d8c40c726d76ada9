#include "agent/daemon/moved_connection_wire.h"

#include <sstream>

namespace kib::daemon {
namespace {

std::string flags_of(const relay::MovedFlow& f) {
  std::string s;
  if (f.eof) s += 'e';
  if (f.shut) s += 's';
  if (f.pipe_r) s += 'p';
  return s.empty() ? "-" : s;
}

bool is_token(const std::string& s) {
  if (s.empty()) return false;
  for (char ch : s)
    if (ch == ' ' || ch == '\n' || ch == '\0') return false;
  return true;
}

}  // namespace

MovedConnectionMessage encode_moved(const MovedConnection& c) {
  const relay::MovedRelay& r = c.relay;
  MovedConnectionMessage m;
  std::ostringstream d;
  d << c.workspace_id << ' ' << r.egress_id << ' ' << r.revision << ' ' << r.idle_ms << ' ' << r.drain_left_ms;
  for (const auto& f : r.flow) d << ' ' << f.pending.size() << ' ' << flags_of(f);
  m.detail = d.str();
  m.payload = r.flow[0].pending + r.flow[1].pending;
  m.fds = {r.guest.get(), r.up.get()};
  for (const auto& f : r.flow)
    if (f.pipe_r) m.fds.insert(m.fds.end(), {f.pipe_r.get(), f.pipe_w.get()});
  return m;
}

Result<MovedConnection> decode_moved(HandoverMessage message) {
  auto bad = [](const std::string& why) {
    return Error{Code::invalid_argument, "handover: a moved connection " + why};
  };
  if (message.op != "connection") return bad("message is \"" + message.op + "\"");
  MovedConnection c;
  relay::MovedRelay& r = c.relay;
  std::istringstream d(message.detail);
  size_t len[2] = {0, 0};
  std::string flags[2];
  if (!(d >> c.workspace_id >> r.egress_id >> r.revision >> r.idle_ms >> r.drain_left_ms >> len[0] >> flags[0] >>
        len[1] >> flags[1]) ||
      !is_token(c.workspace_id) || !is_token(r.egress_id))
    return bad("has malformed fields");
  if (len[0] + len[1] != message.payload.size())
    return bad("has " + std::to_string(message.payload.size()) + " bytes where its fields say " +
               std::to_string(len[0] + len[1]));
  size_t fds = 2;
  for (const auto& f : flags) fds += f.find('p') != std::string::npos ? 2 : 0;
  if (message.fds.size() != fds)
    return bad("carries " + std::to_string(message.fds.size()) + " fds where its fields say " + std::to_string(fds));
  size_t next_fd = 0, off = 0;
  r.guest = std::move(message.fds[next_fd++]);
  r.up = std::move(message.fds[next_fd++]);
  for (int i = 0; i < 2; ++i) {
    relay::MovedFlow& f = r.flow[i];
    f.pending = message.payload.substr(off, len[i]);
    off += len[i];
    f.eof = flags[i].find('e') != std::string::npos;
    f.shut = flags[i].find('s') != std::string::npos;
    if (flags[i].find('p') == std::string::npos) continue;
    f.pipe_r = std::move(message.fds[next_fd++]);
    f.pipe_w = std::move(message.fds[next_fd++]);
  }
  return c;
}

}  // namespace kib::daemon
