// Device clients and device removal with live users.
#include <gtest/gtest.h>

#include <vector>

#include "srdma/client.h"
#include "srdma/device.h"

namespace srdma {
namespace {

Profile profile() {
  Profile p;
  p.num_mpt = 1 << 8;
  p.num_mtt_segs = 1 << 8;
  p.fmr_reserved_mtt_segs = 1 << 6;
  p.num_qp = 64;
  p.num_cq = 64;
  p.num_comp_vectors = 2;
  return p;
}

// A ULP that takes a pool CQ and a QP on every device, and gives them back
// on removal.
struct Ulp {
  struct PerDevice {
    Device dev;
    ProtectionDomain pd;
    CqLease lease;
    std::unique_ptr<QueuePair> qp;
  };
  std::vector<PerDevice> devices;
  int adds = 0, removes = 0;
  bool give_back = true;

  Client client() {
    return Client{"ulp",
                  [this](Device& d) {
                    ++adds;
                    PerDevice p{d.share(), d.alloc_pd().value(), d.cq_pool_lease(64, -1, PollContext::kSoftirq).value(),
                                nullptr};
                    p.qp = p.pd.create_qp(QpInitAttr{p.lease.cq(), p.lease.cq(), QpCaps{32, 32, 1, 1, 0}}).value();
                    devices.push_back(std::move(p));
                  },
                  [this](Device& d) {
                    ++removes;
                    if (!give_back) return;
                    std::erase_if(devices, [&](PerDevice& p) { return p.dev.address() == d.address(); });
                  }};
  }
};

TEST(Clients, AddForPresentAndLaterDevicesRemoveOnRemoval) {
  auto d1 = Device::open(profile()).value();
  Ulp ulp;
  ClientId id = register_client(ulp.client());
  EXPECT_EQ(ulp.adds, 1);
  auto d2 = Device::open(profile()).value();
  EXPECT_EQ(ulp.adds, 2);
  EXPECT_EQ(d2.cq_pool_stats()[0].cqe_used, 64u);
  // Removal: the client destroys its QP and returns its entries first.
  ASSERT_TRUE(d2.remove());
  EXPECT_EQ(ulp.removes, 1);
  EXPECT_TRUE(d2.removed());
  EXPECT_TRUE(d2.cq_pool_stats().empty()) << "the pool is cleaned up";
  EXPECT_EQ(d2.alloc_pd().error().code, ENODEV);
  EXPECT_EQ(d2.create_cq(CqInit{.cqe = 4}).error().code, ENODEV);
  EXPECT_EQ(d2.cq_pool_get(1, 0, PollContext::kSoftirq).error().code, ENODEV);
  EXPECT_EQ(d2.remove().error().code, EINVAL);
  unregister_client(id);
  EXPECT_EQ(ulp.removes, 2) << "unregistering removes from the remaining device";
  EXPECT_TRUE(ulp.devices.empty());
}

TEST(Clients, RemovalWithAClientThatKeepsItsCqsIsReported) {
  Ulp ulp;
  ulp.give_back = false;
  ClientId id = register_client(ulp.client());
  auto d = Device::open(profile()).value();
  auto r = d.remove();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, EBUSY);
  EXPECT_TRUE(d.removed());
  unregister_client(id);
  ulp.devices.clear();  // the QP, lease and PD go now; nothing crashes
}

}  // namespace
}  // namespace srdma
