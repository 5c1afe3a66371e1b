#include "srdma/status.h"

#include <fmt/format.h>

namespace srdma {

std::string errno_name(int code) {
  switch (code) {
    case 0: return "OK";
    case EPERM: return "EPERM";
    case ENOENT: return "ENOENT";
    case EINTR: return "EINTR";
    case EIO: return "EIO";
    case EAGAIN: return "EAGAIN";
    case ENOMEM: return "ENOMEM";
    case EACCES: return "EACCES";
    case EFAULT: return "EFAULT";
    case EBUSY: return "EBUSY";
    case EEXIST: return "EEXIST";
    case ENODEV: return "ENODEV";
    case EINVAL: return "EINVAL";
    case ENOSPC: return "ENOSPC";
    case ERANGE: return "ERANGE";
    case ENOSYS: return "ENOSYS";
    case EOVERFLOW: return "EOVERFLOW";
    case EOPNOTSUPP: return "EOPNOTSUPP";
    case ETIMEDOUT: return "ETIMEDOUT";
    case ECONNREFUSED: return "ECONNREFUSED";
    case ECANCELED: return "ECANCELED";
    case ECONNRESET: return "ECONNRESET";
    case EADDRINUSE: return "EADDRINUSE";
    case EADDRNOTAVAIL: return "EADDRNOTAVAIL";
    case ENETUNREACH: return "ENETUNREACH";
    case EHOSTUNREACH: return "EHOSTUNREACH";
    case EPROTO: return "EPROTO";
    case EMSGSIZE: return "EMSGSIZE";
    case EPIPE: return "EPIPE";
    default: return fmt::format("E{}", code);
  }
}

std::string Error::to_string() const { return errno_name(code) + ": " + reason; }

}  // namespace srdma
