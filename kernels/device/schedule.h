// How the fake device runs enqueued work (fake_runtime.h): its own header so
// that settings (model/backend/backend.h's BackendOptions) can name a
// schedule without the fake's threads and locks.
#pragma once

namespace ckv::kernels::device {

// kInline: at enqueue; kLazy: only when a synchronisation or a cross-stream
// wait forces it; kThreaded: a worker per stream with seeded random delays.
enum class Schedule { kInline, kLazy, kThreaded };
// "inline", "lazy", "threaded".
const char* ScheduleName(Schedule s);
// The schedule of a name above; false (out unchanged) when unknown.
bool ParseSchedule(const char* name, Schedule* out);

}  // namespace ckv::kernels::device
