// A throwaway PKI for TLS tests, made in memory (common/pki.h): a CA, a server
// certificate for 127.0.0.1 / localhost, and client certificates whose
// subject CN is the user name a server that checks client certificates
// reports (tests/support/fault_proxy.h). EC P-256 keys,
// valid from an hour ago for a day; nothing is written to disk.
// Thread-safety: reentrant. Failure: INTERNAL naming the OpenSSL step.
#pragma once

#include <string>

#include "common/status.h"

namespace tfjob::testing {

struct KeyPair {
  std::string cert_pem;
  std::string key_pem;
};

class TestPki {
 public:
  // A fresh CA named `ca_name`.
  static StatusOr<TestPki> Create(const std::string& ca_name = "tfjob test CA");

  const std::string& ca_pem() const { return ca_.cert_pem; }
  // A server certificate for 127.0.0.1 and localhost, signed by this CA.
  StatusOr<KeyPair> Server() const;
  // A client certificate with subject CN=`user`, signed by this CA.
  StatusOr<KeyPair> Client(const std::string& user) const;

 private:
  KeyPair ca_;
};

}  // namespace tfjob::testing
