// The process's IPv6 addresses on the RoCEv2 link (net.h, kRoce6AddressTag).
//
// Append-only: an entry, once published, never changes or goes, so a link
// address handed out stays valid for the life of the process and readers
// take no lock. Adding takes a mutex; looking up (the receive path, once
// per datagram) probes an open-addressing index of twice the capacity, so
// a probe sequence ends at an empty slot within a few steps. The index is
// keyed by a hash seeded at random per process: a sender cannot choose
// addresses that collide here.
#include <array>
#include <atomic>
#include <cstring>
#include <mutex>

#include <fmt/format.h>

#include "common/secure_random.h"
#include "srdma/net.h"

namespace srdma {
namespace {

constexpr std::uint32_t kIndexSlots = 2 * kMaxIpv6Addresses;
static_assert((kIndexSlots & (kIndexSlots - 1)) == 0);

struct Table {
  std::mutex add_mu;
  std::atomic<std::uint32_t> count{0};
  std::atomic<std::uint32_t> arrivals{0};  // entries added by roce_address_of_arrival (under add_mu)
  std::array<Gid, kMaxIpv6Addresses> entries{};
  // Entry index + 1; 0 is empty.
  std::array<std::atomic<std::uint32_t>, kIndexSlots> index{};
  const std::uint64_t seed = secure_random_u64();
};

Table& table() {
  static auto* t = new Table;  // never destroyed: addresses outlive static destruction order
  return *t;
}

std::uint32_t slot_of(const Table& t, const Gid& g) {
  std::uint64_t a, b;
  std::memcpy(&a, g.data(), 8);
  std::memcpy(&b, g.data() + 8, 8);
  std::uint64_t h = (a ^ t.seed) * 0x9E3779B97F4A7C15ull;
  h = (h ^ (h >> 29) ^ b) * 0xBF58476D1CE4E5B9ull;
  h ^= h >> 32;
  return static_cast<std::uint32_t>(h) & (kIndexSlots - 1);
}

// The entry's index + 1, or 0.
std::uint32_t find(const Table& t, const Gid& g) {
  for (std::uint32_t s = slot_of(t, g), n = 0; n < kIndexSlots; s = (s + 1) & (kIndexSlots - 1), ++n) {
    const std::uint32_t e = t.index[s].load(std::memory_order_acquire);
    if (e == 0) return 0;
    if (t.entries[e - 1] == g) return e;
  }
  return 0;
}

// The link address of `a`, added if new and there is room: ENOSPC when
// the table is full or, for an arrival, the allowance is spent.
Result<std::uint64_t> intern(const IpAddress& a, bool arrival) {
  if (a.is_v4()) return roce_address(a.v4());
  Table& t = table();
  if (const std::uint32_t e = find(t, a.bytes); e != 0) return roce6_address(e - 1);
  std::lock_guard lock(t.add_mu);
  if (const std::uint32_t e = find(t, a.bytes); e != 0) return roce6_address(e - 1);
  const std::uint32_t n = t.count.load(std::memory_order_relaxed);
  if (n == kMaxIpv6Addresses)
    return make_error(ENOSPC, fmt::format("{} IPv6 peers named already, the most a process holds", n));
  if (arrival) {
    if (t.arrivals.load(std::memory_order_relaxed) >= kMaxIpv6Arrivals)
      return make_error(ENOSPC, "the CM's allowance of IPv6 sources is spent");
    t.arrivals.fetch_add(1, std::memory_order_relaxed);
  }
  t.entries[n] = a.bytes;
  std::uint32_t s = slot_of(t, a.bytes);
  while (t.index[s].load(std::memory_order_relaxed) != 0) s = (s + 1) & (kIndexSlots - 1);
  t.count.store(n + 1, std::memory_order_release);
  t.index[s].store(n + 1, std::memory_order_release);  // publishes entries[n]
  return roce6_address(n);
}

}  // namespace

Result<std::uint64_t> roce_address_of(const IpAddress& a) { return intern(a, false); }

std::uint64_t roce_address_of_arrival(const IpAddress& a) {
  // Neither an unspecified nor a multicast source names a peer.
  if (a.bytes == Gid{} || a.bytes[0] == 0xff) return 0;
  // Spent: a flood of new sources costs a lookup, no lock.
  if (ipv6_arrivals_taken() >= kMaxIpv6Arrivals) return known_roce_address(a);
  return intern(a, true).value_or(0);
}

std::size_t ipv6_arrivals_taken() { return table().arrivals.load(std::memory_order_relaxed); }

std::uint64_t known_roce_address(const IpAddress& a) {
  if (a.is_v4()) return roce_address(a.v4());
  const std::uint32_t e = find(table(), a.bytes);
  return e == 0 ? 0 : roce6_address(e - 1);
}

bool roce6_known(std::uint64_t a) {
  return is_roce6_address(a) && roce6_index(a) < table().count.load(std::memory_order_acquire);
}

IpAddress ip_of_roce_address(std::uint64_t a) {
  if (is_roce_address(a)) return IpAddress::of_v4(roce_ipv4(a));
  if (!roce6_known(a)) return IpAddress{};  // the unspecified address: nobody
  return IpAddress{table().entries[roce6_index(a)]};
}

Gid gid_of_roce_address(std::uint64_t a) { return ip_of_roce_address(a).bytes; }

Result<std::uint64_t> roce_address_of_gid(const Gid& gid) {
  const IpAddress a{gid};
  if (a.is_v4()) return roce_address(a.v4());
  if (gid == Gid{}) return make_error(EINVAL, "the GID is the unspecified address ::");
  if (gid[0] == 0xff) return make_error(EINVAL, "the GID is an IPv6 multicast address (not supported)");
  return roce_address_of(a);
}

std::size_t ipv6_table_size() { return table().count.load(std::memory_order_acquire); }

}  // namespace srdma
