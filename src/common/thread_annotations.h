// Clang's thread-safety annotations (-Wthread-safety): which lock guards a
// field, which lock a function needs held, which a guard takes. GCC
// ignores them (the macros are empty there); scripts/thread_safety.sh runs
// clang's analysis over the data path, and CI runs that script.
#pragma once

#if defined(__clang__)
#define SRDMA_TSA(x) __attribute__((x))
#else
#define SRDMA_TSA(x)
#endif

#define CAPABILITY(name) SRDMA_TSA(capability(name))
#define SCOPED_CAPABILITY SRDMA_TSA(scoped_lockable)
#define GUARDED_BY(lock) SRDMA_TSA(guarded_by(lock))
#define REQUIRES(...) SRDMA_TSA(requires_capability(__VA_ARGS__))
#define EXCLUDES(...) SRDMA_TSA(locks_excluded(__VA_ARGS__))
#define ACQUIRE(...) SRDMA_TSA(acquire_capability(__VA_ARGS__))
#define RELEASE(...) SRDMA_TSA(release_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) SRDMA_TSA(try_acquire_capability(__VA_ARGS__))
#define ASSERT_CAPABILITY(x) SRDMA_TSA(assert_capability(x))
#define LOCK_RETURNED(x) SRDMA_TSA(lock_returned(x))
#define NO_THREAD_SAFETY_ANALYSIS SRDMA_TSA(no_thread_safety_analysis)
