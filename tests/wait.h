// The tests' one set of waiting helpers.
//
// A wait for something that must happen polls with a generous deadline (this
// machine is shared and noisy): the deadline only bounds a failure. A check
// that something must NOT happen never sleeps: it drains what could cause it
// first (EventQueue::drain, WorkQueue::drain, drain_cq() below) or waits for
// a later event that is ordered after it (a fence completion on the same QP).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <span>
#include <thread>
#include <vector>

#include "srdma/cq.h"

namespace srdma::test {

inline constexpr std::chrono::milliseconds kDeadline = std::chrono::seconds(10);

// Polls `pred` until it holds; false if the deadline passed first.
template <class F>
bool eventually(F pred, std::chrono::milliseconds limit = kDeadline) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return true;
}

// Polls `cq` (a srdma::CompletionQueue or an hca::Cq) until `n` completions
// came or the deadline passed; returns those that came.
template <class CqT>
std::vector<Wc> poll_n(CqT& cq, std::size_t n, std::chrono::milliseconds limit = kDeadline) {
  std::vector<Wc> out;
  const auto end = std::chrono::steady_clock::now() + limit;
  while (out.size() < n) {
    Wc wc[16];
    const int k = cq.poll(std::span<Wc>(wc, std::min<std::size_t>(16, n - out.size())));
    out.insert(out.end(), wc, wc + k);
    if (k > 0) continue;
    if (std::chrono::steady_clock::now() > end) break;
    std::this_thread::yield();
  }
  return out;
}

// The next completion of `cq`; a test failure (and kGeneralErr) if none came.
template <class CqT>
Wc poll_one(CqT& cq, std::chrono::milliseconds limit = kDeadline) {
  auto wcs = poll_n(cq, 1, limit);
  if (wcs.size() == 1) return wcs[0];
  ADD_FAILURE() << "no completion";
  Wc wc;
  wc.status = WcStatus::kGeneralErr;
  return wc;
}

// Quiesces the completion processing of a core CQ: once it returns, every
// event its vector had scheduled before the call has been handled, and for a
// WORKQUEUE or UNBOUND CQ every work item queued before the handlers
// returned has run. A check that no event or done() came follows it.
void drain_cq(CompletionQueue& cq);

}  // namespace srdma::test
