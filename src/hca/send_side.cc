// The send side of a QP: the loop that runs it (responses into the
// completer first, then the requester until it idles), how responses reach
// it from any thread (an inbox, and a slot for the thread that runs it),
// the engine timer, and the failures that end the QP. See qp.h for the
// locking rules.
#include <algorithm>
#include <mutex>

#include "common/asymmetric_fence.h"
#include "hca/link.h"
#include "hca/qp.h"
#include "hca/queue_engine.h"
#include "hca/srq.h"

namespace srdma::hca {

void Qp::run_send_side(bool check_timeout) {
  SendSideHere here(this);  // a response this thread delivers meanwhile is ours to drain (kick)
  // A link with a wire sends what we send here together, before sq_mu_
  // (held by our callers) lets another thread send for this QP.
  SendBatch batch(engine_.link(), SendBatch::kOrdered);
  // The transport timeout is checked only when the engine timer runs us
  // (once, after draining the responses already here):
  // whenever the completer's deadline is set (or unstamped), a timer at or
  // before it is pending (arm_timer), so checking on every post would only
  // cost a clock read.
  for (;;) {
    // Completer first: responses retire WQEs and may stop the requester.
    // (Handling them sends nothing, so none arrives meanwhile; and every
    // way out of this loop below sends nothing either: own_ack_ and
    // own_inbox_ are empty when it returns.)
    if (own_ack_valid_) {  // older than own_inbox_
      own_ack_valid_ = false;
      const Ack ack = own_ack_;
      completer_.handle_ack(ack);
      continue;
    }
    if (!own_inbox_.empty()) {
      drain_.swap(own_inbox_);
      for (auto& m : drain_) completer_.handle(m);
      drain_.clear();
      continue;
    }
    if (inbox_ready_.load(std::memory_order_acquire)) {
      {
        FastLock lock(inbox_mu_);
        drain_.swap(inbox_);
        if (!rndv_inbox_.empty()) [[unlikely]] {
          for (RndvWork& r : rndv_inbox_) rndv_pending_.push_back(std::move(r));
          rndv_inbox_.clear();
        }
      }
      // inbox_ready_ stays set until what was taken is completed: a request
      // delivered meanwhile by another thread (receive_request) sees it and
      // waits for sq_mu_, so the send CQEs these responses make come before
      // the CQE of the peer's next message, as they arrived. Cleared while
      // the taken ones were being completed, it let the receive thread push
      // a reply's CQE between them (perftest -e's one-channel loop then
      // polled its send CQ empty, one CQE behind for good; two such and its
      // two-entry send CQ overran).
      for (auto& m : drain_) completer_.handle(m);
      drain_.clear();
      {
        FastLock lock(inbox_mu_);
        if (inbox_.empty() && rndv_inbox_.empty()) inbox_ready_.store(false, std::memory_order_relaxed);
      }
      continue;
    }
    if (check_timeout) {  // once, after the responses that are here
      check_timeout = false;
      completer_.check_timeout();
    }
    if (!rndv_pending_.empty()) [[unlikely]] post_rndv();
    switch (requester_.next_step()) {
      case Requester::Step::kIdle:
        return;
      case Requester::Step::kWaitRnr:
        arm_timer(requester_.rnr_until());
        return;
      case Requester::Step::kWaitRate:
        arm_timer(requester_.rate_until());
        return;
      case Requester::Step::kFlush:
        flush_send_queue();
        return;
      case Requester::Step::kSend:
        requester_.send_one();
        // The usual end of a post: nothing came back, nothing is left to
        // send (what the next turn would find, one turn sooner).
        if (requester_.next() == sq_.prod() && !answers_waiting() && state() == QpState::kRts) return;
        break;
    }
  }
}

void Qp::receive_response(Packet&& pkt) {
  // An answer delivered by the thread whose send side is running (the
  // in-process link answers a request before send() returns) is that send
  // side's to take: it holds sq_mu_, so no inbox lock and no kick.
  if (SendSideHere::runs(this)) {
    sq_mu_.assert_held();  // by the send side running on this thread
    if (!own_answers_pending() && Ack::is(pkt)) {
      own_ack_ = Ack::of(pkt);
      own_ack_valid_ = true;
      return;
    }
    own_inbox_.push_back(std::move(pkt));
    return;
  }
  {
    FastLock lock(inbox_mu_);
    inbox_.push_back(std::move(pkt));
    inbox_ready_.store(true, std::memory_order_release);
  }
  kick();
}

void Qp::receive_ack(const Ack& ack) {
  if (SendSideHere::runs(this)) [[likely]] {
    sq_mu_.assert_held();  // by the send side running on this thread
    if (!own_answers_pending()) [[likely]] {
      own_ack_ = ack;
      own_ack_valid_ = true;
      return;
    }
  }
  receive_response_packet(ack);
}

void Qp::receive_response_packet(const Ack& ack) { receive_response(ack.packet()); }

// take_stranded_responses (qp.h): a response that arrived while we held
// sq_mu_, after run_send_side() last looked, found kick() locked out: take
// it now, or it would wait for the next post or timer (the send side arms
// no timer for an answer it saw arrive). Our unlock (a plain store) must be
// ordered before the load: a Dekker pair with kick(). Where answers come
// back on the sending thread (answers_inline_), kick()'s side is the rare
// one (another thread's response found us holding sq_mu_): the poster pays
// the light half of an asymmetric fence and kick() the heavy one. Where
// they come from a wire's receive thread, that happens all the time: a
// full fence here, against kick()'s locked try_lock.
void Qp::poster_fence() const {
  if (answers_inline_)
    asymmetric_light_fence();
  else
    std::atomic_thread_fence(std::memory_order_seq_cst);
}

void Qp::drain_stranded_responses() {
  // Only from a thread that runs no send side: one inside another QP's
  // (a request delivered inline by the in-process link) holds that QP's
  // sq_mu_, and taking ours could invert the order with a thread doing the
  // opposite. There the holder completes them when it lets go, as before.
  if (SendSideHere::top != nullptr) return;
  {
    FastLock lock(sq_mu_);
    run_send_side();
  }
  take_stranded_responses();
}

void Qp::kick() {
  // Whoever holds sq_mu_ drains the inbox before it lets go; re-check after
  // unlocking so that a response that arrived just then is not stranded.
  for (;;) {
    if (!sq_mu_.try_lock()) {
      // A send side running on this thread (its request was answered
      // synchronously) drains the inbox in its loop, before it returns;
      // without answers_inline_ the holder's full fence after it lets
      // go pairs with our locked try_lock.
      if (SendSideHere::runs(this) || !answers_inline_) return;
      // Another thread holds it, and looks at the inbox after it lets go
      // behind only the light half: after the heavy half, either it sees
      // our response or we see it gone.
      asymmetric_heavy_fence();
      if (sq_mu_.locked()) return;
      continue;
    }
    run_send_side();
    sq_mu_.unlock();
    poster_fence();  // as in take_stranded_responses
    if (!inbox_ready_.load(std::memory_order_relaxed)) return;
  }
}

void Qp::arm_timer(Clock::time_point at, bool transport) {
  // One pending timer per QP is enough: an earlier one re-arms as needed.
  if (timer_armed_ != Clock::time_point{} && timer_armed_ <= at) return;
  timer_armed_ = at;
  timer_armed_timeout_ = transport ? path_.timeout : 0xff;
  engine_.schedule_timer(weak_from_this(), at);
}

void Qp::on_timer(Clock::time_point at) {
  {
    FastLock lock(sq_mu_);
    // A task for a deadline an earlier one superseded (arm_timer keeps one
    // deadline; the engine timer keeps every task): the earlier one ran the
    // send side, which armed what it still needs. Running it again would
    // arm again, and a QP paced by the rate (a deadline per packet, a
    // transport deadline each time) multiplied its tasks without end.
    if (at != timer_armed_) return;
    timer_armed_ = {};
    timer_armed_timeout_ = 0xff;
    run_send_side(/*check_timeout=*/true);
  }
  take_stranded_responses();
}

void Qp::fail_wqe(std::uint64_t index, WcStatus status) {
  state_.store(QpState::kErr, std::memory_order_release);
  completer_.fail(index, status);
  requester_.stop(completer_.consumer());
  FastLock lock(rq_mu_);  // lock order: sq_mu_ then rq_mu_
  responder_.flush();
}

void Qp::flush_send_queue() {
  completer_.flush();
  requester_.stop(sq_.prod());
  // Rendezvous work not posted yet is younger than every WQE: it flushes last.
  while (!rndv_pending_.empty()) {
    const RndvWork r = std::move(rndv_pending_.front());
    rndv_pending_.pop_front();
    drop_rndv(r, WcStatus::kWrFlushErr);
  }
}

// Tag matching's rendezvous (qp.h says how the pieces fit).
void Qp::queue_rndv(RndvWork&& w) {
  {
    FastLock lock(inbox_mu_);
    rndv_inbox_.push_back(std::move(w));
    inbox_ready_.store(true, std::memory_order_release);
  }
  rndv_kick_.store(true, std::memory_order_relaxed);
}

void Qp::kick_rndv() {
  rndv_kick_.store(false, std::memory_order_relaxed);
  // A request delivered inside another QP's send side (the in-process
  // link: the sender's post) kicks us once that send side returns: its
  // loop has then taken the ACK it was delivered (and completed its
  // SEND), so our READ and FIN reach the sender after it, as on a wire
  // (its responder may refuse the READ and end its QP: the ACK must not
  // find it ended). kick() takes sq_mu_ only if free, and a send side of
  // ours running on this thread takes the work in its loop.
  if (SendSideHere::top != nullptr && !SendSideHere::runs(this))
    SendSideHere::deferred.push_back(shared_from_this());
  else
    kick();
}

void Qp::SendSideHere::run_deferred() {
  while (!deferred.empty()) {
    const std::shared_ptr<Qp> q = std::move(deferred.back());
    deferred.pop_back();
    q->kick();  // (its send side, the outermost now, runs what it defers in turn)
  }
}

namespace {

void store_be(std::byte* p, std::uint64_t v, int n) {
  for (int i = n - 1; i >= 0; --i, v >>= 8) p[i] = static_cast<std::byte>(v & 0xff);
}

}  // namespace

void Qp::post_rndv() {
  // In the send queue's spare slots, behind the consumer's WQEs (RC keeps
  // its order); what finds no room waits for a completion to free one.
  while (!rndv_pending_.empty() && rndv_in_sq_ < kRndvSlots && sq_.prod() - completer_.consumer() < sq_.depth()) {
    RndvWork r = std::move(rndv_pending_.front());
    rndv_pending_.pop_front();
    // max_rd_atomic 0 since the match (a modify): no READ may go out.
    if (!r.fin && path_.max_rd_atomic == 0) {
      drop_rndv(r, WcStatus::kLocQpOpErr);
      continue;
    }
    SendWqe& w = sq_[sq_.prod()];
    w.wr_id = r.recv_wr_id;
    w.flags = SEND_SIGNALED;  // every way it completes goes through the completer's complete_send
    w.imm = 0;
    w.compare_add = w.swap = 0;
    w.xrc_srqn = 0;
    w.remote_addr = r.va;
    w.rkey = r.rkey;
    w.device = r.fin ? DeviceWqe::kRndvFin : DeviceWqe::kRndvRead;
    w.tm_pdn = r.pdn;
    w.tm_tag = r.tag;
    w.tm_priv = r.priv;
    if (r.fin) {
      // The FIN: the request's TMH and RVH again, opcode FIN, inline.
      w.opcode = WrOpcode::kSend;
      w.sges.clear();
      w.is_inline = true;
      w.inline_data.assign(kTmhSize + kRvhSize, std::byte{0});
      std::byte* p = w.inline_data.data();
      p[0] = static_cast<std::byte>(TmhOpcode::kFin);
      store_be(p + 4, r.priv, 4);
      store_be(p + 8, r.tag, 8);
      store_be(p + kTmhSize, r.va, 8);
      store_be(p + kTmhSize + 8, r.rkey, 4);
      store_be(p + kTmhSize + 12, r.len, 4);
      w.length = kTmhSize + kRvhSize;
    } else {
      w.opcode = WrOpcode::kRdmaRead;
      w.sges = std::move(r.sges);
      w.is_inline = false;
      w.inline_data.clear();
      w.length = r.len;
    }
    sq_.produce();
    ++rndv_in_sq_;
  }
}

void Qp::rndv_done(SendWqe& w, WcStatus status) {
  --rndv_in_sq_;
  const DeviceWqe kind = w.device;
  w.device = DeviceWqe::kNone;
  // A FIN completes nothing the consumer posted: one that fails (the
  // sender posted no receive for it, say) ends the QP with no WR of the
  // consumer's to say why, so the QP fatal event does.
  if (kind != DeviceWqe::kRndvRead) {
    if (status != WcStatus::kSuccess && status != WcStatus::kWrFlushErr)
      engine_.async_events().raise(AsyncEvent{AsyncEventType::kQpFatal, 0, qpn_, init_.qp_context});
    return;
  }
  complete_tag(w.wr_id, status, status == WcStatus::kSuccess ? w.length : 0);
  if (status != WcStatus::kSuccess) return;
  RndvWork fin;
  fin.recv_wr_id = w.wr_id;
  fin.va = w.remote_addr;
  fin.rkey = w.rkey;
  fin.len = w.length;
  fin.tag = w.tm_tag;
  fin.priv = w.tm_priv;
  fin.fin = true;
  rndv_pending_.push_back(std::move(fin));
}

void Qp::drop_rndv(const RndvWork& r, WcStatus status) {
  if (!r.fin) complete_tag(r.recv_wr_id, status, 0);
}

void Qp::complete_tag(std::uint64_t recv_wr_id, WcStatus status, std::uint32_t byte_len) {
  // The tag's second completion (its first, WC_TM_MATCH, came with the
  // request): the data is in its buffer (WC_TM_DATA_VALID), or the READ
  // failed. No tag info: the first had it.
  Wc wc;
  wc.wr_id = recv_wr_id;
  wc.status = status;
  wc.opcode = WcOpcode::kTmRecv;
  wc.byte_len = byte_len;
  if (status == WcStatus::kSuccess) wc.wc_flags = WC_TM_DATA_VALID;
  wc.qp_num = qpn_;
  wc.qp_context = init_.qp_context;
  wc.src_qp = path_.dest_qpn;
  if (Cq* cq = init_.recv_cq ? init_.recv_cq.get() : init_.srq ? init_.srq->cq().get() : nullptr)
    push_cqe(*cq, wc, false);
}

}  // namespace srdma::hca
