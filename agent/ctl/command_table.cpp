#include "agent/ctl/command_table.h"

namespace kib::ctl {
namespace {

std::vector<FlagSpec> concat(std::vector<FlagSpec> a, const std::vector<FlagSpec>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The EgressSpec flags shared by create and update: "Update replaces the whole spec",
// so update takes the same flags as create.
std::vector<FlagSpec> egress_spec_flags() {
  return {
      {"address", "spec.socks5.address", Bind::string, true, "SOCKS5 endpoint host:port"},
      {"username", "spec.socks5.username", Bind::string, false, "SOCKS5 username (RFC 1929)"},
      {"password-file", "spec.socks5.password", Bind::secret_file, false,
       "file holding the SOCKS5 password, '-' for stdin"},
      {"tls", "spec.socks5.tls", Bind::presence, false, "wrap the SOCKS5 connection in TLS"},
      {"server-name", "spec.socks5.tls.server_name", Bind::string, false,
       "TLS server name (implies --tls; default: the host of --address)"},
      {"ca-cert", "spec.socks5.tls.ca_cert", Bind::file, false, "PEM CA bundle to verify the endpoint (implies --tls)"},
      {"udp-enabled", "spec.udp_enabled", Bind::enable, false, "allow SOCKS5 UDP ASSOCIATE through this Egress"},
  };
}

std::vector<FlagSpec> metadata_flags(std::string_view labels, std::string_view annotations) {
  return {
      {"label", labels, Bind::key_value, false, "label k=v (repeatable)"},
      {"annotation", annotations, Bind::key_value, false, "annotation k=v (repeatable)"},
  };
}

std::vector<FlagSpec> list_flags() {
  return {
      {"page-size", "page_size", Bind::uint, false, "items per page (0 = server default)"},
      {"page-token", "page_token", Bind::string, false, "continue from this page token"},
      {"selector", "label_selector", Bind::key_value, false, "keep items with label k=v (repeatable)"},
      {"all", "", Bind::client, false, "follow next_page_token until the last page"},
  };
}

FlagSpec wait_flag() {
  return {"wait", "", Bind::client, false,
          "wait until the policy is applied (status: applied_revision = its revision, no error), up to --timeout"};
}

FlagSpec drain_flag() {
  return {"drain-seconds", "drain_seconds", Bind::uint, false,
          "drain time for moved connections (0-3600, default 600)"};
}

// update: what it does not restate it keeps from the current Egress (egress_update.h).
std::vector<FlagSpec> egress_update_flags() {
  std::vector<FlagSpec> flags = {{"expected-revision", "expected_revision", Bind::uint, false,
                                  "the revision being replaced (default: the current one, read first)"}};
  for (FlagSpec f : egress_spec_flags()) {
    f.required = false;  // the current value is kept
    flags.push_back(f);
  }
  flags.push_back({"no-credentials", "", Bind::client, false, "remove the username and password"});
  flags.push_back({"no-tls", "", Bind::client, false, "remove TLS (else the current TLS settings are kept)"});
  flags.push_back({"no-udp", "", Bind::client, false, "turn UDP ASSOCIATE off (else the current setting is kept)"});
  flags.push_back({"replace", "", Bind::client, false,
                   "send the spec exactly as given (needs --address): keep nothing from the current one"});
  flags.push_back(drain_flag());
  return flags;
}

std::vector<CommandSpec> build_table() {
  return {
      {"agent",
       "",
       "kibotos.ctrl.v1.AgentService.GetAgent",
       "",
       "",
       false,
       false,
       "",
       {},
       "show the agent's version, uptime and counts"},
      // Egress
      {"egress", "create", "kibotos.ctrl.v1.EgressService.CreateEgress", "", "", true, false, "",
       concat(egress_spec_flags(), metadata_flags("labels", "annotations")), "create an Egress"},
      {"egress",
       "get",
       "kibotos.ctrl.v1.EgressService.GetEgress",
       "egress_id",
       "EGRESS_ID",
       false,
       false,
       "",
       {},
       "show one Egress"},
      {"egress", "list", "kibotos.ctrl.v1.EgressService.ListEgresses", "", "", false, true, "", list_flags(),
       "list Egresses in creation order"},
      {"egress", "update", "kibotos.ctrl.v1.EgressService.UpdateEgress", "egress_id", "EGRESS_ID", true, false, "",
       egress_update_flags(),
       "change an Egress's spec, keeping what is not given (compare-and-set on its revision; the password must be "
       "given again)"},
      {"egress",
       "delete",
       "kibotos.ctrl.v1.EgressService.DeleteEgress",
       "egress_id",
       "EGRESS_ID",
       true,
       false,
       "",
       {},
       "delete an Egress"},
      {"egress",
       "label",
       "kibotos.ctrl.v1.EgressService.UpdateEgressLabels",
       "egress_id",
       "EGRESS_ID",
       true,
       false,
       "",
       {{"expected-revision", "expected_labels_revision", Bind::uint, true, "the labels_revision being replaced"},
        {"label", "labels", Bind::key_value, false, "label k=v (repeatable; the whole map is replaced)"}},
       "replace an Egress's labels"},
      {"egress",
       "annotate",
       "kibotos.ctrl.v1.EgressService.UpdateEgressAnnotations",
       "egress_id",
       "EGRESS_ID",
       true,
       false,
       "",
       {{"expected-revision", "expected_annotations_revision", Bind::uint, true,
         "the annotations_revision being replaced"},
        {"annotation", "annotations", Bind::key_value, false,
         "annotation k=v (repeatable; the whole map is replaced)"}},
       "replace an Egress's annotations"},
      // Workspace
      {"workspace", "create", "kibotos.ctrl.v1.WorkspaceService.CreateWorkspace", "", "", true, false, "",
       concat(
           {{"netns", "netns", Bind::string, true,
             "the guest's network namespace: a path, e.g. /run/netns/vm1, or a name under /run/netns"},
            {"policy", "network_policy", Bind::message_file, true, "NetworkPolicy file (YAML or JSON), '-' for stdin"},
            wait_flag()},
           metadata_flags("labels", "annotations")),
       "attach a network namespace as a Workspace"},
      {"workspace",
       "get",
       "kibotos.ctrl.v1.WorkspaceService.GetWorkspace",
       "workspace_id",
       "WORKSPACE_ID",
       false,
       false,
       "",
       {},
       "show one Workspace"},
      {"workspace", "list", "kibotos.ctrl.v1.WorkspaceService.ListWorkspaces", "", "", false, true, "", list_flags(),
       "list Workspaces in creation order"},
      {"workspace",
       "update-policy",
       "kibotos.ctrl.v1.WorkspaceService.UpdateNetworkPolicy",
       "workspace_id",
       "WORKSPACE_ID",
       true,
       false,
       "",
       {{"expected-revision", "expected_revision", Bind::uint, true, "the policy revision being replaced"},
        {"policy", "network_policy", Bind::message_file, true, "NetworkPolicy file (YAML or JSON), '-' for stdin"},
        drain_flag(),
        wait_flag()},
       "replace a Workspace's NetworkPolicy (compare-and-set on its revision)"},
      {"workspace",
       "delete",
       "kibotos.ctrl.v1.WorkspaceService.DeleteWorkspace",
       "workspace_id",
       "WORKSPACE_ID",
       true,
       false,
       "",
       {},
       "detach a Workspace and remove what the agent installed"},
      {"workspace",
       "label",
       "kibotos.ctrl.v1.WorkspaceService.UpdateWorkspaceLabels",
       "workspace_id",
       "WORKSPACE_ID",
       true,
       false,
       "",
       {{"expected-revision", "expected_labels_revision", Bind::uint, true, "the labels_revision being replaced"},
        {"label", "labels", Bind::key_value, false, "label k=v (repeatable; the whole map is replaced)"}},
       "replace a Workspace's labels"},
      {"workspace",
       "annotate",
       "kibotos.ctrl.v1.WorkspaceService.UpdateWorkspaceAnnotations",
       "workspace_id",
       "WORKSPACE_ID",
       true,
       false,
       "",
       {{"expected-revision", "expected_annotations_revision", Bind::uint, true,
         "the annotations_revision being replaced"},
        {"annotation", "annotations", Bind::key_value, false,
         "annotation k=v (repeatable; the whole map is replaced)"}},
       "replace a Workspace's annotations"},
      {"workspace",
       "status",
       "kibotos.ctrl.v1.WorkspaceService.GetWorkspace",
       "workspace_id",
       "WORKSPACE_ID",
       false,
       false,
       "workspace.network_policy_status",
       {},
       "show what the data plane enforces for a Workspace"},
      {"workspace",
       "connections",
       "kibotos.ctrl.v1.WorkspaceService.ListConnections",
       "workspace_id",
       "WORKSPACE_ID",
       false,
       true,
       "",
       {{"page-size", "page_size", Bind::uint, false, "connections per page (0 = server default)"},
        {"page-token", "page_token", Bind::string, false, "continue from this page token"},
        {"all", "", Bind::client, false, "follow next_page_token until the last page"},
        {"watch", "", Bind::client, false, "show the list again every 2 s until interrupted"}},
       "list a Workspace's live connections, oldest first"},
  };
}

}  // namespace

bool takes_value(Bind b) { return b != Bind::enable && b != Bind::presence && b != Bind::client; }

const std::vector<CommandSpec>& command_table() {
  static const std::vector<CommandSpec> table = build_table();
  return table;
}

const std::vector<FlagSpec>& global_flags() {
  // field is empty: these steer kibotosctl. Bind tells only whether a value follows.
  static const std::vector<FlagSpec> flags = {
      {"output", "", Bind::string, false, "output format: table (default), json, yaml or id (only the IDs)"},
      {"socket", "", Bind::string, false, "agent's Unix socket (default $KIBOTOS_SOCKET or /run/kibotos/ctrl.sock)"},
      {"server", "", Bind::string, false, "host:port of the agent's TLS listener (instead of the socket)"},
      {"cert", "", Bind::string, false, "client certificate (PEM) for --server"},
      {"key", "", Bind::string, false, "client private key (PEM) for --server"},
      {"ca", "", Bind::string, false, "CA bundle (PEM) that signed the agent's certificate"},
      {"command-id", "", Bind::string, false, "command ID of a write (default: a fresh random one)"},
      {"timeout", "", Bind::uint, false,
       "time to wait for the answer, and for a policy to apply: 30, 30s, 2m, 1h (default 30s)"},
      {"help", "", Bind::enable, false, "show help"},
      {"version", "", Bind::enable, false, "print kibotosctl's version"},
  };
  return flags;
}

const CommandSpec* find_command(std::string_view group, std::string_view verb) {
  for (const auto& c : command_table())
    if (c.group == group && c.verb == verb) return &c;
  return nullptr;
}

const FlagSpec* find_flag(const std::vector<FlagSpec>& flags, std::string_view name) {
  for (const auto& f : flags)
    if (f.name == name) return &f;
  return nullptr;
}

bool group_exists(std::string_view group) {
  for (const auto& c : command_table())
    if (c.group == group) return true;
  return false;
}

bool group_has_verbs(std::string_view group) {
  for (const auto& c : command_table())
    if (c.group == group && !c.verb.empty()) return true;
  return false;
}

}  // namespace kib::ctl
