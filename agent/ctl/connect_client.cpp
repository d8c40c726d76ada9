#include "agent/ctl/connect_client.h"

#include <cerrno>
#include <cstring>

#include <curl/curl.h>
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include "agent/common/c_ptr.h"

namespace kib::ctl {
namespace {

constexpr size_t kMaxResponseBytes = 64u << 20;

using SlistPtr = CPtr<curl_slist_free_all>;

size_t on_body(char* data, size_t size, size_t n, void* user) {
  auto* out = static_cast<std::string*>(user);
  if (out->size() + size * n > kMaxResponseBytes) return 0;  // aborts the transfer
  out->append(data, size * n);
  return size * n;
}

// Connect's table for HTTP statuses without a Connect error body.
Code code_for_http(long status) {
  switch (status) {
    case 400: return Code::internal;
    case 401: return Code::unauthenticated;
    case 403: return Code::permission_denied;
    case 404: return Code::unimplemented;
    case 408: return Code::deadline_exceeded;
    case 429:
    case 502:
    case 503:
    case 504: return Code::unavailable;
    default: return Code::unknown;
  }
}

// "kibotos.ctrl.v1.EgressService.CreateEgress" -> "kibotos.ctrl.v1.EgressService/CreateEgress"
std::string connect_path(std::string_view method) {
  std::string p(method);
  const auto dot = p.rfind('.');
  if (dot != std::string::npos) p[dot] = '/';
  return "/" + p;
}

// The TLS alert the server sent, from curl's trace ("TLSv1.3 (IN), TLS alert, unknown
// CA (560):"). With TLS 1.3 the server checks our certificate after our side of the
// handshake is done: its refusal arrives as an alert on the first read, and curl's own
// error then only says that the connection is gone ("getpeername() failed with errno
// 107").
int on_curl_trace(CURL*, curl_infotype type, char* data, size_t size, void* user) {
  if (type != CURLINFO_TEXT) return 0;
  static constexpr std::string_view kAlert = "(IN), TLS alert, ";
  const std::string_view line(data, size);
  const size_t at = line.find(kAlert);
  if (at == std::string_view::npos) return 0;
  std::string_view alert = line.substr(at + kAlert.size());
  alert = alert.substr(0, alert.rfind(" ("));  // the alert's number
  if (alert == "close notify") return 0;       // an orderly end, not a refusal
  *static_cast<std::string*>(user) = std::string(alert);
  return 0;
}

Error transport_error(CURL* c, CURLcode rc, const char* errbuf, const Endpoint& ep, const std::string& tls_alert) {
  const std::string where = ep.server.empty() ? ep.unix_socket : ep.server;
  if (!tls_alert.empty())
    return Error{Code::unavailable, "cannot reach the agent at " + where + ": the server refused the TLS handshake: " +
                                        tls_alert + " (is --cert issued by the agent's client CA?)"};
  long os_errno = 0;
  curl_easy_getinfo(c, CURLINFO_OS_ERRNO, &os_errno);
  std::string detail = errbuf[0] ? errbuf : curl_easy_strerror(rc);
  // For the socket, errno says it best: ENOENT (agent not running) or EACCES (not in
  // the socket's group); curl's text would talk about "localhost port 80".
  if (ep.server.empty() && rc == CURLE_COULDNT_CONNECT && os_errno != 0)
    detail = std::strerror(static_cast<int>(os_errno));
  if (os_errno == EACCES) detail += " (is this user in the agent's socket group, e.g. kibotos?)";
  if (rc == CURLE_OPERATION_TIMEDOUT) return Error{Code::deadline_exceeded, "no answer from " + where + ": " + detail};
  return Error{Code::unavailable, "cannot reach the agent at " + where + ": " + detail};
}

}  // namespace

struct ConnectClient::Curl {
  CPtr<curl_easy_cleanup> handle{curl_easy_init()};
};

Error error_from_response(long http_status, std::string_view body) {
  google::protobuf::Struct s;
  google::protobuf::util::JsonParseOptions opts;
  opts.ignore_unknown_fields = true;
  if (google::protobuf::util::JsonStringToMessage(std::string(body), &s, opts).ok()) {
    const auto& f = s.fields();
    const auto code = f.find("code");
    const auto msg = f.find("message");
    if (code != f.end() && code->second.has_string_value()) {
      const auto c = code_from_name(code->second.string_value());
      std::string message = msg != f.end() ? msg->second.string_value() : "";
      if (c && *c != Code::ok) return Error{*c, std::move(message)};
    }
  }
  return Error{code_for_http(http_status), "HTTP status " + std::to_string(http_status)};
}

ConnectClient::ConnectClient(Endpoint endpoint) : endpoint_(std::move(endpoint)), curl_(std::make_unique<Curl>()) {}
ConnectClient::~ConnectClient() = default;

Result<std::string> ConnectClient::call(std::string_view method, const std::string& json_body) {
  CURL* c = curl_->handle.get();
  if (c == nullptr) return Error{Code::internal, "curl_easy_init failed"};
  curl_easy_reset(c);
  std::string url, tls_alert;
  if (endpoint_.server.empty()) {
    curl_easy_setopt(c, CURLOPT_UNIX_SOCKET_PATH, endpoint_.unix_socket.c_str());
    url = "http://localhost" + connect_path(method);
  } else {
    url = "https://" + endpoint_.server + connect_path(method);
    curl_easy_setopt(c, CURLOPT_SSLCERT, endpoint_.cert.c_str());
    curl_easy_setopt(c, CURLOPT_SSLKEY, endpoint_.key.c_str());
    if (!endpoint_.ca.empty()) curl_easy_setopt(c, CURLOPT_CAINFO, endpoint_.ca.c_str());
    curl_easy_setopt(c, CURLOPT_SSLVERSION, static_cast<long>(CURL_SSLVERSION_TLSv1_2));
    // The trace goes to on_curl_trace only, never to stderr.
    curl_easy_setopt(c, CURLOPT_DEBUGFUNCTION, on_curl_trace);
    curl_easy_setopt(c, CURLOPT_DEBUGDATA, &tls_alert);
    curl_easy_setopt(c, CURLOPT_VERBOSE, 1L);
  }
  const std::string timeout = "Connect-Timeout-Ms: " + std::to_string(endpoint_.timeout_seconds * 1000ull);
  curl_slist* raw = nullptr;
  for (const char* h : {"Content-Type: application/json", "Connect-Protocol-Version: 1", timeout.c_str()})
    raw = curl_slist_append(raw, h);
  SlistPtr headers(raw);
  std::string body;
  char errbuf[CURL_ERROR_SIZE] = {};
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers.get());
  curl_easy_setopt(c, CURLOPT_POSTFIELDS, json_body.c_str());
  curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(json_body.size()));
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &body);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
  if (endpoint_.max_time_ms > 0)
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(endpoint_.max_time_ms));
  else
    curl_easy_setopt(c, CURLOPT_TIMEOUT, static_cast<long>(endpoint_.timeout_seconds) + 5);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_NOPROXY, "*");  // never send the agent's API through a proxy
  const CURLcode rc = curl_easy_perform(c);
  if (rc != CURLE_OK) return transport_error(c, rc, errbuf, endpoint_, tls_alert);
  long status = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
  if (status != 200) return error_from_response(status, body);
  return body;
}

}  // namespace kib::ctl
