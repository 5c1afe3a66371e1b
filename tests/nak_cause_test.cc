// Every class C NAK is counted under its cause on the responder and under
// its code on the requester, and each cause gives the requester the status
// IBA ties to its code: requests that earn each one, sent through the
// requester as a consumer would post them.
#include <gtest/gtest.h>

#include <set>

#include "hca_pair.h"

namespace srdma::hca {
namespace {

using pair::connect;
using pair::poll_n;
using pair::post;
using pair::Side;
using pair::write_wr;

struct Case {
  const char* name;
  NakCause cause;
  NakCode code;
  WcStatus status;
};

// Posts on a what `cause` needs on a's peer b, waits for a's failed CQE.
void provoke(const Case& c) {
  SCOPED_TRACE(c.name);
  Side a, b;
  pair::PathParams p;
  if (c.cause == NakCause::kAccessNotEnabled) p.access = ACCESS_LOCAL_WRITE;  // no remote access at all
  if (c.cause == NakCause::kInvalidNoResources) p.max_dest_rd_atomic = 0;
  connect(a, b, p);
  Sge sge{a.addr(), 64, a.key};
  Sge rsge{b.addr(), 16, b.key};
  RecvWr r;
  r.wr_id = 9;
  r.sg_list = &rsge;
  r.num_sge = 1;
  SendWr w = write_wr(1, sge, b.addr(), b.key);
  switch (c.cause) {
    case NakCause::kInvalidReceiveTooShort:  // 64 bytes into 16
      ASSERT_TRUE(b.qp->post_recv(&r, nullptr));
      w.opcode = WrOpcode::kSend;
      break;
    case NakCause::kInvalidInvalidate:  // a key b never registered for fast registration
      rsge.length = 64;
      ASSERT_TRUE(b.qp->post_recv(&r, nullptr));
      w.opcode = WrOpcode::kSendWithInv;
      w.invalidate_rkey = b.key;
      break;
    case NakCause::kOperationalPlacement:  // the receive names a key b does not have
      rsge.length = 64;
      rsge.lkey = b.key ^ 0x100;
      ASSERT_TRUE(b.qp->post_recv(&r, nullptr));
      w.opcode = WrOpcode::kSend;
      break;
    case NakCause::kInvalidAtomicAlignment:
      sge.length = 8;
      w.opcode = WrOpcode::kAtomicFetchAndAdd;
      w.remote_addr = b.addr(4);
      break;
    case NakCause::kInvalidNoResources:
      w.opcode = WrOpcode::kRdmaRead;
      break;
    case NakCause::kAccessKeyRefused:
      w.rkey = b.key ^ 0x100;
      break;
    case NakCause::kAccessNotEnabled:
    default:
      break;
  }
  ASSERT_TRUE(post(a, w));
  const std::vector<Wc> wcs = poll_n(*a.scq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, c.status) << wc_status_str(wcs[0].status);
  const TransportCounters ca = a.qp->counters(), cb = b.qp->counters();
  for (std::size_t i = 0; i < kNumNakCauses; ++i)
    EXPECT_EQ(cb.naks_sent[i], i == static_cast<std::size_t>(c.cause) ? 1u : 0u)
        << nak_cause_str(static_cast<NakCause>(i));
  for (std::size_t i = 0; i < kNumNakCodes; ++i)
    EXPECT_EQ(ca.naks_received[i], i == static_cast<std::size_t>(c.code) ? 1u : 0u)
        << nak_code_str(static_cast<NakCode>(i));
  EXPECT_EQ(b.qp->state(), QpState::kErr) << "class C ends the responder's QP";
  // The device sums them.
  EXPECT_EQ(b.dev->engine().counters().naks_sent_for(c.cause), 1u);
  EXPECT_EQ(a.dev->engine().counters().naks_received_for(c.code), 1u);
}

TEST(NakCause, EachIsCountedUnderItsNameAndCode) {
  const Case kCases[] = {
      {"receive too short", NakCause::kInvalidReceiveTooShort, NakCode::kInvalidRequest, WcStatus::kRemInvReqErr},
      {"invalidate refused", NakCause::kInvalidInvalidate, NakCode::kInvalidRequest, WcStatus::kRemInvReqErr},
      {"atomic unaligned", NakCause::kInvalidAtomicAlignment, NakCode::kInvalidRequest, WcStatus::kRemInvReqErr},
      {"no rd/atomic resources", NakCause::kInvalidNoResources, NakCode::kInvalidRequest, WcStatus::kRemInvReqErr},
      {"access not enabled", NakCause::kAccessNotEnabled, NakCode::kRemoteAccessError, WcStatus::kRemAccessErr},
      {"rkey refused", NakCause::kAccessKeyRefused, NakCode::kRemoteAccessError, WcStatus::kRemAccessErr},
      {"placement refused", NakCause::kOperationalPlacement, NakCode::kRemoteOperationalError,
       WcStatus::kRemOpErr},
  };
  for (const Case& c : kCases) provoke(c);
}

TEST(NakCause, NamesAreDistinct) {
  std::set<std::string_view> names;
  for (std::size_t i = 0; i < kNumNakCauses; ++i) names.insert(nak_cause_str(static_cast<NakCause>(i)));
  for (std::size_t i = 0; i < kNumNakCodes; ++i) names.insert(nak_code_str(static_cast<NakCode>(i)));
  EXPECT_EQ(names.size(), kNumNakCauses + kNumNakCodes);
  EXPECT_FALSE(names.contains("?"));
}

}  // namespace
}  // namespace srdma::hca
