#include "rsocket_wire.h"

#include <cstring>

namespace srdma::rdmacm::rs {
namespace {

constexpr std::uint32_t kMaxData = 0x1FFFFFFF;

void put16(std::uint8_t* p, std::uint16_t v) {
  p[0] = static_cast<std::uint8_t>(v >> 8);
  p[1] = static_cast<std::uint8_t>(v);
}
void put32(std::uint8_t* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::uint8_t>(v >> (24 - 8 * i));
}
void put64(std::uint8_t* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<std::uint8_t>(v >> (56 - 8 * i));
}
std::uint16_t get16(const std::uint8_t* p) { return static_cast<std::uint16_t>(p[0] << 8 | p[1]); }
std::uint32_t get32(const std::uint8_t* p) {
  return std::uint32_t{p[0]} << 24 | std::uint32_t{p[1]} << 16 | std::uint32_t{p[2]} << 8 | p[3];
}
std::uint64_t get64(const std::uint8_t* p) { return std::uint64_t{get32(p)} << 32 | get32(p + 4); }

// rs_sge on the wire: addr, key, length.
void put_sge(std::uint8_t* p, const Sge& s) {
  put64(p, s.addr);
  put32(p + 8, s.key);
  put32(p + 12, s.length);
}
Sge get_sge(const std::uint8_t* p) { return Sge{get64(p), get32(p + 8), get32(p + 12)}; }

bool wraps(std::uint64_t addr, std::uint64_t len) { return addr + len < addr; }

}  // namespace

int value_to_scale(int value, int bits) {
  return value <= (1 << (bits - 1)) ? value : (1 << (bits - 1)) | (value >> bits);
}
int scale_to_value(int value, int bits) {
  return value <= (1 << (bits - 1)) ? value : (value & ~(1 << (bits - 1))) << bits;
}

void format_conn_data(const ConnData& c, std::uint8_t* out) {
  std::memset(out, 0, kConnDataBytes);
  out[0] = c.version;
  out[1] = c.flags;
  put16(out + 2, c.credits);
  out[7] = c.target_iomap_size;
  put_sge(out + 8, c.target_sgl);
  put_sge(out + 24, c.data_buf);
}

bool parse_conn_data(const void* data, std::size_t len, ConnData& out, const char** why) {
  auto bad = [&](const char* reason) {
    *why = reason;
    return false;
  };
  if (!data || len < kConnDataBytes) return bad("private data shorter than rs_conn_data (40 bytes)");
  const auto* p = static_cast<const std::uint8_t*>(data);
  ConnData c;
  c.version = p[0];
  c.flags = p[1];
  c.credits = get16(p + 2);
  c.target_iomap_size = p[7];
  c.target_sgl = get_sge(p + 8);
  c.data_buf = get_sge(p + 24);
  if (c.version != kVersion) return bad("rs_conn_data version is not 1");
  if (c.credits == 0) return bad("no receive credits");
  if (c.target_sgl.length == 0 || c.target_sgl.length > kMaxPeerSglEntries)
    return bad("target SGL of 0 or too many entries");
  if (wraps(c.target_sgl.addr, std::uint64_t{c.target_sgl.length} * sizeof(Sge)))
    return bad("target SGL address range wraps");
  if (c.flags & kFlagIomap) {
    const std::uint64_t iomap = static_cast<std::uint64_t>(scale_to_value(c.target_iomap_size, 8));
    if (wraps(c.target_sgl.addr + std::uint64_t{c.target_sgl.length} * sizeof(Sge), iomap * sizeof(Iomap)))
      return bad("iomap address range wraps");
  }
  if (!valid_target_sge(c.data_buf)) return bad("receive buffer empty, over 2^29 bytes, or wrapping");
  out = c;
  return true;
}

bool valid_target_sge(const Sge& s) {
  return s.length != 0 && s.length <= kMaxData && !wraps(s.addr, s.length);
}

Decoded decode_imm(std::uint32_t imm, std::uint32_t iomap_entries) {
  Decoded d;
  const std::uint32_t data = imm_data(imm);
  switch (imm_op(imm)) {
    case kOpData:
      d.action = Action::kData;
      d.value = data;
      return d;
    case kOpSgl:
      d.action = Action::kCredits;
      d.value = data;
      return d;
    case kOpIomapSgl:
      if (data >= iomap_entries) {
        d.why = "IOMAP_SGL index beyond the iomap we offered";
        return d;
      }
      d.action = Action::kIomapUpdated;
      d.value = data;
      return d;
    case kOpCtrl:
      switch (data) {
        case kCtrlDisconnect:
          d.action = Action::kDisconnect;
          return d;
        case kCtrlShutdown:
          d.action = Action::kShutdown;
          return d;
        case kCtrlKeepalive:
          d.action = Action::kKeepalive;
          return d;
        default:
          d.why = "unknown control code";
          return d;
      }
    case kOpWrite:
      d.why = "RS_OP_WRITE as an immediate (riowrite sends none)";
      return d;
    default:
      d.why = "reserved operation in the immediate";
      return d;
  }
}

bool RecvLedger::accept_data(std::uint32_t bytes, const char** why) {
  if (bytes > outstanding()) {
    *why = "DATA beyond the receive buffer we advertised";
    return false;
  }
  if (queued_ >= ring_) {
    *why = "DATA beyond our receive credits";
    return false;
  }
  filled_ += bytes;
  ++queued_;
  return true;
}

}  // namespace srdma::rdmacm::rs
