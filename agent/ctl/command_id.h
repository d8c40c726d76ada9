#pragma once
// A fresh command ID per write: 128 random bits, so two invocations never collide and
// a scripted retry passes the same ID again with --command-id.
#include <string>

namespace kib::ctl {

std::string random_command_id();

}  // namespace kib::ctl
