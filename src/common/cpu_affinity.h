// Thread placement: which CPUs this process may run on, and pinning a
// thread to one of them (the completion vectors' threads, the work queues,
// the two sides of `srdma perf`'s ping-pong).
#pragma once

#include <pthread.h>

namespace srdma {

// The CPUs the calling thread may run on: the online ones minus whatever a
// cpuset or taskset (or an earlier pin of this thread) took away. 0 if the
// kernel does not say.
int allowed_cpu_count();
// The n-th of those CPUs (n from 0), or -1 if there are n or fewer.
int nth_allowed_cpu(int n);
// Pins `thread` to `cpu`; false if the kernel refuses (best effort).
bool pin_thread(pthread_t thread, int cpu);

}  // namespace srdma
