// Extended CQs (ibv_create_cq_ex): start_poll/next_poll/end_poll and the
// ibv_wc_read_* accessors over the same core CQ, and the clock their
// timestamps are in (ibv_query_rt_values_ex).
//
// start_poll takes up to 16 CQEs from the core CQ at once, as ibv_poll_cq
// converts them 16 at a time, and next_poll walks them: one lock and one
// core poll per batch, no ibv_wc conversion. What a batch holds beyond the
// CQE the application is at stays in this CQ (ibv_poll_cq on the same CQ
// returns it first), so nothing is lost between the two ways of polling.
// Completion timestamps are taken when a CQE leaves the core CQ for this
// library: the engine keeps no time per CQE.
#include "cq_ex.h"

#include <arpa/inet.h>
#include <time.h>

#include <array>
#include <cstring>
#include <new>

#include "convert.h"
#include "errors.h"
#include "objects.h"

namespace srdma::verbs {

namespace {

// The flags this device can fill: the standard ones, both timestamps and
// tag matching's info. CVLAN and flow tags belong to raw packet hardware.
constexpr std::uint64_t kSupportedWcFlags =
    IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_SRC_QP |
    IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL | IBV_WC_EX_WITH_DLID_PATH_BITS | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |
    IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK | IBV_WC_EX_WITH_TM_INFO;
constexpr std::uint32_t kSupportedCqFlags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED;
constexpr std::uint32_t kKnownInitMask = IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD;

std::uint64_t now_ns(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<std::uint64_t>(ts.tv_nsec);
}

CqExPoll& ext_of(ibv_cq_ex* cq) { return *reinterpret_cast<Cq*>(cq)->ext; }
const ibv_wc& cur(ibv_cq_ex* cq) {
  CqExPoll& p = ext_of(cq);
  return p.wc[p.at];
}

// Refills the batch from the core CQ; false when it is empty. Under p.mu.
bool refill(Cq& cq, CqExPoll& p) {
  std::array<Wc, CqExPoll::kBatch> batch;
  const int n = cq.core->poll(std::span<Wc>(batch.data(), batch.size()));
  if (n <= 0) return false;
  const std::uint64_t ts = p.stamp ? now_ns(CLOCK_MONOTONIC) : 0;
  const std::uint64_t wall = p.stamp_wall ? now_ns(CLOCK_REALTIME) : 0;
  for (int i = 0; i < n; ++i) {
    to_ibv_wc(batch[static_cast<std::size_t>(i)], p.wc[static_cast<std::size_t>(i)]);
    p.ts[static_cast<std::size_t>(i)] = ts;
    p.wall[static_cast<std::size_t>(i)] = wall;
    p.tm[static_cast<std::size_t>(i)] = ibv_wc_tm_info{batch[static_cast<std::size_t>(i)].tm_tag,
                                                       batch[static_cast<std::size_t>(i)].tm_priv};
  }
  p.at = 0;
  p.count = n;
  return true;
}

// Makes the batch's next CQE the current one; ENOENT when the CQ is empty.
int advance(ibv_cq_ex* ibcq) {
  Cq& cq = *reinterpret_cast<Cq*>(ibcq);
  CqExPoll& p = *cq.ext;
  if (++p.at >= p.count && !refill(cq, p)) {
    p.at = p.count = 0;
    return ENOENT;
  }
  const ibv_wc& wc = p.wc[p.at];
  ibcq->status = wc.status;
  ibcq->wr_id = wc.wr_id;
  return 0;
}

int start_poll(ibv_cq_ex* ibcq, ibv_poll_cq_attr* attr) {
  if (!attr || attr->comp_mask) return fail("ibv_start_poll", EINVAL, "NULL attr or a comp_mask bit");
  CqExPoll& p = ext_of(ibcq);
  if (!p.single_threaded) p.mu.lock();
  p.at -= 1;  // advance() moves onto the first CQE not handed out yet
  const int r = advance(ibcq);
  if (r != 0 && !p.single_threaded) p.mu.unlock();  // ENOENT: no end_poll follows
  return r;
}
int next_poll(ibv_cq_ex* ibcq) { return advance(ibcq); }
void end_poll(ibv_cq_ex* ibcq) {
  CqExPoll& p = ext_of(ibcq);
  ++p.at;  // the current CQE was consumed
  if (!p.single_threaded) p.mu.unlock();
}

ibv_wc_opcode read_opcode(ibv_cq_ex* cq) { return cur(cq).opcode; }
std::uint32_t read_vendor_err(ibv_cq_ex* cq) { return cur(cq).vendor_err; }
std::uint32_t read_byte_len(ibv_cq_ex* cq) { return cur(cq).byte_len; }
__be32 read_imm_data(ibv_cq_ex* cq) { return cur(cq).imm_data; }  // the union's: invalidated_rkey with WITH_INV
std::uint32_t read_qp_num(ibv_cq_ex* cq) { return cur(cq).qp_num; }
std::uint32_t read_src_qp(ibv_cq_ex* cq) { return cur(cq).src_qp; }
unsigned int read_wc_flags(ibv_cq_ex* cq) { return cur(cq).wc_flags; }
std::uint32_t read_slid(ibv_cq_ex* cq) { return cur(cq).slid; }
std::uint8_t read_sl(ibv_cq_ex* cq) { return cur(cq).sl; }
std::uint8_t read_dlid_path_bits(ibv_cq_ex* cq) { return cur(cq).dlid_path_bits; }
void read_tm_info(ibv_cq_ex* cq, ibv_wc_tm_info* info) {
  CqExPoll& p = ext_of(cq);
  *info = p.tm[static_cast<std::size_t>(p.at)];
}
std::uint64_t read_completion_ts(ibv_cq_ex* cq) {
  CqExPoll& p = ext_of(cq);
  return p.ts[p.at];
}
std::uint64_t read_completion_wallclock_ns(ibv_cq_ex* cq) {
  CqExPoll& p = ext_of(cq);
  return p.wall[p.at];
}

}  // namespace

int poll_cq_ex_classic(Cq& cq, int num_entries, ibv_wc* wc) {
  CqExPoll& p = *cq.ext;
  std::unique_lock lock(p.mu, std::defer_lock);
  if (!p.single_threaded) lock.lock();
  int done = 0;
  while (done < num_entries) {
    if (p.at >= p.count && !refill(cq, p)) {
      p.at = p.count = 0;
      break;
    }
    wc[done++] = p.wc[p.at++];
  }
  return done;
}

ibv_cq_ex* create_cq_ex_op(ibv_context* context, ibv_cq_init_attr_ex* attr) {
  constexpr const char* verb = "ibv_create_cq_ex";
  if (!context || !attr) return fail_null<ibv_cq_ex>(verb, EINVAL, "NULL context or attribute");
  if (attr->comp_mask & ~kKnownInitMask) return fail_null<ibv_cq_ex>(verb, EINVAL, "unknown comp_mask bits");
  if (attr->wc_flags & ~kSupportedWcFlags)
    return fail_null<ibv_cq_ex>(verb, EOPNOTSUPP, "wc_flags beyond the standard ones, the timestamps and TM info (CVLAN, flow tag)");
  const std::uint32_t flags = (attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) ? attr->flags : 0;
  if (flags & ~kSupportedCqFlags) return fail_null<ibv_cq_ex>(verb, EOPNOTSUPP, "unknown create flags");
  if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD) && !attr->parent_domain)
    return fail_null<ibv_cq_ex>(verb, EINVAL, "MASK_PD without a parent domain");
  ibv_pd* parent = (attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD) ? attr->parent_domain : nullptr;
  if (parent && (parent->context != context || !to_pd(parent)->is_parent()))
    return fail_null<ibv_cq_ex>(verb, EINVAL, "MASK_PD with a PD that is not a parent domain of this context");
  if (attr->cqe > static_cast<std::uint32_t>(INT32_MAX)) return fail_null<ibv_cq_ex>(verb, EINVAL, "cqe too large");
  auto ext = std::unique_ptr<CqExPoll>(new (std::nothrow) CqExPoll);
  if (!ext) return fail_null<ibv_cq_ex>(verb, ENOMEM, "out of memory");
  ext->single_threaded = (flags & IBV_CREATE_CQ_ATTR_SINGLE_THREADED) != 0;
  ext->stamp = (attr->wc_flags & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP) != 0;
  ext->stamp_wall = (attr->wc_flags & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK) != 0;
  Cq* cq = make_cq(verb, context, static_cast<int>(attr->cqe), attr->cq_context, attr->channel,
                   static_cast<int>(attr->comp_vector), parent);
  if (!cq) return nullptr;
  cq->ext = std::move(ext);
  ibv_cq_ex& x = cq->ex;
  x.comp_mask = 0;
  x.start_poll = start_poll;
  x.next_poll = next_poll;
  x.end_poll = end_poll;
  x.read_opcode = read_opcode;
  x.read_vendor_err = read_vendor_err;
  x.read_byte_len = read_byte_len;
  x.read_imm_data = read_imm_data;
  x.read_qp_num = read_qp_num;
  x.read_src_qp = read_src_qp;
  x.read_wc_flags = read_wc_flags;
  x.read_slid = read_slid;
  x.read_sl = read_sl;
  x.read_dlid_path_bits = read_dlid_path_bits;
  // Only what was asked for: a read of a flag not in wc_flags is a NULL
  // call in rdma-core's providers too, not a silent 0.
  x.read_completion_ts = ext_of(&x).stamp ? read_completion_ts : nullptr;
  x.read_completion_wallclock_ns = ext_of(&x).stamp_wall ? read_completion_wallclock_ns : nullptr;
  x.read_tm_info = (attr->wc_flags & IBV_WC_EX_WITH_TM_INFO) ? read_tm_info : nullptr;
  return &x;
}

int query_rt_values_op(ibv_context* context, ibv_values_ex* values) {
  if (!context || !values) return fail("ibv_query_rt_values_ex", EINVAL, "NULL context or values");
  if (values->comp_mask & ~static_cast<std::uint32_t>(IBV_VALUES_MASK_RAW_CLOCK))
    return fail("ibv_query_rt_values_ex", EOPNOTSUPP, "only the raw clock (IBV_VALUES_MASK_RAW_CLOCK)");
  if (values->comp_mask & IBV_VALUES_MASK_RAW_CLOCK) {
    // The completion timestamps' clock: CLOCK_MONOTONIC in ns (hca_core_clock 1 GHz).
    clock_gettime(CLOCK_MONOTONIC, &values->raw_clock);
  }
  return 0;
}

}  // namespace srdma::verbs
