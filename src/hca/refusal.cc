#include "srdma/translation.h"

namespace srdma {

std::string_view refusal_name(Refusal r) {
  switch (r) {
    case Refusal::kUnknownIndex: return "unknown_index";
    case Refusal::kKeyMismatch: return "key_mismatch";
    case Refusal::kNotHwOwned: return "not_hw_owned";
    case Refusal::kPdMismatch: return "pd_mismatch";
    case Refusal::kQpMismatch: return "qp_mismatch";
    case Refusal::kAccessDenied: return "access_denied";
    case Refusal::kOutOfBounds: return "out_of_bounds";
    case Refusal::kPageFault: return "page_fault";
  }
  return "unknown";
}

std::string_view refusal_reason(Refusal r) {
  switch (r) {
    case Refusal::kUnknownIndex: return "no memory region at the key's MPT index";
    case Refusal::kKeyMismatch: return "the key does not match the region's current key (stale or forged)";
    case Refusal::kNotHwOwned: return "the MPT entry is software-owned, not valid for access";
    case Refusal::kPdMismatch: return "the region belongs to another protection domain";
    case Refusal::kQpMismatch: return "the type 2 memory window is bound through another QP";
    case Refusal::kAccessDenied: return "the region does not grant this access";
    case Refusal::kOutOfBounds: return "the range is not inside the region";
    case Refusal::kPageFault:
      return "an on-demand region's page is not mapped with the access's permission (the fault-in failed)";
  }
  return "unknown refusal";
}

}  // namespace srdma
