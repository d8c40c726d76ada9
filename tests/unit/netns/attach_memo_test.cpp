// The attach memo (netns/attach_memo.h) in a temporary directory: what is put or
// dropped is what the next start loads, whatever happened to the writer; anything
// else (another boot, a torn first line, another version) loads as nothing or as an
// error, never as a note that was not written.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "netns/attach_memo.h"

using namespace kib;
using namespace kib::netns;
namespace fs = std::filesystem;

namespace {

const std::string kBoot = "f7489d03-18a1-4e17-a49b-ea96a42f2295";

struct TempDir {
  fs::path path;
  TempDir() {
    std::string templ = (fs::temp_directory_path() / "attach-memo-XXXXXX").string();
    REQUIRE(::mkdtemp(templ.data()) != nullptr);
    path = templ;
  }
  ~TempDir() { fs::remove_all(path); }
  std::string file() const { return (path / "attachments").string(); }
};

AttachNote note(uint64_t cookie, uint32_t gen, uint16_t tcp, uint16_t dns = 0) {
  return AttachNote{cookie, gen, TproxyPorts{tcp, dns, static_cast<uint16_t>(dns ? dns + 1 : 0)},
                    ruleset_digest("table " + std::to_string(cookie))};
}

std::string read_all(const std::string& path) {
  std::ifstream f(path);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

void append_raw(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::app);
  f << text;
}

}  // namespace

TEST_CASE("a missing memo loads as no notes") {
  TempDir d;
  auto notes = load_attach_notes(d.file(), kBoot);
  REQUIRE(notes.ok());
  CHECK(notes->empty());
}

TEST_CASE("notes created, put and dropped load back as the last state of each Workspace") {
  TempDir d;
  AttachNotes first{{"ws-a", note(11, 3, 40000)}, {"ws-b", note(12, 5, 40001, 40100)}};
  auto memo = AttachMemo::create(d.file(), kBoot, first);
  REQUIRE(memo.ok());
  REQUIRE(memo->put("ws-c", note(13, 7, 40002)).ok());
  REQUIRE(memo->put("ws-a", note(11, 9, 40000)).ok());  // a later write in ws-a's namespace
  REQUIRE(memo->drop("ws-b").ok());
  auto loaded = load_attach_notes(d.file(), kBoot);
  REQUIRE(loaded.ok());
  AttachNotes want{{"ws-a", note(11, 9, 40000)}, {"ws-c", note(13, 7, 40002)}};
  CHECK(*loaded == want);
}

TEST_CASE("every field of a note survives the file") {
  TempDir d;
  AttachNote n{18446744073709551615ull, 4294967295u, TproxyPorts{65535, 1, 2}, 0xfedcba9876543210ull};
  REQUIRE(AttachMemo::create(d.file(), kBoot, {{"ws-x.1_y", n}}).ok());
  auto loaded = load_attach_notes(d.file(), kBoot);
  REQUIRE(loaded.ok());
  REQUIRE(loaded->count("ws-x.1_y") == 1);
  CHECK(loaded->at("ws-x.1_y") == n);
}

TEST_CASE("a memo of another boot loads as no notes: its namespaces are gone") {
  TempDir d;
  REQUIRE(AttachMemo::create(d.file(), kBoot, {{"ws-a", note(1, 1, 1000)}}).ok());
  auto loaded = load_attach_notes(d.file(), "00000000-0000-0000-0000-000000000000");
  REQUIRE(loaded.ok());
  CHECK(loaded->empty());
}

TEST_CASE("a line the writer died in is skipped, the lines before it count") {
  TempDir d;
  auto memo = AttachMemo::create(d.file(), kBoot, {{"ws-a", note(1, 1, 1000)}});
  REQUIRE(memo.ok());
  REQUIRE(memo->put("ws-b", note(2, 2, 2000)).ok());
  append_raw(d.file(), "+ 3 3 3000 0 0 00000000000000ff ws-");  // no newline: cut short
  auto loaded = load_attach_notes(d.file(), kBoot);
  REQUIRE(loaded.ok());
  CHECK(loaded->size() == 2);
  CHECK(loaded->count("ws-b") == 1);
}

TEST_CASE("a memo torn before its header ended loads as no notes") {
  TempDir d;
  append_raw(d.file(), "kibotos-attach-memo 1 f748");
  auto loaded = load_attach_notes(d.file(), kBoot);
  REQUIRE(loaded.ok());
  CHECK(loaded->empty());
}

TEST_CASE("a file that is not a memo of this version is an error naming the line") {
  TempDir d;
  append_raw(d.file(), "kibotos-attach-memo 2 " + kBoot + "\n");
  auto other_version = load_attach_notes(d.file(), kBoot);
  REQUIRE_FALSE(other_version.ok());
  CHECK(other_version.error().code == Code::invalid_argument);
  CHECK(other_version.error().message.find(":1:") != std::string::npos);

  REQUIRE(AttachMemo::create(d.file(), kBoot, {{"ws-a", note(1, 1, 1000)}}).ok());
  append_raw(d.file(), "+ 5 5 99999 0 0 ff ws-b\n");  // a port out of range
  auto bad = load_attach_notes(d.file(), kBoot);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().message.find(":3:") != std::string::npos);
}

TEST_CASE("create replaces what was there, and appends go to the new file") {
  TempDir d;
  REQUIRE(AttachMemo::create(d.file(), kBoot, {{"ws-old", note(1, 1, 1000)}}).ok());
  auto memo = AttachMemo::create(d.file(), kBoot, {{"ws-new", note(2, 2, 2000)}});
  REQUIRE(memo.ok());
  REQUIRE(memo->put("ws-more", note(3, 3, 3000)).ok());
  auto loaded = load_attach_notes(d.file(), kBoot);
  REQUIRE(loaded.ok());
  CHECK(loaded->count("ws-old") == 0);
  CHECK(loaded->count("ws-new") == 1);
  CHECK(loaded->count("ws-more") == 1);
  CHECK_FALSE(fs::exists(d.file() + ".tmp"));
}

TEST_CASE("a memo grows by appends until rewritten, and long_for says when") {
  TempDir d;
  auto memo = AttachMemo::create(d.file(), kBoot, {});
  REQUIRE(memo.ok());
  for (int i = 0; i < 1100; ++i) REQUIRE(memo->put("ws-a", note(1, static_cast<uint32_t>(i), 1000)).ok());
  CHECK(memo->long_for(1));
  CHECK_FALSE(memo->long_for(1000));  // 1,100 lines are not 4 per live note
  const auto before = read_all(d.file()).size();
  REQUIRE(memo->rewrite({{"ws-a", note(1, 1099, 1000)}}).ok());
  CHECK(read_all(d.file()).size() < before / 100);
  CHECK_FALSE(memo->long_for(1));
  auto loaded = load_attach_notes(d.file(), kBoot);
  REQUIRE(loaded.ok());
  CHECK(loaded->at("ws-a").generation == 1099);
}

TEST_CASE("the digest tells table texts apart") {
  CHECK(ruleset_digest("table inet kibotos { }") == ruleset_digest("table inet kibotos { }"));
  CHECK(ruleset_digest("table inet kibotos { }") != ruleset_digest("table inet kibotos {  }"));
  CHECK(ruleset_digest("") != ruleset_digest(" "));
}

TEST_CASE("this boot has an ID") {
  auto boot = current_boot_id();
  REQUIRE(boot.ok());
  CHECK(boot->size() == 36);
}
