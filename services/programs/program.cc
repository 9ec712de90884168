#include "services/programs/program.h"

#include <ostream>

#include "services/programs/programs.h"

namespace tfjob::programs {

std::shared_ptr<ps::PsClient> ChiefContext::PsClientFor(size_t i) const {
  ps::ClientOptions o;
  o.retry.total_timeout = connect_timeout;
  o.credentials = credentials;
  return std::make_shared<ps::PsClient>(ps_addresses[i], o);
}

std::vector<std::shared_ptr<ps::PsClient>> ChiefContext::PsClients() const {
  std::vector<std::shared_ptr<ps::PsClient>> out;
  for (size_t i = 0; i < ps_addresses.size(); ++i) out.push_back(PsClientFor(i));
  return out;
}

int Program::RunCollective(const std::vector<std::string>&, const CollectiveContext& ctx) {
  return ReportError(InvalidArgument("TF_CONFIG: program \"" + name() +
                                     "\" needs parameter servers, but the cluster has no \"ps\" tasks"),
                     *ctx.err);
}

int Program::RunEvaluator(const std::vector<std::string>&, const EvaluatorContext& ctx) {
  return ReportError(InvalidArgument("TF_CONFIG: program \"" + name() + "\" has no evaluator role"), *ctx.err);
}

ProgramList BuiltinPrograms() { return {MakeCounter(), MakeFit()}; }

int ExitCodeFor(const Status& s) {
  switch (s.code()) {
    case Code::kOk: return 0;
    case Code::kInvalidArgument:
    case Code::kNotFound:
    case Code::kDataLoss:
    case Code::kOutOfRange:
    case Code::kFailedPrecondition:
    case Code::kAlreadyExists:
      return 2;
    default:
      return 1;
  }
}

int ReportError(const Status& s, std::ostream& err) {
  err << "tfjob-runtime: error: " << s.message() << std::endl;
  return ExitCodeFor(s);
}

}  // namespace tfjob::programs
