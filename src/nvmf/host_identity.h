// The host NQN a host uses when none is given: unique per machine, as
// nvme-cli finds it. /etc/nvme/hostnqn when it holds one (nvme-cli's
// `nvme gen-hostnqn > /etc/nvme/hostnqn`, read by nvme connect as the
// default); else a UUID NQN derived from /etc/machine-id, app-specific as
// systemd's sd_id128_get_machine_app_specific() derives one (HMAC-SHA256
// keyed with the machine ID), so the machine ID itself never goes on the
// wire; else a random UUID NQN, new in each process.
//
// Hosts once all defaulted to one fixed NQN, so that `--allow-host` on a
// target could not tell any two softrdma hosts apart.
#pragma once

#include <string>
#include <string_view>

namespace srdma::nvmf {

inline constexpr std::string_view kHostNqnFile = "/etc/nvme/hostnqn";
inline constexpr std::string_view kMachineIdFile = "/etc/machine-id";

// From those files (the parameters are for tests).
std::string default_host_nqn(std::string_view hostnqn_file = kHostNqnFile,
                             std::string_view machine_id_file = kMachineIdFile);

// "nqn.2014-08.org.nvmexpress:uuid:" and the UUID of 16 bytes.
std::string uuid_host_nqn(const unsigned char (&uuid)[16]);

}  // namespace srdma::nvmf
