// The service manager's notification protocol (sd_notify(3)): a datagram
// of newline-separated VAR=VALUE assignments ("READY=1", "RELOADING=1",
// "STOPPING=1", "STATUS=...") sent to the AF_UNIX socket that
// $NOTIFY_SOCKET names (a path, or "@name" in the abstract namespace).
//
// Written here rather than linking libsystemd's sd_notify: the protocol is
// a documented, stable interface of a few lines, and srdma runs as often
// outside systemd as under it; a service needs no libsystemd0 for it.
#pragma once

#include <cstdint>
#include <string_view>

namespace srdma::tools {

// Sends `state` when $NOTIFY_SOCKET is set. false when it is not set, names
// no usable socket, or the send failed (a notification is never an error
// of the program's own: the caller goes on).
bool notify_service_manager(std::string_view state);

// CLOCK_MONOTONIC in microseconds: what RELOADING=1 carries as
// MONOTONIC_USEC (systemd 253's Type=notify-reload asks for it).
std::uint64_t monotonic_usec();

}  // namespace srdma::tools
