#pragma once
// Owners of the OpenSSL objects the agent holds (see c_ptr.h).
#include <openssl/bio.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "agent/common/c_ptr.h"

namespace kib {

using SslCtxPtr = CPtr<SSL_CTX_free>;
using SslPtr = CPtr<SSL_free>;
using SslSessionPtr = CPtr<SSL_SESSION_free>;
using BioPtr = CPtr<BIO_free>;
using X509Ptr = CPtr<X509_free>;
using X509StorePtr = CPtr<X509_STORE_free>;

}  // namespace kib
