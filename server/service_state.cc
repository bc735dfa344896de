#include "server/service_state.h"

namespace ckv::server {

void ServiceState::SetBackend(const ServiceBackend& backend) {
  absl::MutexLock lock(&mu_);
  backend_ = backend;
  ready_ = true;
}

absl::StatusOr<ServiceBackend> ServiceState::Backend() const {
  if (draining()) return absl::UnavailableError("server is draining");
  absl::MutexLock lock(&mu_);
  if (!ready_) return absl::UnavailableError("model is loading");
  return backend_;
}

ServiceBackend ServiceState::backend_unchecked() const {
  absl::MutexLock lock(&mu_);
  return backend_;
}

void ServiceState::StreamStarted() {
  absl::MutexLock lock(&mu_);
  ++streams_;
}

void ServiceState::StreamEnded() {
  absl::MutexLock lock(&mu_);
  --streams_;
}

int ServiceState::active_streams() const {
  absl::MutexLock lock(&mu_);
  return streams_;
}

bool ServiceState::WaitStreamsDone(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto done = [this]()
                  ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return streams_ == 0; };
  return mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
}

}  // namespace ckv::server
