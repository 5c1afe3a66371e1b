// Address handles (UD): where a datagram goes, and the way back to a
// datagram's sender from its completion and GRH area.
#include <arpa/inet.h>

#include <cstring>
#include <new>

#include "convert.h"
#include "errors.h"
#include "objects.h"

using namespace srdma;
using namespace srdma::verbs;

namespace {

// rxe's GRH area on RoCEv2 IPv4: 20 zero bytes, then the IPv4 header.
constexpr std::size_t kIpv4HeaderAt = 20;

// ibv_init_ah_from_wc's failure: -1 with errno, as its man page says.
int init_ah_fails(std::string_view reason) {
  fail("ibv_init_ah_from_wc", EINVAL, reason);
  return -1;
}

}  // namespace

extern "C" {

ibv_ah* ibv_create_ah(ibv_pd* pd, ibv_ah_attr* attr) {
  if (!pd || !attr) return fail_null<ibv_ah>("ibv_create_ah", EINVAL, "NULL PD or attr");
  auto peer = peer_address(to_ctx(pd->context)->ipv4, *attr);
  if (!peer) return fail_null<ibv_ah>("ibv_create_ah", peer.error());
  AhAttr a;
  a.dest_addr = *peer;
  a.is_global = attr->is_global != 0;
  if (a.is_global) {
    a.hop_limit = attr->grh.hop_limit;
    a.traffic_class = attr->grh.traffic_class;
    a.flow_label = attr->grh.flow_label & 0xFFFFF;
    std::memcpy(a.dgid.data(), attr->grh.dgid.raw, a.dgid.size());
  }
  a.sl = attr->sl & 0xF;
  auto* ah = new (std::nothrow) Ah{};
  if (!ah) return fail_null<ibv_ah>("ibv_create_ah", ENOMEM, "out of memory");
  auto core = pd_core(pd).create_ah(a);
  if (!core) {
    delete ah;
    return fail_null<ibv_ah>("ibv_create_ah", core.error());
  }
  ah->core = std::move(*core);
  ah->ibv.context = pd->context;
  ah->ibv.pd = pd;
  to_ctx(pd->context)->adopt(Kind::kAh, ah);
  return &ah->ibv;
}

int ibv_destroy_ah(ibv_ah* ah) {
  if (!ah) return fail("ibv_destroy_ah", EINVAL, "NULL AH");
  to_ctx(ah->context)->release(Kind::kAh, ah);
  delete to_ah(ah);
  return 0;
}

int ibv_init_ah_from_wc(ibv_context* context, std::uint8_t port_num, ibv_wc* wc, ibv_grh* grh, ibv_ah_attr* ah_attr) {
  if (!context || !wc || !ah_attr) return init_ah_fails("NULL argument");
  if (port_num != 1) return init_ah_fails("the device has one port, port 1");
  std::memset(ah_attr, 0, sizeof *ah_attr);
  ah_attr->dlid = wc->slid;
  ah_attr->sl = wc->sl;
  ah_attr->port_num = port_num;
  if (!(wc->wc_flags & IBV_WC_GRH)) return 0;
  if (!grh) return init_ah_fails("a completion with a GRH but no GRH buffer");
  const auto* g6 = reinterpret_cast<const std::uint8_t*>(grh);
  if ((g6[0] >> 4) == 6) {  // over IPv6 the GRH area is the datagram's IPv6 header
    if (g6[6] != 17) return init_ah_fails("the GRH area's IPv6 header is not of a UDP datagram");
    ah_attr->is_global = 1;
    std::memcpy(ah_attr->grh.dgid.raw, g6 + 8, 16);  // its source: where the answer goes
    ah_attr->grh.sgid_index = 0;
    ah_attr->grh.hop_limit = 0xFF;
    ah_attr->grh.traffic_class = static_cast<std::uint8_t>((g6[0] & 0xf) << 4 | g6[1] >> 4);
    return 0;
  }
  const auto* ip = reinterpret_cast<const std::uint8_t*>(grh) + kIpv4HeaderAt;
  if ((ip[0] >> 4) != 4) return init_ah_fails("the GRH area holds no IPv4 header");
  std::uint32_t saddr;
  std::memcpy(&saddr, ip + 12, sizeof saddr);
  const Gid g = gid_of_ipv4(ntohl(saddr));
  ah_attr->is_global = 1;
  std::memcpy(ah_attr->grh.dgid.raw, g.data(), g.size());
  ah_attr->grh.sgid_index = 0;
  ah_attr->grh.hop_limit = 0xFF;
  ah_attr->grh.traffic_class = ip[1];
  return 0;
}

ibv_ah* ibv_create_ah_from_wc(ibv_pd* pd, ibv_wc* wc, ibv_grh* grh, std::uint8_t port_num) {
  if (!pd) return fail_null<ibv_ah>("ibv_create_ah_from_wc", EINVAL, "NULL PD");
  ibv_ah_attr attr;
  if (int r = ibv_init_ah_from_wc(pd->context, port_num, wc, grh, &attr); r) return nullptr;
  return ibv_create_ah(pd, &attr);
}

}  // extern "C"
