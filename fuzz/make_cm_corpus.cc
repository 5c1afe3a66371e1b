// Writes the CM MAD fuzzer's seed corpus: one well-formed MAD of each
// message the codec decodes (fields at irregular values, private data
// patterned), an rdma_connect REQ over IPv4 and one over IPv6 (an RDMA CM
// header in its private data), an XRC REQ, a SIDR_REQ with its header, and a
// ClassPortInfo Get (refused: unsupported), so the fuzzer starts past the
// header checks.
// usage: make_cm_corpus <dir>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "cm/cm_mad.h"
#include "cm/cma_header.h"

using namespace srdma::cm;

namespace {

std::string dir;

template <std::size_t N>
void fill(std::array<std::byte, N>& a, unsigned seed) {
  for (std::size_t i = 0; i < N; ++i) a[i] = static_cast<std::byte>((i * 7 + seed) & 0xff);
}

void write(const std::string& name, const Mad& m) {
  std::ofstream(dir + "/" + name, std::ios::binary)
      .write(reinterpret_cast<const char*>(m.data()), static_cast<std::streamsize>(m.size()));
}

void put(const std::string& name, const Message& msg, std::uint64_t tid) {
  Mad m{};
  const MadStatus s = encode(msg, tid, m);
  CmMad back;
  // Check what we write: a seed the codec refuses would be no seed.
  if (!s.ok() || !decode(m, back).ok() || !(back.message == msg)) {
    std::fprintf(stderr, "make_cm_corpus: %s: %s\n", name.c_str(), describe(s).c_str());
    std::exit(1);
  }
  write(name, m);
}

Req connect_req(const CmaHeader& h) {
  Req r;
  r.local_comm_id = 0x1a2b3c4d;
  r.service_id = rdma_service_id(kRdmaPsTcp, 4420);
  r.local_ca_guid = 0x0002c90300a1b2c3ULL;
  r.local_qpn = 0x000123;
  r.responder_resources = 16;
  r.initiator_depth = 16;
  r.remote_cm_response_timeout = 20;
  r.starting_psn = 0xabcdef;
  r.local_cm_response_timeout = 20;
  r.retry_count = 7;
  r.rnr_retry_count = 7;
  r.max_cm_retries = 15;
  r.primary_path.local_lid = 0xffff;
  r.primary_path.hop_limit = 64;
  r.primary_path.local_ack_timeout = 18;
  r.primary_path.local_gid[10] = r.primary_path.local_gid[11] = std::byte{0xff};
  r.primary_path.remote_gid = r.primary_path.local_gid;
  fill(r.private_data, 1);
  if (!encode_cma_header(h, r.private_data).ok()) std::exit(1);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_cm_corpus <dir>\n");
    return 2;
  }
  dir = argv[1];
  put("req_ipv4", connect_req(cma_header_v4(0x0a000001, 0x0a000002, 50000)), 1);
  CmaHeader v6;
  v6.ip_version = 6;
  v6.src_port = 50001;
  fill(v6.src_addr, 2);
  fill(v6.dst_addr, 3);
  put("req_ipv6", connect_req(v6), 2);
  Req xrc = connect_req(cma_header_v4(0x0a000001, 0x0a000002, 50002));
  xrc.transport_service_type = TransportServiceType::kExtended;
  xrc.extended_transport_type = kExtendedTransportXrc;
  xrc.srq = true;
  xrc.alternate_path = xrc.primary_path;
  xrc.alternate_path.flow_label = 0xabcde;
  xrc.alternate_path.packet_rate = 0x2a;
  xrc.sap_supported = true;
  put("req_xrc_alt_path", xrc, 3);

  Mra mra;
  mra.local_comm_id = 0x11111111;
  mra.remote_comm_id = 0x1a2b3c4d;
  mra.message_mraed = MsgMraed::kReq;
  mra.service_timeout = 24;
  fill(mra.private_data, 4);
  put("mra", mra, 4);
  Rej rej;
  rej.local_comm_id = 0x11111111;
  rej.remote_comm_id = 0x1a2b3c4d;
  rej.message_rejected = MsgRejected::kReq;
  rej.ari_length = 8;
  rej.reason = RejectReason::kConsumerDefined;
  fill(rej.ari, 5);
  fill(rej.private_data, 6);
  put("rej", rej, 5);
  Rep rep;
  rep.local_comm_id = 0x11111111;
  rep.remote_comm_id = 0x1a2b3c4d;
  rep.local_qpn = 0x000456;
  rep.starting_psn = 0x123456;
  rep.vendor_id = 0x0002c9;
  rep.responder_resources = 16;
  rep.initiator_depth = 16;
  rep.target_ack_delay = 15;
  rep.failover_accepted = FailoverAccepted::kNotSupported;
  rep.rnr_retry_count = 7;
  rep.local_ca_guid = 0x0002c90300d4e5f6ULL;
  fill(rep.private_data, 7);
  put("rep", rep, 6);
  Rtu rtu;
  rtu.local_comm_id = 0x1a2b3c4d;
  rtu.remote_comm_id = 0x11111111;
  put("rtu", rtu, 7);
  Dreq dreq;
  dreq.local_comm_id = 0x1a2b3c4d;
  dreq.remote_comm_id = 0x11111111;
  dreq.remote_qpn_eecn = 0x000456;
  put("dreq", dreq, 8);
  Drep drep;
  drep.local_comm_id = 0x11111111;
  drep.remote_comm_id = 0x1a2b3c4d;
  put("drep", drep, 9);
  SidrReq sreq;
  sreq.request_id = 0xcafebabe;
  sreq.service_id = rdma_service_id(kRdmaPsUdp, 7174);
  if (!encode_cma_header(cma_header_v4(0x0a000001, 0x0a000002, 50003), sreq.private_data).ok()) return 1;
  put("sidr_req", sreq, 10);
  SidrRep srep;
  srep.request_id = 0xcafebabe;
  srep.qpn = 0x00face;
  srep.qkey = 0x01234567;
  srep.service_id = sreq.service_id;
  srep.info_length = 16;
  fill(srep.info, 8);
  put("sidr_rep", srep, 11);

  // A ClassPortInfo Get: refused (unsupported), a seed for that verdict.
  Mad cpi{};
  (void)encode(Rtu{}, 12, cpi);
  cpi[3] = std::byte{kMethodGet};
  cpi[17] = std::byte{0x01};
  write("class_port_info_get", cpi);
  return 0;
}
