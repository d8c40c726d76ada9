// Fuzz target: kibotosctl's message files (agent/ctl/message_file.cpp): YAML or JSON
// an operator writes (policies, Egress specs), converted by yaml-cpp and filled by
// protobuf's JSON parser. The first byte picks the message. Checked beyond not
// crashing: the YAML-to-JSON conversion is idempotent on its own output (JSON is
// YAML, within YAML's 1024-character cap on implicit keys), and an accepted message
// prints to JSON that reads back to the same message.
#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/message_differencer.h>

#include <memory>
#include <string>

#include "agent/ctl/message_file.h"
#include "kibotos/ctrl/v1/egress.pb.h"
#include "kibotos/ctrl/v1/workspace.pb.h"
#include "tests/fuzz/fuzz_input.h"

namespace {

using kib::fuzz::require;
namespace ctrl = kibotos::ctrl::v1;

std::unique_ptr<google::protobuf::Message> message_for(uint8_t pick) {
  switch (pick % 4) {
    case 0: return std::make_unique<ctrl::NetworkPolicy>();
    case 1: return std::make_unique<ctrl::EgressSpec>();
    case 2: return std::make_unique<ctrl::CreateWorkspaceRequest>();
    default: return std::make_unique<ctrl::UpdateNetworkPolicyRequest>();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 16384) return 0;  // a policy file is small; longer inputs only slow yaml-cpp
  kib::fuzz::FuzzInput in(data, size);
  const uint8_t pick = in.byte();
  const std::string_view text = kib::fuzz::text(in.rest());

  if (auto json = kib::ctl::yaml_to_json(text); json.ok()) {
    // YAML caps implicit keys at 1024 characters and JSON does not, so a long explicit
    // key (`? key`) converts to JSON that yaml-cpp cannot read again (parse_message_text
    // hands such JSON to protobuf as it is). Any other output must read back unchanged.
    auto twice = kib::ctl::yaml_to_json(*json);
    if (twice.ok())
      require(*twice == *json, "YAML-to-JSON is idempotent on its output");
    else
      require(json->size() > 1024, "YAML-to-JSON output reads back");
  }
  auto msg = message_for(pick);
  if (!kib::ctl::parse_message_text(text, "fuzz", *msg).ok()) return 0;
  std::string printed;
  require(google::protobuf::util::MessageToJsonString(*msg, &printed).ok(), "an accepted message prints");
  auto back = message_for(pick);
  require(kib::ctl::parse_message_text(printed, "printed", *back).ok(), "a printed message reads back");
  require(google::protobuf::util::MessageDifferencer::Equals(*msg, *back), "and is the same message");
  return 0;
}
