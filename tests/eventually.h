// Polls a condition until it holds or a generous deadline passes: tests
// that wait for another thread on this noisy machine.
#pragma once

#include <chrono>
#include <thread>

namespace srdma::test {

template <class F>
bool eventually(F pred, std::chrono::milliseconds limit = std::chrono::seconds(10)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return true;
}

}  // namespace srdma::test
