// XRC in the drop-in: XRC domains (ibv_open_xrcd / ibv_close_xrcd), XRC
// and tag-matching SRQs (ibv_create_srq_ex, ibv_get_srq_num) and XRC_RECV QPs
// (ibv_create_qp_ex with an XRCD). XRC_SEND QPs are made as any QP of a PD
// (qp.cc, qp_ex.cc).
//
// A domain opened on a file is the file's (ibv_open_xrcd(3)): the opens of
// one file in this process share it, found by the file's device and inode;
// opened with fd -1 it is nobody else's. Each open is a handle of its own;
// the domain goes when its last handle is closed, which is refused (EBUSY)
// while XRC SRQs or XRC_RECV QPs use it.
#include <fcntl.h>
#include <sys/stat.h>

#include <cstring>
#include <map>
#include <mutex>
#include <tuple>

#include "convert.h"
#include "errors.h"
#include "objects.h"
#include "ops.h"
#include "qp_ex.h"
#include "signals.h"

namespace srdma::verbs {

struct XrcdShared {
  std::unique_ptr<XrcDomain> core;
  bool by_file = false;
  std::tuple<std::uint64_t, dev_t, ino_t> key{};  // the device's address, the file's identity
  int handles = 0;  // guarded by the registry's mutex
};

namespace {

// The domains opened on files, by file (weak: the handles own them).
struct XrcdRegistry {
  std::mutex mu;
  std::map<std::tuple<std::uint64_t, dev_t, ino_t>, std::weak_ptr<XrcdShared>> by_file;
};
XrcdRegistry& registry() {
  static auto* r = new XrcdRegistry;  // never destroyed: handles may outlive static destruction
  return *r;
}

constexpr std::uint32_t kKnownXrcdMask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
constexpr std::uint32_t kKnownSrqMask =
    IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ |
    IBV_SRQ_INIT_ATTR_TM;

}  // namespace

XrcDomain& xrcd_core(ibv_xrcd* x) { return *to_xrcd(x)->shared->core; }

namespace {
// An XRC_RECV QP's wrapper, made or opened: no PD, CQs or SRQ of its own.
Qp* adopt_tgt_qp(ibv_context* context, Qp* qp, std::unique_ptr<QueuePair> core, void* qp_context) {
  qp->core = std::move(core);
  qp->caps = QpCaps{0, 0, 0, 0, 0};
  ibv_qp& q = qp->ibv;
  q.context = context;
  q.qp_context = qp_context;
  q.qp_num = qp->core->qp_num();
  q.handle = q.qp_num;
  q.state = IBV_QPS_RESET;
  q.qp_type = IBV_QPT_XRC_RECV;
  pthread_mutex_init(&q.mutex, nullptr);
  pthread_cond_init(&q.cond, nullptr);
  to_ctx(context)->adopt(Kind::kQp, qp);
  return qp;
}
}  // namespace

ibv_xrcd* open_xrcd_op(ibv_context* context, ibv_xrcd_init_attr* attr) {
  constexpr const char* verb = "ibv_open_xrcd";
  if (!context || !attr) return fail_null<ibv_xrcd>(verb, EINVAL, "NULL context or attribute");
  if (attr->comp_mask & ~kKnownXrcdMask) return fail_null<ibv_xrcd>(verb, EINVAL, "unknown comp_mask bits");
  if ((attr->comp_mask & kKnownXrcdMask) != kKnownXrcdMask)
    return fail_null<ibv_xrcd>(verb, EINVAL, "fd and oflags are both required (IBV_XRCD_INIT_ATTR_FD, _OFLAGS)");
  if (attr->oflags & ~(O_CREAT | O_EXCL)) return fail_null<ibv_xrcd>(verb, EINVAL, "oflags other than O_CREAT, O_EXCL");
  Context& ctx = *to_ctx(context);
  auto* x = new (std::nothrow) Xrcd{};
  if (!x) return fail_null<ibv_xrcd>(verb, ENOMEM, "out of memory");
  std::unique_lock lock(registry().mu);
  std::shared_ptr<XrcdShared> shared;
  std::tuple<std::uint64_t, dev_t, ino_t> key{};
  if (attr->fd != -1) {
    struct stat st {};
    if (fstat(attr->fd, &st) != 0) {
      delete x;
      return fail_null<ibv_xrcd>(verb, EBADF, "fd is not an open file");
    }
    key = {ctx.dev.address(), st.st_dev, st.st_ino};
    if (auto it = registry().by_file.find(key); it != registry().by_file.end()) shared = it->second.lock();
    // ibv_open_xrcd(3): O_EXCL refuses a file that has a domain; without
    // O_CREAT, the file must have one (EAGAIN, as the kernel answers).
    if (shared && (attr->oflags & O_EXCL)) {
      delete x;
      return fail_null<ibv_xrcd>(verb, EINVAL, "O_EXCL: the file already has an XRC domain");
    }
    if (!shared && !(attr->oflags & O_CREAT)) {
      delete x;
      return fail_null<ibv_xrcd>(verb, EAGAIN, "the file has no XRC domain and O_CREAT is not set");
    }
  }
  if (!shared) {
    SignalsBlocked quiet;
    auto core = ctx.dev.open_xrcd();
    if (!core) {
      delete x;
      return fail_null<ibv_xrcd>(verb, core.error());
    }
    shared = std::make_shared<XrcdShared>();
    shared->core = std::move(*core);
    if (attr->fd != -1) {
      shared->by_file = true;
      shared->key = key;
      registry().by_file[key] = shared;
    }
  }
  ++shared->handles;
  x->shared = std::move(shared);
  x->ibv.context = context;
  lock.unlock();
  ctx.adopt(Kind::kXrcd, x);
  return &x->ibv;
}

int close_xrcd_op(ibv_xrcd* xrcd) {
  constexpr const char* verb = "ibv_close_xrcd";
  if (!xrcd) return fail(verb, EINVAL, "NULL XRCD");
  Xrcd* x = to_xrcd(xrcd);
  {
    std::lock_guard lock(registry().mu);
    XrcdShared& s = *x->shared;
    if (s.handles == 1) {
      // The last handle takes the domain with it: not while it is used.
      if (auto r = s.core->close(); !r) return fail(verb, r.error());
      if (s.by_file) registry().by_file.erase(s.key);
    }
    --s.handles;
  }
  to_ctx(xrcd->context)->release(Kind::kXrcd, x);
  delete x;
  return 0;
}

ibv_srq* create_srq_ex_op(ibv_context* context, ibv_srq_init_attr_ex* attr) {
  constexpr const char* verb = "ibv_create_srq_ex";
  if (!context || !attr) return fail_null<ibv_srq>(verb, EINVAL, "NULL context or attribute");
  if (attr->comp_mask & ~kKnownSrqMask) return fail_null<ibv_srq>(verb, EINVAL, "unknown comp_mask bits");
  const ibv_srq_type type = (attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) ? attr->srq_type : IBV_SRQT_BASIC;
  if (type != IBV_SRQT_BASIC && type != IBV_SRQT_XRC && type != IBV_SRQT_TM)
    return fail_null<ibv_srq>(verb, EINVAL, "unknown srq_type");
  if ((type == IBV_SRQT_TM) != ((attr->comp_mask & IBV_SRQ_INIT_ATTR_TM) != 0))
    return fail_null<ibv_srq>(verb, EINVAL, "a TM SRQ (IBV_SRQT_TM) and its tm_cap (IBV_SRQ_INIT_ATTR_TM) go together");
  if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) || !attr->pd)
    return fail_null<ibv_srq>(verb, EINVAL, "an SRQ needs a PD (IBV_SRQ_INIT_ATTR_PD)");
  if (attr->pd->context != context) return fail_null<ibv_srq>(verb, EINVAL, "the PD is of another context");
  ibv_srq_init_attr init{};
  init.srq_context = attr->srq_context;
  init.attr = attr->attr;
  ibv_srq* srq = nullptr;
  if (type == IBV_SRQT_BASIC) {
    if (attr->comp_mask & (IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ))
      return fail_null<ibv_srq>(verb, EINVAL, "a basic SRQ takes no XRCD or CQ");
    srq = make_srq(verb, attr->pd, &init, nullptr, nullptr);
  } else if (type == IBV_SRQT_TM) {
    if ((attr->comp_mask & IBV_SRQ_INIT_ATTR_XRCD) || !(attr->comp_mask & IBV_SRQ_INIT_ATTR_CQ) || !attr->cq)
      return fail_null<ibv_srq>(verb, EINVAL, "a TM SRQ needs a CQ (IBV_SRQ_INIT_ATTR_CQ) and no XRCD");
    if (attr->cq->context != context) return fail_null<ibv_srq>(verb, EINVAL, "the CQ is of another context");
    srq = make_srq(verb, attr->pd, &init, nullptr, attr->cq, &attr->tm_cap);
  } else {
    constexpr std::uint32_t kXrcNeeds = IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
    if ((attr->comp_mask & kXrcNeeds) != kXrcNeeds || !attr->xrcd || !attr->cq)
      return fail_null<ibv_srq>(verb, EINVAL, "an XRC SRQ needs an XRCD and a CQ (IBV_SRQ_INIT_ATTR_XRCD, _CQ)");
    if (attr->xrcd->context != context || attr->cq->context != context)
      return fail_null<ibv_srq>(verb, EINVAL, "the XRCD or CQ is of another context");
    srq = make_srq(verb, attr->pd, &init, attr->xrcd, attr->cq);
  }
  if (srq) attr->attr = init.attr;
  return srq;
}

int get_srq_num_op(ibv_srq* srq, std::uint32_t* srq_num) {
  if (!srq || !srq_num) return fail("ibv_get_srq_num", EINVAL, "NULL SRQ or srq_num");
  // Every SRQ has its number (as mlx5 answers); only an XRC SRQ's is of use
  // to a peer: a TGT QP refuses any other.
  *srq_num = to_srq(srq)->core->srq_num();
  return 0;
}

ibv_qp* create_xrc_recv_qp(ibv_context* context, ibv_qp_init_attr_ex* attr) {
  constexpr const char* verb = "ibv_create_qp_ex";
  if (!(attr->comp_mask & IBV_QP_INIT_ATTR_XRCD) || !attr->xrcd)
    return fail_null<ibv_qp>(verb, EINVAL, "an XRC_RECV QP needs an XRCD (IBV_QP_INIT_ATTR_XRCD)");
  if (attr->xrcd->context != context) return fail_null<ibv_qp>(verb, EINVAL, "the XRCD is of another context");
  if ((attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) && attr->send_ops_flags)
    return fail_null<ibv_qp>(verb, EINVAL, "an XRC_RECV QP sends nothing: no send_ops_flags");
  if ((attr->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && attr->create_flags)
    return fail_null<ibv_qp>(verb, EOPNOTSUPP, "no create_flags are supported");
  auto* qp = new_object<Qp>(nullptr);
  if (!qp) return fail_null<ibv_qp>(verb, ENOMEM, "out of memory");
  std::memset(&qp->ex, 0, sizeof qp->ex);
  // Its CQs, SRQ and caps are ignored, as the kernel's XRC_TGT creation
  // ignores them: it has none of its own.
  QpInitAttr init;
  init.qp_type = QpType::kXrcTgt;
  init.qp_context = qp;
  SignalsBlocked quiet;
  auto core = xrcd_core(attr->xrcd).create_tgt_qp(init);
  if (!core) {
    delete_object(qp);
    return fail_null<ibv_qp>(verb, core.error());
  }
  attr->cap = ibv_qp_cap{};
  return &adopt_tgt_qp(context, qp, std::move(*core), attr->qp_context)->ibv;
}

ibv_qp* open_qp_op(ibv_context* context, ibv_qp_open_attr* attr) {
  constexpr const char* verb = "ibv_open_qp";
  constexpr std::uint32_t kNeeds = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
  if (!context || !attr) return fail_null<ibv_qp>(verb, EINVAL, "NULL context or attribute");
  if (attr->comp_mask & ~(kNeeds | IBV_QP_OPEN_ATTR_CONTEXT))
    return fail_null<ibv_qp>(verb, EINVAL, "unknown comp_mask bits");
  if ((attr->comp_mask & kNeeds) != kNeeds || !attr->xrcd)
    return fail_null<ibv_qp>(verb, EINVAL, "the QP's number, XRCD and type are required");
  if (attr->qp_type != IBV_QPT_XRC_RECV) return fail_null<ibv_qp>(verb, EINVAL, "only XRC_RECV QPs are opened");
  if (attr->xrcd->context != context) return fail_null<ibv_qp>(verb, EINVAL, "the XRCD is of another context");
  auto* qp = new_object<Qp>(nullptr);
  if (!qp) return fail_null<ibv_qp>(verb, ENOMEM, "out of memory");
  std::memset(&qp->ex, 0, sizeof qp->ex);
  SignalsBlocked quiet;
  auto core = xrcd_core(attr->xrcd).open_tgt_qp(attr->qp_num);
  if (!core) {
    delete_object(qp);
    return fail_null<ibv_qp>(verb, core.error());
  }
  Qp* w = adopt_tgt_qp(context, qp, std::move(*core),
                       (attr->comp_mask & IBV_QP_OPEN_ATTR_CONTEXT) ? attr->qp_context : nullptr);
  w->ibv.state = ibv_state(w->core->state());
  return &w->ibv;
}

}  // namespace srdma::verbs
