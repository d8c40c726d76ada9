#pragma once
// HTTP/1.1 with keep-alive (and pipelining) on one connection, parsed by Debian's
// http-parser; each complete request goes to the Connect handler in order.
#include <http_parser.h>

#include <chrono>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "agent/api/http/byte_stream.h"
#include "agent/api/http/http_message.h"
#include "agent/common/result.h"

namespace kib::api {

class Http1Session {
 public:
  Http1Session(ByteStream& stream, const HttpHandler& handler, std::string peer);
  // Serves until the peer closes, times out, errs, or a response closes the connection.
  // `initial` holds bytes already read from the stream.
  void serve(std::string_view initial);

 private:
  struct Pending {
    HttpRequest request;
    bool keep_alive = true;
  };
  static constexpr size_t kMaxHeaders = 100;
  static constexpr size_t kMaxUrl = 8192;

  // Feeds bytes to the parser and answers what completed; false: close the connection.
  bool feed(const char* data, size_t len);
  bool answer_ready();
  bool write_response(const HttpResponse& r, bool keep_alive);
  void fail(int status, const Error& error);
  // The answer to a request the parser refused, or that our callbacks stopped.
  void fail_parse(enum http_errno err);
  bool obs_fold_before(const char* value) const;
  void drain_after_early_response();
  void commit_header();

  static int on_message_begin(http_parser* p);
  static int on_url(http_parser* p, const char* at, size_t len);
  static int on_header_field(http_parser* p, const char* at, size_t len);
  static int on_header_value(http_parser* p, const char* at, size_t len);
  static int on_headers_complete(http_parser* p);
  static int on_body(http_parser* p, const char* at, size_t len);
  static int on_message_complete(http_parser* p);

  ByteStream& stream_;
  const HttpHandler& handler_;
  std::string peer_;
  http_parser parser_;
  http_parser_settings settings_;
  HttpRequest current_;
  // When the request being received began (its first byte); none between requests.
  std::optional<std::chrono::steady_clock::time_point> request_began_;
  std::string url_, field_, value_;
  bool last_was_value_ = false;
  bool too_many_headers_ = false;
  bool url_too_long_ = false;
  bool obs_fold_ = false;
  // Why on_headers_complete refused the request (its HTTP version), if it did.
  std::optional<std::pair<int, Error>> version_refusal_;
  // The bytes being parsed begin here; the last byte other than SP and HTAB parsed
  // before them. Together they tell an obs-fold continuation from a value cut by a read.
  const char* chunk_begin_ = nullptr;
  char last_non_space_ = '\n';
  // A request announced a body over the limit, or its headers decided a refusal: it
  // is answered and the connection closed without reading the body.
  bool close_after_ = false;
  // The request being received is refused by its headers alone (HttpHandler::
  // answerable) and has a body: answered before the body if that is not whole yet.
  bool refused_by_headers_ = false;
  // A response said "connection: close".
  bool closing_ = false;
  std::deque<Pending> ready_;
};

}  // namespace kib::api
