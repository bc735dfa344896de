// Builds the RpcClient of a command from ClientOptions: reads the TLS PEM
// files and the token file into a ChannelSecurity.
#ifndef CLUSTERKV_CLIENT_CONNECT_H_
#define CLUSTERKV_CLIENT_CONNECT_H_

#include <memory>

#include "absl/status/statusor.h"
#include "client/options.h"
#include "client/rpc_client.h"

namespace ckv::client {

// INVALID_ARGUMENT naming the flag when a file cannot be read, or when the
// token file's first line is empty. The token never appears in a message.
absl::StatusOr<ChannelSecurity> ChannelSecurityFrom(const ClientOptions& o);

absl::StatusOr<std::unique_ptr<RpcClient>> ConnectFrom(const ClientOptions& o);

}  // namespace ckv::client

#endif  // CLUSTERKV_CLIENT_CONNECT_H_
