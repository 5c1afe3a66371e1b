// An address handle's state: its attributes and the PD it keeps alive.
// Internal to src/core.
#pragma once

#include <memory>

#include "core/pd_state.h"
#include "srdma/ah.h"

namespace srdma::detail {

struct AhState {
  std::shared_ptr<PdState> pd;
  AhAttr attr;
};

struct AhAccess {
  static const AhState& state(const AddressHandle& ah) { return *ah.state_; }
};

}  // namespace srdma::detail
