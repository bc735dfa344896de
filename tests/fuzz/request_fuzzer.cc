// libFuzzer target: arbitrary bytes parsed as each request message of the
// wire contract and passed through the server's request validation (config
// and sampling merges, token-id checks, text encoding, session lookup).
// Every outcome must be OK or a request error (INVALID_ARGUMENT, NOT_FOUND);
// anything else, or a crash, is a bug.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "clusterkv/v1/clusterkv.pb.h"
#include "model/kv/cluster_worker.h"
#include "server/service_convert.h"
#include "server/session_manager.h"

namespace {

namespace v1 = ::clusterkv::v1;
using ckv::server::CheckTokenIds;
using ckv::server::EncodeText;
using ckv::server::MergeKvConfig;
using ckv::server::MergeSampling;

// A byte-level vocabulary like the demo model's.
const ckv::Tokenizer& TestTokenizer() {
  static const ckv::Tokenizer* t = [] {
    ckv::TokenizerConfig c;
    c.tokens = {"<unk>", "<s>", "</s>"};
    c.token_types = {2, 3, 3};
    for (int b = 0; b < 256; ++b) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
      c.tokens.push_back(buf);
      c.token_types.push_back(6);
    }
    c.scores.assign(c.tokens.size(), 0.0f);
    auto tok = ckv::Tokenizer::FromConfig(std::move(c));
    if (!tok.ok()) std::abort();
    return tok->release();
  }();
  return *t;
}

ckv::server::SessionManager& Sessions() {
  static ckv::server::SessionManager* m = [] {
    ckv::ModelConfig c;
    c.n_layers = 2;
    c.n_heads = 4;
    c.n_kv_heads = 2;
    c.head_dim = 16;
    c.d_model = 64;
    c.vocab_size = 259;
    return new ckv::server::SessionManager(c, ckv::server::ServerLimits{},
                                           nullptr);
  }();
  return *m;
}

void Expect(const absl::Status& s) {
  if (s.ok() || s.code() == absl::StatusCode::kInvalidArgument ||
      s.code() == absl::StatusCode::kNotFound) {
    return;
  }
  std::fprintf(stderr, "unexpected status: %s\n", s.ToString().c_str());
  std::abort();
}

void Input(const std::string& text, const v1::TokenIds& ids, bool has_text,
           bool has_ids) {
  if (has_text) Expect(EncodeText(TestTokenizer(), text, true).status());
  if (has_ids) {
    Expect(CheckTokenIds(ids.ids(), TestTokenizer().vocab_size()).status());
  }
}

void Sampling(const v1::SamplingParams& p) {
  Expect(MergeSampling(ckv::SamplingParams{}, p).status());
}

void Kv(const v1::KvConfig& p) {
  Expect(MergeKvConfig(ckv::KvStoreConfig{}, p, /*model_layers=*/4).status());
}

void Session(const std::string& id) { Expect(Sessions().Get(id).status()); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t kind = data[0] % 6;
  const void* body = data + 1;
  const int n = static_cast<int>(size - 1);
  switch (kind) {
    case 0: {
      v1::CreateSessionRequest r;
      if (!r.ParseFromArray(body, n)) return 0;
      Kv(r.kv());
      Sampling(r.sampling());
      break;
    }
    case 1: {
      v1::PrefillRequest r;
      if (!r.ParseFromArray(body, n)) return 0;
      Session(r.session_id());
      Input(r.text(), r.tokens(), r.has_text(), r.has_tokens());
      break;
    }
    case 2: {
      v1::DecodeRequest r;
      if (!r.ParseFromArray(body, n)) return 0;
      Session(r.session_id());
      Input(r.text(), r.tokens(), r.has_text(), r.has_tokens());
      Sampling(r.sampling());
      break;
    }
    case 3: {
      v1::GenerateRequest r;
      if (!r.ParseFromArray(body, n)) return 0;
      Input(r.prompt(), r.tokens(), r.has_prompt(), r.has_tokens());
      Kv(r.kv());
      Sampling(r.sampling());
      break;
    }
    case 4: {
      v1::ForkSessionRequest r;
      if (!r.ParseFromArray(body, n)) return 0;
      Expect(Sessions().Fork(r.session_id()).status());
      break;
    }
    default: {
      v1::CloseSessionRequest r;
      if (!r.ParseFromArray(body, n)) return 0;
      Expect(Sessions().Close(r.session_id()).status());
      break;
    }
  }
  return 0;
}
