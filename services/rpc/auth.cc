#include "services/rpc/auth.h"

#include <fstream>
#include <sstream>

namespace tfjob::rpc {

StatusOr<Credentials> CredentialsFromEnv(const EnvLookup& env) {
  Credentials c;
  if (auto t = env(kTokenEnv); t && !t->empty()) {
    c.token = *t;
  } else if (auto f = env(kTokenFileEnv); f && !f->empty()) {
    std::ifstream in(*f);
    if (!in) return InvalidArgument(std::string(kTokenFileEnv) + ": cannot read \"" + *f + "\"");
    std::stringstream ss;
    ss << in.rdbuf();
    c.token = ss.str();
    while (!c.token.empty() && (c.token.back() == '\n' || c.token.back() == '\r' || c.token.back() == ' ')) {
      c.token.pop_back();
    }
    if (c.token.empty()) return InvalidArgument(std::string(kTokenFileEnv) + ": \"" + *f + "\" is empty");
  }
  if (c.enabled() && c.token.size() < 16) {
    return InvalidArgument("the task token (" + std::string(kTokenEnv) + " or " + kTokenFileEnv +
                           ") is shorter than 16 characters");
  }
  ASSIGN_OR_RETURN(c.tls, tls::Config::FromEnv(env));
  return c;
}

void Attach(grpc::ClientContext& ctx, const Credentials& c) {
  if (c.enabled()) ctx.AddMetadata(kTokenMetadata, c.token);
}

grpc::Status Authenticate(const grpc::ServerContext& ctx, const Credentials& c) {
  if (!c.enabled()) return grpc::Status::OK;
  const auto& md = ctx.client_metadata();
  auto it = md.find(kTokenMetadata);
  if (it != md.end() && TokenMatches(std::string_view(it->second.data(), it->second.size()), c.token)) {
    return grpc::Status::OK;
  }
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "missing or wrong task token (x-tfjob-token)");
}

}  // namespace tfjob::rpc
