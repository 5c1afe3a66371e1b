#include "srdma/mw.h"

#include <fmt/format.h>

#include "core/pd_impl.h"
#include "srdma/pd.h"

namespace srdma {

MemoryWindow::MemoryWindow(MemoryWindow&& o) noexcept
    : pd_(std::move(o.pd_)), alloc_key_(o.alloc_key_), rkey_(o.rkey_), type_(o.type_) {}

MemoryWindow& MemoryWindow::operator=(MemoryWindow&& o) noexcept {
  if (this != &o) {
    (void)dealloc();
    pd_ = std::move(o.pd_);
    alloc_key_ = o.alloc_key_;
    rkey_ = o.rkey_;
    type_ = o.type_;
  }
  return *this;
}

MemoryWindow::~MemoryWindow() { (void)dealloc(); }

std::uint32_t MemoryWindow::pd_num() const { return pd_ ? pd_->pdn : 0; }

Result<void> MemoryWindow::dealloc() {
  if (!pd_) return make_error(EINVAL, "the memory window is not allocated");
  if (auto r = pd_->device->hca->tables().dealloc_mw(alloc_key_); !r) return r;
  pd_->usecnt.fetch_sub(1);
  pd_.reset();
  return {};
}

Result<MemoryWindow> ProtectionDomain::alloc_mw(MwType type) {
  if (!state_) return make_error(EINVAL, "the protection domain is deallocated");
  if (type != MwType::kType1 && type != MwType::kType2)
    return make_error(EINVAL, fmt::format("memory window type {} is neither 1 nor 2", static_cast<unsigned>(type)));
  auto key = state_->device->hca->tables().alloc_mw(state_->pdn,
                                                    static_cast<hca::TranslationTables::MwType>(type));
  if (!key) return std::unexpected(key.error());
  state_->usecnt.fetch_add(1);
  return MemoryWindow(state_, *key, type);
}

}  // namespace srdma
