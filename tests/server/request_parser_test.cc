// Tests of the HTTP/1.1 request parser (server/http/request_parser.h) fed
// the way a connection feeds it: in pieces, down to a byte at a time, with
// the unconsumed rest passed again. The wire behaviour (status codes,
// pipelining, limits) is tested on the real server by
// tests/http/http_front_test.py; this covers the splits.
#include "server/http/request_parser.h"

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ckv::server::http {
namespace {

struct Fed {
  RequestParser::State state = RequestParser::State::kNeedMore;
  std::string body;
  std::string rest;  // bytes not consumed at the end
  int error_status = 0;
};

// Feeds `bytes` in pieces of `step`, keeping what Feed does not consume, until
// the request is done, refused or the bytes run out.
Fed FeedInSteps(const std::string& bytes, size_t step) {
  RequestParser parser(RequestLimits{});
  Fed out;
  std::string pending;
  for (size_t next = 0;;) {
    if (next < bytes.size()) {
      pending.append(bytes, next, step);
      next += step;
    }
    size_t used = 0;
    out.state = parser.Feed(pending, &used);
    EXPECT_LE(used, pending.size());
    pending.erase(0, used);
    if (out.state == RequestParser::State::kDone) {
      out.body = parser.request().body;
      break;
    }
    if (out.state == RequestParser::State::kError) {
      out.error_status = parser.error_status();
      break;
    }
    if (next >= bytes.size()) break;
  }
  out.rest = pending;
  return out;
}

constexpr char kChunkedHead[] =
    "POST /v1/completions HTTP/1.1\r\nHost: a\r\n"
    "Transfer-Encoding: chunked\r\n\r\n";

// The final chunk arriving a byte at a time ("0\r\n", "\r", "\n") made
// Boost 1.74's Beast assert (the rest re-scanned from 4 bytes); a debug or
// sanitizer build aborted here before request_parser.cc waited for 5.
TEST(RequestParserTest, ChunkedBodyAnySplit) {
  const std::vector<std::string> bodies = {
      "0\r\n\r\n",
      "4\r\nWiki\r\n0\r\n\r\n",
      "4\r\nWiki\r\n5;ext=1\r\npedia\r\n0\r\n\r\n",
      "3\r\nabc\r\n0\r\nTrailer: x\r\n\r\n",
  };
  const std::vector<std::string> expected = {"", "Wiki", "Wikipedia", "abc"};
  for (size_t i = 0; i < bodies.size(); ++i) {
    const std::string request = kChunkedHead + bodies[i];
    for (size_t step = 1; step <= 7; ++step) {
      const Fed fed = FeedInSteps(request, step);
      EXPECT_EQ(fed.state, RequestParser::State::kDone)
          << "body " << i << " step " << step;
      EXPECT_EQ(fed.body, expected[i]) << "body " << i << " step " << step;
      EXPECT_EQ(fed.rest, "") << "body " << i << " step " << step;
    }
  }
}

// A chunked body cut short is still waiting (no request, no refusal).
TEST(RequestParserTest, ChunkedBodyCutShortWaits) {
  for (const char* body : {"0\r\n", "0\r\n\r", "4\r\nWi", "4\r\nWiki\r\n0"}) {
    const Fed fed = FeedInSteps(std::string(kChunkedHead) + body, 1);
    EXPECT_EQ(fed.state, RequestParser::State::kHeaderDone) << body;
  }
}

// Bad chunking is refused with 400 in every split.
TEST(RequestParserTest, BadChunkingIs400) {
  for (const char* body : {"zz\r\nab\r\n0\r\n\r\n", "4\r\nWikiXX0\r\n\r\n"}) {
    for (size_t step = 1; step <= 5; ++step) {
      const Fed fed = FeedInSteps(std::string(kChunkedHead) + body, step);
      EXPECT_EQ(fed.state, RequestParser::State::kError) << body;
      EXPECT_EQ(fed.error_status, 400) << body;
    }
  }
}

// The fuzzer's input that aborted (tests/fuzz/corpus/http_request_fuzzer/
// regress-beast-chunk-assert, split as the fuzzer split it: byte 0 picks
// the step) parses to an answer, not an abort.
TEST(RequestParserTest, FuzzerRegression) {
  std::ifstream in(CKV_FUZZ_CORPUS_DIR
                   "/http_request_fuzzer/regress-beast-chunk-assert",
                   std::ios::binary);
  ASSERT_TRUE(in.good()) << "missing regression input";
  const std::string data((std::istreambuf_iterator<char>(in)),
                         std::istreambuf_iterator<char>());
  ASSERT_GT(data.size(), 1u);
  const size_t step = 1 + static_cast<unsigned char>(data[0]) % 64;
  std::string rest = data.substr(1);
  int requests = 0;
  // Pipelined requests, one parser each, as the fuzzer parses them.
  while (!rest.empty() && requests < 64) {
    const Fed fed = FeedInSteps(rest, step);
    if (fed.state != RequestParser::State::kDone) break;
    ++requests;
    rest = fed.rest;
  }
  EXPECT_GE(requests, 1);
}

}  // namespace
}  // namespace ckv::server::http
