#include "agent/api/compression/gzip.h"

#include <zlib.h>

#include <algorithm>
#include <cctype>

namespace kib::api {
namespace {

// windowBits 15 + 16: a gzip wrapper rather than zlib's own.
constexpr int kGzipWindow = 15 + 16;

struct Inflater {
  z_stream z{};
  bool open = false;
  Inflater() { open = inflateInit2(&z, kGzipWindow) == Z_OK; }
  ~Inflater() {
    if (open) inflateEnd(&z);
  }
};

struct Deflater {
  z_stream z{};
  bool open = false;
  Deflater() { open = deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, kGzipWindow, 8, Z_DEFAULT_STRATEGY) == Z_OK; }
  ~Deflater() {
    if (open) deflateEnd(&z);
  }
};

Bytef* in_ptr(std::string_view data) { return reinterpret_cast<Bytef*>(const_cast<char*>(data.data())); }

}  // namespace

Result<std::string> gzip_compress(std::string_view data) {
  Deflater d;
  if (!d.open) return Error{Code::internal, "gzip: cannot start the compressor"};
  std::string out(deflateBound(&d.z, static_cast<uLong>(data.size())), '\0');
  d.z.next_in = in_ptr(data);
  d.z.avail_in = static_cast<uInt>(data.size());
  d.z.next_out = reinterpret_cast<Bytef*>(out.data());
  d.z.avail_out = static_cast<uInt>(out.size());
  if (deflate(&d.z, Z_FINISH) != Z_STREAM_END) return Error{Code::internal, "gzip: compression failed"};
  out.resize(d.z.total_out);
  return out;
}

Result<std::string> gzip_decompress(std::string_view data, size_t max_out) {
  Inflater inf;
  if (!inf.open) return Error{Code::internal, "gzip: cannot start the decompressor"};
  inf.z.next_in = in_ptr(data);
  inf.z.avail_in = static_cast<uInt>(data.size());
  std::string out;
  char chunk[16384];
  for (;;) {
    inf.z.next_out = reinterpret_cast<Bytef*>(chunk);
    inf.z.avail_out = sizeof chunk;
    const int rv = inflate(&inf.z, Z_NO_FLUSH);
    if (rv != Z_OK && rv != Z_STREAM_END && rv != Z_BUF_ERROR)
      return Error{Code::invalid_argument, "gzip: corrupt compressed data"};
    const size_t produced = sizeof chunk - inf.z.avail_out;
    if (out.size() + produced > max_out)
      return Error{Code::resource_exhausted,
                   "decompressed message is larger than " + std::to_string(max_out) + " bytes"};
    out.append(chunk, produced);
    if (rv == Z_STREAM_END) {
      if (inf.z.avail_in != 0) return Error{Code::invalid_argument, "gzip: data after the compressed stream"};
      return out;
    }
    // No progress possible: the input ended before the stream did.
    if (produced == 0 && (rv == Z_BUF_ERROR || inf.z.avail_in == 0))
      return Error{Code::invalid_argument, "gzip: truncated compressed data"};
  }
}

bool lists_gzip(const std::string* header) {
  if (header == nullptr) return false;
  std::string_view rest = *header;
  while (!rest.empty()) {
    size_t comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    item = item.substr(0, item.find(';'));
    while (!item.empty() && std::isspace(static_cast<unsigned char>(item.front()))) item.remove_prefix(1);
    while (!item.empty() && std::isspace(static_cast<unsigned char>(item.back()))) item.remove_suffix(1);
    if (item.size() == kGzip.size() && std::equal(item.begin(), item.end(), kGzip.begin(), [](char a, char b) {
          return std::tolower(static_cast<unsigned char>(a)) == b;
        }))
      return true;
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return false;
}

}  // namespace kib::api
