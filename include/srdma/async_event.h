// Asynchronous events of a device (like ib_event / ibv_async_event):
// delivered to the handler set with Device::set_async_event_handler, on the
// device's event thread, in the order raised.
//
// Raised today: kCqErr (a CQ overran), kQpFatal (a QP on it was moved to
// ERR with no WQE to report it), kQpLastWqeReached (a QP attached to an SRQ
// entered ERR: it takes no more WQEs from it) and kSrqLimitReached (an
// armed SRQ's WQEs fell below its limit; it is disarmed). kPortActive
// belongs to port state changes and kDeviceFatal to a dying device; the
// software device has neither (its one port is active from open), so they
// are defined for handlers but not raised.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace srdma {

enum class AsyncEventType {
  kCqErr,             // IB_EVENT_CQ_ERR: CQ overrun (or CQ access error)
  kQpFatal,           // IB_EVENT_QP_FATAL: the QP entered ERR by a local catastrophic error
  kQpLastWqeReached,  // IB_EVENT_QP_LAST_WQE_REACHED
  kPortActive,        // IB_EVENT_PORT_ACTIVE
  kDeviceFatal,       // IB_EVENT_DEVICE_FATAL
  kSrqLimitReached,   // IB_EVENT_SRQ_LIMIT_REACHED
};
inline constexpr std::size_t kAsyncEventTypes = 6;

// "CQ error", "QP fatal error", ... (the kernel's ib_event_msg strings).
std::string_view async_event_str(AsyncEventType t);

struct AsyncEvent {
  AsyncEventType type;
  std::uint32_t cqn = 0;   // kCqErr
  std::uint32_t qpn = 0;   // kQpFatal, kQpLastWqeReached
  // kCqErr: the CompletionQueue*; QP events: the QP's qp_context;
  // kSrqLimitReached: the SharedReceiveQueue* (its context() is srq_context).
  void* context = nullptr;
  std::uint32_t srqn = 0;  // kSrqLimitReached
};

}  // namespace srdma
