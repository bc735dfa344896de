// `clusterkv qa`: prefill a document once into a session, fork it once per
// question and decode all questions concurrently, labelling the streamed
// answers "[qN] ". When the server's model has a chat template (and no
// --raw), the document is the conversation's first turn (--doc-role) and
// each question a user turn, rendered by the server.
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/commands.h"
#include "client/json_output.h"
#include "client/text_stream.h"

namespace ckv::client {
namespace {

struct Answer {
  std::string question;
  std::string session_id;  // the fork that answered
  std::string text;
  absl::StatusOr<pb::DecodeSummary> summary = absl::UnknownError("not run");
};

// Closes the sessions it holds (most recent first) when asked or when it
// goes out of scope, e.g. on an early error return.
class SessionCloser {
 public:
  SessionCloser(RpcClient& client, const Io& io) : client_(client), io_(io) {}
  ~SessionCloser() { CloseAll(); }

  void Add(const std::string& id) { ids_.push_back(id); }

  // Returns the number of sessions that failed to close (reported on err).
  int CloseAll() {
    int failed = 0;
    for (auto it = ids_.rbegin(); it != ids_.rend(); ++it) {
      auto closed = client_.CloseSession(*it);
      if (closed.ok()) continue;
      ++failed;
      io_.err << "warning: closing session " << *it << ": "
              << absl::StatusCodeToString(closed.status().code()) << ": "
              << closed.status().message() << std::endl;
    }
    ids_.clear();
    return failed;
  }

 private:
  RpcClient& client_;
  const Io& io_;
  std::vector<std::string> ids_;
};

// Each question as a user turn (chat) or formatted text (raw).
void DecodeAll(RpcClient& client, const ClientOptions& o, const Io& io,
               bool chat, std::vector<Answer>& answers) {
  LabelledPrinter printer(io.out);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < answers.size(); ++i) {
    threads.emplace_back([&, i] {
      Answer& a = answers[i];
      pb::DecodeRequest request;
      request.set_session_id(a.session_id);
      if (chat) {
        pb::ChatMessage* m = request.mutable_messages()->add_messages();
        m->set_role("user");
        m->set_content(a.question);
      } else {
        request.set_text(FormatQuestion(o.question_format, a.question));
      }
      *request.mutable_sampling() = BuildSampling(o.sampling);
      const int stream = static_cast<int>(i);
      a.summary = client.Decode(request, [&](const pb::TokenEvent& t) {
        a.text += t.text();
        if (!o.json) printer.Write(stream, t.text());
      });
      if (!o.json) printer.Finish(stream);
    });
  }
  for (std::thread& t : threads) t.join();
}

void PrintSummaries(const std::vector<Answer>& answers, const Io& io) {
  for (size_t i = 0; i < answers.size(); ++i) {
    const Answer& a = answers[i];
    io.err << LabelledPrinter::Label(static_cast<int>(i));
    if (a.summary.ok()) {
      io.err << DecodeSummaryLine(*a.summary);
    } else {
      io.err << "error: " << absl::StatusCodeToString(a.summary.status().code())
             << ": " << a.summary.status().message();
    }
    io.err << "  <- " << a.question << "\n";
  }
  io.err << std::flush;
}

nlohmann::json AnswersJson(const std::vector<Answer>& answers) {
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < answers.size(); ++i) {
    const Answer& a = answers[i];
    nlohmann::json j = {{"index", i + 1},
                        {"question", a.question},
                        {"session_id", a.session_id}};
    if (a.summary.ok()) {
      j["text"] = a.summary->text().empty() ? a.text : a.summary->text();
      j["summary"] = ProtoToJson(*a.summary);
    } else {
      j["text"] = a.text;
      j["error"] = StatusToJson(a.summary.status());
    }
    out.push_back(std::move(j));
  }
  return out;
}

absl::Status FirstError(const std::vector<Answer>& answers) {
  for (const Answer& a : answers) {
    if (!a.summary.ok()) return a.summary.status();
  }
  return absl::OkStatus();
}

absl::Status ForkAll(RpcClient& client, const std::string& parent,
                     SessionCloser& closer, std::vector<Answer>& answers) {
  for (Answer& a : answers) {
    auto child = client.ForkSession(parent);
    if (!child.ok()) return child.status();
    a.session_id = child->session_id();
    closer.Add(a.session_id);
  }
  return absl::OkStatus();
}

// Whether to send messages: the model has a chat template and no --raw.
absl::StatusOr<bool> UseChat(RpcClient& client, const ClientOptions& o) {
  if (o.raw) return false;
  auto info = client.GetServerInfo();
  if (!info.ok()) return info.status();
  return info->has_chat_template();
}

// The document as the conversation's first turn, without the assistant's
// opening (the questions add it).
absl::StatusOr<pb::PrefillSummary> PrefillChat(RpcClient& client,
                                               const std::string& session_id,
                                               std::istream& doc,
                                               const ClientOptions& o,
                                               const Io& io) {
  std::stringstream text;
  text << doc.rdbuf();
  pb::ChatMessages messages;
  pb::ChatMessage* m = messages.add_messages();
  m->set_role(o.doc_role);
  m->set_content(text.str());
  messages.set_add_generation_prompt(false);
  ProgressReporter progress(io.err, ProgressStyleFor(o, io));
  auto summary = client.PrefillMessages(
      session_id, messages, [&](const pb::PrefillProgress& p) {
        progress.Update(p.tokens_done(), p.tokens_total());
      });
  progress.Finish();
  return summary;
}

}  // namespace

absl::StatusOr<int> RunQa(RpcClient& client, const ClientOptions& o,
                          const Io& io) {
  if (o.doc.empty() || o.questions.empty()) {
    return absl::InvalidArgumentError(
        "qa: --doc FILE and at least one --question are required");
  }
  auto doc = OpenFile(o.doc);
  if (!doc.ok()) return doc.status();
  auto chat = UseChat(client, o);
  if (!chat.ok()) return chat.status();
  auto session = client.CreateSession(BuildCreateSession(o));
  if (!session.ok()) return session.status();
  const std::string parent = session->session_id();
  SessionCloser closer(client, io);
  closer.Add(parent);
  auto prefill = *chat ? PrefillChat(client, parent, **doc, o, io)
                       : PrefillWithProgress(client, parent, **doc, o, io);
  if (!prefill.ok()) return prefill.status();
  if (!o.json) io.err << PrefillSummaryLine(*prefill) << std::endl;
  std::vector<Answer> answers(o.questions.size());
  for (size_t i = 0; i < answers.size(); ++i) {
    answers[i].question = o.questions[i];
  }
  if (auto s = ForkAll(client, parent, closer, answers); !s.ok()) return s;
  DecodeAll(client, o, io, *chat, answers);
  const int close_failures = closer.CloseAll();
  if (o.json) {
    PrintJson(io, {{"session_id", parent},
                   {"document", o.doc},
                   {"chat_template", *chat},
                   {"prefill", ProtoToJson(*prefill)},
                   {"answers", AnswersJson(answers)},
                   {"sessions_closed", close_failures == 0}});
  } else {
    PrintSummaries(answers, io);
  }
  if (auto s = FirstError(answers); !s.ok()) return s;
  return 0;
}

}  // namespace ckv::client
