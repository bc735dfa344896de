// Unit tests of the clusterkv client's pure parts: UTF-8 chunking, labelled
// printing, progress formatting, health wire format, JSON and flags.
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/reflection.h"
#include "client/command_util.h"
#include "client/connect.h"
#include "client/json_output.h"
#include "client/options.h"
#include "client/progress.h"
#include "client/rpc_client.h"
#include "client/text_stream.h"
#include "common/flag_spelling.h"
#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"

namespace ckv::client {
namespace {

const std::string kEuro = "\xE2\x82\xAC";       // U+20AC, 3 bytes
const std::string kEmoji = "\xF0\x9F\x98\x80";  // U+1F600, 4 bytes

// grpc-status-details-bin as the server sends it for a limit rejection.
TEST(ErrorDetailsTest, FromGrpcKeepsErrorInfoAndRetryInfo) {
  google::rpc::Status details;
  details.set_code(8);
  details.set_message("max_sessions limit reached (2 sessions)");
  google::rpc::ErrorInfo info;
  info.set_reason("MAX_SESSIONS");
  info.set_domain("clusterkv.v1");
  (*info.mutable_metadata())["limit"] = "max_sessions";
  details.add_details()->PackFrom(info);
  google::rpc::RetryInfo retry;
  retry.mutable_retry_delay()->set_seconds(5);
  retry.mutable_retry_delay()->set_nanos(500000000);
  details.add_details()->PackFrom(retry);
  const absl::Status s =
      FromGrpc(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                            details.message(), details.SerializeAsString()));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(), details.message());
  const auto d = ErrorDetailsOf(s);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->reason, "MAX_SESSIONS");
  EXPECT_EQ(d->domain, "clusterkv.v1");
  EXPECT_EQ(d->metadata.at("limit"), "max_sessions");
  EXPECT_DOUBLE_EQ(d->retry_delay_seconds, 5.5);
  EXPECT_EQ(DescribeErrorDetails(s),
            " (reason MAX_SESSIONS, retry after 5.5 s)");
  const absl::Status plain =
      FromGrpc(grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown session"));
  EXPECT_FALSE(ErrorDetailsOf(plain).has_value());
  EXPECT_EQ(DescribeErrorDetails(plain), "");
}

TEST(Utf8Test, CompletePrefixLeavesOutIncompleteTail) {
  EXPECT_EQ(CompleteUtf8Prefix("abc"), 3u);
  EXPECT_EQ(CompleteUtf8Prefix("a" + kEuro), 4u);
  EXPECT_EQ(CompleteUtf8Prefix("a" + kEuro.substr(0, 2)), 1u);
  EXPECT_EQ(CompleteUtf8Prefix("a" + kEmoji.substr(0, 1)), 1u);
  EXPECT_EQ(CompleteUtf8Prefix("a" + kEmoji.substr(0, 3)), 1u);
  EXPECT_EQ(CompleteUtf8Prefix(kEmoji), 4u);
  EXPECT_EQ(CompleteUtf8Prefix(""), 0u);
}

TEST(Utf8Test, FindsInvalidBytes) {
  EXPECT_EQ(FindInvalidUtf8("ok " + kEuro + kEmoji), std::string::npos);
  EXPECT_EQ(FindInvalidUtf8("ab\xFF"), 2u);
  EXPECT_EQ(FindInvalidUtf8("a\xC0\x80"), 1u);               // overlong
  EXPECT_EQ(FindInvalidUtf8("\xED\xA0\x80"), 0u);            // surrogate
  EXPECT_EQ(FindInvalidUtf8("x" + kEuro.substr(0, 2)), 1u);  // truncated
}

TEST(Utf8ChunkReaderTest, ChunksEndOnCharacterBoundaries) {
  std::string text;
  for (int i = 0; i < 300; ++i) text += (i % 3 == 0) ? kEmoji : "a" + kEuro;
  std::istringstream in(text);
  Utf8ChunkReader reader(in, 7);
  std::string chunk, joined;
  int chunks = 0;
  while (true) {
    auto more = reader.Next(&chunk);
    ASSERT_TRUE(more.ok()) << more.status();
    if (!*more) break;
    ASSERT_LE(chunk.size(), 7u);
    ASSERT_EQ(FindInvalidUtf8(chunk), std::string::npos);
    joined += chunk;
    ++chunks;
  }
  EXPECT_EQ(joined, text);
  EXPECT_GT(chunks, 100);
  EXPECT_EQ(reader.bytes_read(), static_cast<int64_t>(text.size()));
}

TEST(Utf8ChunkReaderTest, RejectsInvalidUtf8) {
  std::istringstream in("hello \xFF world");
  Utf8ChunkReader reader(in, 64);
  std::string chunk;
  auto more = reader.Next(&chunk);
  EXPECT_EQ(more.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(LabelledPrinterTest, LabelsEveryLineAndKeepsCharactersWhole) {
  std::ostringstream out;
  LabelledPrinter p(out);
  p.Write(0, "Hello ");
  p.Write(1, "Bonjour " + kEuro.substr(0, 1));  // incomplete: held back
  p.Write(0, "world\nline2");
  p.Write(1, kEuro.substr(1) + "!");
  p.Finish(0);
  p.Finish(1);
  // Whole lines only: nothing interleaves inside a line.
  EXPECT_EQ(out.str(),
            "[q1] Hello world\n"
            "[q1] line2\n"
            "[q2] Bonjour " +
                kEuro + "!\n");
}

TEST(LabelledPrinterTest, LongLinesWrapAtASpaceOrCharacterBoundary) {
  std::ostringstream out;
  LabelledPrinter p(out);
  std::string words;
  while (words.size() < 100) words += "word ";
  p.Write(0, words);
  std::string euros;
  for (int i = 0; i < 40; ++i) euros += kEuro;  // 120 bytes, no spaces
  p.Write(1, euros);
  p.Finish(0);
  p.Finish(1);
  std::istringstream lines(out.str());
  std::string line;
  int n = 0;
  while (std::getline(lines, line)) {
    ++n;
    EXPECT_LE(line.size(), 5 + LabelledPrinter::kWrapBytes) << line;
    EXPECT_EQ(line.rfind("[q", 0), 0u) << line;
    if (line.rfind("[q2] ", 0) == 0) {
      EXPECT_EQ((line.size() - 5) % 3, 0u) << "a euro sign was split";
    }
  }
  EXPECT_GE(n, 4);
}

TEST(LabelledPrinterTest, IncompleteTailIsFlushedAtFinish) {
  std::ostringstream out;
  LabelledPrinter p(out);
  p.Write(2, "x" + kEmoji.substr(0, 2));
  EXPECT_EQ(out.str(), "");  // no whole line yet
  p.Finish(2);
  EXPECT_EQ(out.str(), "[q3] x" + kEmoji.substr(0, 2) + "\n");
}

TEST(ProgressTest, FormatsEta) {
  EXPECT_EQ(FormatEta(0), "0:00");
  EXPECT_EQ(FormatEta(65), "1:05");
  EXPECT_EQ(FormatEta(3723), "1:02:03");
  EXPECT_EQ(FormatEta(-1), "--:--");
}

TEST(ProgressTest, FormatsBarAndLine) {
  const ProgressSnapshot p{250, 1000, 500};
  EXPECT_EQ(FormatProgressBar(p, 8),
            "prefill [##......]  25%  250/1000 tok  500 tok/s  ETA 0:02");
  EXPECT_EQ(FormatProgressLine(p),
            "prefill: 25% (250/1000 tokens, 500 tok/s, ETA 0:02)");
  const ProgressSnapshot unknown{0, 0, 0};
  EXPECT_EQ(FormatProgressLine(unknown),
            "prefill: 0% (0/0 tokens, -- tok/s, ETA --:--)");
  const ProgressSnapshot done{10, 10, 0};
  EXPECT_EQ(FormatProgressBar(done, 4),
            "prefill [####] 100%  10/10 tok  -- tok/s  ETA 0:00");
}

TEST(ProgressTest, LinesModeReportsQuarters) {
  std::ostringstream err;
  ProgressReporter r(err, ProgressStyle::kLines);
  for (int done = 0; done <= 100; done += 10) r.Update(done, 100);
  r.Finish();
  const std::string s = err.str();
  EXPECT_EQ(std::count(s.begin(), s.end(), '\n'), 4) << s;
  EXPECT_NE(s.find("prefill: 30% (30/100"), std::string::npos) << s;
  EXPECT_NE(s.find("prefill: 100% (100/100"), std::string::npos) << s;
}

TEST(ProgressTest, BarModeRedrawsInPlace) {
  std::ostringstream err;
  ProgressReporter r(err, ProgressStyle::kBar);
  r.Update(5, 10);
  r.Update(10, 10);
  r.Finish();
  const std::string s = err.str();
  EXPECT_EQ(s.front(), '\r');
  EXPECT_EQ(s.back(), '\n');
  EXPECT_EQ(std::count(s.begin(), s.end(), '\n'), 1);
}

// proto/grpc/health/v1/health.proto against the public wire format:
// HealthCheckRequest{string service = 1}, HealthCheckResponse{enum status =
// 1}. (client_fake_server_test checks it against gRPC's own health service.)
TEST(HealthProtoTest, WireFormatIsTheStandardOne) {
  grpc::health::v1::HealthCheckRequest request;
  EXPECT_EQ(request.SerializeAsString(), "");
  request.set_service("ab");
  EXPECT_EQ(request.SerializeAsString(), std::string("\x0A\x02"
                                                     "ab"));
  grpc::health::v1::HealthCheckResponse response;
  ASSERT_TRUE(response.ParseFromString(std::string("\x08\x01")));
  EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  // Unknown fields are skipped.
  ASSERT_TRUE(response.ParseFromString(std::string("\x12\x01z\x08\x02")));
  EXPECT_EQ(response.status(),
            grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  EXPECT_FALSE(response.ParseFromString(std::string("\x12\x05z")));
  EXPECT_EQ(grpc::health::v1::Health::service_full_name(),
            std::string("grpc.health.v1.Health"));
}

TEST(HealthProtoTest, MapsEveryServingStatus) {
  using Proto = grpc::health::v1::HealthCheckResponse;
  EXPECT_EQ(FromHealthProto(Proto::UNKNOWN), ServingStatus::kUnknown);
  EXPECT_EQ(FromHealthProto(Proto::SERVING), ServingStatus::kServing);
  EXPECT_EQ(FromHealthProto(Proto::NOT_SERVING), ServingStatus::kNotServing);
  EXPECT_EQ(FromHealthProto(Proto::SERVICE_UNKNOWN),
            ServingStatus::kServiceUnknown);
  // A status added to the protocol after this client was built.
  EXPECT_EQ(FromHealthProto(static_cast<Proto::ServingStatus>(7)),
            ServingStatus::kUnknown);
}

TEST(JsonOutputTest, RendersPresenceNumbersAndEnums) {
  pb::DecodeSummary s;
  s.set_finish_reason(pb::FINISH_REASON_EOS);
  s.set_generated_tokens(int64_t{1} << 40);
  const nlohmann::json j = ProtoToJson(s);
  EXPECT_EQ(j["finish_reason"], "FINISH_REASON_EOS");
  EXPECT_EQ(j["generated_tokens"].get<int64_t>(), int64_t{1} << 40);
  EXPECT_EQ(j["text"], "");
  pb::SamplingParams p;
  p.set_top_k(5);
  p.add_stop("END");
  const nlohmann::json jp = ProtoToJson(p);
  EXPECT_FALSE(jp.contains("temperature"));  // unset optional
  EXPECT_EQ(jp["top_k"], 5);
  EXPECT_EQ(jp["stop"], nlohmann::json::array({"END"}));
  pb::SessionInfo info;
  EXPECT_TRUE(ProtoToJson(info)["memory"].is_object());
}

// common/flag_spelling.h, shared by every program.
TEST(FlagSpellingTest, RewritesNamesOnly) {
  const std::pair<std::string, std::string> cases[] = {
      {"--max-tokens=a-b", "--max_tokens=a-b"},
      {"-top-k", "-top_k"},
      {"--json", "--json"},
      {"--", "--"},
      {"-", "-"},
      {"", ""},
      {"-1e-5", "-1e-5"},
      {"--2-x", "--2-x"},
      {"text-with-dashes", "text-with-dashes"},
      {"--a-b=--c-d", "--a_b=--c-d"}};
  for (const auto& [in, want] : cases) {
    std::string arg = in;
    FlagNameToAbslSpelling(arg);
    EXPECT_EQ(arg, want) << in;
  }
  std::string a0 = "prog", a1 = "--dense-layers", a2 = "--",
              a3 = "--not-a-flag";
  char* argv[] = {a0.data(), a1.data(), a2.data(), a3.data()};
  DashesToUnderscores(4, argv);
  EXPECT_EQ(a1, "--dense_layers");
  EXPECT_EQ(a3, "--not-a-flag");  // positional after "--"
  EXPECT_EQ(DocumentedFlagName("max_host_kv_bytes"), "--max-host-kv-bytes");
}

// Parses like main() does; flag values are restored afterwards.
absl::StatusOr<CommandLine> Parse(std::vector<std::string> args) {
  absl::FlagSaver saver;
  args.insert(args.begin(), "clusterkv");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return ParseCommandLine(static_cast<int>(argv.size()), argv.data());
}

TEST(OptionsTest, ParsesDashedAndRepeatedFlags) {
  auto cl = Parse({"--json", "qa", "--doc", "d.txt", "--question", "a, b?",
                   "--question=second", "--max-tokens", "32", "--top-p=0.9",
                   "--stop", "END", "--policy", "clusterkv", "--chunk-kib", "8",
                   "--server=h:1"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  const ClientOptions& o = cl->options;
  EXPECT_EQ(cl->args, std::vector<std::string>({"qa"}));
  EXPECT_TRUE(o.json);
  EXPECT_EQ(o.doc, "d.txt");
  EXPECT_EQ(o.questions, std::vector<std::string>({"a, b?", "second"}));
  EXPECT_EQ(o.sampling.max_tokens, 32);
  EXPECT_FLOAT_EQ(*o.sampling.top_p, 0.9f);
  EXPECT_FALSE(o.sampling.temperature.has_value());
  EXPECT_EQ(o.sampling.stop, std::vector<std::string>({"END"}));
  EXPECT_EQ(o.kv.policy, "clusterkv");
  EXPECT_FALSE(o.kv.budget.has_value());
  EXPECT_EQ(o.chunk_bytes, 8u * 1024);
  EXPECT_EQ(o.server, "h:1");
}

TEST(OptionsTest, NegativeNumbersAreValuesNotFlagNames) {
  auto cl = Parse(
      {"--frequency-penalty", "-1e-3", "--presence-penalty=-2e-1", "info"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_FLOAT_EQ(*cl->options.sampling.frequency_penalty, -1e-3f);
  EXPECT_FLOAT_EQ(*cl->options.sampling.presence_penalty, -0.2f);
  // Single-dash flags have both spellings too.
  auto single = Parse({"-max-tokens=5", "info"});
  ASSERT_TRUE(single.ok()) << single.status();
  EXPECT_EQ(single->options.sampling.max_tokens, 5);
}

TEST(OptionsTest, DefaultsComeFromTheStruct) {
  auto cl = Parse({"session", "info", "abc"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  const ClientOptions defaults;
  EXPECT_EQ(cl->options.server, defaults.server);
  EXPECT_EQ(cl->options.chunk_bytes, defaults.chunk_bytes);
  EXPECT_EQ(cl->options.question_format, defaults.question_format);
  EXPECT_EQ(cl->args, std::vector<std::string>({"session", "info", "abc"}));
}

TEST(OptionsTest, RejectsUnknownFlagsAndBadValues) {
  EXPECT_EQ(Parse({"--no-such-flag", "info"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Parse({"--max-tokens", "many", "info"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Parse({"info", "--question"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Parse({"--progress", "fancy", "info"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto help = Parse({"--help"});
  ASSERT_TRUE(help.ok());
  EXPECT_TRUE(help->help);
}

TEST(OptionsTest, SecurityFlags) {
  auto cl = Parse({"--tls-ca", "ca.pem", "--token-file", "t", "info"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_TRUE(cl->options.tls);  // implied by --tls-ca
  EXPECT_EQ(cl->options.tls_ca, "ca.pem");
  EXPECT_EQ(cl->options.token_file, "t");
  auto plain = Parse({"info"});
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->options.tls);
  EXPECT_EQ(Parse({"--tls-cert", "c.pem", "info"}).status().code(),
            absl::StatusCode::kInvalidArgument);  // without --tls-key
  EXPECT_EQ(
      Parse({"--token", "x", "--token-file", "t", "info"}).status().code(),
      absl::StatusCode::kInvalidArgument);
}

TEST(ConnectTest, ReadsTheTokenFileAndNeverEchoesTheToken) {
  const std::string dir = ::testing::TempDir();
  const std::string token_file = dir + "/ckv_token";
  std::ofstream(token_file) << "  s3cret-token  \nignored\n";
  ClientOptions o;
  o.token_file = token_file;
  auto sec = ChannelSecurityFrom(o);
  ASSERT_TRUE(sec.ok()) << sec.status();
  EXPECT_EQ(sec->token, "s3cret-token");
  EXPECT_FALSE(sec->tls);
  std::ofstream(token_file) << "\n";
  EXPECT_EQ(ChannelSecurityFrom(o).status().code(),
            absl::StatusCode::kInvalidArgument);
  o.token_file = "";
  o.tls = true;
  o.tls_ca = dir + "/no-such-ca.pem";
  auto missing = ChannelSecurityFrom(o);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(missing.status().message().find("--tls-ca"), std::string::npos);
}

TEST(OptionsTest, FormatsQuestions) {
  EXPECT_EQ(FormatQuestion("Q: {question}\nA:", "why?"), "Q: why?\nA:");
  EXPECT_EQ(FormatQuestion("{question}", "raw"), "raw");
}

TEST(OptionsTest, SamplingParityFlagsReachTheRequest) {
  auto cl = Parse({"generate", "--prompt", "p", "--min-p", "0.05",
                   "--repetition-penalty=1.2", "--frequency-penalty", "0.5",
                   "--presence-penalty", "-0.5", "--penalty-last-n", "32",
                   "--logit-bias", "42=-5.5", "--logit-bias=7=100",
                   "--logprobs", "3"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  const pb::SamplingParams p = BuildSampling(cl->options.sampling);
  EXPECT_FLOAT_EQ(p.min_p(), 0.05f);
  EXPECT_FLOAT_EQ(p.repetition_penalty(), 1.2f);
  EXPECT_FLOAT_EQ(p.frequency_penalty(), 0.5f);
  EXPECT_FLOAT_EQ(p.presence_penalty(), -0.5f);
  EXPECT_EQ(p.penalty_last_n(), 32);
  ASSERT_EQ(p.logit_bias_size(), 2);
  EXPECT_FLOAT_EQ(p.logit_bias().at(42), -5.5f);
  EXPECT_FLOAT_EQ(p.logit_bias().at(7), 100.0f);
  EXPECT_EQ(p.logprobs(), 3);
  // Unset flags stay unset (the session's defaults apply).
  auto plain = Parse({"generate", "--prompt", "p"});
  ASSERT_TRUE(plain.ok());
  const pb::SamplingParams q = BuildSampling(plain->options.sampling);
  EXPECT_FALSE(q.has_min_p() || q.has_logprobs() || q.has_penalty_last_n());
  EXPECT_EQ(q.logit_bias_size(), 0);
  for (const char* bad : {"42", "x=1", "42=", "=1", "42=1=2"}) {
    EXPECT_EQ(Parse({"generate", "--logit-bias", bad}).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

}  // namespace
}  // namespace ckv::client
