// `clusterkv session create|prefill|ask|fork|info|close|list`.
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "client/commands.h"
#include "client/json_output.h"

namespace ckv::client {
namespace {

absl::Status UsageError(const std::string& message) {
  return absl::InvalidArgumentError(
      absl::StrCat("session ", message, " (see clusterkv --help)"));
}

std::string FormatUnixMs(int64_t ms) {
  if (ms <= 0) return "-";
  return absl::FormatTime("%Y-%m-%d %H:%M:%S", absl::FromUnixMillis(ms),
                          absl::LocalTimeZone());
}

void PrintSessionInfo(const pb::SessionInfo& s, const Io& io) {
  io.out << "session:  " << s.session_id();
  if (!s.parent_session_id().empty()) {
    io.out << " (fork of " << s.parent_session_id() << ")";
  }
  io.out << "\n"
         << absl::StrFormat("tokens:   %d (%d clustered, %d segments)%s\n",
                            s.tokens(), s.clustered_tokens(), s.segments(),
                            s.busy() ? ", BUSY" : "")
         << absl::StrFormat("memory:   host %s (%s shared), device %s\n",
                            FormatBytes(s.memory().host_bytes()),
                            FormatBytes(s.memory().host_shared_bytes()),
                            FormatBytes(s.memory().device_bytes()))
         << absl::StrFormat(
                "cache:    %d lookups, %d hits, %d misses, hit rate %.3f, "
                "%s host->device\n",
                s.cache().lookups(), s.cache().hits(), s.cache().misses(),
                s.cache().hit_rate(), FormatBytes(s.cache().h2d_bytes()))
         << "kv:       " << KeyValues(s.kv()) << "\n"
         << "sampling: " << KeyValues(s.sampling()) << "\n"
         << absl::StrFormat("idle TTL: %d s, created %s, last used %s\n",
                            s.idle_ttl_seconds(),
                            FormatUnixMs(s.created_unix_ms()),
                            FormatUnixMs(s.last_used_unix_ms()));
}

void PrintSessionList(const pb::ListSessionsResponse& list, const Io& io) {
  io.out << absl::StrFormat("%-36s %10s %8s %12s %5s  %s\n", "SESSION",
                            "TOKENS", "SEGMENTS", "HOST", "BUSY", "PARENT");
  for (const pb::SessionInfo& s : list.sessions()) {
    io.out << absl::StrFormat(
        "%-36s %10d %8d %12s %5s  %s\n", s.session_id(), s.tokens(),
        s.segments(), FormatBytes(s.memory().host_bytes()),
        s.busy() ? "yes" : "no",
        s.parent_session_id().empty() ? "-" : s.parent_session_id());
  }
}

// Prints a SessionInfo result: the id (human) or the whole message (JSON).
absl::StatusOr<int> PrintSessionResult(
    const absl::StatusOr<pb::SessionInfo>& info, bool id_only,
    const ClientOptions& o, const Io& io) {
  if (!info.ok()) return info.status();
  if (o.json) {
    PrintJson(io, ProtoToJson(*info));
  } else if (id_only) {
    io.out << info->session_id() << std::endl;
  } else {
    PrintSessionInfo(*info, io);
  }
  return 0;
}

absl::StatusOr<int> Prefill(RpcClient& client, const std::string& id,
                            const ClientOptions& o, const Io& io) {
  if (o.file.empty() == o.text.empty()) {
    return UsageError("prefill: give exactly one of --file and --text");
  }
  std::unique_ptr<std::istream> in;
  if (!o.file.empty()) {
    auto file = OpenFile(o.file);
    if (!file.ok()) return file.status();
    in = *std::move(file);
  } else {
    in = std::make_unique<std::istringstream>(o.text);
  }
  auto summary = PrefillWithProgress(client, id, *in, o, io);
  if (!summary.ok()) return summary.status();
  if (o.json) {
    PrintJson(io, {{"session_id", id}, {"summary", ProtoToJson(*summary)}});
  } else {
    io.out << PrefillSummaryLine(*summary) << std::endl;
  }
  return 0;
}

absl::StatusOr<int> Ask(RpcClient& client, const std::string& id,
                        const ClientOptions& o, const Io& io) {
  if (o.questions.size() != 1) {
    return UsageError("ask: give exactly one --question");
  }
  pb::DecodeRequest request;
  request.set_session_id(id);
  request.set_text(FormatQuestion(o.question_format, o.questions[0]));
  *request.mutable_sampling() = BuildSampling(o.sampling);
  return StreamDecodeOutput(
      [&](const TokenCallback& on_token) {
        return client.Decode(request, on_token);
      },
      "ask", {{"session_id", id}, {"question", o.questions[0]}}, o, io);
}

absl::StatusOr<int> Close(RpcClient& client, const std::string& id,
                          const ClientOptions& o, const Io& io) {
  auto closed = client.CloseSession(id);
  if (!closed.ok()) return closed.status();
  if (o.json) {
    PrintJson(io, {{"session_id", id},
                   {"freed_host_bytes", closed->freed_host_bytes()}});
  } else {
    io.out << "closed " << id << " (freed "
           << FormatBytes(closed->freed_host_bytes()) << " host memory)"
           << std::endl;
  }
  return 0;
}

absl::StatusOr<int> List(RpcClient& client, const ClientOptions& o,
                         const Io& io) {
  auto list = client.ListSessions();
  if (!list.ok()) return list.status();
  if (o.json) {
    PrintJson(io, ProtoToJson(*list));
  } else {
    PrintSessionList(*list, io);
  }
  return 0;
}

// Subcommands that take a session ID.
absl::StatusOr<int> RunWithId(RpcClient& client, const std::string& sub,
                              const std::string& id, const ClientOptions& o,
                              const Io& io) {
  if (sub == "prefill") return Prefill(client, id, o, io);
  if (sub == "ask") return Ask(client, id, o, io);
  if (sub == "fork") {
    return PrintSessionResult(client.ForkSession(id), true, o, io);
  }
  if (sub == "info") {
    return PrintSessionResult(client.GetSession(id), false, o, io);
  }
  if (sub == "cancel") {
    auto r = client.CancelSession(id);
    if (!r.ok()) return r.status();
    if (o.json) {
      PrintJson(io, {{"session_id", id}, {"cancelled", r->cancelled()}});
    } else {
      io.out << (r->cancelled() ? "cancelled the call on " : "idle: ") << id
             << std::endl;
    }
    return 0;
  }
  return Close(client, id, o, io);
}

}  // namespace

absl::StatusOr<int> RunSession(RpcClient& client,
                               const std::vector<std::string>& args,
                               const ClientOptions& o, const Io& io) {
  if (args.size() < 2) return UsageError("needs a subcommand");
  const std::string& sub = args[1];
  const bool takes_id = sub == "prefill" || sub == "ask" || sub == "fork" ||
                        sub == "info" || sub == "close" || sub == "cancel";
  if (!takes_id && sub != "create" && sub != "list") {
    return UsageError(absl::StrCat("unknown subcommand '", sub, "'"));
  }
  const size_t want = takes_id ? 3 : 2;
  if (args.size() != want) {
    return UsageError(absl::StrCat(
        sub, takes_id ? ": needs exactly one ID" : ": takes no arguments"));
  }
  if (sub == "create") {
    return PrintSessionResult(client.CreateSession(BuildCreateSession(o)), true,
                              o, io);
  }
  if (sub == "list") return List(client, o, io);
  return RunWithId(client, sub, args[2], o, io);
}

}  // namespace ckv::client
