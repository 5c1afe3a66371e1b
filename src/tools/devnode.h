// `srdma devnode [--remove]`: the device node UCX looks for.
//
// UCX (uct_ib_device_is_accessible) keeps only the verbs devices whose
// /dev/infiniband/<ibv_device.dev_name> is a character device it may read
// and write, and never opens it. softrdma's libibverbs.so.1 reports
// dev_name "srdma0" and never creates anything itself: the user who wants
// UCX on softrdma runs this (as root) once, and --remove undoes it.
#pragma once

#include <ostream>
#include <string>

#include "srdma/status.h"

namespace srdma::tools {

// Where the drop-in says its node is (its ibv_device dev_path).
inline constexpr const char* kDevNodeDir = "/dev/infiniband";
inline constexpr const char* kDevNodePath = "/dev/infiniband/srdma0";

// Creates kDevNodePath (and its directory) as a character device with the
// null device's numbers (1:3), mode 0666: anything that opens it reads EOF
// and writes nowhere. Already there and ours: nothing to do. Something
// else there: EEXIST, left alone.
Result<void> devnode_create(std::ostream& out, const std::string& path = kDevNodePath);

// Removes the node if it is ours (a 1:3 character device), then its
// directory if that is left empty. Absent: nothing to do. Anything else
// there: EEXIST, left alone.
Result<void> devnode_remove(std::ostream& out, const std::string& path = kDevNodePath);

}  // namespace srdma::tools
