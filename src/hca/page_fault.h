// The page-fault handler of an on-demand paging (ODP) region.
//
// A hardware ODP HCA keeps no pages pinned: when an access meets a page its
// tables do not hold, it asks the kernel to fault the page in, and when the
// kernel cannot (the address is unmapped, or not mapped with the access's
// permission) the access ends in a protection error. The software HCA does
// the same through madvise(MADV_POPULATE_READ / _WRITE) (Linux 5.14): the
// kernel faults the pages in as a read or a write would, and answers an
// error instead of raising SIGSEGV. translate() calls this for every access
// through an ODP region, before any byte moves.
//
// A page unmapped between the fault-in and the copy that follows is the
// consumer's race, as on hardware while an invalidation is in flight.
#pragma once

#include <cstddef>
#include <cstdint>

namespace srdma::hca {

// Faults in the pages of [addr, addr + length) for reading, or for writing
// when `write`. False when a page is unmapped or lacks the permission (or
// the kernel cannot populate it: a PFN mapping, a hole in a file). Never
// touches the bytes itself. Thread-safe.
bool fault_in(const void* addr, std::uint64_t length, bool write);

// Whether this kernel can fault pages in for us (MADV_POPULATE_*): the
// device reports ODP only then. Decided once per process.
bool fault_in_available();

}  // namespace srdma::hca
