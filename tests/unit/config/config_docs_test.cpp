// The documentation of the configuration is checked against the table the parser
// reads keys with (config_values): packaging/config/agent.yaml shows every key, and
// each default it shows (a commented "#key: value" line) is the embedded default; the
// operator's guide's "`section.key` (`default`" mentions are too.
#include <doctest/doctest.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include "agent/config/config.h"

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::map<std::string, std::string> defaults() {
  std::map<std::string, std::string> out;
  for (auto& [k, v] : kib::config_values(kib::Config{})) out[k] = v;
  return out;
}

bool is_name_char(char c) { return (c >= 'a' && c <= 'z') || c == '_' || c == '.'; }

// "name: rest" with a name of [a-z_.]+: the name, and rest after ": " (or "").
bool split_key(const std::string& s, std::string& name, std::string& rest) {
  size_t i = 0;
  while (i < s.size() && is_name_char(s[i])) ++i;
  if (i == 0 || i >= s.size() || s[i] != ':') return false;
  name = s.substr(0, i);
  rest = s.size() > i + 2 && s[i + 1] == ' ' ? s.substr(i + 2) : "";
  return true;
}

// The value `text` gives `key` when a config file sets it, in config_values' notation.
std::string value_of(const std::string& key, const std::string& text) {
  std::string yaml;
  const size_t dot = key.rfind('.');
  if (dot == std::string::npos) {
    yaml = key + ": " + text + "\n";
  } else {
    // Sections nest one level per dot.
    std::string indent;
    size_t start = 0;
    for (size_t d = key.find('.'); d != std::string::npos; d = key.find('.', start)) {
      yaml += indent + key.substr(start, d - start) + ":\n";
      indent += "  ";
      start = d + 1;
    }
    yaml += indent + key.substr(start) + ": " + text + "\n";
  }
  auto r = kib::parse_config(yaml);
  if (!r.ok()) return "error: " + r.error().message;
  for (auto& [k, v] : kib::config_values(*r))
    if (k == key) return v;
  return "no such key";
}

}  // namespace

TEST_CASE("agent.yaml names every configuration key") {
  const std::string text = read_file(KIB_SOURCE_ROOT "/packaging/config/agent.yaml");
  REQUIRE(!text.empty());
  std::istringstream in(text);
  std::set<std::string> named;
  for (std::string l; std::getline(in, l);) {
    const size_t start = l.find_first_not_of(" #");
    std::string name, rest;
    if (start != std::string::npos && split_key(l.substr(start), name, rest)) named.insert(name);
  }
  for (const auto& entry : defaults()) {  // no structured binding: CHECK_MESSAGE captures it (clang 14)
    const auto& key = entry.first;
    CHECK_MESSAGE(named.count(key.substr(key.rfind('.') + 1)) == 1, key);
  }
}

TEST_CASE("the defaults agent.yaml shows are the embedded defaults") {
  const auto want = defaults();
  std::istringstream in(read_file(KIB_SOURCE_ROOT "/packaging/config/agent.yaml"));
  std::string section;
  int checked = 0;
  for (std::string l; std::getline(in, l);) {
    std::string name, value;
    // "api:" opens a section; "#state_dir: /var/lib/kibotos" and, in a section,
    // "  #max_connections: 256" show defaults.
    const bool in_section = l.rfind("  #", 0) == 0;
    const bool top = l.rfind("#", 0) == 0;
    if (!in_section && !top) {
      if (split_key(l, name, value)) section = name;
      continue;
    }
    if (!split_key(l.substr(in_section ? 3 : 1), name, value) || value.empty()) continue;
    const std::string key = in_section ? section + "." + name : name;
    const auto it = want.find(key);
    REQUIRE_MESSAGE(it != want.end(), "agent.yaml shows an unknown key: ", key);
    CHECK_MESSAGE(value_of(key, value) == it->second, key);
    ++checked;
  }
  CHECK(checked >= 25);
}

TEST_CASE("the defaults the operator's guide names are the embedded defaults") {
  const auto want = defaults();
  const std::string text = read_file(KIB_SOURCE_ROOT "/docs/operator-guide.md");
  int checked = 0;
  // "`dataplane.workspace_loops` (`1`"
  for (size_t at = text.find("` (`"); at != std::string::npos; at = text.find("` (`", at + 1)) {
    const size_t open = text.rfind('`', at - 1);
    const size_t close = text.find('`', at + 4);
    if (open == std::string::npos || close == std::string::npos) continue;
    const auto d = want.find(text.substr(open + 1, at - open - 1));
    if (d == want.end()) continue;  // not a configuration key
    CHECK_MESSAGE(value_of(d->first, text.substr(at + 4, close - at - 4)) == d->second, d->first);
    ++checked;
  }
  CHECK(checked >= 4);
}
