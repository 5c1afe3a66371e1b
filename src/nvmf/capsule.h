// Building capsules: the host's command capsules and the target's response
// capsules, as bytes ready to send. The inverse of the target's parser
// (capsule_parser.h) for commands; decode_completion is the host's parser for
// responses.
//
// Every builder sets PSDT to 01b (SGL), as the fabrics require, and refuses
// with EINVAL what the wire cannot express (an NLB above 65536, a keyed SGL
// longer than 2^24 - 1 bytes, an NQN longer than its field). Thread-safe (pure).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "nvmf/status.h"
#include "nvmf/wire.h"
#include "srdma/status.h"

namespace srdma::nvmf {

// --- data descriptors

// A keyed SGL data block: `length` bytes of remote memory at `addr` under
// `rkey`; `invalidate` asks the target to answer with send-with-invalidate.
// EINVAL if length > 2^24 - 1.
Result<NvmeSgl> keyed_sgl(std::uint64_t addr, std::uint32_t length, std::uint32_t rkey,
                          bool invalidate = false);
// In-capsule data: `length` bytes at `offset` from the start of the in-capsule data.
NvmeSgl in_capsule_sgl(std::uint32_t offset, std::uint32_t length);
// No data: a zero keyed descriptor (what Linux's nvme-rdma sends).
NvmeSgl null_sgl();

// --- commands (64-byte SQEs)

// Read/Write `nlb` blocks (1..65536) from `slba`. EINVAL on nlb out of range
// or nsid 0.
Result<NvmeCommand> build_read(std::uint16_t cid, std::uint32_t nsid, std::uint64_t slba,
                               std::uint32_t nlb, const NvmeSgl& data);
Result<NvmeCommand> build_write(std::uint16_t cid, std::uint32_t nsid, std::uint64_t slba,
                                std::uint32_t nlb, const NvmeSgl& data, bool fua = false);
// EINVAL on nsid 0 (FFFFFFFFh = every namespace is fine).
Result<NvmeCommand> build_flush(std::uint16_t cid, std::uint32_t nsid);
NvmeCommand build_keep_alive(std::uint16_t cid);
// `data` must describe a 4096-byte buffer the target writes.
// Get Log Page (admin 02h): `length` bytes (dwords) of log `lid` from `offset`.
Result<NvmeCommand> build_get_log_page(std::uint16_t cid, std::uint8_t lid, std::uint64_t offset, std::uint32_t length,
                                       const NvmeSgl& data);
NvmeCommand build_identify(std::uint16_t cid, Cns cns, std::uint32_t nsid, const NvmeSgl& data,
                           std::uint16_t cntid = 0);

struct ConnectParams {
  std::uint16_t qid = 0;          // 0 = admin queue
  std::uint32_t queue_size = 32;  // entries, 2..65536 (sent 0's based)
  std::uint8_t cattr = 0;
  std::uint32_t kato_ms = 0;      // admin queue: keep alive timeout
};
// `data` describes the 1024-byte ConnectData. EINVAL on a queue size out of range.
Result<NvmeCommand> build_connect(std::uint16_t cid, const ConnectParams& params,
                                  const NvmeSgl& data);
// EINVAL if an NQN is empty or does not fit its 256-byte field with its NUL.
Result<ConnectData> build_connect_data(const std::array<std::uint8_t, 16>& hostid,
                                       std::uint16_t cntlid, std::string_view subnqn,
                                       std::string_view hostnqn);
// Sizes come from the property table (CAP 8 bytes, the others 4). Property
// Set of a read-only property is EINVAL.
NvmeCommand build_property_get(std::uint16_t cid, Property p);
Result<NvmeCommand> build_property_set(std::uint16_t cid, Property p, std::uint64_t value);

// The capsule bytes: the SQE followed by the in-capsule data (if any).
std::vector<std::byte> encode_capsule(const NvmeCommand& cmd,
                                      std::span<const std::byte> in_capsule_data = {});
template <class T>
std::span<const std::byte> bytes_of(const T& wire_struct) {
  static_assert(std::is_trivially_copyable_v<T>);
  return std::as_bytes(std::span<const T, 1>(&wire_struct, 1));
}

// --- responses (16-byte CQEs)

// A completion for `cid` on queue `sq_id`; `result` fills DW0 (low) and DW1.
NvmeCompletion build_completion(std::uint16_t cid, std::uint16_t sq_id, std::uint16_t sq_head,
                                NvmeStatus status, std::uint64_t result = 0, bool phase = false);
std::array<std::byte, sizeof(NvmeCompletion)> encode_completion(const NvmeCompletion& cqe);
// The host's side: EINVAL unless exactly 16 bytes (IORCSZ is 1 for RDMA).
Result<NvmeCompletion> decode_completion(std::span<const std::byte> capsule);

}  // namespace srdma::nvmf
