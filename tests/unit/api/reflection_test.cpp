// Server reflection from the compiled-in descriptors, and the health check.
#include <doctest/doctest.h>
#include <google/protobuf/descriptor.pb.h>

#include <atomic>

#include "agent/api/reflection/health_check.h"
#include "agent/api/reflection/server_reflection.h"
#include "kibotos/ctrl/v1/agent.pb.h"

namespace v1 = grpc::reflection::v1;
namespace health = grpc::health::v1;
using namespace kib;
using namespace kib::api;

namespace {

struct Reflection {
  MethodRegistry registry;
  ServerReflection reflection{{"kibotos.ctrl.v1.AgentService"}};
  Reflection() {
    // Linked so its descriptor is in the generated pool.
    (void)kibotos::ctrl::v1::GetAgentRequest::default_instance();
    reflection.register_methods(registry);
  }
  v1::ServerReflectionResponse ask(const v1::ServerReflectionRequest& req) { return reflection.answer(req); }
};

std::vector<std::string> file_names(const v1::ServerReflectionResponse& r) {
  std::vector<std::string> out;
  for (const auto& bytes : r.file_descriptor_response().file_descriptor_proto()) {
    google::protobuf::FileDescriptorProto f;
    REQUIRE(f.ParseFromString(bytes));
    out.push_back(f.name());
  }
  return out;
}

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

}  // namespace

TEST_CASE("list_services names the API's services and both reflection versions") {
  Reflection r;
  v1::ServerReflectionRequest req;
  req.set_list_services("*");
  auto resp = r.ask(req);
  std::vector<std::string> names;
  for (const auto& s : resp.list_services_response().service()) names.push_back(s.name());
  CHECK(contains(names, "kibotos.ctrl.v1.AgentService"));
  CHECK(contains(names, "grpc.reflection.v1.ServerReflection"));
  CHECK(contains(names, "grpc.reflection.v1alpha.ServerReflection"));
  CHECK(resp.original_request().list_services() == "*");
}

TEST_CASE("file_containing_symbol answers the file and its imports, the file first") {
  Reflection r;
  v1::ServerReflectionRequest req;
  req.set_file_containing_symbol("kibotos.ctrl.v1.AgentService");
  auto names = file_names(r.ask(req));
  REQUIRE(!names.empty());
  CHECK(names.front() == "kibotos/ctrl/v1/agent.proto");
  CHECK(contains(names, "google/protobuf/duration.proto"));
  // A method and a nested symbol resolve to the same file.
  req.set_file_containing_symbol("kibotos.ctrl.v1.AgentService.GetAgent");
  CHECK(file_names(r.ask(req)).front() == "kibotos/ctrl/v1/agent.proto");
}

TEST_CASE("every listed service resolves to its file, both reflection versions included") {
  Reflection r;
  v1::ServerReflectionRequest list;
  list.set_list_services("");
  const auto listed = r.ask(list);
  for (const auto& service : listed.list_services_response().service()) {
    v1::ServerReflectionRequest req;
    req.set_file_containing_symbol(service.name());
    auto resp = r.ask(req);
    CHECK_MESSAGE(resp.has_file_descriptor_response(), service.name());
  }
}

TEST_CASE("file_by_filename answers the file; an unknown one is a NOT_FOUND error response") {
  Reflection r;
  v1::ServerReflectionRequest req;
  req.set_file_by_filename("grpc/reflection/v1/reflection.proto");
  CHECK(file_names(r.ask(req)).front() == "grpc/reflection/v1/reflection.proto");
  req.set_file_by_filename("no/such.proto");
  auto resp = r.ask(req);
  CHECK(resp.error_response().error_code() == 5);
  req.set_file_containing_symbol("no.such.Symbol");
  CHECK(r.ask(req).error_response().error_code() == 5);
}

TEST_CASE("extensions: numbers of a known type; an unknown type is NOT_FOUND") {
  Reflection r;
  v1::ServerReflectionRequest req;
  req.set_all_extension_numbers_of_type("kibotos.ctrl.v1.Agent");
  auto resp = r.ask(req);
  CHECK(resp.all_extension_numbers_response().base_type_name() == "kibotos.ctrl.v1.Agent");
  CHECK(resp.all_extension_numbers_response().extension_number_size() == 0);
  req.set_all_extension_numbers_of_type("no.Such");
  CHECK(r.ask(req).error_response().error_code() == 5);
  req.mutable_file_containing_extension()->set_containing_type("kibotos.ctrl.v1.Agent");
  req.mutable_file_containing_extension()->set_extension_number(100);
  CHECK(r.ask(req).error_response().error_code() == 5);
}

TEST_CASE("ServerReflectionInfo is a stream under v1 and v1alpha") {
  Reflection r;
  for (const char* path : {"grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
                           "grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"}) {
    const Method* m = r.registry.find(path);
    REQUIRE_MESSAGE(m != nullptr, path);
    CHECK(m->streaming);
  }
}

TEST_CASE("health: SERVING while ready, NOT_SERVING otherwise, unknown services NOT_FOUND") {
  Readiness ready;
  ready.set(true);
  HealthCheck h(ready, {"kibotos.ctrl.v1.AgentService"});
  MethodRegistry registry;
  h.register_methods(registry);
  health::HealthCheckRequest req;
  CHECK(h.check(req)->status() == health::HealthCheckResponse::SERVING);
  req.set_service("kibotos.ctrl.v1.AgentService");
  CHECK(h.check(req)->status() == health::HealthCheckResponse::SERVING);
  req.set_service("grpc.health.v1.Health");
  CHECK(h.check(req).ok());
  ready.set(false);
  CHECK(h.check(req)->status() == health::HealthCheckResponse::NOT_SERVING);
  req.set_service("no.Such");
  CHECK(h.check(req).error().code == Code::not_found);
  CHECK(registry.find("grpc.health.v1.Health/Check") != nullptr);
}

namespace {

// Counts its wakes, as a session's eventfd would.
struct CountingWaker final : CallWaker {
  mutable std::atomic<int> wakes{0};
  void wake() const override { ++wakes; }
};

std::vector<health::HealthCheckResponse::ServingStatus> statuses(ServerStream& s) {
  auto polled = s.poll();
  REQUIRE(polled.ok());
  std::vector<health::HealthCheckResponse::ServingStatus> out;
  for (const auto& m : *polled) out.push_back(static_cast<const health::HealthCheckResponse&>(*m).status());
  return out;
}

using Serving = health::HealthCheckResponse;

}  // namespace

TEST_CASE("health Watch: the status at once, then one message per readiness change") {
  Readiness ready;
  HealthCheck h(ready, {"kibotos.ctrl.v1.AgentService"});
  auto waker = std::make_shared<CountingWaker>();
  CallContext ctx;
  ctx.waker = waker;
  health::HealthCheckRequest req;
  auto watch = h.watch(req, ctx);
  REQUIRE(watch.ok());
  CHECK(statuses(**watch) == std::vector{Serving::NOT_SERVING});
  CHECK(statuses(**watch).empty());  // nothing changed: nothing sent
  ready.set(true);
  CHECK(waker->wakes == 1);
  CHECK(statuses(**watch) == std::vector{Serving::SERVING});
  ready.set(true);  // not a change: no wake
  CHECK(waker->wakes == 1);
  ready.set(false);
  ready.set(true);  // undone before the session looked: nothing to say
  CHECK(statuses(**watch).empty());
  ready.set(false);
  CHECK(statuses(**watch) == std::vector{Serving::NOT_SERVING});
}

TEST_CASE("health Watch of an unknown service answers SERVICE_UNKNOWN and stays open") {
  Readiness ready;
  HealthCheck h(ready, {"kibotos.ctrl.v1.AgentService"});
  CallContext ctx;
  ctx.waker = std::make_shared<CountingWaker>();
  health::HealthCheckRequest req;
  req.set_service("no.Such");
  auto watch = h.watch(req, ctx);
  REQUIRE(watch.ok());
  CHECK(statuses(**watch) == std::vector{Serving::SERVICE_UNKNOWN});
  ready.set(true);
  CHECK(statuses(**watch).empty());
  CHECK(ready.watchers() == 0);  // it never changes: nothing to be woken for
}

TEST_CASE("health Watch stops watching when its stream ends, and is capped agent-wide") {
  Readiness ready;
  HealthCheck h(ready, {});
  CallContext ctx;
  ctx.waker = std::make_shared<CountingWaker>();
  std::vector<std::unique_ptr<ServerStream>> open;
  for (size_t i = 0; i < Readiness::kMaxWatchers; ++i) {
    auto w = h.watch({}, ctx);
    REQUIRE(w.ok());
    open.push_back(std::move(*w));
  }
  auto over = h.watch({}, ctx);
  REQUIRE(!over.ok());
  CHECK(over.error().code == Code::resource_exhausted);
  open.pop_back();
  CHECK(ready.watchers() == Readiness::kMaxWatchers - 1);
  CHECK(h.watch({}, ctx).ok());
  open.clear();
  CHECK(ready.watchers() == 0);
}

TEST_CASE("health Watch where the transport cannot hold a stream open (HTTP/1.1) is unimplemented") {
  Readiness ready;
  HealthCheck h(ready, {});
  auto w = h.watch({}, CallContext{});
  REQUIRE(!w.ok());
  CHECK(w.error().code == Code::unimplemented);
}

TEST_CASE("health Watch is registered as a stream beside Check") {
  Readiness ready;
  HealthCheck h(ready, {});
  MethodRegistry registry;
  h.register_methods(registry);
  const Method* m = registry.find("grpc.health.v1.Health/Watch");
  REQUIRE(m != nullptr);
  CHECK(m->streaming);
  CHECK(m->open_stream);
}
