// Device::poll_receiving: a consumer that waits in poll(2) for its
// completion channel (rsockets' blocking calls and rpoll do, through
// libibverbs.so.1's srdma_poll_receiving) receives from the wire
// meanwhile. The wait ends with the channel's event, an ordinary fd beside
// it, or the timeout, on either link.
#include <poll.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <memory>

#include "connected_pair.h"
#include "srdma/access.h"
#include "srdma/device.h"

namespace srdma::test {
namespace {

// A device, a buffer, a CQ bound to a completion channel and an RC QP.
struct ChannelNode {
  Device dev;
  ProtectionDomain pd;
  PageBuf buf{4096};
  MemoryRegion mr;
  std::unique_ptr<CompChannel> ch;
  std::unique_ptr<CompletionQueue> cq;
  std::unique_ptr<QueuePair> qp;

  ChannelNode(LinkKind link, unsigned k) : dev(open_device(link, k)) {
    pd = dev.alloc_pd().value();
    mr = pd.reg_mr(buf.data(), buf.size(), kAccessAll).value();
    ch = dev.create_comp_channel().value();
    cq = dev.create_cq(CqInit{.cqe = 16, .channel = ch.get()}).value();
    qp = pd.create_qp(QpInitAttr{cq.get(), cq.get(), QpCaps{8, 8, 1, 1, 0}, false, nullptr}).value();
  }
};

struct Pipe {
  Pipe() { EXPECT_EQ(::pipe(fd), 0); }
  ~Pipe() {
    ::close(fd[0]);
    ::close(fd[1]);
  }
  int fd[2] = {-1, -1};
};

class PollReceiving : public ::testing::TestWithParam<LinkKind> {};

TEST_P(PollReceiving, EndsWithTheChannelsEventAnOrdinaryFdOrTheTimeout) {
  ChannelNode a(GetParam(), 1), b(GetParam(), 2);
  connect_qps(*a.qp, a.dev, *b.qp, b.dev);
  Sge rs{b.buf.addr(), 256, b.mr.lkey()};
  RecvWr rw;
  rw.wr_id = 7;
  rw.sg_list = &rs;
  rw.num_sge = 1;
  ASSERT_TRUE(b.qp->post_recv(rw));
  ASSERT_TRUE(b.cq->req_notify(CQ_NEXT_COMP));
  for (std::size_t i = 0; i < 256; ++i) a.buf[i] = static_cast<std::uint8_t>(i * 7 + 1);
  Sge ss{a.buf.addr(), 256, a.mr.lkey()};
  SendWr sw;
  sw.wr_id = 1;
  sw.sg_list = &ss;
  sw.num_sge = 1;
  sw.opcode = WrOpcode::kSend;
  sw.send_flags = SEND_SIGNALED;
  ASSERT_TRUE(a.qp->post_send(sw));

  Pipe other;  // an ordinary fd beside the channel's, quiet for now
  pollfd fds[2] = {{b.ch->fd(), POLLIN, 0}, {other.fd[0], POLLIN, 0}};
  ASSERT_EQ(b.dev.poll_receiving(fds, 2, 20000), 1);
  EXPECT_NE(fds[0].revents & POLLIN, 0);
  EXPECT_EQ(fds[1].revents, 0);
  auto got = b.ch->get_event(false);
  ASSERT_TRUE(got) << got.error().reason;
  EXPECT_EQ(*got, b.cq.get());
  b.ch->ack_events(*b.cq, 1);
  const Wc wc = poll_one(*b.cq);
  EXPECT_EQ(wc.status, WcStatus::kSuccess);
  EXPECT_EQ(wc.wr_id, 7u);
  EXPECT_EQ(wc.byte_len, 256u);
  EXPECT_EQ(std::memcmp(b.buf.data(), a.buf.data(), 256), 0);
  const Wc sent = poll_one(*a.cq);  // its ACK left b whoever received the SEND
  EXPECT_EQ(sent.status, WcStatus::kSuccess);
  EXPECT_EQ(sent.wr_id, 1u);

  ASSERT_EQ(::write(other.fd[1], "x", 1), 1);
  fds[0].revents = fds[1].revents = 0;
  ASSERT_EQ(b.dev.poll_receiving(fds, 2, 20000), 1);
  EXPECT_EQ(fds[0].revents, 0);
  EXPECT_NE(fds[1].revents & POLLIN, 0);

  char c;
  ASSERT_EQ(::read(other.fd[0], &c, 1), 1);
  fds[0].revents = fds[1].revents = 0;
  EXPECT_EQ(b.dev.poll_receiving(fds, 2, 1), 0);  // nothing more: the timeout
  EXPECT_EQ(fds[0].revents | fds[1].revents, 0);
}

INSTANTIATE_TEST_SUITE_P(Links, PollReceiving, ::testing::Values(LinkKind::kInproc, LinkKind::kUdp, LinkKind::kSameHost), test::link_name);

}  // namespace
}  // namespace srdma::test
