#pragma once
// `-o id`: only the IDs a command's answer names, one a line, for scripts
// (`id=$(kibotosctl egress create ... -o id)`). A resource's ID is its field 1 when
// that is named "*_id"; a response shows the resource it wraps, a list one ID per
// item, a delete the ID it deleted.
#include <string>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>

#include "agent/common/result.h"
#include "agent/ctl/command_table.h"

namespace kib::ctl {

// A usage error when `c`'s answer (of type `response`) names no ID, e.g. `agent`.
Status check_id_output(const CommandSpec& c, const google::protobuf::Descriptor* response);

// The IDs in `shown` (the selected part of the answer), each followed by a newline.
std::string id_lines(const google::protobuf::Message& shown);

}  // namespace kib::ctl
