#include "common/pki.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

namespace tfjob::pki {
namespace {

template <typename T, void (*F)(T*)>
struct Deleter {
  void operator()(T* p) const { F(p); }
};
using Key = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY, EVP_PKEY_free>>;
using Cert = std::unique_ptr<X509, Deleter<X509, X509_free>>;
using Bio = std::unique_ptr<BIO, Deleter<BIO, BIO_free_all>>;
using Bn = std::unique_ptr<BIGNUM, Deleter<BIGNUM, BN_free>>;

Status Fail(const std::string& step) { return Internal("job PKI: " + step + " failed"); }

constexpr long kTenYears = 10L * 366 * 24 * 3600;

StatusOr<std::string> Pem(const std::function<int(BIO*)>& write, const std::string& what) {
  Bio b(BIO_new(BIO_s_mem()));
  if (!b || write(b.get()) != 1) return Fail(what + " PEM");
  char* data = nullptr;
  const long n = BIO_get_mem_data(b.get(), &data);
  return std::string(data, static_cast<size_t>(n));
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

// A certificate for `key` with CN `cn`, signed by `issuer_key` (self-signed
// when `issuer` is null). Serial numbers are 128 random bits, as RFC 5280
// advises for CAs that may meet each other's certificates.
StatusOr<Cert> Issue(EVP_PKEY* key, const std::string& cn, X509* issuer, EVP_PKEY* issuer_key,
                     const std::vector<std::pair<int, const char*>>& extensions) {
  Cert c(X509_new());
  if (!c) return Fail("X509_new");
  Bn serial(BN_new());
  if (!serial || BN_rand(serial.get(), 127, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) != 1 ||
      !BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(c.get()))) {
    return Fail("serial number");
  }
  X509_set_version(c.get(), 2);
  X509_gmtime_adj(X509_getm_notBefore(c.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(c.get()), kTenYears);
  X509_set_pubkey(c.get(), key);
  X509_NAME* name = X509_get_subject_name(c.get());
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  X509_set_issuer_name(c.get(), issuer ? X509_get_subject_name(issuer) : name);
  for (const auto& [nid, value] : extensions) RETURN_IF_ERROR(AddExt(c.get(), issuer ? issuer : c.get(), nid, value));
  if (X509_sign(c.get(), issuer_key ? issuer_key : key, EVP_sha256()) <= 0) return Fail("signing " + cn);
  return c;
}

Status WriteFile(const std::string& path, const std::string& text, mode_t mode) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return Unavailable("cannot write " + path + ": " + std::strerror(errno));
  size_t off = 0;
  while (off < text.size()) {
    const ssize_t w = ::write(fd, text.data() + off, text.size() - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const int e = errno;
      ::close(fd);
      return Unavailable("cannot write " + path + ": " + std::strerror(e));
    }
    off += static_cast<size_t>(w);
  }
  fchmod(fd, mode);  // O_CREAT's mode is filtered by the umask; an existing file keeps its own
  if (::close(fd) != 0) return Unavailable("cannot write " + path + ": " + std::strerror(errno));
  return Status::Ok();
}

}  // namespace

StatusOr<JobPki> NewJobPki(std::string_view job) {
  Key ca_key(EVP_EC_gen("P-256"));
  Key key(EVP_EC_gen("P-256"));
  if (!ca_key || !key) return Fail("EC key generation");
  const std::string name(job.empty() ? "tfjob" : job);
  ASSIGN_OR_RETURN(Cert ca, Issue(ca_key.get(), "tfjob CA " + name, nullptr, nullptr,
                                  {{NID_basic_constraints, "critical,CA:TRUE,pathlen:0"},
                                   {NID_key_usage, "critical,keyCertSign,cRLSign"},
                                   {NID_subject_key_identifier, "hash"}}));
  const std::string san = std::string("DNS:") + kTaskServerName;
  ASSIGN_OR_RETURN(Cert cert, Issue(key.get(), name, ca.get(), ca_key.get(),
                                    {{NID_basic_constraints, "critical,CA:FALSE"},
                                     {NID_key_usage, "critical,digitalSignature"},
                                     {NID_ext_key_usage, "serverAuth,clientAuth"},
                                     {NID_subject_alt_name, san.c_str()},
                                     {NID_authority_key_identifier, "keyid:always"}}));
  JobPki out;
  ASSIGN_OR_RETURN(out.ca_pem, Pem([&](BIO* b) { return PEM_write_bio_X509(b, ca.get()); }, "CA certificate"));
  ASSIGN_OR_RETURN(out.cert_pem, Pem([&](BIO* b) { return PEM_write_bio_X509(b, cert.get()); }, "certificate"));
  ASSIGN_OR_RETURN(out.key_pem, Pem([&](BIO* b) {
                     return PEM_write_bio_PrivateKey(b, key.get(), nullptr, nullptr, 0, nullptr, nullptr);
                   }, "private key"));
  return out;
}

Status WriteTlsDir(const std::string& dir, const JobPki& pki) {
  RETURN_IF_ERROR(WriteFile(dir + "/" + kCaFile, pki.ca_pem, 0644));
  RETURN_IF_ERROR(WriteFile(dir + "/" + kCertFile, pki.cert_pem, 0644));
  return WriteFile(dir + "/" + kKeyFile, pki.key_pem, 0600);
}

}  // namespace tfjob::pki
