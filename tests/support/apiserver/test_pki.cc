#include "tests/support/apiserver/test_pki.h"

#include <atomic>
#include <memory>
#include <utility>
#include <vector>

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

namespace tfjob::testing {
namespace {

template <typename T, void (*F)(T*)>
struct Deleter {
  void operator()(T* p) const { F(p); }
};
using Key = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY, EVP_PKEY_free>>;
using Cert = std::unique_ptr<X509, Deleter<X509, X509_free>>;
using Bio = std::unique_ptr<BIO, Deleter<BIO, BIO_free_all>>;

Status Fail(const std::string& step) { return Internal("test PKI: " + step + " failed"); }

StatusOr<Key> NewKey() {
  Key k(EVP_EC_gen("P-256"));
  if (!k) return Fail("EC key generation");
  return k;
}

std::string ToPem(const Bio& b) {
  char* data = nullptr;
  const long n = BIO_get_mem_data(b.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

StatusOr<std::string> KeyPem(EVP_PKEY* k) {
  Bio b(BIO_new(BIO_s_mem()));
  if (!b || PEM_write_bio_PrivateKey(b.get(), k, nullptr, nullptr, 0, nullptr, nullptr) != 1) return Fail("key PEM");
  return ToPem(b);
}

StatusOr<std::string> CertPem(X509* c) {
  Bio b(BIO_new(BIO_s_mem()));
  if (!b || PEM_write_bio_X509(b.get(), c) != 1) return Fail("certificate PEM");
  return ToPem(b);
}

Status AddExt(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  if (!ext) return Fail(std::string("extension ") + value);
  const int ok = X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  return ok == 1 ? Status::Ok() : Fail(std::string("extension ") + value);
}

// Signs `key`'s certificate with CN `cn` by `issuer` (self-signed when null).
StatusOr<Cert> Issue(EVP_PKEY* key, const std::string& cn, X509* issuer, EVP_PKEY* issuer_key,
                     const std::vector<std::pair<int, const char*>>& extensions) {
  static std::atomic<long> serial{1};
  Cert c(X509_new());
  if (!c) return Fail("X509_new");
  X509_set_version(c.get(), 2);
  ASN1_INTEGER_set(X509_get_serialNumber(c.get()), serial.fetch_add(1));
  X509_gmtime_adj(X509_getm_notBefore(c.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(c.get()), 24 * 3600);
  X509_set_pubkey(c.get(), key);
  X509_NAME* name = X509_get_subject_name(c.get());
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  X509_set_issuer_name(c.get(), issuer ? X509_get_subject_name(issuer) : name);
  for (const auto& [nid, value] : extensions) RETURN_IF_ERROR(AddExt(c.get(), issuer ? issuer : c.get(), nid, value));
  if (X509_sign(c.get(), issuer_key ? issuer_key : key, EVP_sha256()) <= 0) return Fail("signing " + cn);
  return c;
}

StatusOr<Key> LoadKey(const std::string& pem) {
  Bio b(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  Key k(PEM_read_bio_PrivateKey(b.get(), nullptr, nullptr, nullptr));
  if (!k) return Fail("loading the CA key");
  return k;
}

StatusOr<Cert> LoadCert(const std::string& pem) {
  Bio b(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  Cert c(PEM_read_bio_X509(b.get(), nullptr, nullptr, nullptr));
  if (!c) return Fail("loading the CA certificate");
  return c;
}

StatusOr<KeyPair> Leaf(const KeyPair& ca, const std::string& cn,
                       const std::vector<std::pair<int, const char*>>& extensions) {
  ASSIGN_OR_RETURN(Key ca_key, LoadKey(ca.key_pem));
  ASSIGN_OR_RETURN(Cert ca_cert, LoadCert(ca.cert_pem));
  ASSIGN_OR_RETURN(Key key, NewKey());
  ASSIGN_OR_RETURN(Cert cert, Issue(key.get(), cn, ca_cert.get(), ca_key.get(), extensions));
  KeyPair out;
  ASSIGN_OR_RETURN(out.cert_pem, CertPem(cert.get()));
  ASSIGN_OR_RETURN(out.key_pem, KeyPem(key.get()));
  return out;
}

}  // namespace

StatusOr<TestPki> TestPki::Create(const std::string& ca_name) {
  ASSIGN_OR_RETURN(Key key, NewKey());
  ASSIGN_OR_RETURN(Cert cert, Issue(key.get(), ca_name, nullptr, nullptr,
                                    {{NID_basic_constraints, "critical,CA:TRUE"},
                                     {NID_key_usage, "critical,keyCertSign,cRLSign"},
                                     {NID_subject_key_identifier, "hash"}}));
  TestPki pki;
  ASSIGN_OR_RETURN(pki.ca_.cert_pem, CertPem(cert.get()));
  ASSIGN_OR_RETURN(pki.ca_.key_pem, KeyPem(key.get()));
  return pki;
}

StatusOr<KeyPair> TestPki::Server() const {
  return Leaf(ca_, "127.0.0.1",
              {{NID_basic_constraints, "critical,CA:FALSE"},
               {NID_key_usage, "critical,digitalSignature,keyEncipherment"},
               {NID_ext_key_usage, "serverAuth"},
               {NID_subject_alt_name, "IP:127.0.0.1,DNS:localhost"}});
}

StatusOr<KeyPair> TestPki::Client(const std::string& user) const {
  return Leaf(ca_, user,
              {{NID_basic_constraints, "critical,CA:FALSE"},
               {NID_key_usage, "critical,digitalSignature,keyEncipherment"},
               {NID_ext_key_usage, "clientAuth"}});
}

}  // namespace tfjob::testing
