#include "tests/support/test_pki.h"

#include "common/pki.h"

namespace tfjob::testing {
namespace {

constexpr long kHour = 3600;

KeyPair From(const pki::KeyPair& k) { return KeyPair{k.cert_pem, k.key_pem}; }

}  // namespace

StatusOr<TestPki> TestPki::Create(const std::string& ca_name) {
  ASSIGN_OR_RETURN(pki::KeyPair ca, pki::Issue(ca_name,
                                               {{"basicConstraints", "critical,CA:TRUE"},
                                                {"keyUsage", "critical,keyCertSign,cRLSign"},
                                                {"subjectKeyIdentifier", "hash"}},
                                               nullptr, -kHour, 24 * kHour));
  TestPki pki;
  pki.ca_ = From(ca);
  return pki;
}

StatusOr<KeyPair> TestPki::Server() const {
  const pki::KeyPair ca{ca_.cert_pem, ca_.key_pem};
  ASSIGN_OR_RETURN(pki::KeyPair k, pki::Issue("127.0.0.1",
                                              {{"basicConstraints", "critical,CA:FALSE"},
                                               {"keyUsage", "critical,digitalSignature,keyEncipherment"},
                                               {"extendedKeyUsage", "serverAuth"},
                                               {"subjectAltName", "IP:127.0.0.1,DNS:localhost"}},
                                              &ca, -kHour, 24 * kHour));
  return From(k);
}

StatusOr<KeyPair> TestPki::Client(const std::string& user) const {
  const pki::KeyPair ca{ca_.cert_pem, ca_.key_pem};
  ASSIGN_OR_RETURN(pki::KeyPair k, pki::Issue(user,
                                              {{"basicConstraints", "critical,CA:FALSE"},
                                               {"keyUsage", "critical,digitalSignature,keyEncipherment"},
                                               {"extendedKeyUsage", "clientAuth"}},
                                              &ca, -kHour, 24 * kHour));
  return From(k);
}

}  // namespace tfjob::testing
