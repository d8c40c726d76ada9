#pragma once
// One owner for every C library handle that is released by a single free function:
// CPtr<SSL_free> is a std::unique_ptr<SSL> whose deleter calls SSL_free. The pointee
// type is read off the free function's parameter, so each handle type is named once.
// (systemd: "one cleanup definition per C type".)
#include <memory>
#include <type_traits>

namespace kib {

namespace detail {
template <typename F>
struct FreeArg;
template <typename R, typename T>
struct FreeArg<R (*)(T*)> {
  using type = T;
};
}  // namespace detail

// The deleter: calls Free on a non-null pointer (unique_ptr never passes null).
template <auto Free>
struct CFree {
  template <typename T>
  void operator()(T* p) const {
    Free(p);
  }
};

template <auto Free>
using CPtr = std::unique_ptr<typename detail::FreeArg<decltype(Free)>::type, CFree<Free>>;

}  // namespace kib
