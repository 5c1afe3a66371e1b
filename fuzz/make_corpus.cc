// Writes the fuzz seed corpus: one well-formed capsule of each kind, built by
// the host-side builders, so the fuzzer starts past the parser's first checks.
// usage: make_corpus <dir>   (scripts/fuzz.sh --corpus builds and runs it)
#include <cstdio>
#include <fstream>
#include <string>

#include "nvmf/capsule.h"

using namespace srdma::nvmf;

namespace {

void put(const std::string& dir, const char* name, std::span<const std::byte> bytes) {
  std::ofstream(dir + "/" + name, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <corpus dir>\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  const NvmeSgl keyed4k = keyed_sgl(0x7f0000001000, 4096, 0x1234).value();
  std::array<std::uint8_t, 16> hostid{0xde, 0xad};
  ConnectData cd = build_connect_data(hostid, kDynamicCntlid, "nqn.2026-11.io.softrdma:ram0",
                                      "nqn.2014-08.org.nvmexpress:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6")
                       .value();
  put(dir, "connect_admin_keyed", encode_capsule(build_connect(1, {.qid = 0, .queue_size = 32, .kato_ms = 5000},
                                                               keyed_sgl(0x9000, 1024, 7).value()).value()));
  put(dir, "connect_io_incapsule",
      encode_capsule(build_connect(2, {.qid = 1, .queue_size = 128}, in_capsule_sgl(0, 1024)).value(),
                     bytes_of(cd)));
  put(dir, "property_get_cap", encode_capsule(build_property_get(3, Property::kCap)));
  put(dir, "property_set_cc", encode_capsule(build_property_set(4, Property::kCc, 0x460001).value()));
  put(dir, "identify_ctrl", encode_capsule(build_identify(5, Cns::kController, 0, keyed4k)));
  put(dir, "identify_ns", encode_capsule(build_identify(6, Cns::kNamespace, 1, keyed4k)));
  put(dir, "identify_list", encode_capsule(build_identify(7, Cns::kActiveNamespaceList, 0, keyed4k)));
  put(dir, "keep_alive", encode_capsule(build_keep_alive(8)));
  put(dir, "read_keyed", encode_capsule(build_read(9, 1, 16, 8, keyed4k).value()));
  put(dir, "write_keyed_inv",
      encode_capsule(build_write(10, 1, 0, 8, keyed_sgl(0x1000, 4096, 0x55, true).value()).value()));
  std::vector<std::byte> payload(1024, std::byte{0x5A});
  put(dir, "write_incapsule", encode_capsule(build_write(11, 1, 2, 2, in_capsule_sgl(0, 1024)).value(), payload));
  put(dir, "flush_all", encode_capsule(build_flush(12, kNsidBroadcast).value()));
  return 0;
}
