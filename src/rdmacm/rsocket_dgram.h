// Datagram rsockets (SOCK_DGRAM) over UD, rdma-core 44's ds_ protocol:
//  - the rsocket's number is a kernel UDP socket's fd: the address space,
//    binding and the first contact are UDP's;
//  - a datagram to a peer whose UD QP we do not know yet goes over that
//    UDP socket behind a 16-byte ds_udp_header (tag 0x55555555, version 4,
//    op DATA or CTRL, length 16, our QPN, our IPv4 address); whoever gets a
//    DATA this way answers a CTRL header (its QPN), and both sides then
//    make an address handle to the other;
//  - from then on datagrams are UD SENDs (Q_Key RDMA_UDP_QKEY) of an
//    8-byte ds_header (version 4, length 8, the sender's UDP port and IPv4
//    address, so the receiver can name the source) and the data, at most
//    2048 bytes in all (RS_SNDLOWAT).
// rdma-core runs the UDP side in a service thread; here the socket's own
// calls (and rpoll) read it, so no thread is needed.
#pragma once

#include <netinet/in.h>
#include <poll.h>

#include <cstdint>
#include <deque>
#include <map>
#include <vector>

#include "rsocket.h"

namespace srdma::rdmacm::rs {

constexpr std::uint32_t kDsUdpTag = 0x55555555;
constexpr std::size_t kDsUdpHeaderBytes = 16;
constexpr std::size_t kDsHeaderBytes = 8;
constexpr std::size_t kGrhBytes = 40;
constexpr std::uint32_t kDsSlot = kSndLowat;  // one datagram's room, its header included

struct DgramPeer {
  ibv_ah* ah = nullptr;
  std::uint32_t qpn = 0;
};

struct DgramMsg {
  sockaddr_in from{};
  int slot = -1;                   // a receive slot of the QP, or
  std::vector<std::uint8_t> data;  // a datagram that came over UDP
  std::uint32_t offset = 0, length = 0;
};

struct Dgram {
  int udp = -1;
  std::uint32_t ip = 0;  // ours, network order
  std::uint16_t port = 0;
  rdma_cm_id* id = nullptr;
  ibv_comp_channel* channel = nullptr;
  ibv_cq* cq = nullptr;
  bool armed = false;
  // rdma-core sizes both by its 128 KiB buffers (64 slots); a bigger ring
  // (local only: nothing on the wire says it) drops fewer datagrams of a
  // sender that outruns a software receiver.
  int sq_size = 64, rq_size = 1024;
  std::uint8_t* rbuf = nullptr;  // rq_size slots, then one GRH slot
  std::uint8_t* sbuf = nullptr;  // sq_size slots
  ibv_mr* rmr = nullptr;
  ibv_mr* smr = nullptr;
  std::vector<int> free_slots;
  std::deque<DgramMsg> ready;
  std::map<std::uint64_t, DgramPeer> peers;  // by (ip << 16 | port)
  bool connected = false;
  sockaddr_in peer{};
  ~Dgram();
};

// The SOCK_DGRAM halves of the calls (rsocket.cc and friends dispatch).
int dgram_socket(RSocket& rs);
int dgram_bind(RSocket& rs, const sockaddr* addr, socklen_t len);
int dgram_connect(RSocket& rs, const sockaddr* addr, socklen_t len);
// rgetsockname (peer false) and rgetpeername, in the socket's domain.
int dgram_name(RSocket& rs, bool peer, sockaddr* addr, socklen_t* len);
ssize_t dgram_sendto(RSocket& rs, const void* buf, std::size_t len, int flags, const sockaddr* to, socklen_t tolen);
ssize_t dgram_recvfrom(RSocket& rs, void* buf, std::size_t len, int flags, sockaddr* from, socklen_t* fromlen);
// rpoll: the ready events, never blocking; and the fds to sleep on.
short dgram_revents(RSocket& rs, short events);
// Arms the CQ (true when it was not: check again before sleeping).
bool dgram_arm(RSocket& rs);
void dgram_wait_fds(RSocket& rs, std::vector<pollfd>& out);
void dgram_after_wait(RSocket& rs);

}  // namespace srdma::rdmacm::rs
