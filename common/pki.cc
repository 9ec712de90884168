#include "common/pki.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
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

Status Fail(const std::string& step) { return Internal("PKI: " + step + " failed"); }

constexpr long kTenYears = 10L * 366 * 24 * 3600;

StatusOr<std::string> Pem(const std::function<int(BIO*)>& write, const std::string& what) {
  Bio b(BIO_new(BIO_s_mem()));
  if (!b || write(b.get()) != 1) return Fail(what + " PEM");
  char* data = nullptr;
  const long n = BIO_get_mem_data(b.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

Status AddExt(X509* cert, X509* issuer, const std::string& name, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_nconf(nullptr, &ctx, name.c_str(), value.c_str());
  if (!ext) return Fail("extension " + name + "=" + value);
  const int ok = X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  return ok == 1 ? Status::Ok() : Fail("extension " + name + "=" + value);
}

StatusOr<Key> LoadKey(const std::string& pem) {
  Bio b(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  Key k(b ? PEM_read_bio_PrivateKey(b.get(), nullptr, nullptr, nullptr) : nullptr);
  if (!k) return Fail("loading the issuer's key");
  return k;
}

StatusOr<Cert> LoadCert(const std::string& pem) {
  Bio b(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  Cert c(b ? PEM_read_bio_X509(b.get(), nullptr, nullptr, nullptr) : nullptr);
  if (!c) return Fail("loading the issuer's certificate");
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

StatusOr<KeyPair> Issue(const std::string& cn, const std::vector<std::pair<std::string, std::string>>& extensions,
                        const KeyPair* issuer, long not_before_s, long not_after_s) {
  Key key(EVP_EC_gen("P-256"));
  if (!key) return Fail("EC key generation");
  Key issuer_key;
  Cert issuer_cert;
  if (issuer) {
    ASSIGN_OR_RETURN(issuer_key, LoadKey(issuer->key_pem));
    ASSIGN_OR_RETURN(issuer_cert, LoadCert(issuer->cert_pem));
  }
  Cert c(X509_new());
  Bn serial(BN_new());
  if (!c || !serial || BN_rand(serial.get(), 127, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) != 1 ||
      !BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(c.get()))) {
    return Fail("serial number");
  }
  X509_set_version(c.get(), 2);
  X509_gmtime_adj(X509_getm_notBefore(c.get()), not_before_s);
  X509_gmtime_adj(X509_getm_notAfter(c.get()), not_after_s);
  X509_set_pubkey(c.get(), key.get());
  X509_NAME* name = X509_get_subject_name(c.get());
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  X509_set_issuer_name(c.get(), issuer ? X509_get_subject_name(issuer_cert.get()) : name);
  for (const auto& [ext, value] : extensions)
    RETURN_IF_ERROR(AddExt(c.get(), issuer ? issuer_cert.get() : c.get(), ext, value));
  if (X509_sign(c.get(), issuer ? issuer_key.get() : key.get(), EVP_sha256()) <= 0) return Fail("signing " + cn);
  KeyPair out;
  ASSIGN_OR_RETURN(out.cert_pem, Pem([&](BIO* b) { return PEM_write_bio_X509(b, c.get()); }, "certificate"));
  ASSIGN_OR_RETURN(
      out.key_pem,
      Pem([&](BIO* b) { return PEM_write_bio_PrivateKey(b, key.get(), nullptr, nullptr, 0, nullptr, nullptr); },
          "private key"));
  return out;
}

StatusOr<JobPki> NewJobPki(std::string_view job) {
  const std::string name(job.empty() ? "tfjob" : job);
  // Valid from an hour ago, for clocks a little behind this one.
  ASSIGN_OR_RETURN(KeyPair ca, Issue("tfjob CA " + name,
                                     {{"basicConstraints", "critical,CA:TRUE,pathlen:0"},
                                      {"keyUsage", "critical,keyCertSign,cRLSign"},
                                      {"subjectKeyIdentifier", "hash"}},
                                     nullptr, -3600, kTenYears));
  ASSIGN_OR_RETURN(KeyPair task, Issue(name,
                                       {{"basicConstraints", "critical,CA:FALSE"},
                                        {"keyUsage", "critical,digitalSignature"},
                                        {"extendedKeyUsage", "serverAuth,clientAuth"},
                                        {"subjectAltName", std::string("DNS:") + kTaskServerName},
                                        {"authorityKeyIdentifier", "keyid:always"}},
                                       &ca, -3600, kTenYears));
  // The CA's key goes out of scope here: only its certificate is kept.
  return JobPki{ca.cert_pem, task.cert_pem, task.key_pem};
}

StatusOr<std::unique_ptr<TempTlsDir>> TempTlsDir::Make(std::string_view job) {
  // TMPDIR, else /tmp: the standard library reads the variable.
  std::error_code ec;
  std::filesystem::path tmp = std::filesystem::temp_directory_path(ec);
  if (ec) tmp = "/tmp";
  std::string path = (tmp / "tfjob-tls.XXXXXX").string();
  if (!mkdtemp(path.data())) {
    return Unavailable("cannot make a directory for the TLS material: " + std::string(std::strerror(errno)));
  }
  std::unique_ptr<TempTlsDir> d(new TempTlsDir(path));  // removed again if what follows fails
  ASSIGN_OR_RETURN(JobPki pem, NewJobPki(job));
  RETURN_IF_ERROR(WriteTlsDir(path, pem));
  return d;
}

TempTlsDir::~TempTlsDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

Status WriteTlsDir(const std::string& dir, const JobPki& pki) {
  RETURN_IF_ERROR(WriteFile(dir + "/" + kCaFile, pki.ca_pem, 0644));
  RETURN_IF_ERROR(WriteFile(dir + "/" + kCertFile, pki.cert_pem, 0644));
  return WriteFile(dir + "/" + kKeyFile, pki.key_pem, 0600);
}

}  // namespace tfjob::pki
