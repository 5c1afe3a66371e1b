// The smallest program on softrdma: opens a device, registers memory in a
// protection domain and prints the device's name and the region's keys.
#include <cstdio>
#include <vector>

#include "srdma/access.h"
#include "srdma/device.h"

int main() {
  srdma::Profile p;  // small tables: a quick open
  p.num_mpt = 1 << 10;
  p.num_mtt_segs = 1 << 12;
  p.num_qp = 64;
  p.num_cq = 64;
  p.num_comp_vectors = 1;
  auto dev = srdma::Device::open(p);
  if (!dev) {
    std::fprintf(stderr, "consumer: open: %s\n", dev.error().to_string().c_str());
    return 1;
  }
  auto pd = dev->alloc_pd();
  if (!pd) {
    std::fprintf(stderr, "consumer: alloc_pd: %s\n", pd.error().to_string().c_str());
    return 1;
  }
  std::vector<char> buf(1 << 16);
  auto mr = pd->reg_mr(buf.data(), buf.size(), srdma::ACCESS_LOCAL_WRITE | srdma::ACCESS_REMOTE_READ);
  if (!mr) {
    std::fprintf(stderr, "consumer: reg_mr: %s\n", mr.error().to_string().c_str());
    return 1;
  }
  std::printf("device %s: registered %zu bytes, lkey 0x%x rkey 0x%x (%s)\n", dev->name().c_str(), mr->length(),
              mr->lkey(), mr->rkey(), srdma::access_to_string(mr->access()).c_str());
  return 0;
}
