// An address handle's state: its attributes and the PD it keeps alive.
// Internal to src/core.
#pragma once

#include <memory>

#include "core/pd_impl.h"
#include "srdma/ah.h"

namespace srdma::detail {

struct AhImpl {
  std::shared_ptr<PdImpl> pd;
  AhAttr attr;
};

struct AhAccess {
  static const AhImpl& state(const AddressHandle& ah) { return *ah.state_; }
};

}  // namespace srdma::detail
