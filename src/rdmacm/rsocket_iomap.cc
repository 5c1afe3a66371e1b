// riomap, riounmap, riowrite: direct placement. riomap registers a region
// and (PROT_WRITE) offers it to the peer by writing an rs_iomap entry into
// the peer's iomap area (an IOMAP_SGL message, the entry's index in the
// immediate), ahead of the next data sent; riowrite RDMA-WRITEs, without
// an immediate, into a region the peer offered us, found by offset in our
// own iomap area. The peer's entries are checked before we write.
#include <byteswap.h>
#include <rdma/rsocket.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstring>

#include "rsocket.h"

namespace srdma::rdmacm::rs {

int send_iomaps(RSocket& rs, std::unique_lock<std::mutex>& lock, int flags) {
  for (IomapMr& m : rs.iomaps) {
    if (m.index < 0 || m.sent) continue;
    if (!can_send(rs)) {
      if (wait_for(rs, lock, nonblocking(rs, flags), conn_can_send)) return -1;
      if (!(rs.state & kWritable)) return rs_fail("riomap", ECONNRESET, "the connection is closed for sending");
    }
    Iomap e{m.offset, Sge{reinterpret_cast<std::uintptr_t>(m.mr->addr), m.mr->rkey, static_cast<std::uint32_t>(m.mr->length)}};
    if (rs.swap) e = Iomap{bswap_64(e.offset), Sge{bswap_64(e.sge.addr), bswap_32(e.sge.key), bswap_32(e.sge.length)}};
    ++rs.sseq_no;  // as rdma-core: the message takes one of the peer's receives
    --rs.sqe_avail;
    rs.sbuf_bytes_avail -= sizeof e;
    m.sent = true;
    if (post_payload(rs, &e, sizeof e, make_imm(kOpIomapSgl, static_cast<std::uint32_t>(m.index)), true,
                     rs.remote_iomap.addr + sizeof(Iomap) * std::uint64_t(m.index), rs.remote_iomap.key))
      return -1;
  }
  rs.iomap_pending = false;
  return 0;
}

void free_iomaps(RSocket& rs) {
  for (IomapMr& m : rs.iomaps)
    if (m.mr) ibv_dereg_mr(m.mr);
  rs.iomaps.clear();
}

}  // namespace srdma::rdmacm::rs

using namespace srdma::rdmacm::rs;  // NOLINT: the C entry points below

extern "C" {

off_t riomap(int socket, void* buf, size_t len, int prot, int flags, off_t offset) {
  (void)flags;
  RSocketRef rs = lookup(socket);
  if (!rs) return rs_fail("riomap", EBADF, "not an rsocket");
  std::scoped_lock sl(rs->slock);
  std::lock_guard lock(rs->mu);
  if (!rs->id || !rs->id->pd || (prot & ~(PROT_WRITE | PROT_NONE)))
    return rs_fail("riomap", EINVAL, "not connected, or prot other than PROT_WRITE/PROT_NONE");
  if (!buf || !len || len > 0xFFFFFFFFu) return rs_fail("riomap", EINVAL, "empty region, or over 4 GiB");
  IomapMr m;
  int access = IBV_ACCESS_LOCAL_WRITE;
  if (prot & PROT_WRITE) {
    std::vector<bool>& used = rs->remote_slots;
    used.resize(rs->remote_iomap.length, false);
    const auto free_slot = std::find(used.begin(), used.end(), false);
    if (free_slot == used.end()) return rs_fail("riomap", ENOMEM, "the peer's iomap is full (RDMA_IOMAPSIZE)");
    m.index = static_cast<int>(free_slot - used.begin());
    access |= IBV_ACCESS_REMOTE_WRITE;
  }
  m.mr = ibv_reg_mr(rs->id->pd, buf, len, access);
  if (!m.mr) return -1;
  if (offset == -1) offset = static_cast<off_t>(reinterpret_cast<std::uintptr_t>(buf));
  m.offset = static_cast<std::uint64_t>(offset);
  if (m.index >= 0) {
    rs->remote_slots[static_cast<std::size_t>(m.index)] = true;
    rs->iomap_pending = true;
  }
  rs->iomaps.push_back(m);
  return offset;
}

int riounmap(int socket, void* buf, size_t len) {
  RSocketRef rs = lookup(socket);
  if (!rs) return rs_fail("riounmap", EBADF, "not an rsocket");
  std::scoped_lock sl(rs->slock);
  std::lock_guard lock(rs->mu);
  for (auto it = rs->iomaps.begin(); it != rs->iomaps.end(); ++it) {
    if (it->mr->addr != buf || it->mr->length != len) continue;
    ibv_dereg_mr(it->mr);
    if (it->index >= 0) rs->remote_slots[static_cast<std::size_t>(it->index)] = false;
    rs->iomaps.erase(it);
    return 0;
  }
  return rs_fail("riounmap", EINVAL, "no mapping of that address and length");
}

size_t riowrite(int socket, const void* buf, size_t count, off_t offset, int flags) {
  RSocketRef rs = lookup(socket);
  if (!rs) return static_cast<size_t>(rs_fail("riowrite", EBADF, "not an rsocket"));
  if (count && !buf) return static_cast<size_t>(rs_fail("riowrite", EFAULT, "NULL buffer"));
  std::scoped_lock sl(rs->slock);
  std::unique_lock lock(rs->mu);
  if (!rs->cq || !(rs->state & kConnected)) return static_cast<size_t>(rs_fail("riowrite", ENOTCONN, "not connected"));
  int ret = 0;
  if (rs->iomap_pending && (ret = send_iomaps(*rs, lock, flags))) return static_cast<size_t>(ret);
  const auto* src = static_cast<const std::uint8_t*>(buf);
  std::size_t left = count;
  auto off = static_cast<std::uint64_t>(offset);
  while (left) {
    // The peer's region holding `off` (entries it wrote into our area).
    Iomap iom{};
    bool found = false;
    for (int i = 0; i < rs->target_iomap_size && !found; ++i) {
      const volatile Iomap& e = rs->target_iomap[i];
      iom = Iomap{e.offset, Sge{e.sge.addr, e.sge.key, e.sge.length}};
      found = iom.sge.length && off >= iom.offset && off - iom.offset < iom.sge.length;
    }
    if (!found) {
      if (left == count) ret = rs_fail("riowrite", EINVAL, "no region of the peer's holds that offset");
      break;
    }
    if (iom.offset + iom.sge.length < iom.offset || iom.sge.addr + iom.sge.length < iom.sge.addr) {
      protocol_error(*rs, EPROTO, "the peer's iomap entry wraps");
      ret = rs_fail("riowrite", EPROTO, "bad iomap entry");
      break;
    }
    if (!can_send(*rs)) {
      ret = wait_for(*rs, lock, nonblocking(*rs, flags), conn_can_send);
      if (ret) break;
      if (!(rs->state & kWritable)) {
        ret = rs_fail("riowrite", ECONNRESET, "the connection is closed for sending");
        break;
      }
    }
    // Whole WRITEs of up to 64 KiB from the start (see send_common).
    std::uint32_t xfer = static_cast<std::uint32_t>(std::min<std::size_t>(left, kMaxTransfer));
    xfer = static_cast<std::uint32_t>(
        std::min<std::uint64_t>({xfer, rs->sbuf_bytes_avail, iom.offset + iom.sge.length - off}));
    --rs->sqe_avail;
    rs->sbuf_bytes_avail -= xfer;
    ret = post_payload(*rs, src, xfer, make_imm(kOpWrite, xfer), false, iom.sge.addr + (off - iom.offset), iom.sge.key);
    if (ret) break;
    src += xfer;
    off += xfer;
    left -= xfer;
  }
  return (ret && left == count) ? static_cast<size_t>(ret) : count - left;
}

}  // extern "C"
