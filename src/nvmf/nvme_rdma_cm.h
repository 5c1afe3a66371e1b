// The private data NVMe over Fabrics puts in the RDMA CM exchange
// (NVMe-oF 1.1, 7.3.1: "RDMA Transport Connection Management"): the host
// names the queue and its sizes in the request; the controller answers with
// its receive queue size or rejects with a status.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <vector>

namespace srdma::nvmf {

struct NvmeRdmaCmRequest {
  std::uint16_t recfmt = 0;   // record format: 0
  std::uint16_t qid = 0;      // 0: admin queue
  std::uint16_t hrqsize = 0;  // host receive queue size (entries)
  std::uint16_t hsqsize = 0;  // host send queue size, 0's based
  std::uint8_t rsvd[24] = {};
};
static_assert(sizeof(NvmeRdmaCmRequest) == 32);

struct NvmeRdmaCmReply {
  std::uint16_t recfmt = 0;
  std::uint16_t crqsize = 0;  // controller receive queue size
  std::uint8_t rsvd[28] = {};
};
static_assert(sizeof(NvmeRdmaCmReply) == 32);

// Reject status values (NVMe-oF 1.1 Figure 55).
enum class NvmeRdmaCmStatus : std::uint16_t {
  kInvalidRecfmt = 0x01,
  kInvalidQid = 0x02,
  kInvalidHsqsize = 0x03,
  kInvalidHrqsize = 0x04,
  kNoResources = 0x05,
  kInvalidIrd = 0x06,
  kInvalidOrd = 0x07,
};

template <class T>
std::vector<std::byte> cm_private_data(const T& v) {
  std::vector<std::byte> out(sizeof(T));
  std::memcpy(out.data(), &v, sizeof(T));
  return out;
}

template <class T>
std::optional<T> parse_cm_private_data(std::span<const std::byte> data) {
  if (data.size() < sizeof(T)) return std::nullopt;
  T v;
  std::memcpy(&v, data.data(), sizeof(T));
  return v;
}

}  // namespace srdma::nvmf
