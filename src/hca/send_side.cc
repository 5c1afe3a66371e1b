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
        inbox_ready_.store(false, std::memory_order_relaxed);
      }
      for (auto& m : drain_) completer_.handle(m);
      drain_.clear();
      continue;
    }
    if (check_timeout) {  // once, after the responses that are here
      check_timeout = false;
      completer_.check_timeout();
    }
    switch (requester_.next_step()) {
      case Requester::Step::kIdle:
        return;
      case Requester::Step::kWaitRnr:
        arm_timer(requester_.rnr_until());
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

void Qp::on_timer() {
  {
    FastLock lock(sq_mu_);
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
}

}  // namespace srdma::hca
