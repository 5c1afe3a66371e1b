// Thread placement helpers: the allowed CPUs in order, and refusals.
#include "common/cpu_affinity.h"

#include <gtest/gtest.h>

#include <sched.h>

#include <thread>

namespace srdma {
namespace {

TEST(CpuAffinity, NthAllowedCpuWalksTheAllowedSetInOrder) {
  const int n = allowed_cpu_count();
  ASSERT_GT(n, 0);
  int last = -1;
  for (int i = 0; i < n; ++i) {
    const int cpu = nth_allowed_cpu(i);
    ASSERT_GT(cpu, last) << i;
    last = cpu;
  }
  EXPECT_EQ(nth_allowed_cpu(n), -1) << "only n CPUs";
  EXPECT_EQ(nth_allowed_cpu(-1), -1);
}

TEST(CpuAffinity, PinsAThreadAndRefusesANonsenseCpu) {
  std::thread t([] {
    EXPECT_FALSE(pin_thread(pthread_self(), -1));
    EXPECT_FALSE(pin_thread(pthread_self(), CPU_SETSIZE));
    const int cpu = nth_allowed_cpu(0);
    ASSERT_TRUE(pin_thread(pthread_self(), cpu));
    EXPECT_EQ(sched_getcpu(), cpu);
    EXPECT_EQ(allowed_cpu_count(), 1) << "the thread's own mask is now one CPU";
  });
  t.join();
}

}  // namespace
}  // namespace srdma
