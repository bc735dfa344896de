#include "server/admission.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace ckv::server {

AdmissionTicket::~AdmissionTicket() {
  owner_->Release(tenant_, host_, device_);
}

Admission::Admission(const ServerLimits& limits, const SessionManager* sessions,
                     int n_layers, ServerMetrics* metrics)
    : limits_(limits),
      sessions_(sessions),
      n_layers_(std::max(1, n_layers)),
      metrics_(metrics) {}

absl::Status Admission::Reject(Limit limit, int64_t need, int64_t max) {
  if (metrics_ != nullptr) metrics_->AdmissionRejected(LimitName(limit));
  return LimitExceeded(
      limit, max,
      absl::StrCat(LimitName(limit), " limit exceeded: the request needs ",
                   need, ", the limit is ", max));
}

int64_t Admission::DeviceBytesEstimate(const KvStoreConfig& kv,
                                       int64_t new_tokens) const {
  const int64_t per_layer = sessions_->HostBytesPerToken() / n_layers_;
  const int dense = kv.policy == KvPolicy::kFull
                        ? n_layers_
                        : std::min(kv.dense_layers, n_layers_);
  const int64_t tail = std::min<int64_t>(new_tokens, kv.window);
  return per_layer * (new_tokens * dense + tail * (n_layers_ - dense));
}

absl::StatusOr<std::unique_ptr<AdmissionTicket>> Admission::Admit(
    const AdmissionRequest& r) {
  if (r.input_tokens > limits_.max_prompt_tokens) {
    return Reject(Limit::kMaxPromptTokens, r.input_tokens,
                  limits_.max_prompt_tokens);
  }
  const int64_t new_tokens = r.input_tokens + r.max_new_tokens;
  const int64_t session_after = r.session_tokens + new_tokens;
  if (session_after > limits_.max_session_tokens) {
    return Reject(Limit::kMaxSessionTokens, session_after,
                  limits_.max_session_tokens);
  }
  const int64_t host = new_tokens * sessions_->HostBytesPerToken();
  const int64_t device = DeviceBytesEstimate(r.kv, new_tokens);
  const MemoryTotals totals = sessions_->Totals();
  const int64_t tenant_host = limits_.tenant_max_host_kv_bytes > 0
                                  ? sessions_->TenantTotals(r.tenant).host_bytes
                                  : 0;
  absl::MutexLock lock(&mu_);
  const int64_t host_after = totals.host_bytes + reserved_host_ + host;
  if (host_after > limits_.max_host_kv_bytes) {
    return Reject(Limit::kMaxHostKvBytes, host_after,
                  limits_.max_host_kv_bytes);
  }
  const int64_t device_after = totals.device_bytes + reserved_device_ + device;
  if (device_after > limits_.max_device_kv_bytes) {
    return Reject(Limit::kMaxDeviceKvBytes, device_after,
                  limits_.max_device_kv_bytes);
  }
  if (auto s = CheckTenantLocked(r.tenant, tenant_host, host); !s.ok()) {
    return s;
  }
  ++admitted_;
  reserved_host_ += host;
  reserved_device_ += device;
  reserved_tenant_host_[r.tenant] += host;
  return std::make_unique<AdmissionTicket>(this, r.tenant, host, device);
}

// The tenant's sessions (`tenant_host`: shared segments once) plus its
// reservations plus this request.
absl::Status Admission::CheckTenantLocked(const std::string& tenant,
                                          int64_t tenant_host, int64_t host) {
  const int64_t max = limits_.tenant_max_host_kv_bytes;
  if (max <= 0) return absl::OkStatus();
  auto it = reserved_tenant_host_.find(tenant);
  const int64_t reserved = it == reserved_tenant_host_.end() ? 0 : it->second;
  const int64_t after = tenant_host + reserved + host;
  if (after > max) return Reject(Limit::kTenantMaxHostKvBytes, after, max);
  return absl::OkStatus();
}

AdmissionStats Admission::stats() const {
  absl::MutexLock lock(&mu_);
  return {admitted_, reserved_host_, reserved_device_};
}

void Admission::Release(const std::string& tenant, int64_t host,
                        int64_t device) {
  absl::MutexLock lock(&mu_);
  reserved_host_ -= host;
  reserved_device_ -= device;
  auto it = reserved_tenant_host_.find(tenant);
  if (it != reserved_tenant_host_.end() && (it->second -= host) == 0) {
    reserved_tenant_host_.erase(it);
  }
}

}  // namespace ckv::server
