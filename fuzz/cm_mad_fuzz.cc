// libFuzzer target for the CM MAD codec (cm/cm_mad.h) and the RDMA CM
// header (cm/cma_header.h): any byte string must decode or be refused -- no
// crash, no read outside the input (ASan), no undefined behaviour (UBSan) --
// and the codec must keep its promises (a broken promise traps):
//   - a verdict has its cause in the bytes, read here by hand from the
//     layout: size, base version, class, class version, attribute, method,
//     and the fields with reserved values, in the order decode() checks them;
//   - decode_header() agrees with decode() on every prefix of 24 bytes or
//     more, and refuses shorter ones;
//   - what decodes encodes back to the input with its reserved bits (a
//     table here, by hand) cleared, and that decodes to the same message;
//   - the input with a reserved bit set, or with one of the bytes that hold
//     a reserved-value field swept through all 256 values, is judged the
//     same way;
//   - the RDMA CM header at the start of the input (or of a REQ's private
//     data) decodes or is refused for its cause, and encodes back to its 36
//     bytes less what the receiver ignores.
//
// Built by clang++ -fsanitize=fuzzer,address,undefined straight from
// src/cm/cm_mad.cc and src/cm/cma_header.cc (neither needs <expected>);
// seeds from fuzz/make_cm_corpus.cc (fuzz/cm_corpus/).
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "cm/cm_mad.h"
#include "cm/cma_header.h"

namespace {

using namespace srdma::cm;

void check(bool promise) {
  if (!promise) __builtin_trap();
}

std::uint8_t u8(std::span<const std::byte> b, std::size_t i) { return std::to_integer<std::uint8_t>(b[i]); }
std::uint8_t cm8(std::span<const std::byte> b, std::size_t i) { return u8(b, kMadHeaderBytes + i); }

// Reserved bits by message, CM data offset and mask (IBA 12.6; Linux's
// cm_msgs.h comments and ibta_vol1_c12.h). Header bytes 18..19 for all.
struct Reserved {
  std::uint16_t attr;
  std::uint8_t cm_byte;
  std::uint8_t mask;
};
constexpr Reserved kReserved[] = {
    {0x10, 4, 0xff},   {0x10, 24, 0xff},  {0x10, 25, 0xff},  {0x10, 26, 0xff},  {0x10, 27, 0xff},
    {0x10, 90, 0x0f},  {0x10, 91, 0xc0},  {0x10, 94, 0x07},  {0x10, 95, 0x07},  {0x10, 134, 0x0f},
    {0x10, 135, 0xc0}, {0x10, 138, 0x07}, {0x10, 139, 0x03},  // REQ
    {0x11, 8, 0x3f},   {0x11, 9, 0x07},                       // MRA
    {0x12, 8, 0x3f},   {0x12, 9, 0x01},                       // REJ
    {0x13, 27, 0x0f},                                         // REP
    {0x15, 11, 0xff},                                         // DREQ
    {0x17, 6, 0xff},   {0x17, 7, 0xff},                       // SIDR_REQ
};

Mad reserved_mask(std::uint16_t attr) {
  Mad m{};
  m[18] = m[19] = std::byte{0xff};
  for (const Reserved& r : kReserved)
    if (r.attr == attr) m[kMadHeaderBytes + r.cm_byte] = std::byte{r.mask};
  return m;
}

// The bytes holding a field with reserved values, by message (CM offset).
std::vector<std::uint8_t> value_bytes(std::uint16_t attr) {
  switch (attr) {
    case 0x10: return {43, 50, 51};  // TST, MTU, extended transport type
    case 0x11: return {8};           // message MRAed
    case 0x12: return {8, 9};        // message REJected, reject info length
    case 0x13: return {26};          // failover accepted
    case 0x18: return {5};           // additional information length
    default: return {};
  }
}

// The verdict decode() must reach, by hand.
MadError expected_verdict(std::span<const std::byte> b) {
  if (b.size() != kMadBytes) return MadError::kWrongSize;
  if (u8(b, 0) != 1) return MadError::kBadBaseVersion;
  if (u8(b, 1) != 0x07) return MadError::kBadClass;
  if (u8(b, 2) != 2) return MadError::kBadClassVersion;
  const unsigned attr = unsigned{u8(b, 16)} << 8 | u8(b, 17);
  if (attr == 0x0001 || attr == 0x0019 || attr == 0x001a) return MadError::kUnsupportedAttribute;
  if (attr < 0x0010 || attr > 0x0018) return MadError::kUnknownAttribute;
  if (u8(b, 3) != 0x03) return MadError::kBadMethod;
  switch (attr) {
    case 0x10: {
      const unsigned mtu = cm8(b, 50) >> 4;
      if (mtu < 1 || mtu > 5) return MadError::kReservedValue;
      if ((cm8(b, 43) >> 1 & 3) == 3 && (cm8(b, 51) & 7) != 1) return MadError::kReservedValue;
      break;
    }
    case 0x11:
      if ((cm8(b, 8) >> 6) == 3) return MadError::kReservedValue;
      break;
    case 0x12:
      if ((cm8(b, 8) >> 6) == 3 || (cm8(b, 9) >> 1) > 72) return MadError::kReservedValue;
      break;
    case 0x13:
      if ((cm8(b, 26) >> 1 & 3) == 3) return MadError::kReservedValue;
      break;
    case 0x18:
      if (cm8(b, 5) > 72) return MadError::kReservedValue;
      break;
    default: break;
  }
  return MadError::kNone;
}

// One decode, held to its promises; the decoded MAD when accepted.
bool check_decode(std::span<const std::byte> b, CmMad& out) {
  const MadStatus s = decode(b, out);
  check(s.error == expected_verdict(b));
  check(!describe(s).empty() && !mad_error_name(s.error).empty());
  check(s.ok() || !s.field.empty());
  if (b.size() >= kMadHeaderBytes) {
    MadHeader h;
    const MadStatus hs = decode_header(b, h);
    const bool header_ok = u8(b, 0) == 1 && u8(b, 1) == 7 && u8(b, 2) == 2;
    check(hs.ok() == header_ok);
    if (s.ok()) check(h == out.header);
  } else {
    MadHeader h;
    check(decode_header(b, h).error == MadError::kTooShort);
  }
  if (!s.ok()) return false;

  // Canonical form: the input less its reserved bits, and a fixed point.
  check(is_cm_attribute(out.header.attribute_id) && attribute_of(out.message) == out.header.attribute_id);
  Mad canonical{};
  check(encode(out.header, out.message, canonical).ok());
  const Mad reserved = reserved_mask(static_cast<std::uint16_t>(out.header.attribute_id));
  for (std::size_t i = 0; i < kMadBytes; ++i) check(canonical[i] == (b[i] & ~reserved[i]));
  CmMad again;
  check(decode(canonical, again).ok() && again == out);
  return true;
}

void check_cma(std::span<const std::byte> b) {
  CmaHeader h;
  const MadStatus s = decode_cma_header(b, h);
  if (b.size() < kCmaHeaderBytes) {
    check(s.error == MadError::kShortPrivateData);
    return;
  }
  const unsigned ipv = u8(b, 1) >> 4;
  const bool good = u8(b, 0) == 0 && (ipv == 4 || ipv == 6);
  check(s.ok() == good);
  if (!good) {
    check(s.error == MadError::kReservedValue);
    return;
  }
  std::array<std::byte, kCmaHeaderBytes> out{};
  check(encode_cma_header(h, out).ok());
  for (std::size_t i = 0; i < kCmaHeaderBytes; ++i) {
    std::uint8_t ignored = 0;
    if (i == 1) ignored = 0x0f;
    if (ipv == 4 && ((i >= 4 && i < 16) || (i >= 20 && i < 32))) ignored = 0xff;
    check((u8(out, i) & ignored) == 0);
    check((u8(out, i) & ~ignored) == (u8(b, i) & ~ignored));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> in(reinterpret_cast<const std::byte*>(data), size);
  CmMad out;
  const bool accepted = check_decode(in, out);
  check_cma(in);
  if (size != kMadBytes) return 0;

  if (accepted && std::holds_alternative<Req>(out.message)) check_cma(std::get<Req>(out.message).private_data);
  if (accepted && std::holds_alternative<SidrReq>(out.message))
    check_cma(std::get<SidrReq>(out.message).private_data);

  // The last byte picks a reserved bit to set and a value byte to sweep.
  const unsigned ctl = u8(in, size - 1);
  const unsigned attr = unsigned{u8(in, 16)} << 8 | u8(in, 17);
  Mad copy{};
  std::copy(in.begin(), in.end(), copy.begin());
  if (accepted) {
    const Mad reserved = reserved_mask(static_cast<std::uint16_t>(attr));
    std::vector<std::size_t> bits;
    for (std::size_t i = 0; i < kMadBytes * 8; ++i)
      if ((reserved[i / 8] & std::byte{static_cast<std::uint8_t>(0x80 >> (i % 8))}) != std::byte{0}) bits.push_back(i);
    const std::size_t bit = bits[ctl % bits.size()];
    Mad flipped = copy;
    flipped[bit / 8] ^= std::byte{static_cast<std::uint8_t>(0x80 >> (bit % 8))};
    CmMad same;
    check(check_decode(flipped, same) && same == out);  // a reserved bit changes nothing
  }
  const std::vector<std::uint8_t> sweep = value_bytes(static_cast<std::uint16_t>(attr));
  if (!sweep.empty()) {
    const std::size_t at = kMadHeaderBytes + sweep[ctl % sweep.size()];
    for (unsigned v = 0; v < 256; ++v) {
      Mad swept = copy;
      swept[at] = static_cast<std::byte>(v);
      CmMad ignored;
      (void)check_decode(swept, ignored);
    }
  }
  return 0;
}
