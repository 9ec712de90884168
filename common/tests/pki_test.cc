#include "common/pki.h"

#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include <gtest/gtest.h>
#include <openssl/bio.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

namespace tfjob::pki {
namespace {

struct X509Free {
  void operator()(X509* p) const { X509_free(p); }
};
using Cert = std::unique_ptr<X509, X509Free>;

Cert Load(const std::string& pem) {
  BIO* b = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  Cert c(PEM_read_bio_X509(b, nullptr, nullptr, nullptr));
  BIO_free(b);
  return c;
}

// X509_V_OK when `leaf` chains to `ca` (and only to it) for `purpose`.
int Verify(const std::string& ca_pem, const std::string& leaf_pem, int purpose) {
  Cert ca = Load(ca_pem), leaf = Load(leaf_pem);
  if (!ca || !leaf) return -1;
  X509_STORE* store = X509_STORE_new();
  X509_STORE_add_cert(store, ca.get());
  X509_STORE_CTX* ctx = X509_STORE_CTX_new();
  X509_STORE_CTX_init(ctx, store, leaf.get(), nullptr);
  X509_STORE_CTX_set_purpose(ctx, purpose);
  const int ok = X509_verify_cert(ctx);
  const int err = ok == 1 ? X509_V_OK : X509_STORE_CTX_get_error(ctx);
  X509_STORE_CTX_free(ctx);
  X509_STORE_free(store);
  return err;
}

TEST(PkiTest, TheTaskCertificateChainsToItsJobsCaForServerAndClient) {
  auto p = NewJobPki("mnist");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(Verify(p->ca_pem, p->cert_pem, X509_PURPOSE_SSL_SERVER), X509_V_OK);
  EXPECT_EQ(Verify(p->ca_pem, p->cert_pem, X509_PURPOSE_SSL_CLIENT), X509_V_OK);
  Cert leaf = Load(p->cert_pem);
  ASSERT_TRUE(leaf);
  EXPECT_EQ(X509_check_host(leaf.get(), kTaskServerName, 0, 0, nullptr), 1);
  EXPECT_NE(X509_check_host(leaf.get(), "mnist-worker-0", 0, 0, nullptr), 1);
  EXPECT_NE(p->key_pem.find("PRIVATE KEY"), std::string::npos);
  // The CA's key is not handed out: only its certificate.
  EXPECT_EQ(p->ca_pem.find("PRIVATE KEY"), std::string::npos);
}

TEST(PkiTest, AnotherJobsCertificateDoesNotVerify) {
  auto a = NewJobPki("a"), b = NewJobPki("a");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->ca_pem, b->ca_pem);
  EXPECT_NE(Verify(a->ca_pem, b->cert_pem, X509_PURPOSE_SSL_SERVER), X509_V_OK);
  EXPECT_NE(Verify(b->ca_pem, a->cert_pem, X509_PURPOSE_SSL_CLIENT), X509_V_OK);
}

TEST(PkiTest, WriteTlsDirWritesTheThreeFilesAndKeepsTheKeyPrivate) {
  char tmpl[] = "/tmp/pki_test.XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  auto p = NewJobPki("job");
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(WriteTlsDir(dir, *p).ok());
  auto read = [&](const char* f) {
    std::ifstream in(dir + "/" + f);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  EXPECT_EQ(read(kCaFile), p->ca_pem);
  EXPECT_EQ(read(kCertFile), p->cert_pem);
  EXPECT_EQ(read(kKeyFile), p->key_pem);
  struct stat st {};
  ASSERT_EQ(stat((dir + "/" + kKeyFile).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  const Status missing = WriteTlsDir(dir + "/no/such/dir", *p);
  EXPECT_EQ(missing.code(), Code::kUnavailable);
  EXPECT_NE(missing.message().find("no/such/dir/ca.crt"), std::string::npos) << missing;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tfjob::pki
