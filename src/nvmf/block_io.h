// The host's asynchronous block request: what a caller submits to an
// NVMe-oF controller and gets back in its completion callback.
#pragma once

#include <cstdint>

#include "nvmf/status.h"

namespace srdma::nvmf {

struct BlockIo {
  enum class Op : std::uint8_t { kRead, kWrite, kFlush };

  Op op = Op::kRead;
  std::uint32_t nsid = 1;
  std::uint64_t lba = 0;
  std::uint32_t nblocks = 0;  // read/write: 1..max, in the namespace's blocks
  void* buf = nullptr;        // nblocks * block size bytes (read into, write from)
  // Runs once per submitted request, on a completion thread (or on the
  // submitter's thread when the controller fails under it). Keep it short.
  void (*done)(BlockIo& io) = nullptr;
  void* context = nullptr;

  // Results. `transport_error` is an errno (ETIMEDOUT, ECONNRESET,
  // ENOTCONN ...) when the command never got a response; otherwise 0 and
  // `status` is the controller's.
  NvmeStatus status;
  int transport_error = 0;
  bool ok() const { return transport_error == 0 && status.ok(); }
};

}  // namespace srdma::nvmf
