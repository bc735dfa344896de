// Snapshot writer and reader (format: model/kv/snapshot.h). Both walk the
// same field order, section by section, so each Write* has its Read* below.
#include "model/kv/snapshot.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "model/kv/checksum.h"
#include "model/kv/snapshot_format.h"
#include "model/kv/snapshot_settings.h"

namespace ckv {
namespace fmt = snapshot_format;
namespace {

constexpr size_t kMiB = size_t{1} << 20;

// ------------------------------------------------------------ byte sinks

class Out {
 public:
  virtual ~Out() = default;
  virtual void Put(const void* p, size_t n) = 0;
  template <class T>
  void Pod(T v) {
    Put(&v, sizeof(v));
  }
  void Str(const std::string& s) {
    Pod(static_cast<uint32_t>(s.size()));
    Put(s.data(), s.size());
  }
  template <class T>
  void Array(const std::vector<T>& v) {
    Pod(static_cast<uint64_t>(v.size()));
    Put(v.data(), v.size() * sizeof(T));
  }
};

class CountOut final : public Out {
 public:
  void Put(const void*, size_t n) override { bytes += n; }
  uint64_t bytes = 0;
};

// Forwards to `next`, counting bytes and the CRC-32C.
class CrcOut final : public Out {
 public:
  explicit CrcOut(Out* next) : next_(next) {}
  void Put(const void* p, size_t n) override {
    crc = Crc32c(crc, p, n);
    bytes += n;
    next_->Put(p, n);
  }
  uint32_t crc = 0;
  uint64_t bytes = 0;

 private:
  Out* next_;
};

class StringOut final : public Out {
 public:
  explicit StringOut(std::string* s) : s_(s) {}
  void Put(const void* p, size_t n) override {
    s_->append(static_cast<const char*>(p), n);
  }

 private:
  std::string* s_;
};

// Buffered writes to a file descriptor; the first error sticks.
class FileOut final : public Out {
 public:
  explicit FileOut(int fd) : fd_(fd) { buf_.reserve(kMiB); }
  void Put(const void* p, size_t n) override {
    if (buf_.size() + n > kMiB) Flush();
    if (n >= kMiB) {
      WriteAll(static_cast<const char*>(p), n);
    } else {
      buf_.append(static_cast<const char*>(p), n);
    }
  }
  void Flush() {
    WriteAll(buf_.data(), buf_.size());
    buf_.clear();
  }
  int error() const { return error_; }

 private:
  void WriteAll(const char* p, size_t n) {
    while (error_ == 0 && n > 0) {
      const ssize_t w = ::write(fd_, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        error_ = w < 0 ? errno : EIO;
        return;
      }
      p += w;
      n -= static_cast<size_t>(w);
    }
  }
  int fd_;
  int error_ = 0;
  std::string buf_;
};

// ---------------------------------------------------------------- writing

template <class Body>
void Section(Out& out, uint32_t tag, const Body& body) {
  CountOut count;
  body(count);
  out.Pod(tag);
  out.Pod(uint32_t{0});
  out.Pod(count.bytes);
  body(out);
}

void WriteMeta(Out& o, const SnapshotMeta& m) {
  o.Str(m.session_id);
  o.Str(m.parent_id);
  o.Str(m.tenant);
  o.Pod(m.idle_ttl_seconds);
  const SamplingParams& s = m.sampling;
  o.Str(snapshot_settings::EncodeSampling(s));
  o.Pod(static_cast<uint32_t>(s.stop.size()));
  for (const auto& stop : s.stop) o.Str(stop);
  o.Pod(static_cast<uint32_t>(s.logit_bias.size()));
  for (const auto& [id, bias] : s.logit_bias) {
    o.Pod(int32_t{id});
    o.Pod(float{bias});
  }
  o.Array(m.last_logits);
  const SnapshotConversation& c = m.conversation;
  o.Pod(static_cast<uint8_t>(c.active));
  if (!c.active) return;
  o.Pod(static_cast<uint8_t>(c.reply_open));
  o.Pod(static_cast<uint32_t>(c.messages.size()));
  for (const auto& [role, content] : c.messages) {
    o.Str(role);
    o.Str(content);
  }
  o.Str(c.text);
}

void WriteConf(Out& o, const KvShape& shape, const KvStoreConfig& c) {
  for (int32_t v :
       {shape.n_layers, shape.n_heads, shape.n_kv_heads, shape.head_dim}) {
    o.Pod(v);
  }
  o.Str(snapshot_settings::EncodeKv(c));
}

void WriteEdges(Out& o, const StoreParts& p) {
  o.Pod(p.n_tokens);
  o.Pod(p.sink_rows);
  o.Pod(p.tail_rows);
  o.Pod(static_cast<uint64_t>(p.segments.size()));
  for (int l = 0; l < p.shape.n_layers; ++l) {
    o.Array(p.sink_k[l]);
    o.Array(p.sink_v[l]);
    o.Array(p.tail_k[l]);
    o.Array(p.tail_v[l]);
  }
}

// The K (or V) rows of a segment layer as an Array in position order, the
// file's order, whichever order memory holds them in (clustered heads are
// stored by cluster; the reader's Restore sorts them again).
void WriteRowsInPositionOrder(Out& o, const Segment& seg, int l, bool values) {
  const SegmentLayer& layer = seg.layer(l);
  o.Pod(static_cast<uint64_t>((values ? layer.v : layer.k).size()));
  const int64_t n = seg.size();
  const int hd = seg.shape().head_dim;
  const size_t head_bytes = sizeof(uint16_t) * n * hd;
  std::vector<uint16_t> rows;
  for (int h = 0; h < seg.shape().n_kv_heads; ++h) {
    const uint16_t* src = values ? seg.values(l, h) : seg.keys(l, h);
    if (seg.row_positions(l, h) == nullptr) {
      o.Put(src, head_bytes);
      continue;
    }
    rows.resize(size_t{1} * n * hd);
    for (int32_t r = 0; r < n; ++r) {
      std::memcpy(&rows[size_t{1} * r * hd],
                  src + int64_t{seg.StoredRow(l, h, r)} * hd,
                  sizeof(uint16_t) * hd);
    }
    o.Put(rows.data(), head_bytes);
  }
}

void WriteSegment(Out& o, const Segment& seg) {
  o.Pod(seg.first_pos());
  o.Pod(seg.size());
  for (int l = 0; l < seg.shape().n_layers; ++l) {
    const SegmentLayer& layer = seg.layer(l);
    WriteRowsInPositionOrder(o, seg, l, false);
    WriteRowsInPositionOrder(o, seg, l, true);
    o.Pod(static_cast<uint32_t>(layer.heads.size()));
    for (const HeadIndex& h : layer.heads) {
      o.Pod(int32_t{h.k});
      o.Pod(int32_t{h.kmeans_iterations});
      o.Array(h.centroids);
      o.Array(h.offsets);
      o.Array(h.members);
      o.Array(h.page_min);
      o.Array(h.page_max);
    }
  }
}

void WritePayload(Out& o, const Snapshot& s) {
  Section(o, fmt::kMeta, [&](Out& x) { WriteMeta(x, s.meta); });
  Section(o, fmt::kConf,
          [&](Out& x) { WriteConf(x, s.store.shape, s.store.config); });
  Section(o, fmt::kEdge, [&](Out& x) { WriteEdges(x, s.store); });
  for (const auto& seg : s.store.segments) {
    Section(o, fmt::kSegm, [&](Out& x) { WriteSegment(x, *seg); });
  }
}

fmt::Header MakeHeader(const Snapshot& s, uint64_t model_fingerprint,
                       const CrcOut& payload) {
  fmt::Header h;
  std::memcpy(h.magic, fmt::kMagic, sizeof(h.magic));
  h.version = kSnapshotVersion;
  h.header_bytes = kSnapshotHeaderBytes;
  h.model_fingerprint = model_fingerprint;
  h.store_fingerprint = StoreFingerprint(s.store.shape, s.store.config);
  h.payload_bytes = payload.bytes;
  h.payload_crc = payload.crc;
  h.header_crc = Crc32c(0, &h, fmt::kHeaderCrcBytes);
  return h;
}

absl::Status IoError(int err, absl::string_view what, const std::string& p) {
  return absl::ErrnoToStatus(err, absl::StrCat(what, " '", p, "'"));
}

// fsync of the folder holding `path`, so that a rename is durable.
void SyncParent(const std::string& path) {
  const std::filesystem::path parent =
      std::filesystem::path(path).parent_path();
  const std::string dir = parent.empty() ? std::string(".") : parent.string();
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  (void)::fsync(fd);
  ::close(fd);
}

// Writes header and payload to `fd`; returns the bytes written.
absl::StatusOr<int64_t> WriteTo(int fd, const Snapshot& s,
                                uint64_t model_fingerprint,
                                const std::string& path) {
  FileOut file(fd);
  const std::string placeholder(kSnapshotHeaderBytes, '\0');
  file.Put(placeholder.data(), placeholder.size());
  CrcOut payload(&file);
  WritePayload(payload, s);
  file.Flush();
  const fmt::Header h = MakeHeader(s, model_fingerprint, payload);
  int err = file.error();
  if (err == 0 && ::pwrite(fd, &h, sizeof(h), 0) != sizeof(h)) {
    err = errno != 0 ? errno : EIO;
  }
  if (err == 0 && ::fsync(fd) != 0) err = errno;
  if (err != 0) return IoError(err, "cannot write snapshot", path);
  return static_cast<int64_t>(kSnapshotHeaderBytes + payload.bytes);
}

// ---------------------------------------------------------------- reading

absl::Status Corrupt(absl::string_view what) {
  return absl::DataLossError(absl::StrCat("corrupt snapshot: ", what));
}

absl::Status Mismatch(absl::string_view what) {
  return absl::FailedPreconditionError(
      absl::StrCat("snapshot does not fit this server: ", what));
}

// Reads fields in order; the first error sticks and later reads return
// zeros without touching memory. Counts are checked against the bytes that
// remain before anything is allocated.
class In {
 public:
  In(const char* p, size_t n, size_t base) : p_(p), n_(n), base_(base) {}

  size_t remaining() const { return n_ - pos_; }
  bool ok() const { return status_.ok(); }
  const absl::Status& status() const { return status_; }
  size_t offset() const { return base_ + pos_; }
  void Fail(absl::Status s) {
    if (status_.ok()) status_ = std::move(s);
  }

  template <class T>
  T Pod(const char* what) {
    T v{};
    if (!Need(sizeof(T), what)) return v;
    std::memcpy(&v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string Str(const char* what) {
    const uint32_t n = Pod<uint32_t>(what);
    if (!Need(n, what)) return "";
    std::string s(p_ + pos_, n);
    pos_ += n;
    return s;
  }
  template <class T>
  void Array(std::vector<T>* v, const char* what) {
    const uint64_t count = Pod<uint64_t>(what);
    if (ok() && count > remaining() / sizeof(T)) Truncated(what);
    if (!ok()) return;
    v->resize(count);
    Copy(v->data(), count * sizeof(T));
  }
  // An array whose length must be `count`, into `dst` (count elements).
  template <class T>
  void Fixed(T* dst, uint64_t count, const char* what) {
    const uint64_t n = Pod<uint64_t>(what);
    if (ok() && n != count) {
      Fail(Corrupt(absl::StrCat(what, ": ", n, " elements, ", count,
                                " expected (offset ", offset(), ")")));
    }
    if (ok() && n > remaining() / sizeof(T)) Truncated(what);
    if (ok()) Copy(dst, n * sizeof(T));
  }
  // A reader over the next n bytes (n <= remaining()).
  In Sub(size_t n) {
    In sub(p_ + pos_, n, offset());
    pos_ += n;
    return sub;
  }
  bool Need(uint64_t n, const char* what) {
    if (ok() && n > remaining()) Truncated(what);
    return ok();
  }

 private:
  void Truncated(const char* what) {
    Fail(absl::DataLossError(
        absl::StrCat("snapshot truncated: ", what, " at byte ", offset(),
                     " runs past the end of its section or file")));
  }
  void Copy(void* dst, size_t bytes) {
    if (bytes == 0) return;  // dst may be null (an empty vector)
    std::memcpy(dst, p_ + pos_, bytes);
    pos_ += bytes;
  }

  const char* p_;
  size_t n_, base_, pos_ = 0;
  absl::Status status_;
};

absl::StatusOr<In> OpenSection(In& in, uint32_t tag, const char* name) {
  const uint32_t t = in.Pod<uint32_t>(name);
  in.Pod<uint32_t>(name);
  const uint64_t len = in.Pod<uint64_t>(name);
  if (!in.ok()) return in.status();
  if (t != tag) {
    return Corrupt(absl::StrCat("expected section ", name, " at byte ",
                                in.offset() - fmt::kSectionHeaderBytes));
  }
  if (!in.Need(len, name)) return in.status();
  return in.Sub(len);
}

absl::Status CloseSection(const In& sec, const char* name) {
  if (!sec.ok()) return sec.status();
  if (sec.remaining() != 0) {
    return Corrupt(absl::StrCat("section ", name, " has ", sec.remaining(),
                                " unexpected trailing bytes"));
  }
  return absl::OkStatus();
}

absl::StatusOr<fmt::Header> ReadHeader(absl::string_view bytes,
                                       const SnapshotExpect& e) {
  fmt::Header h;
  if (bytes.size() < sizeof(h)) {
    return absl::DataLossError(absl::StrCat(
        "snapshot truncated: ", bytes.size(), " bytes, less than its ",
        kSnapshotHeaderBytes, "-byte header"));
  }
  std::memcpy(&h, bytes.data(), sizeof(h));
  if (std::memcmp(h.magic, fmt::kMagic, sizeof(h.magic)) != 0) {
    return Corrupt("not a clusterkv snapshot (bad magic)");
  }
  if (e.verify_checksums &&
      Crc32c(0, &h, fmt::kHeaderCrcBytes) != h.header_crc) {
    return Corrupt("header checksum mismatch");
  }
  if ((h.version != kSnapshotVersion && h.version != kSnapshotVersionV1) ||
      h.header_bytes != sizeof(h)) {
    return Mismatch(absl::StrCat("format version ", h.version,
                                 ", this server reads versions ",
                                 kSnapshotVersionV1, " to ", kSnapshotVersion));
  }
  if (h.model_fingerprint != e.model_fingerprint) {
    return Mismatch(absl::StrFormat(
        "written for another model file (fingerprint %016x, the loaded "
        "model's is %016x)",
        h.model_fingerprint, e.model_fingerprint));
  }
  const size_t payload = bytes.size() - sizeof(h);
  if (h.payload_bytes != payload) {
    return absl::DataLossError(absl::StrCat(
        "snapshot truncated or padded: the header says ", h.payload_bytes,
        " payload bytes, the file has ", payload));
  }
  if (e.verify_checksums &&
      Crc32c(0, bytes.data() + sizeof(h), payload) != h.payload_crc) {
    return Corrupt("payload checksum mismatch");
  }
  return h;
}

// Version 1: the fields it had, in order.
void ReadSamplingV1(In& in, SamplingParams* s) {
  s->temperature = in.Pod<float>("temperature");
  s->top_k = in.Pod<int32_t>("top_k");
  s->top_p = in.Pod<float>("top_p");
  s->seed = in.Pod<uint64_t>("seed");
  s->max_tokens = in.Pod<int32_t>("max_tokens");
}

absl::Status ReadSampling(In& in, uint32_t version, SamplingParams* s) {
  if (version == kSnapshotVersionV1) {
    ReadSamplingV1(in, s);
  } else {
    const std::string record = in.Str("sampling settings");
    if (!in.ok()) return in.status();
    if (auto st = snapshot_settings::DecodeSampling(record, s); !st.ok()) {
      return st;
    }
  }
  const uint32_t n_stop = in.Pod<uint32_t>("stop strings");
  if (!in.Need(uint64_t{n_stop} * 4, "stop strings")) return in.status();
  for (uint32_t i = 0; i < n_stop && in.ok(); ++i) {
    s->stop.push_back(in.Str("stop string"));
  }
  if (version == kSnapshotVersionV1) return in.status();
  const uint32_t n_bias = in.Pod<uint32_t>("logit bias");
  if (!in.Need(uint64_t{n_bias} * 8, "logit bias")) return in.status();
  for (uint32_t i = 0; i < n_bias && in.ok(); ++i) {
    const int32_t id = in.Pod<int32_t>("logit bias id");
    s->logit_bias[id] = in.Pod<float>("logit bias");
  }
  return in.status();
}

// A flag byte: 0 or 1, else corrupt.
bool Flag(In& in, const char* what) {
  const uint8_t v = in.Pod<uint8_t>(what);
  if (v > 1) in.Fail(Corrupt(absl::StrCat(what, " is neither 0 nor 1")));
  return v == 1;
}

absl::Status ReadConversation(In& in, SnapshotConversation* c) {
  c->active = Flag(in, "conversation flag");
  if (!c->active) return in.status();
  c->reply_open = Flag(in, "conversation reply flag");
  const uint32_t n = in.Pod<uint32_t>("conversation messages");
  if (!in.Need(uint64_t{n} * 8, "conversation messages")) return in.status();
  for (uint32_t i = 0; i < n && in.ok(); ++i) {
    std::string role = in.Str("message role");
    c->messages.emplace_back(std::move(role), in.Str("message content"));
  }
  c->text = in.Str("conversation text");
  return in.status();
}

absl::Status ReadMeta(In& in, const SnapshotExpect& e, uint32_t version,
                      SnapshotMeta* m) {
  m->session_id = in.Str("session id");
  m->parent_id = in.Str("parent id");
  m->tenant = in.Str("tenant");
  m->idle_ttl_seconds = in.Pod<uint32_t>("idle ttl");
  if (!in.ok()) return in.status();
  if (auto st = ReadSampling(in, version, &m->sampling); !st.ok()) return st;
  in.Array(&m->last_logits, "last logits");
  if (version != kSnapshotVersionV1) {
    if (auto st = ReadConversation(in, &m->conversation); !st.ok()) return st;
  }
  if (!in.ok()) return in.status();
  if (m->session_id.empty()) return Corrupt("empty session id");
  if (auto st = ValidateSamplingParams(m->sampling); !st.ok()) {
    return Corrupt(absl::StrCat("sampling defaults: ", st.message()));
  }
  if (!m->last_logits.empty() && e.vocab_size > 0 &&
      m->last_logits.size() != static_cast<size_t>(e.vocab_size)) {
    return Mismatch(absl::StrCat(m->last_logits.size(),
                                 " logits, the model's "
                                 "vocabulary has ",
                                 e.vocab_size, " tokens"));
  }
  return absl::OkStatus();
}

absl::Status ReadKvSettings(In& in, uint32_t version, KvStoreConfig* c) {
  if (version == kSnapshotVersionV1) {
    snapshot_settings::KvIntsV1 ints;
    for (int32_t& v : ints) v = in.Pod<int32_t>("KV config");
    const uint64_t seed = in.Pod<uint64_t>("KV config seed");
    const int64_t max_tokens = in.Pod<int64_t>("KV config max_tokens");
    if (!in.ok()) return in.status();
    return snapshot_settings::DecodeKvV1(ints, seed, max_tokens, c);
  }
  const std::string record = in.Str("KV settings");
  if (!in.ok()) return in.status();
  return snapshot_settings::DecodeKv(record, c);
}

absl::Status ReadConf(In& in, const SnapshotExpect& e,
                      const fmt::Header& header, StoreParts* p) {
  KvShape& s = p->shape;
  s.n_layers = in.Pod<int32_t>("shape");
  s.n_heads = in.Pod<int32_t>("shape");
  s.n_kv_heads = in.Pod<int32_t>("shape");
  s.head_dim = in.Pod<int32_t>("shape");
  if (auto st = ReadKvSettings(in, header.version, &p->config); !st.ok()) {
    return st;
  }
  if (auto st = ValidateKvStoreConfig(p->config); !st.ok()) {
    return Corrupt(absl::StrCat("KV config: ", st.message()));
  }
  const KvShape& w = e.shape;
  s.layer_window = w.layer_window;  // the model's, not stored
  if (s.n_layers != w.n_layers || s.n_heads != w.n_heads ||
      s.n_kv_heads != w.n_kv_heads || s.head_dim != w.head_dim) {
    return Mismatch(absl::StrFormat(
        "KV shape %d layers x %d heads (%d KV) x %d differs from the "
        "model's %d x %d (%d) x %d",
        s.n_layers, s.n_heads, s.n_kv_heads, s.head_dim, w.n_layers, w.n_heads,
        w.n_kv_heads, w.head_dim));
  }
  const uint64_t fingerprint =
      header.version == kSnapshotVersionV1
          ? snapshot_settings::StoreFingerprintV1(s, p->config)
          : StoreFingerprint(s, p->config);
  if (e.verify_checksums && fingerprint != header.store_fingerprint) {
    return Mismatch("store parameters differ from the header's fingerprint");
  }
  if (p->config.sink_tokens > e.max_tokens) {
    return Mismatch("sink_tokens above this server's max_session_tokens");
  }
  p->config.max_tokens = e.max_tokens;
  return absl::OkStatus();
}

size_t RowElems(const KvShape& s, int64_t rows) {
  return size_t{1} * s.n_kv_heads * static_cast<size_t>(rows) * s.head_dim;
}

absl::Status ReadEdges(In& in, const SnapshotExpect& e, StoreParts* p,
                       uint64_t* n_segments) {
  p->n_tokens = in.Pod<int64_t>("token count");
  p->sink_rows = in.Pod<int64_t>("sink rows");
  p->tail_rows = in.Pod<int64_t>("tail rows");
  *n_segments = in.Pod<uint64_t>("segment count");
  if (!in.ok()) return in.status();
  if (p->n_tokens > e.max_tokens) {
    return Mismatch(absl::StrCat("the session holds ", p->n_tokens,
                                 " tokens, more than max_session_tokens (",
                                 e.max_tokens, ")"));
  }
  if (p->n_tokens < 0 || p->sink_rows < 0 || p->tail_rows < 0 ||
      p->sink_rows > p->config.sink_tokens || p->tail_rows > p->n_tokens) {
    return Corrupt("token counts out of range");
  }
  const int n_layers = p->shape.n_layers;
  for (auto* rows : {&p->sink_k, &p->sink_v, &p->tail_k, &p->tail_v}) {
    rows->resize(n_layers);
  }
  const size_t sink = RowElems(p->shape, p->sink_rows);
  const size_t tail = RowElems(p->shape, p->tail_rows);
  for (int l = 0; l < n_layers && in.ok(); ++l) {
    for (auto [rows, n] : {std::pair{&p->sink_k, sink},
                           {&p->sink_v, sink},
                           {&p->tail_k, tail},
                           {&p->tail_v, tail}}) {
      // Checked before resizing: the rows must be in the file.
      if (!in.Need(n * 2, "sink/tail rows")) break;
      (*rows)[l].resize(n);
      in.Fixed((*rows)[l].data(), n, "sink/tail rows");
    }
  }
  return in.status();
}

absl::StatusOr<std::shared_ptr<Segment>> ReadSegment(In& in,
                                                     const SnapshotExpect& e,
                                                     const KvShape& shape) {
  const int64_t first_pos = in.Pod<int64_t>("segment position");
  const int64_t n = in.Pod<int64_t>("segment rows");
  if (!in.ok()) return in.status();
  if (n < 1 || n > e.max_tokens || first_pos < 0 || first_pos > e.max_tokens) {
    return Corrupt("segment rows or position out of range");
  }
  const size_t elems = RowElems(shape, n);
  if (!in.Need(uint64_t{2} * 2 * elems * shape.n_layers, "segment rows")) {
    return in.status();
  }
  auto seg = std::make_shared<Segment>(Segment::NextUid(), first_pos, n, shape,
                                       e.arena);
  for (int l = 0; l < shape.n_layers && in.ok(); ++l) {
    SegmentLayer& layer = seg->layer(l);
    in.Fixed(layer.k.data(), elems, "segment keys");
    in.Fixed(layer.v.data(), elems, "segment values");
    const uint32_t heads = in.Pod<uint32_t>("index heads");
    if (in.ok() && heads != 0 && heads != uint32_t(shape.n_kv_heads)) {
      return Corrupt("index head count");
    }
    layer.heads.resize(in.ok() ? heads : 0);
    for (HeadIndex& h : layer.heads) {
      h.k = in.Pod<int32_t>("cluster count");
      h.kmeans_iterations = in.Pod<int32_t>("k-means iterations");
      in.Array(&h.centroids, "centroids");
      in.Array(&h.offsets, "cluster offsets");
      in.Array(&h.members, "cluster members");
      in.Array(&h.page_min, "page minima");
      in.Array(&h.page_max, "page maxima");
    }
  }
  if (!in.ok()) return in.status();
  return seg;
}

absl::Status ReadPayload(In& in, const SnapshotExpect& e, const fmt::Header& h,
                         Snapshot* s) {
  auto meta = OpenSection(in, fmt::kMeta, "META");
  if (!meta.ok()) return meta.status();
  if (auto st = ReadMeta(*meta, e, h.version, &s->meta); !st.ok()) return st;
  if (auto st = CloseSection(*meta, "META"); !st.ok()) return st;
  auto conf = OpenSection(in, fmt::kConf, "CONF");
  if (!conf.ok()) return conf.status();
  if (auto st = ReadConf(*conf, e, h, &s->store); !st.ok()) return st;
  if (auto st = CloseSection(*conf, "CONF"); !st.ok()) return st;
  auto edge = OpenSection(in, fmt::kEdge, "EDGE");
  if (!edge.ok()) return edge.status();
  uint64_t n_segments = 0;
  if (auto st = ReadEdges(*edge, e, &s->store, &n_segments); !st.ok()) {
    return st;
  }
  if (auto st = CloseSection(*edge, "EDGE"); !st.ok()) return st;
  if (n_segments > in.remaining() / fmt::kSectionHeaderBytes) {
    return Corrupt("more segments than the file can hold");
  }
  for (uint64_t i = 0; i < n_segments; ++i) {
    auto sec = OpenSection(in, fmt::kSegm, "SEGM");
    if (!sec.ok()) return sec.status();
    auto seg = ReadSegment(*sec, e, s->store.shape);
    if (!seg.ok()) return seg.status();
    if (auto st = CloseSection(*sec, "SEGM"); !st.ok()) return st;
    s->store.segments.push_back(*std::move(seg));
  }
  if (in.remaining() != 0) {
    return Corrupt(
        absl::StrCat(in.remaining(), " bytes after the last section"));
  }
  return absl::OkStatus();
}

}  // namespace

// ------------------------------------------------------------ public API

absl::StatusOr<uint64_t> ModelFingerprint(
    const std::string& path, const std::vector<gguf::TensorInfo>& tensors) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return IoError(errno, "cannot open model", path);
  struct stat st;
  const uint64_t size = ::fstat(fd, &st) == 0 ? uint64_t(st.st_size) : 0;
  uint64_t h = Fnv1a64(kFnvOffset, &size, sizeof(size));
  std::string buf(std::min<uint64_t>(size, kMiB), '\0');
  for (uint64_t at : {uint64_t{0}, size - buf.size()}) {
    if (::pread(fd, buf.data(), buf.size(), at) !=
        static_cast<ssize_t>(buf.size())) {
      const int err = errno != 0 ? errno : EIO;
      ::close(fd);
      return IoError(err, "cannot read model", path);
    }
    const uint32_t crc = Crc32c(0, buf.data(), buf.size());
    h = Fnv1a64(h, &crc, sizeof(crc));
  }
  ::close(fd);
  for (const gguf::TensorInfo& t : tensors) {
    h = Fnv1a64(h, t.name.data(), t.name.size() + 1);  // with the NUL
    h = Fnv1a64(h, t.dims.data(), t.dims.size() * sizeof(int64_t));
    h = Fnv1a64(h, &t.type, sizeof(t.type));
    h = Fnv1a64(h, &t.offset, sizeof(t.offset));
  }
  return h;
}

uint64_t StoreFingerprint(const KvShape& shape, const KvStoreConfig& c) {
  const uint32_t version = kSnapshotVersion;
  return snapshot_settings::LayoutFingerprint(
      Fnv1a64(kFnvOffset, &version, sizeof(version)), shape, c);
}

std::string SerializeSnapshot(const Snapshot& s, uint64_t model_fingerprint) {
  std::string bytes(kSnapshotHeaderBytes, '\0');
  StringOut out(&bytes);
  CrcOut payload(&out);
  WritePayload(payload, s);
  const fmt::Header h = MakeHeader(s, model_fingerprint, payload);
  std::memcpy(bytes.data(), &h, sizeof(h));
  return bytes;
}

absl::StatusOr<int64_t> WriteSnapshotFile(const std::string& path,
                                          const Snapshot& s,
                                          uint64_t model_fingerprint) {
  const std::string tmp = path + ".tmp";
  const int fd =
      ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return IoError(errno, "cannot create snapshot", tmp);
  auto bytes = WriteTo(fd, s, model_fingerprint, tmp);
  if (::close(fd) != 0 && bytes.ok()) {
    bytes = IoError(errno, "cannot write snapshot", tmp);
  }
  if (bytes.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    bytes = IoError(errno, "cannot rename snapshot to", path);
  }
  if (!bytes.ok()) {
    ::unlink(tmp.c_str());
    return bytes.status();
  }
  SyncParent(path);
  return bytes;
}

absl::StatusOr<Snapshot> ParseSnapshot(absl::string_view bytes,
                                       const SnapshotExpect& expect) {
  auto header = ReadHeader(bytes, expect);
  if (!header.ok()) return header.status();
  In in(bytes.data() + kSnapshotHeaderBytes,
        bytes.size() - kSnapshotHeaderBytes, kSnapshotHeaderBytes);
  Snapshot s;
  if (auto st = ReadPayload(in, expect, *header, &s); !st.ok()) return st;
  return s;
}

absl::StatusOr<Snapshot> ReadSnapshotFile(const std::string& path,
                                          const SnapshotExpect& expect) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return IoError(errno, "cannot open snapshot", path);
  struct stat st;
  std::string bytes;
  int err = ::fstat(fd, &st) == 0 ? 0 : errno;
  if (err == 0) bytes.resize(static_cast<size_t>(st.st_size));
  for (size_t done = 0; err == 0 && done < bytes.size();) {
    const ssize_t r = ::pread(fd, bytes.data() + done, bytes.size() - done,
                              static_cast<off_t>(done));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      err = r < 0 ? errno : 0;
      bytes.resize(done);  // shrank while reading: parse what is there
      break;
    }
    done += static_cast<size_t>(r);
  }
  ::close(fd);
  if (err != 0) return IoError(err, "cannot read snapshot", path);
  auto s = ParseSnapshot(bytes, expect);
  if (!s.ok()) {
    return absl::Status(s.status().code(),
                        absl::StrCat(path, ": ", s.status().message()));
  }
  return s;
}

}  // namespace ckv
