// The fake runtime's ordering checker on its own: overlap lookups through
// the address index (short ranges by start, long ones in a list), reports
// in issue order across both, pruning of covered records and Forget.
#include "kernels/device/ordering_checker.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>

namespace ckv::kernels::device {
namespace {

using ::testing::HasSubstr;
constexpr int kHost = OrderingChecker::kHost;

// A stream's write of [begin, begin + bytes), named `what`.
void StreamWrite(OrderingChecker& c, int stream, uint64_t begin, int64_t bytes,
                 const char* what) {
  c.Issue(stream);
  c.Access(stream, begin, bytes, true, what, Site::Here());
}

TEST(OrderingCheckerTest, ReportsOverlapsOfBothIndexesInIssueOrder) {
  OrderingChecker c;
  const int s = c.AddAgent();
  StreamWrite(c, s, 0x10000, 1 << 20, "long");  // beyond kShortBytes
  StreamWrite(c, s, 0x10100, 256, "short");
  c.Access(kHost, 0x10180, 16, false, "host read", Site::Here());
  ASSERT_EQ(c.race_count(), 2);
  EXPECT_THAT(c.races()[0], HasSubstr("(long at"));
  EXPECT_THAT(c.races()[1], HasSubstr("(short at"));
  // After the host waits for the stream nothing conflicts.
  c.HostJoinAgent(s);
  c.Access(kHost, 0x10000, 1 << 20, true, "host write", Site::Here());
  EXPECT_EQ(c.race_count(), 2);
}

TEST(OrderingCheckerTest, ShortRangesAreFoundAtTheirEdges) {
  OrderingChecker c;
  const int s = c.AddAgent();
  const uint64_t b = 0x100000;
  StreamWrite(c, s, b, 1 << 16, "widest short");  // exactly kShortBytes
  c.Access(kHost, b + (1 << 16), 8, false, "just after", Site::Here());
  EXPECT_EQ(c.race_count(), 0);
  c.Access(kHost, b - 8, 8, false, "just before", Site::Here());
  EXPECT_EQ(c.race_count(), 0);
  c.Access(kHost, b + (1 << 16) - 1, 1, false, "last byte", Site::Here());
  EXPECT_EQ(c.race_count(), 1);
  c.Access(kHost, b - 4, 5, false, "first byte", Site::Here());
  EXPECT_EQ(c.race_count(), 2);
}

// 200,000 records (a batch op's declared ranges): an access meets only the
// one it overlaps (each was a scan of the whole history before).
TEST(OrderingCheckerTest, ManyRecordsOnlyTheOverlappingOneConflicts) {
  OrderingChecker c;
  const int s = c.AddAgent();
  constexpr int kRecords = 200000;
  c.Issue(s);
  for (int i = 0; i < kRecords; ++i) {
    c.Access(s, 0x1000000 + uint64_t{64} * i, 48, true, "item", Site::Here());
  }
  for (int i = 0; i < kRecords; i += 1000) {  // the gaps between them
    c.Access(kHost, 0x1000000 + uint64_t{64} * i + 48, 16, true, "gap",
             Site::Here());
  }
  EXPECT_EQ(c.race_count(), 0);
  c.Access(kHost, 0x1000000 + uint64_t{64} * 123456 + 40, 16, false, "read",
           Site::Here());
  EXPECT_EQ(c.race_count(), 1);
  EXPECT_THAT(c.races()[0], HasSubstr("(item at"));
}

TEST(OrderingCheckerTest, CoveredRecordsArePrunedAndForgetClears) {
  OrderingChecker c;
  const int s = c.AddAgent();
  StreamWrite(c, s, 0x2000, 100, "first");
  StreamWrite(c, s, 0x2000, 200, "second");  // ordered and covering
  c.Access(kHost, 0x2010, 8, false, "read", Site::Here());
  ASSERT_EQ(c.race_count(), 1);  // one report: "first" was pruned
  EXPECT_THAT(c.races()[0], HasSubstr("(second at"));
  StreamWrite(c, s, 0x400000, 1 << 20, "long");
  c.Forget(0x2000, 200);
  c.Forget(0x400000, 1 << 20);
  c.Access(kHost, 0x2000, 200, true, "reuse", Site::Here());
  c.Access(kHost, 0x400000, 1 << 20, true, "reuse long", Site::Here());
  EXPECT_EQ(c.race_count(), 1);
}

}  // namespace
}  // namespace ckv::kernels::device
