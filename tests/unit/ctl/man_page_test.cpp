// kibotosctl(1) and the command table agree: every command and flag the table has is
// in the man page with the command it belongs to, the man page documents no flag the
// table lacks, and `--help` shows the same flags as the man page.
#include <doctest/doctest.h>

#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "agent/ctl/builtin_commands.h"
#include "agent/ctl/command_table.h"
#include "agent/ctl/help_text.h"

using namespace kib::ctl;
using Names = std::set<std::string>;

template <>
struct doctest::StringMaker<Names> {
  static String convert(const Names& names) {
    std::string out = "{";
    for (const auto& n : names) out += " " + n;
    return (out + " }").c_str();
  }
};

namespace {

// A roff line as a reader sees it: font changes and quotes dropped, "\-" as "-".
std::string decode(std::string s) {
  s = std::regex_replace(s, std::regex(R"(\\f[BIRP])"), "");
  s = std::regex_replace(s, std::regex(R"(\\-)"), "-");
  s = std::regex_replace(s, std::regex(R"(\\\(en)"), "-");
  s = std::regex_replace(s, std::regex("\""), "");
  return std::regex_replace(s, std::regex(R"(^\.[A-Z]+ ?)"), "");  // the macro (.B, .BR ...)
}

Names flags_in(const std::string& text) {
  Names out;
  static const std::regex flag(R"((^|[^-\w])--([a-z][a-z0-9-]*))");
  for (std::sregex_iterator it(text.begin(), text.end(), flag), end; it != end; ++it) out.insert((*it)[2]);
  return out;
}

Names names_of(const std::vector<FlagSpec>& flags) {
  Names out;
  for (const auto& f : flags) out.emplace(f.name);
  return out;
}

// "egress create" for a command with a verb, else the word alone ("agent", "completion").
std::string entry_name(const std::string& group, const std::string& verb) {
  return !verb.empty() && find_command(group, verb) ? group + " " + verb : group;
}

std::string name_of(const CommandSpec& c) {
  // Appended piecewise: GCC 12's -Wrestrict false positive at -O2 (PR 105329).
  std::string name(c.group);
  if (!c.verb.empty()) {
    name += ' ';
    name += c.verb;
  }
  return name;
}

// The man page as sections of .TP tags (the line after .TP), and the SYNOPSIS lines.
struct ManPage {
  std::map<std::string, std::vector<std::string>> tags;  // section -> decoded tag lines
  std::vector<std::string> synopsis;                     // raw lines
};

ManPage read_man_page() {
  std::ifstream in(KIB_SOURCE_ROOT "/packaging/man/kibotosctl.1");
  REQUIRE(in.good());
  ManPage m;
  std::string line, section;
  bool tag_next = false;
  while (std::getline(in, line)) {
    if (line.rfind(".SH ", 0) == 0) {
      section = decode(line);
      continue;
    }
    if (section == "SYNOPSIS") m.synopsis.push_back(line);
    if (tag_next) m.tags[section].push_back(decode(line));
    tag_next = line == ".TP";
  }
  return m;
}

// COMMANDS' entries by the command they name ("egress create", "agent", "completion").
std::map<std::string, std::string> command_entries(const ManPage& m) {
  std::map<std::string, std::string> out;
  for (const auto& tag : m.tags.at("COMMANDS")) {
    std::istringstream words(tag);
    std::string group, verb;
    words >> group >> verb;
    const std::string name = entry_name(group, verb);
    INFO(tag);
    CHECK_MESSAGE(out.count(name) == 0, "two entries for " << name);
    out[name] = tag;
  }
  return out;
}

}  // namespace

TEST_CASE("kibotosctl(1) has an entry for every command of the table, with exactly its flags") {
  const auto entries = command_entries(read_man_page());
  for (const auto& c : command_table()) {
    const std::string name = name_of(c);
    INFO(name);
    REQUIRE(entries.count(name) == 1);
    CHECK(flags_in(entries.at(name)) == names_of(c.flags));
    if (!c.positional_name.empty()) CHECK(entries.at(name).find(std::string(c.positional_name)) != std::string::npos);
  }
}

TEST_CASE("kibotosctl(1) documents no command the table or the builtins lack, and every builtin") {
  const auto entries = command_entries(read_man_page());
  for (const auto& entry : entries) {
    // Not a structured binding: clang 14 cannot capture one in INFO.
    const std::string& name = entry.first;
    const auto& tag = entry.second;
    INFO(tag);
    const auto space = name.find(' ');
    const bool known = space == std::string::npos
                           ? find_command(name, "") || find_builtin(name)
                           : find_command(name.substr(0, space), name.substr(space + 1)) != nullptr;
    CHECK(known);
  }
  for (const auto& b : builtin_commands()) CHECK_MESSAGE(entries.count(std::string(b.name)) == 1, b.name);
}

TEST_CASE("the SYNOPSIS lists every verb of each group") {
  const ManPage m = read_man_page();
  std::map<std::string, Names> verbs;
  for (const auto& c : command_table())
    if (!c.verb.empty()) verbs[std::string(c.group)].emplace(c.verb);
  for (const auto& gv : verbs) {
    const auto& group = gv.first;
    const auto& want = gv.second;
    INFO(group);
    Names got;
    for (size_t i = 0; i + 1 < m.synopsis.size(); ++i) {
      if (m.synopsis[i] != ".B " + group) continue;
      std::istringstream alternatives(decode(m.synopsis[i + 1]));
      for (std::string v; std::getline(alternatives, v, '|');)
        got.insert(std::regex_replace(v, std::regex("^ +| +$"), ""));
    }
    CHECK(got == want);
  }
}

TEST_CASE("FLAGS describes every flag of the commands and no other") {
  const ManPage m = read_man_page();
  Names documented, table;
  for (const auto& tag : m.tags.at("FLAGS")) documented.merge(flags_in(tag));
  for (const auto& c : command_table()) table.merge(names_of(c.flags));
  CHECK(documented == table);
}

TEST_CASE("GLOBAL FLAGS describes exactly the global flags") {
  const ManPage m = read_man_page();
  Names documented;
  for (const auto& tag : m.tags.at("GLOBAL FLAGS")) documented.merge(flags_in(tag));
  CHECK(documented == names_of(global_flags()));
}

TEST_CASE("each command's --help shows the flags kibotosctl(1) gives it, and the global ones") {
  const ManPage m = read_man_page();
  const auto entries = command_entries(m);
  Names global;
  for (const auto& tag : m.tags.at("GLOBAL FLAGS")) global.merge(flags_in(tag));
  for (const auto& c : command_table()) {
    INFO(name_of(c));
    Invocation inv;
    inv.command = &c;
    Names want = flags_in(entries.at(name_of(c)));
    want.insert(global.begin(), global.end());
    CHECK(flags_in(help_text(inv)) == want);
  }
}

TEST_CASE("every command the overview help lists has its entry in kibotosctl(1)") {
  const auto entries = command_entries(read_man_page());
  std::istringstream help(help_text(Invocation{}));
  std::string line;
  bool in_commands = false;
  int listed = 0;
  while (std::getline(help, line)) {
    if (line == "Commands:") in_commands = true;
    if (line.empty()) in_commands = false;
    if (!in_commands || line.rfind("  ", 0) != 0) continue;
    std::istringstream words(line);
    std::string group, verb;
    words >> group >> verb;
    const std::string name = entry_name(group, verb);
    CHECK_MESSAGE(entries.count(name) == 1, line);
    ++listed;
  }
  CHECK(listed == static_cast<int>(command_table().size() + builtin_commands().size()));
}
