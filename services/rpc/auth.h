// Task-to-task authentication: every task of one job shares a random token
// (the operator keeps it in a Secret owned by the TFJob; `tfjob run` and
// `tfjob-runtime local` make one per run). Every runtime RPC carries it as
// metadata "x-tfjob-token", and every service checks it before doing
// anything: a call without the right token is UNAUTHENTICATED and changes
// nothing. The collective ring sends it in its hello (group.h). TF_CONFIG is
// untouched: the token comes from the environment.
//
//   TFJOB_AUTH_TOKEN        the token itself
//   TFJOB_AUTH_TOKEN_FILE   a file holding it (a mounted Secret key)
//
// With neither, credentials are empty: calls carry no token and servers
// accept any caller (what a single process with an in-process cluster, or a
// cluster started by hand without one, gets).
//
//   TFJOB_TLS_DIR           the job's CA and certificate (tls/tls.h): every
//                           connection, gRPC included, is then mutual TLS
//                           and only the job's tasks get through at all
//
// Thread-safety: plain values and reentrant functions. Failure: a token file
// that cannot be read, or a token that is too short, is INVALID_ARGUMENT.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include <grpcpp/grpcpp.h>

#include "common/status.h"
#include "common/token.h"
#include "services/tls/tls.h"

namespace tfjob::rpc {

using ::tfjob::kTokenEnv;  // common/token.h
using ::tfjob::kTokenFileEnv;
inline constexpr const char* kTokenMetadata = "x-tfjob-token";

struct Credentials {
  std::string token;                       // "" -> no authentication
  std::shared_ptr<const tls::Config> tls;  // null -> plain TCP
  bool enabled() const { return !token.empty(); }
};

using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
// Reads TFJOB_AUTH_TOKEN, else TFJOB_AUTH_TOKEN_FILE (trailing whitespace
// trimmed), and TFJOB_TLS_DIR. A token shorter than 16 characters is
// refused: it could be guessed. TLS files that are missing or do not belong
// together are INVALID_ARGUMENT naming the file.
StatusOr<Credentials> CredentialsFromEnv(const EnvLookup& env);

// NewToken and TokenMatches are in common/token.h.
using ::tfjob::NewToken;
using ::tfjob::TokenMatches;

// Client side: adds the token to a call.
void Attach(grpc::ClientContext& ctx, const Credentials& c);
// Server side: OK when the call carries the token (or none is required);
// UNAUTHENTICATED otherwise, saying nothing about the expected token.
grpc::Status Authenticate(const grpc::ServerContext& ctx, const Credentials& c);

}  // namespace tfjob::rpc
