#include "agent/ctl/id_lister.h"

#include <memory>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/dynamic_message.h>
#include <google/protobuf/util/json_util.h>

#include "kibotos/ctrl/v1/egress.pb.h"
#include "kibotos/ctrl/v1/workspace.pb.h"

namespace kib::ctl {

std::vector<std::string> list_ids(const CommandSpec& cmd, const Endpoint& endpoint) {
  const CommandSpec* list = find_command(cmd.group, "list");
  if (list == nullptr || cmd.positional.empty()) return {};
  // Touching one message per file links its descriptors into the generated pool.
  (void)kibotos::ctrl::v1::ListEgressesResponse::descriptor();
  (void)kibotos::ctrl::v1::ListWorkspacesResponse::descriptor();
  const auto* method = google::protobuf::DescriptorPool::generated_pool()->FindMethodByName(std::string(list->method));
  if (method == nullptr) return {};
  const auto* resp_type = method->output_type();
  const auto* items = resp_type->field(0);  // List*Response: the items are field 1
  const auto* token = resp_type->FindFieldByName("next_page_token");
  if (items == nullptr || !items->is_repeated() || items->message_type() == nullptr || token == nullptr) return {};
  const auto* id = items->message_type()->FindFieldByName(std::string(cmd.positional));
  if (id == nullptr) return {};

  ConnectClient client(endpoint);
  std::vector<std::string> out;
  std::string page_token;
  google::protobuf::util::JsonParseOptions opts;
  opts.ignore_unknown_fields = true;
  for (int page = 0; page < kMaxIdPages; ++page) {
    // The token is the agent's own opaque text; JSON-escaping it is not needed for the
    // base64url tokens it issues, and a token that needs it ends the listing.
    if (page_token.find_first_of("\"\\") != std::string::npos) break;
    auto body = client.call(list->method, page_token.empty() ? "{}" : R"({"pageToken":")" + page_token + "\"}");
    if (!body.ok()) break;
    std::unique_ptr<google::protobuf::Message> resp(
        google::protobuf::MessageFactory::generated_factory()->GetPrototype(resp_type)->New());
    if (!google::protobuf::util::JsonStringToMessage(*body, resp.get(), opts).ok()) break;
    const auto* r = resp->GetReflection();
    for (int i = 0; i < r->FieldSize(*resp, items); ++i) {
      const auto& item = r->GetRepeatedMessage(*resp, items, i);
      out.push_back(item.GetReflection()->GetString(item, id));
    }
    page_token = r->GetString(*resp, token);
    if (page_token.empty()) break;
  }
  return out;
}

}  // namespace kib::ctl
