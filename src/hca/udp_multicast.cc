// Multicast on the RoCEv2 link (IBA 10.5 for the verbs' side; RoCEv2 maps a
// multicast GID to its IPv4 group, ::ffff:224.x.y.z <-> 224.x.y.z): a UD
// datagram to a group (DestQP 0xFFFFFF) is one UDP datagram to the group's
// address, which the IP network fans out; each receiving device hands it
// to every UD QP attached to the group, as an HCA's multicast table does.
//
// A device joins a group with a socket of its own bound to group:port
// (SO_REUSEADDR, so that the devices of several processes on one host each
// get a copy) and IP_ADD_MEMBERSHIP on the interface of its address; its
// senders name that interface (IP_MULTICAST_IF, udp_link.cc), so on lo the
// groups work without a multicast route. Every frame is parsed and checked
// as a unicast one is (the ICRC over the group's address); one that is not
// a UD SEND to DestQP 0xFFFFFF is dropped and counted (kBadOpcode, kUnknownQp).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <system_error>

#include <fmt/format.h>

#include "hca/queue_engine.h"
#include "hca/udp_link.h"
#include "hca/roce_frame.h"

namespace srdma::hca {
namespace {

constexpr std::uint32_t kMulticastQpn = 0xFFFFFF;
constexpr std::size_t kGroupSlotBytes = 8192;
constexpr int kGroupBatch = 16;  // datagrams read from one group per look

bool is_multicast(std::uint32_t ip) { return (ip >> 28) == 0xE; }

std::string errno_text(int e) { return std::error_code(e, std::generic_category()).message(); }

ip_mreq membership(std::uint32_t group, std::uint32_t local) {
  ip_mreq m{};
  m.imr_multiaddr.s_addr = htonl(group);
  m.imr_interface.s_addr = htonl(local);
  return m;
}

}  // namespace

Result<void> UdpLink::attach_mcast(std::uint32_t group, std::uint32_t qpn) {
  if (v6_) return make_error(EOPNOTSUPP, "multicast on an IPv6 device is not supported (IPv4 groups only)");
  if (!is_multicast(group)) return make_error(EINVAL, fmt::format("{} is not an IPv4 multicast group", ipv4_str(group)));
  std::lock_guard lock(groups_mu_);
  if (!groups_.count(group) && groups_.size() >= kMaxMcastGroups)
    return make_error(ENOMEM, fmt::format("the device has {} multicast groups, its most", kMaxMcastGroups));
  Group& g = groups_[group];
  if (std::find(g.qpns.begin(), g.qpns.end(), qpn) != g.qpns.end())
    return make_error(EEXIST, fmt::format("QP {:#x} is attached to {} already", qpn, ipv4_str(group)));
  if (g.qpns.size() >= kMaxMcastQpsPerGroup)
    return make_error(ENOMEM, fmt::format("group {} has {} QPs attached, its most", ipv4_str(group),
                                          kMaxMcastQpsPerGroup));
  if (g.fd < 0) {
    const int fd = device_udp_socket(SOCK_NONBLOCK);
    if (fd < 0) return make_error(errno, fmt::format("socket() for group {}: {}", ipv4_str(group), errno_text(errno)));
    const int on = 1;
    (void)::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    // Only the groups this socket joined, not every group bound to the
    // port by another process of the host (Linux delivers those by default).
    const int off = 0;
    (void)::setsockopt(fd, IPPROTO_IP, IP_MULTICAST_ALL, &off, sizeof off);
    (void)::setsockopt(fd, IPPROTO_IP, IP_RECVTTL, &on, sizeof on);
    (void)::setsockopt(fd, IPPROTO_IP, IP_RECVTOS, &on, sizeof on);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(group);
    a.sin_port = htons(config_.port);
    if (::bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) {
      const int e = errno;
      ::close(fd);
      groups_.erase(group);
      return make_error(e, fmt::format("cannot bind {}:{}: {}", ipv4_str(group), config_.port, errno_text(e)));
    }
    g.fd = fd;
  }
  if (!g.member) {
    const ip_mreq m = membership(group, ip_);
    if (::setsockopt(g.fd, IPPROTO_IP, IP_ADD_MEMBERSHIP, &m, sizeof m) != 0) {
      const int e = errno;
      if (g.qpns.empty() && !has_groups_.load(std::memory_order_relaxed)) {
        ::close(g.fd);  // nobody polls it yet
        groups_.erase(group);
      }
      return make_error(e, fmt::format("cannot join {} on {}: {}", ipv4_str(group), ipv4_str(ip_), errno_text(e)));
    }
    g.member = true;
  }
  g.qpns.push_back(qpn);
  has_groups_.store(true, std::memory_order_release);
  const std::uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof one);  // a sleeping receive thread polls the new socket too
  return {};
}

Result<void> UdpLink::detach_mcast(std::uint32_t group, std::uint32_t qpn) {
  std::lock_guard lock(groups_mu_);
  auto it = groups_.find(group);
  auto q = it == groups_.end() ? std::vector<std::uint32_t>::iterator{} : std::find(it->second.qpns.begin(), it->second.qpns.end(), qpn);
  if (it == groups_.end() || q == it->second.qpns.end())
    return make_error(ENOENT, fmt::format("QP {:#x} is not attached to {}", qpn, ipv4_str(group)));
  Group& g = it->second;
  g.qpns.erase(q);
  if (g.qpns.empty() && g.member) {
    const ip_mreq m = membership(group, ip_);
    (void)::setsockopt(g.fd, IPPROTO_IP, IP_DROP_MEMBERSHIP, &m, sizeof m);
    g.member = false;
  }
  return {};
}

void UdpLink::wire_fds(std::vector<pollfd>& fds) const {
  fds.push_back({fd_, POLLIN, 0});
  if (!has_groups_.load(std::memory_order_acquire)) return;
  std::lock_guard lock(groups_mu_);
  for (const auto& [group, g] : groups_) fds.push_back({g.fd, POLLIN, 0});
}

int UdpLink::receive_groups() {
  struct Joined {
    std::uint32_t group;
    int fd;
    std::vector<std::uint32_t> qpns;
  };
  std::vector<Joined> joined;
  {
    std::lock_guard lock(groups_mu_);
    for (const auto& [group, g] : groups_) joined.push_back({group, g.fd, g.qpns});
  }
  int handled = 0;
  alignas(8) std::array<std::byte, kGroupSlotBytes> buf;
  for (const Joined& j : joined) {
    for (int i = 0; i < kGroupBatch; ++i) {
      sockaddr_in from{};
      iovec iov{buf.data(), buf.size()};
      alignas(cmsghdr) std::array<std::byte, 64> ctl{};
      msghdr h{};
      h.msg_name = &from;
      h.msg_namelen = sizeof from;
      h.msg_iov = &iov;
      h.msg_iovlen = 1;
      h.msg_control = ctl.data();
      h.msg_controllen = ctl.size();
      const ssize_t len = ::recvmsg(j.fd, &h, MSG_DONTWAIT);
      if (len < 0) break;  // EAGAIN: nothing more in this group
      ++handled;
      int ttl = 64, tos = 0;
      for (cmsghdr* c = CMSG_FIRSTHDR(&h); c != nullptr; c = CMSG_NXTHDR(&h, c)) {
        if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TTL) std::memcpy(&ttl, CMSG_DATA(c), sizeof ttl);
        if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TOS)
          tos = std::to_integer<int>(*reinterpret_cast<const std::byte*>(CMSG_DATA(c)));
      }
      if ((h.msg_flags & MSG_TRUNC) || h.msg_namelen != sizeof from || from.sin_family != AF_INET) {
        dropped_[static_cast<std::size_t>(DropReason::kBadLength)].fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      const std::uint32_t src_ip = ntohl(from.sin_addr.s_addr);
      const IpUdpFields ip{src_ip, j.group, ntohs(from.sin_port), config_.port, 0, true};
      ParsedFrame f;
      const FrameError e =
          parse_frame(std::span<const std::byte>(buf.data(), static_cast<std::size_t>(len)), ip, config_.check_icrc, f);
      if (e != FrameError::kNone) {
        dropped_[static_cast<std::size_t>(drop_reason_of(e))].fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      Packet& p = f.pkt;
      if (p.transport != QpType::kUd) {  // IBA 10.5: only UD is multicast
        dropped_[static_cast<std::size_t>(DropReason::kBadOpcode)].fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      if (p.dst_qpn != kMulticastQpn) {
        dropped_[static_cast<std::size_t>(DropReason::kUnknownQp)].fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      p.src_addr = roce_address(src_ip);
      p.dst_addr = roce_address(j.group);
      p.src_qpn = f.deth_src_qpn;
      p.qkey = f.qkey;
      p.hop_limit = static_cast<std::uint8_t>(ttl);
      p.traffic_class = static_cast<std::uint8_t>(tos);
      frames_received_.fetch_add(1, std::memory_order_relaxed);
      // Every attached QP gets its copy (its own receive WQE, Q_Key check
      // and completion); the payload is read during each delivery.
      for (std::uint32_t qpn : j.qpns) {
        Packet copy = p;
        copy.dst_qpn = qpn;
        engine_->receive(std::move(copy));
      }
    }
  }
  return handled;
}

}  // namespace srdma::hca
