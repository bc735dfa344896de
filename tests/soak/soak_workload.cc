#include "tests/soak/soak_workload.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <thread>

#include "absl/strings/str_cat.h"

namespace ckv::soak {
namespace {

using grpc::StatusCode;
using std::chrono::milliseconds;

constexpr StatusCode kOk = StatusCode::OK;
constexpr StatusCode kExhausted = StatusCode::RESOURCE_EXHAUSTED;
constexpr StatusCode kInvalid = StatusCode::INVALID_ARGUMENT;
constexpr StatusCode kNotFound = StatusCode::NOT_FOUND;
constexpr StatusCode kAborted = StatusCode::ABORTED;
constexpr StatusCode kCancelled = StatusCode::CANCELLED;
constexpr StatusCode kDeadline = StatusCode::DEADLINE_EXCEEDED;
// How long after a cancelled call ABORTED on its session is expected.
constexpr std::chrono::seconds kCancelEcho{2};

// Relative weights of the actions, in Worker::Action order.
constexpr int kWeights[] = {
    8,   // create
    2,   // create_invalid
    14,  // prefill
    2,   // prefill_huge
    2,   // prefill_bad_utf8
    16,  // decode
    5,   // decode_cancel
    4,   // decode_deadline
    3,   // decode_invalid
    6,   // fork
    5,   // get
    5,   // close
    3,   // snapshot (only with --snapshot-dir)
    4,   // unknown_id
    2,   // missing_id
    4,   // busy
    6,   // generate
    2,   // generate_invalid
    1,   // info
};
static_assert(sizeof(kWeights) / sizeof(kWeights[0]) == 19);

// Words of the random texts: ASCII and 2-, 3- and 4-byte UTF-8 characters.
constexpr const char* kWords[] = {
    "the",   "cluster",  "keys",     "recall", "document", "session",
    "fork",  "question", "answer",   "memory", "budget",   "naïve",
    "café",  "Ελληνικά", "страница", "日本語", "中文",     "données",
    "🙂",  "𝄞",        "résumé",   "über",   "ß",        "한국어",
    "token", "segment",  "window",   "sink",   "tail",     "42",
};

// Byte sequences that no UTF-8 decoder may accept.
constexpr const char* kBadUtf8[] = {
    "\xff",      "\xc0\xaf", "\xed\xa0\x80", "\xf5\x80\x80\x80", "\x80",
    "\xe4\xb8(",  // truncated 3-byte character followed by ASCII
};

constexpr const char* kPolicies[] = {"full", "clusterkv", "quest", "streaming",
                                     "clusterkv_rerank"};

}  // namespace

void Tally::Merge(const Tally& o) {
  for (const auto& [k, codes] : o.by_action) {
    for (const auto& [c, n] : codes) by_action[k][c] += n;
  }
  for (const auto& [k, codes] : o.by_rpc) {
    for (const auto& [c, n] : codes) by_rpc[k][c] += n;
  }
  for (const auto& [k, n] : o.exhausted_by_limit) exhausted_by_limit[k] += n;
  requests += o.requests;
  unexpected += o.unexpected;
  sessions_created += o.sessions_created;
  aborted_after_cancel += o.aborted_after_cancel;
  generated_tokens += o.generated_tokens;
  prefilled_tokens += o.prefilled_tokens;
  for (const std::string& m : o.unexpected_messages) {
    if (unexpected_messages.size() < kMaxMessages) {
      unexpected_messages.push_back(m);
    }
  }
}

Worker::Worker(int index, const WorkloadConfig& config,
               const std::string& address, std::atomic<int64_t>* requests)
    : index_(index),
      config_(config),
      stub_(NewStub(address)),
      requests_(requests),
      rng_(config.seed * 1000003 + static_cast<uint64_t>(index)) {}

void Worker::Run(const std::atomic<bool>& stop) {
  while (!stop.load(std::memory_order_relaxed)) Step(Pick());
  CloseAll();
}

Worker::Action Worker::Pick() {
  int total = 0;
  for (int w : kWeights) total += w;
  int r = Uniform(0, total - 1);
  for (int a = 0; a < static_cast<int>(Action::kCount); ++a) {
    if (r < kWeights[a]) return static_cast<Action>(a);
    r -= kWeights[a];
  }
  return Action::kInfo;
}

void Worker::Step(Action a) {
  if (a == Action::kSnapshot && !config_.snapshots) a = Action::kGet;
  const bool needs_session =
      a != Action::kCreate && a != Action::kCreateInvalid &&
      a != Action::kUnknownId && a != Action::kMissingId &&
      a != Action::kGenerate && a != Action::kGenerateInvalid &&
      a != Action::kInfo;
  const int max_owned = config_.max_owned_sessions;
  if (a == Action::kCreate && static_cast<int>(owned_.size()) >= max_owned) {
    a = Action::kClose;
  }
  if (needs_session && owned_.empty()) a = Action::kCreate;
  // A session near its token limit is closed (it would only be refused).
  const size_t index = owned_.empty() ? 0 : RandomOwnedIndex();
  Owned* s = owned_.empty() ? nullptr : &owned_[index];
  session_ = s != nullptr ? s->id : "";
  if (s != nullptr && s->tokens > config_.max_session_tokens * 3 / 4) {
    a = Action::kClose;
  }
  switch (a) {
    case Action::kCreate:
      return DoCreate();
    case Action::kCreateInvalid:
      return DoCreateInvalid();
    case Action::kPrefill:
      return DoPrefill(*s);
    case Action::kPrefillHuge:
      return DoPrefillHuge(*s);
    case Action::kPrefillBadUtf8:
      return DoPrefillBadUtf8(*s);
    case Action::kDecode:
    case Action::kDecodeCancel:
    case Action::kDecodeDeadline:
      return DoDecode(*s, a);
    case Action::kDecodeInvalid:
      return DoDecodeInvalid(*s);
    case Action::kFork:
      return DoFork(*s);
    case Action::kGet:
      return DoGet(*s);
    case Action::kClose:
      return DoClose(index);
    case Action::kSnapshot:
      return DoSnapshot(*s);
    case Action::kUnknownId:
      return DoUnknownId();
    case Action::kMissingId:
      return DoMissingId();
    case Action::kBusy:
      return DoBusy(*s);
    case Action::kGenerate:
      return DoGenerate(false);
    case Action::kGenerateInvalid:
      return DoGenerate(true);
    case Action::kInfo:
    case Action::kCount:
      return DoInfo();
  }
}

bool Worker::Record(const char* action, const char* rpc, const grpc::Status& s,
                    const Codes& expected) {
  const char* code = CodeName(s.error_code());
  ++tally_.requests;
  requests_->fetch_add(1, std::memory_order_relaxed);
  ++tally_.by_action[action][code];
  ++tally_.by_rpc[rpc][code];
  if (s.error_code() == kExhausted) {  // "max_sessions limit reached ..."
    const std::string& m = s.error_message();
    ++tally_.exhausted_by_limit[m.substr(0, m.find(' '))];
  }
  if (std::find(expected.begin(), expected.end(), s.error_code()) !=
      expected.end()) {
    return true;
  }
  if (s.error_code() == kAborted && RecentlyCancelled(session_)) {
    ++tally_.aborted_after_cancel;
    return true;
  }
  Fail(action, absl::StrCat(rpc, ": ", code, " ", s.error_message()));
  return false;
}

void Worker::Fail(const char* action, const std::string& message) {
  ++tally_.unexpected;
  if (tally_.unexpected_messages.size() < Tally::kMaxMessages) {
    tally_.unexpected_messages.push_back(
        absl::StrCat("client ", index_, " ", action, " ", message));
  }
}

// ---- sessions
// ----------------------------------------------------------------

void Worker::DoCreate() {
  v1::CreateSessionRequest req;
  *req.mutable_kv() = RandomKv();
  req.mutable_sampling()->set_temperature(Chance(0.5) ? 0.0f : 0.8f);
  req.mutable_sampling()->set_seed(rng_());
  v1::SessionInfo info;
  const grpc::Status st = CreateSession(*stub_, req, &info);
  Record("create", "CreateSession", st, {kOk, kExhausted});
  if (!st.ok()) return BackOff(st);
  ++tally_.sessions_created;
  owned_.push_back({info.session_id(), 0});
}

void Worker::DoCreateInvalid() {
  v1::CreateSessionRequest req;
  switch (Uniform(0, 4)) {
    case 0:
      req.mutable_kv()->set_policy("bogus");
      break;
    case 1:
      req.mutable_kv()->set_budget(0);
      break;
    case 2:
      req.mutable_sampling()->set_temperature(-1.0f);
      break;
    case 3:
      req.mutable_sampling()->set_top_p(1.5f);
      break;
    default:
      req.mutable_kv()->set_gqa_selection("per_nothing");
      break;
  }
  v1::SessionInfo info;
  const grpc::Status st = CreateSession(*stub_, req, &info);
  if (st.ok()) {  // must not exist: counted as unexpected, then cleaned up
    owned_.push_back({info.session_id(), 0});
  }
  Record("create_invalid", "CreateSession", st, {kInvalid});
}

void Worker::DoFork(Owned& s) {
  if (static_cast<int>(owned_.size()) >= config_.max_owned_sessions) {
    return DoClose(RandomOwnedIndex());
  }
  v1::SessionInfo info;
  const grpc::Status st = ForkSession(*stub_, s.id, &info);
  Record("fork", "ForkSession", st, {kOk, kExhausted});
  if (!st.ok()) return BackOff(st);
  ++tally_.sessions_created;
  owned_.push_back({info.session_id(), info.tokens()});
}

void Worker::DoGet(Owned& s) {
  v1::SessionInfo info;
  const grpc::Status st = GetSession(*stub_, s.id, &info);
  if (Record("get", "GetSession", st, {kOk}) && info.tokens() != s.tokens) {
    Fail("get", absl::StrCat("session ", s.id, " holds ", info.tokens(),
                             " tokens, expected ", s.tokens));
  }
}

void Worker::DoClose(size_t index) {
  const std::string id = owned_[index].id;
  const grpc::Status st = CloseSession(*stub_, id);
  Record("close", "CloseSession", st, {kOk});
  Forget(id);
}

void Worker::DoSnapshot(Owned& s) {
  v1::SnapshotSessionResponse resp;
  const grpc::Status st = SnapshotSession(*stub_, s.id, &resp);
  Record("snapshot", "SnapshotSession", st, {kOk});
}

void Worker::DoInfo() {
  if (Chance(0.5)) {
    v1::ServerInfo info;
    Record("info", "GetServerInfo", GetServerInfo(*stub_, &info), {kOk});
  } else {
    v1::ListSessionsResponse resp;
    Record("info", "ListSessions", ListSessions(*stub_, &resp), {kOk});
  }
}

void Worker::Settle(Owned& s, const char* action) {
  cancelled_[s.id] = std::chrono::steady_clock::now();
  v1::SessionInfo info;
  grpc::Status st = WaitNotBusy(*stub_, s.id, milliseconds(10000), &info);
  if (st.ok() && !info.busy()) {
    // A call cancelled before it reached the server may still arrive (and
    // hold the session briefly): look again a little later.
    std::this_thread::sleep_for(milliseconds(20));
    st = WaitNotBusy(*stub_, s.id, milliseconds(10000), &info);
  }
  if (!Record(action, "GetSession", st, {kOk})) return;
  if (info.busy()) {
    Fail(action, absl::StrCat("session ", s.id,
                              " still busy 10 s after its call ended"));
  }
  s.tokens = info.tokens();
}

void Worker::CloseAll() {
  while (!owned_.empty()) {
    const std::string id = owned_.back().id;
    grpc::Status st = CloseSession(*stub_, id);
    for (int i = 0; i < 100 && st.error_code() == kAborted; ++i) {
      std::this_thread::sleep_for(milliseconds(20));
      st = CloseSession(*stub_, id);
    }
    Record("close", "CloseSession", st, {kOk});
    owned_.pop_back();
  }
}

// ---- prefill
// -----------------------------------------------------------------

void Worker::DoPrefill(Owned& s) {
  const int64_t room = config_.max_session_tokens - s.tokens;
  const int bytes =
      Uniform(8, static_cast<int>(std::clamp<int64_t>(room / 3, 8, 400)));
  const StreamResult r =
      Prefill(*stub_, s.id, RandomText(bytes), Uniform(1, 4));
  if (Record("prefill", "Prefill", r.status, {kOk, kExhausted}) &&
      r.status.ok()) {
    s.tokens = r.session_tokens;
    tally_.prefilled_tokens += r.input_tokens;
  }
}

// More than max_prompt_tokens: refused while streaming (beyond 64 bytes per
// token) or after tokenizing.
void Worker::DoPrefillHuge(Owned& s) {
  const int64_t limit = config_.max_prompt_tokens;
  const int64_t bytes =
      Chance(0.2) ? limit * 64 + Uniform(1, 4096) : limit + Uniform(8, 2048);
  std::string text = RandomText(static_cast<size_t>(bytes));
  const StreamResult r = Prefill(*stub_, s.id, text, Uniform(1, 8));
  Record("prefill_huge", "Prefill", r.status, {kExhausted});
}

void Worker::DoPrefillBadUtf8(Owned& s) {
  const StreamResult r =
      Prefill(*stub_, s.id, BadUtf8(Uniform(4, 200)), Uniform(1, 3));
  Record("prefill_bad_utf8", "Prefill", r.status, {kInvalid});
}

// ---- decode
// ------------------------------------------------------------------

// Several Decode calls in a row on one session (turns of a conversation,
// some continuing with no input): after each, the session holds exactly the
// tokens before + input + generated.
void Worker::DoMultiTurnDecode(Owned& s) {
  v1::SessionInfo info;
  if (!Record("decode_turns", "GetSession", GetSession(*stub_, s.id, &info),
              {kOk})) {
    return;
  }
  int64_t tokens = info.tokens();
  for (int turn = Uniform(2, 4); turn > 0; --turn) {
    v1::DecodeRequest req;
    req.set_session_id(s.id);
    if (tokens == 0 || Chance(0.5)) req.set_text(RandomText(Uniform(2, 30)));
    req.mutable_sampling()->set_max_tokens(Uniform(1, 16));
    const StreamResult r = Decode(*stub_, req);
    Record("decode_turns", "Decode", r.status, {kOk, kExhausted});
    tally_.generated_tokens += static_cast<int64_t>(r.ids.size());
    if (!r.status.ok()) break;
    const int64_t expected =
        tokens + r.input_tokens + static_cast<int64_t>(r.ids.size());
    if (r.session_tokens != expected) {
      Fail("decode_turns",
           absl::StrCat("session_tokens ", r.session_tokens, " != before ",
                        tokens, " + input ", r.input_tokens, " + generated ",
                        r.ids.size()));
    }
    tokens = s.tokens = r.session_tokens;
  }
  if (Record("decode_turns", "GetSession", GetSession(*stub_, s.id, &info),
             {kOk}) &&
      info.tokens() != tokens) {
    Fail("decode_turns", absl::StrCat("GetSession tokens ", info.tokens(),
                                      " != ", tokens, " after the turns"));
  }
}

void Worker::DoDecode(Owned& s, Action kind) {
  if (kind == Action::kDecode && Chance(0.4)) return DoMultiTurnDecode(s);
  v1::DecodeRequest req;
  req.set_session_id(s.id);
  if (s.tokens == 0 || Chance(0.4)) req.set_text(RandomText(Uniform(2, 40)));
  v1::SamplingParams* p = req.mutable_sampling();
  p->set_max_tokens(Uniform(0, 32));
  if (Chance(0.3)) p->set_temperature(0.7f);
  if (Chance(0.2)) p->set_top_k(Uniform(1, 40));
  if (Chance(0.2)) p->set_top_p(0.9f);
  if (Chance(0.1)) p->add_stop("e");
  StreamOptions o;
  const char* action = "decode";
  Codes expected = {kOk, kExhausted};
  if (kind == Action::kDecodeCancel) {
    action = "decode_cancel";
    p->set_max_tokens(Uniform(8, 200));
    o.cancel_after_tokens = Uniform(0, 6);
    expected = {kOk, kExhausted, kCancelled};
  } else if (kind == Action::kDecodeDeadline) {
    action = "decode_deadline";
    p->set_max_tokens(Uniform(8, 200));
    o.timeout = milliseconds(Uniform(1, 150));
    expected = {kOk, kExhausted, kDeadline};
  }
  const StreamResult r = Decode(*stub_, req, o);
  Record(action, "Decode", r.status, expected);
  tally_.generated_tokens += static_cast<int64_t>(r.ids.size());
  if (r.status.ok() && r.session_tokens >= 0) {
    s.tokens = r.session_tokens;
  } else if (!r.status.ok() && r.status.error_code() != kExhausted) {
    Settle(s, action);
  }
}

void Worker::DoDecodeInvalid(Owned& s) {
  v1::DecodeRequest req;
  req.set_session_id(s.id);
  req.set_text(RandomText(Uniform(1, 20)));
  v1::SamplingParams* p = req.mutable_sampling();
  switch (Uniform(0, 6)) {
    case 0:
      p->set_temperature(-0.5f);
      break;
    case 1:
      p->set_temperature(std::numeric_limits<float>::quiet_NaN());
      break;
    case 2:
      p->set_top_p(0.0f);
      break;
    case 3:
      p->set_max_tokens(-3);
      break;
    case 4:
      p->add_stop("");
      break;
    case 5:
      req.set_text(BadUtf8(Uniform(2, 30)));
      break;
    default:
      req.mutable_tokens()->add_ids(config_.vocab_size + Uniform(0, 1000));
      break;
  }
  const StreamResult r = Decode(*stub_, req);
  Record("decode_invalid", "Decode", r.status, {kInvalid});
}

void Worker::DoGenerate(bool invalid) {
  v1::GenerateRequest req;
  req.set_prompt(RandomText(Uniform(4, 200)));
  *req.mutable_kv() = RandomKv();
  req.mutable_sampling()->set_max_tokens(Uniform(1, 24));
  StreamOptions o;
  if (invalid) {
    switch (Uniform(0, 3)) {
      case 0:
        req.set_prompt(BadUtf8(Uniform(2, 40)));
        break;
      case 1:
        req.set_prompt("");
        break;
      case 2:
        req.mutable_kv()->set_window(0);
        break;
      default:
        req.mutable_sampling()->set_top_p(2.0f);
        break;
    }
    const StreamResult r = Generate(*stub_, req, o);
    Record("generate_invalid", "Generate", r.status, {kInvalid});
    return;
  }
  const bool cancel = Chance(0.2);
  if (cancel) o.cancel_after_tokens = Uniform(0, 4);
  const StreamResult r = Generate(*stub_, req, o);
  tally_.generated_tokens += static_cast<int64_t>(r.ids.size());
  if (cancel) {
    Record("generate", "Generate", r.status, {kOk, kExhausted, kCancelled});
  } else {
    Record("generate", "Generate", r.status, {kOk, kExhausted});
  }
  BackOff(r.status);
}

// A client whose request the server refused for a limit waits a moment
// (as real clients do) instead of retrying in a tight loop.
void Worker::BackOff(const grpc::Status& s) {
  if (s.error_code() == kExhausted) {
    std::this_thread::sleep_for(milliseconds(Uniform(5, 25)));
  }
}

// ---- wrong ids and concurrent calls
// ------------------------------------------

void Worker::DoUnknownId() {
  const std::string id =
      !closed_.empty() && Chance(0.7)
          ? closed_[static_cast<size_t>(Uniform(0, closed_.size() - 1))]
          : absl::StrCat("nosuch", rng_() % 1000000007);
  v1::SessionInfo info;
  switch (Uniform(0, config_.snapshots ? 5 : 4)) {
    case 0:
      Record("unknown_id", "GetSession", GetSession(*stub_, id, &info),
             {kNotFound});
      break;
    case 1:
      Record("unknown_id", "ForkSession", ForkSession(*stub_, id, &info),
             {kNotFound});
      break;
    case 2:
      Record("unknown_id", "CloseSession", CloseSession(*stub_, id),
             {kNotFound});
      break;
    case 3:
      Record("unknown_id", "Prefill",
             Prefill(*stub_, id, RandomText(Uniform(2, 50))).status,
             {kNotFound});
      break;
    case 4: {
      v1::DecodeRequest req;
      req.set_session_id(id);
      req.set_text(RandomText(Uniform(2, 10)));
      Record("unknown_id", "Decode", Decode(*stub_, req).status, {kNotFound});
      break;
    }
    default: {
      v1::SnapshotSessionResponse resp;
      Record("unknown_id", "SnapshotSession",
             SnapshotSession(*stub_, id, &resp), {kNotFound});
    }
  }
}

void Worker::DoMissingId() {
  v1::SessionInfo info;
  v1::DecodeRequest req;
  req.set_text("x");
  switch (Uniform(0, 3)) {
    case 0:
      Record("missing_id", "GetSession", GetSession(*stub_, "", &info),
             {kInvalid});
      break;
    case 1:
      Record("missing_id", "ForkSession", ForkSession(*stub_, "", &info),
             {kInvalid});
      break;
    case 2:
      Record("missing_id", "CloseSession", CloseSession(*stub_, ""),
             {kInvalid});
      break;
    default:
      Record("missing_id", "Decode", Decode(*stub_, req).status, {kInvalid});
  }
}

// A long Decode holds the session; a second call on it meanwhile gets
// ABORTED (or runs normally when the first ended already).
void Worker::DoBusy(Owned& s) {
  const std::string id = s.id;
  auto ctx = ContextWithDeadline(milliseconds(60000));
  v1::DecodeRequest req;
  req.set_session_id(id);
  req.set_text(RandomText(Uniform(2, 20)));
  req.mutable_sampling()->set_max_tokens(Uniform(16, 64));
  auto reader = stub_->Decode(ctx.get(), req);
  v1::DecodeResponse resp;
  const bool started = reader->Read(&resp);  // the first token: it runs
  DoBusySecond(s, Uniform(0, 3));
  ctx->TryCancel();
  while (started && reader->Read(&resp)) {
  }
  Record("busy", "Decode", reader->Finish(), {kOk, kExhausted, kCancelled});
  for (Owned& o : owned_) {  // `s` may be gone (closed by the second call)
    if (o.id == id) Settle(o, "busy");
  }
}

void Worker::DoBusySecond(Owned& s, int which) {
  const Codes codes = {kAborted, kOk, kExhausted};
  if (which == 0) {
    v1::DecodeRequest req;
    req.set_session_id(s.id);
    req.set_text("?");
    req.mutable_sampling()->set_max_tokens(Uniform(1, 4));
    Record("busy", "Decode", Decode(*stub_, req).status, codes);
  } else if (which == 1) {
    Record("busy", "Prefill", Prefill(*stub_, s.id, RandomText(16)).status,
           codes);
  } else if (which == 2) {
    v1::SessionInfo info;
    const grpc::Status st = ForkSession(*stub_, s.id, &info);
    Record("busy", "ForkSession", st, codes);
    if (st.ok()) {
      ++tally_.sessions_created;
      owned_.push_back({info.session_id(), info.tokens()});
    }
  } else {
    const std::string id = s.id;
    const grpc::Status st = CloseSession(*stub_, id);
    Record("busy", "CloseSession", st, {kAborted, kOk});
    if (st.ok()) Forget(id);
  }
}

// A call cancelled on the client may reach the server after later calls
// (another HTTP/2 stream): for a while its session may be busy.
bool Worker::RecentlyCancelled(const std::string& id) {
  const auto now = std::chrono::steady_clock::now();
  for (auto it = cancelled_.begin(); it != cancelled_.end();) {
    it = now - it->second > kCancelEcho ? cancelled_.erase(it) : std::next(it);
  }
  return cancelled_.contains(id);
}

// ---- randomness
// --------------------------------------------------------------

size_t Worker::RandomOwnedIndex() {
  return static_cast<size_t>(Uniform(0, static_cast<int>(owned_.size()) - 1));
}

void Worker::Forget(const std::string& id) {
  owned_.erase(std::remove_if(owned_.begin(), owned_.end(),
                              [&](const Owned& o) { return o.id == id; }),
               owned_.end());
  if (closed_.size() >= 16) closed_.erase(closed_.begin());
  closed_.push_back(id);
}

std::string Worker::RandomText(size_t bytes) {
  std::string text;
  constexpr int kCount = sizeof(kWords) / sizeof(kWords[0]);
  while (text.size() < bytes) {
    if (!text.empty()) text += Chance(0.1) ? ", " : " ";
    text += kWords[Uniform(0, kCount - 1)];
  }
  return text;
}

std::string Worker::BadUtf8(size_t bytes) {
  std::string text = RandomText(bytes);
  constexpr int kCount = sizeof(kBadUtf8) / sizeof(kBadUtf8[0]);
  // At a character boundary (before an ASCII byte or at the end), so that
  // the bad sequence is not absorbed by a neighbouring character.
  size_t at = static_cast<size_t>(Uniform(0, static_cast<int>(text.size())));
  while (at < text.size() && (static_cast<unsigned char>(text[at]) & 0x80)) {
    ++at;
  }
  text.insert(at, kBadUtf8[Uniform(0, kCount - 1)]);
  return text;
}

v1::KvConfig Worker::RandomKv() {
  v1::KvConfig kv;
  kv.set_policy(
      kPolicies[Uniform(0, static_cast<int>(std::size(kPolicies)) - 1)]);
  kv.set_budget(Uniform(16, 96));
  kv.set_sink_tokens(Uniform(0, 8));
  kv.set_tokens_per_cluster(Uniform(8, 32));
  kv.set_window(Uniform(16, 64));
  if (Chance(0.3)) kv.set_gqa_selection("per_kv_head");
  if (Chance(0.3)) kv.set_dense_layers(Uniform(0, 2));
  return kv;
}

int Worker::Uniform(int lo, int hi) {
  return std::uniform_int_distribution<int>(lo, hi)(rng_);
}

bool Worker::Chance(double p) {
  return std::uniform_real_distribution<double>(0.0, 1.0)(rng_) < p;
}

}  // namespace ckv::soak
