// clusterkv: command-line client of the ClusterKV gRPC service (talks gRPC
// only). Usage in client/options.cc (Usage()) and README.md.
#include <unistd.h>

#include <cstdio>
#include <iostream>

#include "absl/flags/usage.h"
#include "client/commands.h"
#include "client/options.h"
#include "client/rpc_client.h"

namespace {

int ReportError(const absl::Status& s) {
  std::cerr << "error: " << absl::StatusCodeToString(s.code()) << ": "
            << s.message() << ckv::client::DescribeErrorDetails(s) << std::endl;
  return s.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(ckv::client::Usage());
  auto cl = ckv::client::ParseCommandLine(argc, argv);
  if (!cl.ok()) return ReportError(cl.status());
  if (cl->help || (!cl->args.empty() && cl->args[0] == "help")) {
    std::cout << ckv::client::Usage();
    return 0;
  }
  const ckv::client::Io io{std::cout, std::cerr, isatty(STDERR_FILENO) == 1};
  auto code = ckv::client::RunCommand(cl->args, cl->options, io);
  if (!code.ok()) return ReportError(code.status());
  return *code;
}
