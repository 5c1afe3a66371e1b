// rsockets' wire protocol, as rdma-core 44's librdmacm/rsocket.c speaks it
// over an RC QP, and the checks on everything a peer sends. Pure: no verbs,
// no sockets, so the protocol's pieces are tested on their own
// (tests/rsocket_wire_test.cc).
//
//  - The connection's private data (REQ and REP): struct rs_conn_data,
//    40 bytes, multi-byte fields big-endian: version 1, flags (bit 0: the
//    sender is big-endian, bit 1: it has an iomap area), receive credits,
//    3 reserved bytes, the iomap size (a scaled byte), then two
//    {addr u64, key u32, length u32} entries: the sender's target SGL (where
//    the peer RDMA-writes buffer advertisements; length counts entries) and
//    the first half of its receive buffer.
//  - Every message is an RDMA WRITE WITH IMM (a zero-length one for pure
//    control): bits 31..29 of the immediate are the operation, 28..0 its
//    argument (bytes for DATA, the new credit limit for SGL, the index for
//    IOMAP_SGL, the control code for CTRL). RDMA WRITE without an immediate
//    carries riowrite's data and keepalives; the receiver sees no
//    completion for those.
//  - Buffer advertisements and iomap entries are written by the peer in
//    OUR byte order (the writer swaps when the flags say the hosts differ),
//    so they are read as host-order structs.
#pragma once

#include <cstddef>
#include <cstdint>

namespace srdma::rdmacm::rs {

// Operations in the immediate's top three bits.
enum Op : std::uint32_t {
  kOpData = 0,
  kOpRsvdDataMore = 1,
  kOpWrite = 2,  // riowrite's: never sent as an immediate
  kOpRsvdDraMore = 3,
  kOpSgl = 4,
  kOpRsvd = 5,
  kOpIomapSgl = 6,
  kOpCtrl = 7,
};
enum Ctrl : std::uint32_t { kCtrlDisconnect = 0, kCtrlKeepalive = 1, kCtrlShutdown = 2 };

constexpr std::uint32_t make_imm(std::uint32_t op, std::uint32_t data) { return (op << 29) | (data & 0x1FFFFFFF); }
constexpr std::uint32_t imm_op(std::uint32_t imm) { return imm >> 29; }
constexpr std::uint32_t imm_data(std::uint32_t imm) { return imm & 0x1FFFFFFF; }

constexpr std::uint8_t kVersion = 1;
constexpr std::uint8_t kFlagNet = 1 << 0;    // the sender is big-endian
constexpr std::uint8_t kFlagIomap = 1 << 1;  // an iomap area follows the target SGL
constexpr int kSglSize = 2;                  // entries in our target SGL (RS_SGL_SIZE)
constexpr std::size_t kConnDataBytes = 40;
constexpr std::uint32_t kMaxTransfer = 65536;  // one WRITE's most (RS_MAX_TRANSFER)
constexpr std::uint32_t kSndLowat = 2048;      // RS_SNDLOWAT
constexpr int kCtrlQueue = 4;                  // control messages in flight (RS_QP_CTRL_SIZE)
constexpr int kQpMinSize = 16;
constexpr int kQpMaxSize = 0xFFFE;

// Most target-SGL entries and iomap entries a peer may announce: ours has 2
// and 256 is the iomap's largest (a scaled byte); we write into the
// peer's area at index * 16 and index * 24, so both are bounded.
constexpr std::uint32_t kMaxPeerSglEntries = 64;

// struct rs_sge: what a buffer advertisement and the private data carry.
struct Sge {
  std::uint64_t addr;
  std::uint32_t key;
  std::uint32_t length;
};
static_assert(sizeof(Sge) == 16);
// struct rs_iomap: one riomap'd region of the peer's.
struct Iomap {
  std::uint64_t offset;
  Sge sge;
};
static_assert(sizeof(Iomap) == 24);

// rs_value_to_scale / rs_scale_to_value: an 8-bit size that is exact up to
// 128 and a multiple of 256 above (iomap sizes).
int value_to_scale(int value, int bits);
int scale_to_value(int value, int bits);

// The parsed private data, in host order.
struct ConnData {
  std::uint8_t version = kVersion;
  std::uint8_t flags = 0;
  std::uint16_t credits = 0;
  std::uint8_t target_iomap_size = 0;  // scaled
  Sge target_sgl{};                    // length: entries
  Sge data_buf{};                      // length: bytes
};

// Writes `c` as rs_conn_data (40 bytes) into out.
void format_conn_data(const ConnData& c, std::uint8_t* out);
// Parses a peer's private data; false (and *why) when it is short, of
// another version, or names an SGL or buffer no rsocket sends: no credits,
// a target SGL of 0 or more than kMaxPeerSglEntries entries, an empty
// buffer or one over 2^29 bytes (DATA's immediate cannot say more), or an
// address range that wraps.
bool parse_conn_data(const void* data, std::size_t len, ConnData& out, const char** why);

// Whether a buffer advertisement the peer wrote into our target SGL may be
// written into: non-empty, at most 2^29 bytes, not wrapping.
bool valid_target_sge(const Sge& s);

// What a receive completion's immediate asks of the receiver.
enum class Action { kData, kCredits, kIomapUpdated, kDisconnect, kShutdown, kKeepalive, kError };
struct Decoded {
  Action action = Action::kError;
  std::uint32_t value = 0;  // bytes (kData), the new credit limit (kCredits), index (kIomapUpdated)
  const char* why = nullptr;
};
// Decodes an immediate; `iomap_entries` is how many iomap entries we
// offered (an IOMAP_SGL index beyond it is an error). Reserved operations,
// RS_OP_WRITE (never sent as an immediate) and unknown control codes are
// errors.
Decoded decode_imm(std::uint32_t imm, std::uint32_t iomap_entries);

// The receiver's side of the flow control, checking what the peer claims:
// DATA may not exceed the bytes advertised and not yet filled, nor the
// messages queued exceed the receive ring (the peer's credits). Bytes are
// counted modulo 2^64, never wrapping in practice.
class RecvLedger {
 public:
  // `first_grant`: the buffer in the private data; `ring`: messages the
  // receiver can hold unread (its credits, the RQ's size).
  void reset(std::uint32_t first_grant, std::uint32_t ring) {
    granted_ = first_grant;
    filled_ = 0;
    queued_ = 0;
    ring_ = ring;
  }
  void grant(std::uint32_t bytes) { granted_ += bytes; }
  // A DATA message of `bytes`: false (and *why) when it overruns.
  bool accept_data(std::uint32_t bytes, const char** why);
  // The application consumed one queued message.
  void consumed() {
    if (queued_) --queued_;
  }
  std::uint64_t outstanding() const { return granted_ - filled_; }
  std::uint32_t queued() const { return queued_; }

 private:
  std::uint64_t granted_ = 0;
  std::uint64_t filled_ = 0;
  std::uint32_t queued_ = 0;
  std::uint32_t ring_ = 0;
};

}  // namespace srdma::rdmacm::rs
