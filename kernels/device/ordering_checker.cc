#include "kernels/device/ordering_checker.h"

#include <algorithm>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ckv::kernels::device {
namespace {

std::string AgentName(int agent) {
  return agent == OrderingChecker::kHost ? std::string("host")
                                         : absl::StrCat("stream ", agent - 1);
}

}  // namespace

OrderingChecker::OrderingChecker() { agents_.emplace_back(); }

int OrderingChecker::AddAgent() {
  agents_.emplace_back();
  return static_cast<int>(agents_.size()) - 1;
}

int OrderingChecker::AddEvent() {
  events_.emplace_back();
  return static_cast<int>(events_.size()) - 1;
}

uint32_t& OrderingChecker::At(Clock& c, int agent) {
  if (agent >= static_cast<int>(c.size())) c.resize(agent + 1, 0);
  return c[agent];
}

uint32_t OrderingChecker::Get(const Clock& c, int agent) {
  return agent < static_cast<int>(c.size()) ? c[agent] : 0;
}

void OrderingChecker::Join(Clock& into, const Clock& from) {
  if (into.size() < from.size()) into.resize(from.size(), 0);
  for (size_t i = 0; i < from.size(); ++i) {
    into[i] = std::max(into[i], from[i]);
  }
}

void OrderingChecker::Issue(int agent) {
  Join(agents_[agent], agents_[kHost]);
  ++At(agents_[agent], agent);
}

void OrderingChecker::Access(int agent, uint64_t begin, int64_t bytes,
                             bool write, const std::string& what, Site site) {
  if (bytes <= 0) return;
  const uint64_t end = begin + static_cast<uint64_t>(bytes);
  if (agent == kHost) ++At(agents_[kHost], kHost);
  const Clock& now = agents_[agent];
  const uint32_t tick = Get(now, agent);
  // Only overlapping records are compared: short ones start within
  // kShortBytes before `begin`.
  matches_.clear();
  const uint64_t from = begin >= kShortBytes ? begin - kShortBytes + 1 : 0;
  for (auto it = short_.lower_bound(from);
       it != short_.end() && it->first < end; ++it) {
    if (it->second.end > begin) {
      matches_.push_back({it->second.seq, true, it->first});
    }
  }
  for (size_t i = 0; i < long_.size(); ++i) {
    if (long_[i].begin < end && begin < long_[i].end) {
      matches_.push_back({long_[i].seq, false, i});
    }
  }
  std::sort(matches_.begin(), matches_.end(),
            [](const Match& a, const Match& b) { return a.seq < b.seq; });
  bool drop_long = false;
  for (const Match& m : matches_) {
    AccessRecord* p = nullptr;
    auto found = short_.end();
    if (m.in_short) {
      for (found = short_.lower_bound(m.key); found->second.seq != m.seq;) {
        ++found;
      }
      p = &found->second;
    } else {
      p = &long_[m.key];
    }
    const bool ordered = p->tick <= Get(now, p->agent);
    if ((p->write || write) && !ordered) {
      ++race_count_;
      if (races_.size() < kMaxReports) {
        races_.push_back(absl::StrFormat(
            "unordered %s of [0x%x, +%d) by %s (%s at %s) and earlier %s by "
            "%s (%s at %s): add an event record/wait or a synchronisation",
            write ? "write" : "read", begin, bytes, AgentName(agent), what,
            SiteString(site), p->write ? "write" : "read", AgentName(p->agent),
            p->what, SiteString(p->site)));
      }
    }
    // A record ordered before this access and covered by it says nothing
    // more (a later conflict with it would conflict with this one too).
    const bool covered = p->begin >= begin && p->end <= end;
    if (covered && ordered && (write || !p->write)) {
      if (m.in_short) {
        short_.erase(found);
      } else {
        p->end = p->begin;  // dropped below
        drop_long = true;
      }
    }
  }
  if (drop_long) {
    std::erase_if(long_,
                  [](const AccessRecord& r) { return r.end == r.begin; });
  }
  AccessRecord r{begin, end, write, agent, tick, what, site, next_seq_++};
  if (end - begin <= kShortBytes) {
    short_.emplace(begin, std::move(r));
  } else {
    long_.push_back(std::move(r));
  }
}

void OrderingChecker::Record(int event, int agent) {
  Issue(agent);
  events_[event] = agents_[agent];
}

void OrderingChecker::Wait(int agent, int event) {
  Issue(agent);
  Join(agents_[agent], events_[event]);
}

void OrderingChecker::HostJoinAgent(int agent) {
  Join(agents_[kHost], agents_[agent]);
}

void OrderingChecker::HostJoinEvent(int event) {
  Join(agents_[kHost], events_[event]);
}

void OrderingChecker::HostJoinAll() {
  for (size_t a = 1; a < agents_.size(); ++a) Join(agents_[kHost], agents_[a]);
}

void OrderingChecker::Forget(uint64_t begin, int64_t bytes) {
  const uint64_t end = begin + static_cast<uint64_t>(bytes);
  for (auto it = short_.lower_bound(begin);
       it != short_.end() && it->first < end;) {
    it = it->second.end <= end ? short_.erase(it) : std::next(it);
  }
  std::erase_if(long_, [&](const AccessRecord& p) {
    return p.begin >= begin && p.end <= end;
  });
}

}  // namespace ckv::kernels::device
