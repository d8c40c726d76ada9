#pragma once
// libnl sockets and errors as the netns code uses them: owned by unique_ptr, and
// opened on the thread that talks to the namespace (a netlink socket belongs to the
// namespace of the thread that created it).
#include <linux/netlink.h>
#include <netlink/attr.h>
#include <netlink/errno.h>
#include <netlink/handlers.h>
#include <netlink/netlink.h>
#include <netlink/socket.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>

#include "agent/common/c_ptr.h"
#include "agent/common/errno_error.h"
#include "agent/common/result.h"

namespace kib::netns {

using NlSocket = CPtr<nl_socket_free>;

// The kernel's answer to the last failed request on a socket, as libnl would lose it:
// libnl folds the errno into its own codes (EACCES becomes "No Access") and drops the
// extended ACK message ("IPv6 is disabled on nexthop device").
struct NlKernelError {
  int error = 0;  // errno, positive; 0: none recorded
  std::string message;
};

namespace detail {

inline int record_kernel_error(sockaddr_nl*, nlmsgerr* e, void* arg) {
  auto* out = static_cast<NlKernelError*>(arg);
  out->error = e->error < 0 ? -e->error : e->error;
  out->message.clear();
  // The TLVs follow the echoed request (only its header when NLM_F_CAPPED).
  const auto* hdr = reinterpret_cast<const nlmsghdr*>(reinterpret_cast<const char*>(e) - NLMSG_HDRLEN);
  if (hdr->nlmsg_flags & NLM_F_ACK_TLVS) {
    size_t offset = NLMSG_HDRLEN + NLMSG_ALIGN(sizeof *e);
    if (!(hdr->nlmsg_flags & NLM_F_CAPPED) && e->msg.nlmsg_len >= NLMSG_HDRLEN)
      offset = NLMSG_HDRLEN + NLMSG_ALIGN(sizeof *e + e->msg.nlmsg_len - NLMSG_HDRLEN);
    if (hdr->nlmsg_len > offset) {
      auto* attrs = reinterpret_cast<nlattr*>(const_cast<char*>(reinterpret_cast<const char*>(hdr)) + offset);
      if (nlattr* msg = nla_find(attrs, static_cast<int>(hdr->nlmsg_len - offset), NLMSGERR_ATTR_MSG);
          msg && nla_len(msg) > 0)
        out->message.assign(static_cast<const char*>(nla_data(msg)),
                            strnlen(static_cast<const char*>(nla_data(msg)), static_cast<size_t>(nla_len(msg))));
    }
  }
  return NL_STOP;  // libnl returns its usual code; callers keep matching on it
}

// The errno libnl's code most likely stands for (nl_syserr2nlerr reversed; where
// several map to one code, the usual one), or 0 for libnl's own conditions.
inline int errno_of_nl(int nl_err) {
  switch (nl_err < 0 ? -nl_err : nl_err) {
    case NLE_INTR: return EINTR;
    case NLE_BAD_SOCK: return EBADF;
    case NLE_AGAIN: return EAGAIN;
    case NLE_NOMEM: return ENOMEM;
    case NLE_EXIST: return EEXIST;
    case NLE_INVAL: return EINVAL;
    case NLE_RANGE: return ERANGE;
    case NLE_OPNOTSUPP: return EOPNOTSUPP;
    case NLE_AF_NOSUPPORT: return EAFNOSUPPORT;
    case NLE_OBJ_NOTFOUND: return ENOENT;
    case NLE_NOADDR: return EADDRNOTAVAIL;
    case NLE_BUSY: return EBUSY;
    case NLE_PROTO_MISMATCH: return EPROTONOSUPPORT;
    case NLE_NOACCESS: return EACCES;
    case NLE_PERM: return EPERM;
    case NLE_NODEV: return ENODEV;
    default: return 0;
  }
}

}  // namespace detail

// Records the kernel's error answers on `sk` in *out (which must outlive the socket),
// with the extended ACK message when the kernel sends one.
inline void capture_kernel_errors(nl_sock* sk, NlKernelError* out) {
  nl_socket_modify_err_cb(sk, NL_CB_CUSTOM, detail::record_kernel_error, out);
  int one = 1;
  // Best effort: without it the errno is still exact, only the kernel's sentence is missing.
  (void)::setsockopt(nl_socket_get_fd(sk), SOL_NETLINK, NETLINK_EXT_ACK, &one, sizeof one);
}

// "WHAT: Permission denied (EACCES): KERNEL MESSAGE": the errno in words and by name,
// taken from `kernel` when it recorded the answer to this request, else translated
// from libnl's code (libnl's own text only when it stands for no errno).
inline Error nl_error(const std::string& what, int err, const NlKernelError* kernel = nullptr) {
  int sys = detail::errno_of_nl(err);
  std::string detail_text;
  if (kernel && kernel->error != 0 && nl_syserr2nlerr(kernel->error) == (err < 0 ? -err : err)) {
    sys = kernel->error;
    if (!kernel->message.empty()) detail_text = ": " + kernel->message;
  }
  if (sys == 0) return make_error(Code::internal, what + ": " + nl_geterror(err));
  const char* name = strerrorname_np(sys);
  return make_error(
      out_of_resources(sys) ? Code::resource_exhausted : Code::internal,
      what + ": " + std::strerror(sys) + " (" + (name ? name : "errno " + std::to_string(sys)) + ")" + detail_text);
}

// A socket connected to `protocol` (NETLINK_ROUTE, NETLINK_SOCK_DIAG, ...).
inline Result<NlSocket> connect_netlink(int protocol) {
  NlSocket sk(nl_socket_alloc());
  if (!sk) return make_error(Code::resource_exhausted, "nl_socket_alloc failed");
  errno = 0;
  if (int err = nl_connect(sk.get(), protocol); err < 0) {
    // libnl reports a failed socket() (EMFILE) as "Unspecific failure"; errno has it.
    const int sys = errno;
    if (err == -NLE_FAILURE && sys != 0) return errno_error("open a netlink socket", sys);
    return nl_error("netlink connect", err);
  }
  return sk;
}

}  // namespace kib::netns
