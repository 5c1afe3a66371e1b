// Writes the RoCEv2 frame fuzzer's seed corpus: one well-formed frame of each
// RC opcode (several AETH syndromes, pads 0..3, a full 4096-byte payload,
// the limited-membership P_Key, a GSO segment's Identification) and both
// UD SENDs, built by build_headers and compute_icrc,
// so the fuzzer starts past the parser's first checks and the ICRC check.
// usage: make_roce_corpus <dir>   (scripts/fuzz.sh --corpus builds and runs it)
#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "hca/ring_train.h"
#include "hca/roce_frame.h"

using namespace srdma::hca;
using srdma::MemPiece;

namespace {

// The path the fuzzer checks ICRCs against (must match fuzz/roce_frame_fuzz.cc).
IpUdpFields fuzz_ip(std::uint16_t ip_id = 0) {
  IpUdpFields ip;
  ip.src_ip = 0x0a000001;  // 10.0.0.1
  ip.dst_ip = 0x0a000002;  // 10.0.0.2
  ip.src_port = entropy_port(0x11);
  ip.dst_port = kRoceV2Port;
  ip.ip_id = ip_id;
  ip.dont_fragment = true;
  return ip;
}

std::string dir;

// Headers, payload, pad and ICRC, the way a sender lays them out.
void put(const std::string& name, const FrameHeaders& h, const std::vector<std::byte>& payload,
         std::uint16_t ip_id = 0) {
  std::vector<std::byte> f(h.bytes.begin(), h.bytes.begin() + h.length);
  f.insert(f.end(), payload.begin(), payload.end());
  f.resize(f.size() + h.pad);
  const MemPiece piece{const_cast<std::byte*>(payload.data()), payload.size()};
  const std::span<const MemPiece> pieces(&piece, payload.empty() ? 0 : 1);
  const std::uint32_t icrc = compute_icrc(fuzz_ip(ip_id), {h.bytes.data(), h.length}, pieces,
                                          static_cast<std::uint32_t>(payload.size()), h.pad);
  for (int i = 0; i < 4; ++i) f.push_back(static_cast<std::byte>((icrc >> (8 * i)) & 0xff));
  // Check what we write: a seed the parser refuses would be no seed.
  ParsedFrame out;
  const FrameError e = parse_frame(f, fuzz_ip(), true, out);
  if (e != FrameError::kNone) {
    std::fprintf(stderr, "make_roce_corpus: %s: %s\n", name.c_str(), std::string(frame_error_str(e)).c_str());
    std::exit(1);
  }
  std::ofstream(dir + "/" + name, std::ios::binary)
      .write(reinterpret_cast<const char*>(f.data()), static_cast<std::streamsize>(f.size()));
}

std::vector<std::byte> pattern(std::size_t n, unsigned seed) {
  std::vector<std::byte> b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<std::byte>((i * 7 + seed) & 0xff);
  return b;
}

Packet packet(Opcode op, std::uint32_t payload_length) {
  Packet p;
  p.op = op;
  p.dst_qpn = 0x000123;
  p.psn = 0xfffffe;  // near the wrap
  p.ack_req = ends_message(op) && is_request(op);
  p.solicited = has_imm(op) && ends_message(op);
  if (has_reth(op)) {
    p.va = 0x00007f0000001000;
    p.rkey = 0x00abcd01;
    p.dma_length = op == Opcode::kReadRequest ? 8192 : payload_length;
  }
  if (is_atomic(op)) {
    p.va = 0x00007f0000002008;
    p.rkey = 0x00abcd02;
    p.compare_add = 0x0102030405060708;
    p.swap = op == Opcode::kCmpSwap ? 0x1112131415161718 : 0;
  }
  if (has_aeth(op)) p.msn = 0x000042;
  if (op == Opcode::kAtomicAck) p.atomic_orig = 0x2122232425262728;
  if (has_imm(op)) p.imm = 0xdeadbeef;
  if (has_ieth(op)) p.imm = 0x00abcd03;  // the rkey to invalidate
  p.payload_length = payload_length;
  return p;
}

void put_rc(const std::string& name, Packet p, unsigned seed, std::uint16_t pkey = kDefaultPkey,
            std::uint16_t ip_id = 0) {
  const std::vector<std::byte> payload = pattern(p.payload_length, seed);
  put(name, build_headers(p, pkey), payload, ip_id);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <corpus dir>\n", argv[0]);
    return 2;
  }
  dir = argv[1];
  struct Rc {
    Opcode op;
    const char* name;
    std::uint32_t payload;  // bytes: pads 0..3 spread over the opcodes
  };
  const Rc rc[] = {
      {Opcode::kSendFirst, "send_first", 256},
      {Opcode::kSendMiddle, "send_middle", 256},
      {Opcode::kSendLast, "send_last", 13},
      {Opcode::kSendLastImm, "send_last_imm", 14},
      {Opcode::kSendOnly, "send_only", 15},
      {Opcode::kSendOnlyImm, "send_only_imm", 0},
      {Opcode::kWriteFirst, "write_first", 256},
      {Opcode::kWriteMiddle, "write_middle", 256},
      {Opcode::kWriteLast, "write_last", 1},
      {Opcode::kWriteLastImm, "write_last_imm", 2},
      {Opcode::kWriteOnly, "write_only", 3},
      {Opcode::kWriteOnlyImm, "write_only_imm", 64},
      {Opcode::kReadRequest, "read_request", 0},
      {Opcode::kReadResponseFirst, "read_response_first", 256},
      {Opcode::kReadResponseMiddle, "read_response_middle", 256},
      {Opcode::kReadResponseLast, "read_response_last", 7},
      {Opcode::kReadResponseOnly, "read_response_only", 33},
      {Opcode::kAck, "ack", 0},
      {Opcode::kAtomicAck, "atomic_ack", 0},
      {Opcode::kCmpSwap, "cmp_swap", 0},
      {Opcode::kFetchAdd, "fetch_add", 0},
      {Opcode::kSendLastInv, "send_last_inv", 6},
      {Opcode::kSendOnlyInv, "send_only_inv", 0},
  };
  unsigned seed = 1;
  for (const Rc& c : rc) put_rc(c.name, packet(c.op, c.payload), seed++);

  // Every AETH syndrome, on an ACK.
  struct Nak {
    Syndrome s;
    const char* name;
  };
  const Nak naks[] = {
      {Syndrome::kRnrNak, "ack_rnr_nak"},
      {Syndrome::kPsnSequenceError, "ack_nak_psn_seq"},
      {Syndrome::kInvalidRequest, "ack_nak_invalid_request"},
      {Syndrome::kRemoteAccessError, "ack_nak_remote_access"},
      {Syndrome::kRemoteOperationalError, "ack_nak_remote_op"},
      {Syndrome::kInvalidRdRequest, "ack_nak_invalid_rd_request"},
  };
  for (const Nak& n : naks) {
    Packet p = packet(Opcode::kAck, 0);
    p.syndrome = n.s;
    if (n.s == Syndrome::kRnrNak) p.rnr_timer = 14;
    put_rc(n.name, p, 0);
  }

  // A full path MTU of payload; the limited default P_Key; a GSO segment.
  put_rc("write_only_4096", packet(Opcode::kWriteOnly, kMaxPayload), 3);
  put_rc("send_only_limited_pkey", packet(Opcode::kSendOnly, 8), 4, kLimitedDefaultPkey);
  put_rc("write_middle_ip_id_5", packet(Opcode::kWriteMiddle, 128), 5, kDefaultPkey, 5);

  // UD SEND ONLY, with and without ImmDt.
  Packet ud = packet(Opcode::kSendOnly, 21);
  ud.transport = srdma::QpType::kUd;
  ud.src_qpn = 0x000456;
  ud.qkey = 0x11111111;
  put("ud_send_only", build_headers(ud), pattern(21, 6));
  ud.op = Opcode::kSendOnlyImm;
  ud.imm = 0xcafef00d;
  ud.payload_length = 32;
  ud.qkey = 0x80010000;
  put("ud_send_only_imm", build_headers(ud), pattern(32, 7));

  // A congestion notification (RoCEv2 annex A17.9.3): BECN, PSN 0.
  Packet cnp = packet(Opcode::kCnp, 0);
  cnp.psn = 0;
  put("cnp", build_headers(cnp), {});

  // Train records of a same-host ring (hca/ring_train.h), which the same
  // target decodes too: a WRITE's train, a part of a SEND that starts and
  // ends inside it, a READ's responses.
  struct Train {
    Opcode op, last;
    std::uint32_t count, mtu, last_bytes;
    const char* name;
  };
  const Train trains[] = {
      {Opcode::kWriteFirst, Opcode::kWriteLastImm, 3, 1024, 100, "train_write"},
      {Opcode::kSendMiddle, Opcode::kSendMiddle, 4, 256, 256, "train_send_part"},
      {Opcode::kReadResponseFirst, Opcode::kReadResponseLast, 2, 4096, 4096, "train_read_responses"},
  };
  for (const Train& t : trains) {
    Packet p = packet(t.op, 0);
    p.count = t.count;
    p.last_op = t.last;
    p.payload_length = (t.count - 1) * t.mtu + t.last_bytes;
    if (has_reth(t.op)) p.dma_length = p.payload_length;
    p.imm = 0x01020304;
    const TrainPrefix pre = encode_train(p);
    std::vector<std::byte> r(pre.bytes.begin(), pre.bytes.begin() + static_cast<std::ptrdiff_t>(pre.length));
    const std::vector<std::byte> body = pattern(p.payload_length, seed++);
    r.insert(r.end(), body.begin(), body.end());
    std::array<std::byte, kMaxTrainPrefix> scratch{};
    ParsedFrame out;
    if (decode_train(r, scratch, 4096, out) != FrameError::kNone) {
      std::fprintf(stderr, "make_roce_corpus: %s does not decode\n", t.name);
      return 1;
    }
    std::ofstream(dir + "/" + t.name, std::ios::binary)
        .write(reinterpret_cast<const char*>(r.data()), static_cast<std::streamsize>(r.size()));
  }
  return 0;
}
