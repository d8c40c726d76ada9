#include "agent/ctl/ctl_main.h"

#include <unistd.h>

#include <chrono>
#include <iostream>
#include <memory>
#include <ostream>
#include <sstream>
#include <thread>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/dynamic_message.h>
#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/time_util.h>

#include "agent/ctl/cli_args.h"
#include "agent/ctl/cli_error.h"
#include "agent/ctl/command_id.h"
#include "agent/ctl/completion.h"
#include "agent/ctl/completion_script.h"
#include "agent/ctl/connect_client.h"
#include "agent/ctl/egress_update.h"
#include "agent/ctl/help_text.h"
#include "agent/ctl/input_file.h"
#include "agent/ctl/output_format.h"
#include "agent/ctl/output_id.h"
#include "agent/ctl/policy_wait.h"
#include "agent/ctl/request_builder.h"
#include "kibotos/ctrl/v1/agent.pb.h"
#include "kibotos/ctrl/v1/egress.pb.h"
#include "kibotos/ctrl/v1/workspace.pb.h"

namespace kib::ctl {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using MessagePtr = std::unique_ptr<Message>;
namespace v1 = kibotos::ctrl::v1;

constexpr int kMaxPages = 100000;

const google::protobuf::MethodDescriptor* find_method(std::string_view name) {
  // Touching one message per file links its descriptors into the generated pool.
  (void)kibotos::ctrl::v1::GetAgentRequest::descriptor();
  (void)kibotos::ctrl::v1::GetEgressRequest::descriptor();
  (void)kibotos::ctrl::v1::GetWorkspaceRequest::descriptor();
  return google::protobuf::DescriptorPool::generated_pool()->FindMethodByName(std::string(name));
}

MessagePtr new_message(const google::protobuf::Descriptor* d) {
  return MessagePtr(google::protobuf::MessageFactory::generated_factory()->GetPrototype(d)->New());
}

Result<std::string> request_json(const Message& req) {
  std::string out;
  const auto st = google::protobuf::util::MessageToJsonString(req, &out);
  if (!st.ok()) return Error{Code::internal, "cannot encode request: " + std::string(st.message())};
  return out;
}

Status call(ConnectClient& client, std::string_view method, const Message& req, Message& resp) {
  KIB_TRY_ASSIGN(auto body, request_json(req));
  KIB_TRY_ASSIGN(auto answer, client.call(method, body));
  google::protobuf::util::JsonParseOptions opts;
  opts.ignore_unknown_fields = true;  // a newer agent may add fields
  const auto st = google::protobuf::util::JsonStringToMessage(answer, &resp, opts);
  if (!st.ok()) return Error{Code::internal, "cannot decode the agent's answer: " + std::string(st.message())};
  return {};
}

// --all: fetch every page and append the items to the first response.
Status fetch_rest(ConnectClient& client, std::string_view method, Message& req, Message& resp) {
  const auto* d = resp.GetDescriptor();
  const FieldDescriptor* items = d->field(0);  // List*Response: the items are field 1
  const FieldDescriptor* token = d->FindFieldByName("next_page_token");
  const FieldDescriptor* req_token = req.GetDescriptor()->FindFieldByName("page_token");
  const auto* r = resp.GetReflection();
  for (int page = 0; page < kMaxPages; ++page) {
    const std::string next = r->GetString(resp, token);
    if (next.empty()) return {};
    if (next == req.GetReflection()->GetString(req, req_token))
      return Error{Code::internal, "the agent returned the same page token twice"};
    req.GetReflection()->SetString(&req, req_token, next);
    MessagePtr more = new_message(d);
    KIB_TRY(call(client, method, req, *more));
    for (int i = 0; i < r->FieldSize(*more, items); ++i)
      r->AddMessage(&resp, items)->CopyFrom(r->GetRepeatedMessage(*more, items, i));
    r->SetString(&resp, token, r->GetString(*more, token));
  }
  return Error{Code::resource_exhausted, "more than " + std::to_string(kMaxPages) + " pages"};
}

bool given(const Invocation& inv, std::string_view flag) {
  for (const auto& [f, v] : inv.values)
    if (f->name == flag) return true;
  return false;
}

// --wait: the answer's Workspace becomes the one that enforces its policy.
Status wait_applied(const Invocation& inv, ConnectClient& client, Message& resp) {
  const FieldDescriptor* f = resp.GetDescriptor()->FindFieldByName("workspace");
  if (f == nullptr) return Error{Code::internal, "--wait: the answer carries no workspace"};
  auto& ws = dynamic_cast<v1::Workspace&>(*resp.GetReflection()->MutableMessage(&resp, f));
  auto get = [&]() -> Result<v1::Workspace> {
    v1::GetWorkspaceRequest req;
    req.set_workspace_id(ws.workspace_id());
    v1::GetWorkspaceResponse got;
    KIB_TRY(call(client, "kibotos.ctrl.v1.WorkspaceService.GetWorkspace", req, got));
    return got.workspace();
  };
  const auto timeout = std::chrono::seconds(inv.global.timeout_seconds);
  KIB_TRY_ASSIGN(auto done, wait_policy_applied(ws, get, timeout, real_clock()));
  ws = std::move(done);
  return {};
}

Status execute_once(const Invocation& inv, ConnectClient& client, Message& req, Message& resp, std::ostream& out) {
  const CommandSpec& c = *inv.command;
  KIB_TRY(call(client, c.method, req, resp));
  if (inv.global.all) KIB_TRY(fetch_rest(client, c.method, req, resp));
  if (given(inv, "wait")) KIB_TRY(wait_applied(inv, client, resp));
  if (c.verb == "delete" && inv.global.output == OutputFormat::table) {  // the answer is empty: say it happened
    out << c.group << " " << inv.positional << " deleted\n";
    return {};
  }
  if (c.verb == "delete" && inv.global.output == OutputFormat::id) {
    out << inv.positional << "\n";
    return {};
  }
  const Message* shown = select_output(resp, c.output_field);
  if (shown == nullptr) {
    if (inv.global.output == OutputFormat::json || inv.global.output == OutputFormat::yaml) out << "{}\n";
    return {};
  }
  KIB_TRY_ASSIGN(auto text, format_output(*shown, inv.global.output));
  out << text;
  return {};
}

// --watch: the same request every 2 s until interrupted or a call fails. On a
// terminal each view replaces the last; elsewhere views follow each other, each
// after a line with its time.
Status watch(const Invocation& inv, ConnectClient& client, const Message& req,
             const google::protobuf::Descriptor* resp_type, std::ostream& out) {
  const bool terminal = &out == &std::cout && isatty(STDOUT_FILENO) == 1;
  for (;;) {
    MessagePtr r = new_message(req.GetDescriptor());
    r->CopyFrom(req);  // --all moves the page token on
    MessagePtr resp = new_message(resp_type);
    std::ostringstream view;
    KIB_TRY(execute_once(inv, client, *r, *resp, view));
    const auto now = google::protobuf::util::TimeUtil::GetCurrentTime();
    out << (terminal ? "\033[H\033[2J" : "") << "Every 2 s: " << google::protobuf::util::TimeUtil::ToString(now) << "\n"
        << view.str() << (terminal ? "" : "\n") << std::flush;
    std::this_thread::sleep_for(std::chrono::seconds(2));
  }
}

// egress update: the current Egress fills in what the command does not restate.
// `usage_error` tells a refusal of the command's flags from a failed read.
Status complete_egress_update(const Invocation& inv, ConnectClient& client, Message& req, bool& usage_error) {
  usage_error = true;
  KIB_TRY(check_egress_update_flags(inv));
  if (!egress_update_needs_current(inv)) return {};
  v1::GetEgressRequest get;
  get.set_egress_id(inv.positional);
  v1::GetEgressResponse current;
  usage_error = false;
  KIB_TRY(call(client, "kibotos.ctrl.v1.EgressService.GetEgress", get, current));
  usage_error = true;
  KIB_TRY(keep_unstated(inv, current.egress(), dynamic_cast<v1::UpdateEgressRequest&>(req)));
  usage_error = false;
  return {};
}

Status execute(const Invocation& inv, Message& req, Message& resp, std::ostream& out, bool& usage_error) {
  Endpoint ep{inv.global.socket, inv.global.server, inv.global.cert,
              inv.global.key,    inv.global.ca,     inv.global.timeout_seconds};
  ConnectClient client(std::move(ep));
  if (req.GetDescriptor() == v1::UpdateEgressRequest::descriptor())
    KIB_TRY(complete_egress_update(inv, client, req, usage_error));
  if (inv.global.watch) return watch(inv, client, req, resp.GetDescriptor(), out);
  return execute_once(inv, client, req, resp, out);
}

}  // namespace

int run_ctl(const std::vector<std::string>& args, std::ostream& out, std::ostream& err, const char* env_socket) {
  if (!args.empty() && args[0] == "__complete") {
    print_completions(std::vector<std::string>(args.begin() + 1, args.end()), out, env_socket);
    return 0;
  }
  auto inv = parse_args(args, env_socket);
  if (!inv.ok()) {
    err << error_line(inv.error());
    return kExitUsage;
  }
  if (inv->global.version) {
    out << "kibotosctl " << KIBOTOS_VERSION << "\n";
    return 0;
  }
  if (inv->global.help) {
    out << help_text(*inv);
    return 0;
  }
  if (inv->builtin) {  // completion SHELL
    out << completion_script(inv->positional);
    return 0;
  }
  const auto* method = find_method(inv->command->method);
  if (method == nullptr) {
    err << error_line(Error{Code::internal, "unknown method " + std::string(inv->command->method)});
    return 1;
  }
  if (inv->global.output == OutputFormat::id) {
    if (Status st = check_id_output(*inv->command, method->output_type()); !st.ok()) {
      err << error_line(st.error());
      return kExitUsage;
    }
  }
  MessagePtr req = new_message(method->input_type());
  MessagePtr resp = new_message(method->output_type());
  if (Status st = build_request(*inv, *req, read_input, random_command_id); !st.ok()) {
    err << error_line(st.error());
    return kExitUsage;  // bad local input (a flag value, an unreadable or invalid file)
  }
  bool usage_error = false;
  if (Status st = execute(*inv, *req, *resp, out, usage_error); !st.ok()) {
    err << error_line(st.error());
    return usage_error ? kExitUsage : exit_code_for(st.error());
  }
  return 0;
}

}  // namespace kib::ctl
