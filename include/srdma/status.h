// Errors as values: an errno-style code and a readable reason.
//
// Every fallible call in softrdma returns Result<T>. A misuse the Linux
// kernel answers with -EINVAL answers here with EINVAL and a sentence saying
// what was wrong. Nothing on the data path throws.
#pragma once

#include <cerrno>
#include <expected>
#include <string>
#include <utility>

namespace srdma {

struct Error {
  int code = 0;        // an errno value: EINVAL, ENOMEM, EBUSY, EFAULT ...
  std::string reason;  // one sentence for a human

  // "EINVAL: reason"
  std::string to_string() const;
};

template <class T>
using Result = std::expected<T, Error>;

inline std::unexpected<Error> make_error(int code, std::string reason) {
  return std::unexpected<Error>(Error{code, std::move(reason)});
}

// The symbolic name of an errno value ("EINVAL"), or "E<number>".
std::string errno_name(int code);

}  // namespace srdma
