// Device clients (like ib_register_client): upper layers learn of every
// device present and every device opened later, and are told before a
// device goes away so they can destroy their QPs and return their pool CQs.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace srdma {

class Device;

struct Client {
  std::string name;
  // Called for each device; the Device& is valid during the call (use
  // Device::share() to keep a handle).
  std::function<void(Device&)> add;
  // Called when the device is removed (Device::remove) or the client
  // unregisters; the client releases everything it holds on the device.
  std::function<void(Device&)> remove;
};

using ClientId = std::uint64_t;

// Calls add() for every open device, then for each device opened later.
ClientId register_client(Client client);
// Calls remove() for every device the client was added to and forgets it.
void unregister_client(ClientId id);

}  // namespace srdma
