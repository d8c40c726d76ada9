// Every message of the three .proto files survives JSON -> message -> JSON and binary
// round trips with every field set (found by reflection, so new fields are covered).
#include <doctest/doctest.h>
#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>
#include <google/protobuf/dynamic_message.h>
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/message_differencer.h>

#include <memory>
#include <vector>

#include "agent/api/connect/message_codec.h"
#include "kibotos/ctrl/v1/agent.pb.h"
#include "kibotos/ctrl/v1/egress.pb.h"
#include "kibotos/ctrl/v1/workspace.pb.h"

namespace pb = google::protobuf;
using kib::api::Codec;

namespace {

void fill(pb::Message& m, int depth, int oneof_choice);

void set_scalar(pb::Message& m, const pb::FieldDescriptor* f, int i) {
  const pb::Reflection* r = m.GetReflection();
  const bool rep = f->is_repeated();
  switch (f->cpp_type()) {
#define KIB_SET(CPPTYPE, Setter, value) \
  case pb::FieldDescriptor::CPPTYPE:    \
    if (rep)                            \
      r->Add##Setter(&m, f, value);     \
    else                                \
      r->Set##Setter(&m, f, value);     \
    break;
    KIB_SET(CPPTYPE_INT32, Int32, -12345 - i)
    KIB_SET(CPPTYPE_INT64, Int64, -1234567890123LL - i)
    KIB_SET(CPPTYPE_UINT32, UInt32, 4000000000u + i)
    KIB_SET(CPPTYPE_UINT64, UInt64, 18446744073709551000ull + i)
    KIB_SET(CPPTYPE_DOUBLE, Double, 1.5 + i)
    KIB_SET(CPPTYPE_FLOAT, Float, 0.25f + i)
    KIB_SET(CPPTYPE_BOOL, Bool, true)
#undef KIB_SET
    case pb::FieldDescriptor::CPPTYPE_ENUM: {
      const pb::EnumDescriptor* e = f->enum_type();
      const pb::EnumValueDescriptor* v = e->value(e->value_count() - 1 - (i % e->value_count()));
      if (rep)
        r->AddEnum(&m, f, v);
      else
        r->SetEnum(&m, f, v);
      break;
    }
    case pb::FieldDescriptor::CPPTYPE_STRING: {
      std::string v = f->type() == pb::FieldDescriptor::TYPE_BYTES
                          ? std::string("\x00\x01\xfe\xff", 4) + std::to_string(i)
                          : f->name() + "-" + std::to_string(i) + "-\xc3\xbc\"\\";
      if (rep)
        r->AddString(&m, f, v);
      else
        r->SetString(&m, f, v);
      break;
    }
    case pb::FieldDescriptor::CPPTYPE_MESSAGE: break;
  }
}

// Well-known types need values their JSON forms accept.
bool fill_well_known(pb::Message& m) {
  const std::string& name = m.GetDescriptor()->full_name();
  if (name != "google.protobuf.Timestamp" && name != "google.protobuf.Duration") return false;
  const pb::Reflection* r = m.GetReflection();
  r->SetInt64(&m, m.GetDescriptor()->FindFieldByName("seconds"), 1700000000);
  r->SetInt32(&m, m.GetDescriptor()->FindFieldByName("nanos"), 123000000);
  return true;
}

void fill_field(pb::Message& m, const pb::FieldDescriptor* f, int depth, int oneof_choice) {
  const pb::Reflection* r = m.GetReflection();
  if (f->cpp_type() != pb::FieldDescriptor::CPPTYPE_MESSAGE) {
    for (int i = 0; i < (f->is_repeated() ? 2 : 1); ++i) set_scalar(m, f, i);
    return;
  }
  if (depth > 4) return;
  if (f->is_map()) {
    for (int i = 0; i < 2; ++i) {
      pb::Message* entry = r->AddMessage(&m, f);
      set_scalar(*entry, entry->GetDescriptor()->FindFieldByNumber(1), i);
      const pb::FieldDescriptor* value = entry->GetDescriptor()->FindFieldByNumber(2);
      if (value->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE)
        fill(*entry->GetReflection()->MutableMessage(entry, value), depth + 1, oneof_choice);
      else
        set_scalar(*entry, value, i);
    }
    return;
  }
  if (f->is_repeated()) {
    for (int i = 0; i < 2; ++i) fill(*r->AddMessage(&m, f), depth + 1, oneof_choice);
  } else {
    fill(*r->MutableMessage(&m, f), depth + 1, oneof_choice);
  }
}

// Sets every field; in each oneof, only member number `oneof_choice` (modulo its size).
void fill(pb::Message& m, int depth, int oneof_choice) {
  if (fill_well_known(m)) return;
  const pb::Descriptor* d = m.GetDescriptor();
  for (int i = 0; i < d->field_count(); ++i) {
    const pb::FieldDescriptor* f = d->field(i);
    const pb::OneofDescriptor* o = f->real_containing_oneof();
    if (o != nullptr && o->field(oneof_choice % o->field_count()) != f) continue;
    fill_field(m, f, depth, oneof_choice);
  }
}

std::vector<const pb::Descriptor*> all_messages() {
  std::vector<const pb::Descriptor*> out;
  for (const pb::FileDescriptor* file :
       {kibotos::ctrl::v1::Egress::descriptor()->file(), kibotos::ctrl::v1::Workspace::descriptor()->file(),
        kibotos::ctrl::v1::Agent::descriptor()->file()}) {
    std::vector<const pb::Descriptor*> stack;
    for (int i = 0; i < file->message_type_count(); ++i) stack.push_back(file->message_type(i));
    while (!stack.empty()) {
      const pb::Descriptor* d = stack.back();
      stack.pop_back();
      if (d->options().map_entry()) continue;
      out.push_back(d);
      for (int i = 0; i < d->nested_type_count(); ++i) stack.push_back(d->nested_type(i));
    }
  }
  return out;
}

// JSON texts equal as values (maps print in no fixed order).
bool same_json(const std::string& a, const std::string& b) {
  pb::Value va, vb;
  if (!pb::util::JsonStringToMessage(a, &va).ok() || !pb::util::JsonStringToMessage(b, &vb).ok()) return false;
  return pb::util::MessageDifferencer::Equals(va, vb);
}

std::unique_ptr<pb::Message> new_message(const pb::Descriptor* d) {
  return std::unique_ptr<pb::Message>(pb::MessageFactory::generated_factory()->GetPrototype(d)->New());
}

}  // namespace

TEST_CASE("the three .proto files define the services' messages") {
  auto all = all_messages();
  CHECK(all.size() > 30);
}

TEST_CASE("every message round-trips through JSON and binary with every field set") {
  for (const pb::Descriptor* d : all_messages()) {
    for (int choice = 0; choice < 2; ++choice) {
      CAPTURE(d->full_name());
      CAPTURE(choice);
      auto original = new_message(d);
      fill(*original, 0, choice);

      auto json = kib::api::encode_message(Codec::json, *original);
      REQUIRE(json.ok());
      auto from_json = new_message(d);
      auto st = kib::api::decode_message(Codec::json, *json, *from_json);
      REQUIRE_MESSAGE(st.ok(), st.error().message);
      CHECK(pb::util::MessageDifferencer::Equals(*original, *from_json));
      auto json_again = kib::api::encode_message(Codec::json, *from_json);
      REQUIRE(json_again.ok());
      CHECK(same_json(*json_again, *json));

      auto bin = kib::api::encode_message(Codec::proto, *original);
      REQUIRE(bin.ok());
      auto from_bin = new_message(d);
      REQUIRE(kib::api::decode_message(Codec::proto, *bin, *from_bin).ok());
      CHECK(pb::util::MessageDifferencer::Equals(*original, *from_bin));
    }
  }
}

TEST_CASE("JSON output uses lowerCamelCase names") {
  kibotos::ctrl::v1::UpdateEgressRequest req;
  req.set_command_id("c");
  req.set_expected_revision(3);
  req.set_drain_seconds(0);  // proto3 optional: present even at zero
  auto json = kib::api::encode_message(Codec::json, req);
  REQUIRE(json.ok());
  CHECK(*json == R"({"commandId":"c","expectedRevision":"3","drainSeconds":0})");
}
