// The clusterkv subcommands.
#ifndef CLUSTERKV_CLIENT_COMMANDS_H_
#define CLUSTERKV_CLIENT_COMMANDS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/command_util.h"
#include "client/options.h"
#include "client/rpc_client.h"

namespace ckv::client {

// Runs `args` (positional arguments: COMMAND [SUBCOMMAND] [ID]) and returns
// the exit code, or the error to report (exit 2 for INVALID_ARGUMENT, 1
// otherwise).
absl::StatusOr<int> RunCommand(const std::vector<std::string>& args,
                               const ClientOptions& o, const Io& io);

absl::StatusOr<int> RunGenerate(RpcClient& client, const ClientOptions& o,
                                const Io& io);
absl::StatusOr<int> RunQa(RpcClient& client, const ClientOptions& o,
                          const Io& io);
// args: ["session", SUBCOMMAND, ...].
absl::StatusOr<int> RunSession(RpcClient& client,
                               const std::vector<std::string>& args,
                               const ClientOptions& o, const Io& io);
absl::StatusOr<int> RunInfo(RpcClient& client, const ClientOptions& o,
                            const Io& io);
absl::StatusOr<int> RunTokenize(RpcClient& client, const ClientOptions& o,
                                const Io& io);
// args: ["detokenize", ID...].
absl::StatusOr<int> RunDetokenize(RpcClient& client,
                                  const std::vector<std::string>& args,
                                  const ClientOptions& o, const Io& io);
absl::StatusOr<int> RunHealth(RpcClient& client, const ClientOptions& o,
                              const Io& io);

}  // namespace ckv::client

#endif  // CLUSTERKV_CLIENT_COMMANDS_H_
