#pragma once
// What relay_harness and dns_harness share: a command loop on stdin (one line in,
// one line out) and the `egress` command's arguments.
//
//   egress ID REV DRAIN HOST:PORT [user=U] [pass=P] [tls] [sni=NAME] [ca=PATH]
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <sstream>
#include <string>

#include "agent/runtime/runtime.h"

namespace kib::harness {

inline std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Fills rev and drain from an `egress` line (after the command word); returns an
// error line, or "" when the line was good.
inline std::string parse_egress(std::istringstream& in, EgressRevision& rev, uint32_t& drain) {
  std::string address;
  in >> rev.egress_id >> rev.revision >> drain >> address;
  auto* s5 = rev.spec.mutable_socks5();
  s5->set_address(address);
  std::string opt;
  while (in >> opt) {
    if (opt.rfind("user=", 0) == 0)
      s5->set_username(opt.substr(5));
    else if (opt.rfind("pass=", 0) == 0)
      s5->set_password(opt.substr(5));
    else if (opt == "tls")
      s5->mutable_tls();
    else if (opt.rfind("sni=", 0) == 0)
      s5->mutable_tls()->set_server_name(opt.substr(4));
    else if (opt.rfind("ca=", 0) == 0)
      s5->mutable_tls()->set_ca_cert(read_file(opt.substr(3)));
    else
      return "error: unknown option " + opt;
  }
  return "";
}

using Command = std::function<std::string(std::istringstream&)>;

// A command whose only argument is an ID and whose answer is "ok".
inline Command with_id(std::function<void(const std::string&)> fn) {
  return [fn = std::move(fn)](std::istringstream& in) {
    std::string id;
    in >> id;
    fn(id);
    return std::string("ok");
  };
}

// Prints "ready", then answers each line with its command's output until "quit" or
// the end of stdin.
inline void run_commands(const std::map<std::string, Command>& commands) {
  std::cout << "ready" << std::endl;
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string cmd;
    in >> cmd;
    if (cmd == "quit") break;
    if (cmd.empty()) continue;
    auto it = commands.find(cmd);
    std::cout << (it == commands.end() ? "error: unknown command " + cmd : it->second(in)) << std::endl;
  }
}

}  // namespace kib::harness
