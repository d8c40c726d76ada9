#pragma once
// Fills a request message from an Invocation through protobuf reflection: each flag
// row names its field path, so every command shares this one builder.
#include <functional>
#include <string>

#include <google/protobuf/message.h>

#include "agent/common/result.h"
#include "agent/ctl/cli_args.h"

namespace kib::ctl {

using FileReader = std::function<Result<std::string>(const std::string& path)>;

// Sets the field at dotted `path` of `req` from one flag value.
Status apply_flag(google::protobuf::Message& req, const FlagSpec& flag, const std::string& value,
                  const FileReader& read);

// The whole request: positional ID, flags, and command_id for writes (the given one,
// else `new_command_id()`).
Status build_request(const Invocation& inv, google::protobuf::Message& req, const FileReader& read,
                     const std::function<std::string()>& new_command_id);

}  // namespace kib::ctl
