#pragma once
// gzip bodies and messages with zlib, the only compression connect-go serves by
// default. Decompression is bounded: a zip bomb is resource_exhausted, not memory.
#include <cstddef>
#include <string>
#include <string_view>

#include "agent/common/result.h"

namespace kib::api {

inline constexpr std::string_view kGzip = "gzip";

Result<std::string> gzip_compress(std::string_view data);
// At most max_out bytes of output; more is resource_exhausted. Corrupt input is
// invalid_argument (as connect-go's decompressor says).
Result<std::string> gzip_decompress(std::string_view data, size_t max_out);

// Whether a comma-separated list of encodings (Accept-Encoding, grpc-accept-encoding,
// connect-accept-encoding) names gzip; parameters such as ";q=0.5" are ignored.
bool lists_gzip(const std::string* header);

}  // namespace kib::api
