#include "nvmf/capsule.h"

#include <fmt/format.h>

#include <bit>
#include <cstring>
#include <tuple>

namespace srdma::nvmf {
namespace {

NvmeCommand sqe(std::uint8_t opcode, std::uint16_t cid, std::uint32_t nsid, const NvmeSgl& data) {
  NvmeCommand c;
  c.opcode = opcode;
  c.flags = kPsdtSglMetaBuffer;
  c.cid = cid;
  c.nsid = nsid;
  c.dptr = data;
  return c;
}

Result<NvmeCommand> read_write(IoOpcode op, std::uint16_t cid, std::uint32_t nsid,
                               std::uint64_t slba, std::uint32_t nlb, const NvmeSgl& data,
                               bool fua) {
  if (nlb == 0 || nlb > 0x10000)
    return make_error(EINVAL, fmt::format("nlb {} outside 1..65536 (a 16-bit 0's based count)", nlb));
  if (nsid == 0 || nsid == kNsidBroadcast)
    return make_error(EINVAL, "Read/Write needs one namespace: nsid 0 and FFFFFFFFh name none");
  NvmeCommand c = sqe(static_cast<std::uint8_t>(op), cid, nsid, data);
  c.cdw10 = static_cast<std::uint32_t>(slba);
  c.cdw11 = static_cast<std::uint32_t>(slba >> 32);
  c.cdw12 = (nlb - 1) | (fua ? 1u << 30 : 0u);
  return c;
}

const PropertyInfo& property_info(Property p) {
  for (const PropertyInfo& row : kProperties)
    if (row.property == p) return row;
  return kProperties[0];  // unreachable: every enumerator has a row
}

NvmeCommand property_command(FabricsType type, std::uint16_t cid, Property p, std::uint64_t value) {
  PropertyCommand pc;
  pc.cid = cid;
  pc.fctype = static_cast<std::uint8_t>(type);
  pc.attrib = property_info(p).size == 8 ? 1 : 0;
  pc.offset = static_cast<std::uint32_t>(p);
  pc.value = value;
  NvmeCommand c = std::bit_cast<NvmeCommand>(pc);
  c.flags = kPsdtSglMetaBuffer;
  return c;
}

}  // namespace

Result<NvmeSgl> keyed_sgl(std::uint64_t addr, std::uint32_t length, std::uint32_t rkey,
                          bool invalidate) {
  if (length > kMaxKeyedSglLength)
    return make_error(EINVAL, fmt::format("keyed SGL length {} exceeds the 24-bit field", length));
  return NvmeSgl::keyed(addr, length, rkey, invalidate);
}

NvmeSgl in_capsule_sgl(std::uint32_t offset, std::uint32_t length) {
  return NvmeSgl::in_capsule(offset, length);
}

NvmeSgl null_sgl() { return NvmeSgl::keyed(0, 0, 0, false); }

Result<NvmeCommand> build_read(std::uint16_t cid, std::uint32_t nsid, std::uint64_t slba,
                               std::uint32_t nlb, const NvmeSgl& data) {
  return read_write(IoOpcode::kRead, cid, nsid, slba, nlb, data, false);
}

Result<NvmeCommand> build_write(std::uint16_t cid, std::uint32_t nsid, std::uint64_t slba,
                                std::uint32_t nlb, const NvmeSgl& data, bool fua) {
  return read_write(IoOpcode::kWrite, cid, nsid, slba, nlb, data, fua);
}

Result<NvmeCommand> build_flush(std::uint16_t cid, std::uint32_t nsid) {
  if (nsid == 0) return make_error(EINVAL, "Flush of nsid 0: use FFFFFFFFh for every namespace");
  return sqe(static_cast<std::uint8_t>(IoOpcode::kFlush), cid, nsid, null_sgl());
}

NvmeCommand build_keep_alive(std::uint16_t cid) {
  return sqe(static_cast<std::uint8_t>(AdminOpcode::kKeepAlive), cid, 0, null_sgl());
}

NvmeCommand build_identify(std::uint16_t cid, Cns cns, std::uint32_t nsid, const NvmeSgl& data,
                           std::uint16_t cntid) {
  NvmeCommand c = sqe(static_cast<std::uint8_t>(AdminOpcode::kIdentify), cid, nsid, data);
  c.cdw10 = static_cast<std::uint32_t>(cns) | (std::uint32_t{cntid} << 16);
  return c;
}

Result<NvmeCommand> build_get_log_page(std::uint16_t cid, std::uint8_t lid, std::uint64_t offset, std::uint32_t length,
                                       const NvmeSgl& data) {
  if (length == 0 || length % 4 || offset % 4)
    return make_error(EINVAL, fmt::format("log page read of {} bytes at {}: dwords only", length, offset));
  NvmeCommand c = sqe(static_cast<std::uint8_t>(AdminOpcode::kGetLogPage), cid, 0, data);
  const std::uint32_t numd = length / 4 - 1;  // 0's based
  c.cdw10 = lid | ((numd & 0xFFFF) << 16);
  c.cdw11 = numd >> 16;
  c.cdw12 = static_cast<std::uint32_t>(offset);
  c.cdw13 = static_cast<std::uint32_t>(offset >> 32);
  return c;
}

Result<NvmeCommand> build_connect(std::uint16_t cid, const ConnectParams& params,
                                  const NvmeSgl& data) {
  if (params.queue_size < 2 || params.queue_size > 0x10000)
    return make_error(EINVAL, fmt::format("queue size {} outside 2..65536", params.queue_size));
  ConnectCommand cc;
  cc.cid = cid;
  cc.dptr = data;
  cc.qid = params.qid;
  cc.sqsize = static_cast<std::uint16_t>(params.queue_size - 1);
  cc.cattr = params.cattr;
  cc.kato = params.kato_ms;
  NvmeCommand c = std::bit_cast<NvmeCommand>(cc);
  c.flags = kPsdtSglMetaBuffer;
  return c;
}

Result<ConnectData> build_connect_data(const std::array<std::uint8_t, 16>& hostid,
                                       std::uint16_t cntlid, std::string_view subnqn,
                                       std::string_view hostnqn) {
  ConnectData d;
  for (auto [name, value, field] : {std::tuple{"subnqn", subnqn, d.subnqn},
                                    std::tuple{"hostnqn", hostnqn, d.hostnqn}}) {
    if (value.empty() || value.size() >= sizeof d.subnqn || value.find('\0') != value.npos)
      return make_error(EINVAL, fmt::format("{} must be 1..255 bytes without NUL, got {} bytes",
                                            name, value.size()));
    std::memcpy(field, value.data(), value.size());
  }
  std::memcpy(d.hostid, hostid.data(), sizeof d.hostid);
  d.cntlid = cntlid;
  return d;
}

NvmeCommand build_property_get(std::uint16_t cid, Property p) {
  return property_command(FabricsType::kPropertyGet, cid, p, 0);
}

Result<NvmeCommand> build_property_set(std::uint16_t cid, Property p, std::uint64_t value) {
  if (!property_info(p).writable)
    return make_error(EINVAL, fmt::format("property {} is read-only", property_info(p).name));
  return property_command(FabricsType::kPropertySet, cid, p, value);
}

std::vector<std::byte> encode_capsule(const NvmeCommand& cmd,
                                      std::span<const std::byte> in_capsule_data) {
  std::vector<std::byte> out(sizeof cmd + in_capsule_data.size());
  std::memcpy(out.data(), &cmd, sizeof cmd);
  if (!in_capsule_data.empty())
    std::memcpy(out.data() + sizeof cmd, in_capsule_data.data(), in_capsule_data.size());
  return out;
}

NvmeCompletion build_completion(std::uint16_t cid, std::uint16_t sq_id, std::uint16_t sq_head,
                                NvmeStatus status, std::uint64_t result, bool phase) {
  NvmeCompletion c;
  c.dw0 = static_cast<std::uint32_t>(result);
  c.dw1 = static_cast<std::uint32_t>(result >> 32);
  c.sq_head = sq_head;
  c.sq_id = sq_id;
  c.cid = cid;
  c.status = status.encode(phase);
  return c;
}

std::array<std::byte, sizeof(NvmeCompletion)> encode_completion(const NvmeCompletion& cqe) {
  return std::bit_cast<std::array<std::byte, sizeof(NvmeCompletion)>>(cqe);
}

Result<NvmeCompletion> decode_completion(std::span<const std::byte> capsule) {
  if (capsule.size() != sizeof(NvmeCompletion))
    return make_error(EINVAL, fmt::format("a response capsule is 16 bytes, got {}", capsule.size()));
  NvmeCompletion c;
  std::memcpy(&c, capsule.data(), sizeof c);
  return c;
}

}  // namespace srdma::nvmf
