// The device's threads (receive, timers, completion vectors, async events)
// must not take the application's signals: a program's SIGALRM belongs to
// its own threads (qperf ends each test with one), and rdma-core runs no
// threads that could take it. A thread inherits its creator's signal mask,
// so the verbs that may start device threads run under this guard.
#pragma once

#include <pthread.h>
#include <signal.h>

namespace srdma::verbs {

class SignalsBlocked {
 public:
  SignalsBlocked() {
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old_);
  }
  ~SignalsBlocked() { pthread_sigmask(SIG_SETMASK, &old_, nullptr); }
  SignalsBlocked(const SignalsBlocked&) = delete;
  SignalsBlocked& operator=(const SignalsBlocked&) = delete;

 private:
  sigset_t old_;
};

}  // namespace srdma::verbs
