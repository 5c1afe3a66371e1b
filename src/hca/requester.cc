// The requester: turns send WQEs into request packets, in order, one PSN
// per packet (IBA 9.7.1): a SEND or WRITE in packets of the path MTU (ONLY,
// or FIRST, MIDDLE..., LAST), a READ as one request that takes a PSN per
// response packet, an atomic as one. It keeps RC ordering: nothing is sent while an RNR wait is pending,
// and after an error nothing more is sent (the QP flushes instead).
//
// Local operations (REG_MR, LOCAL_INV) execute here, at their turn in the
// send queue: after every earlier WR has been handed to the link, before any
// later one. They take no PSN and send nothing; the completer retires them
// in order, so their CQEs never overtake those of earlier WRs. A WR with
// SEND_FENCE waits until every earlier WR has completed (IBA 10.8.3.3), which
// is what makes a LOCAL_INV safe after RDMA READs into the same MR.
#include <algorithm>
#include <cstring>

#include "hca/cq.h"
#include "hca/link.h"
#include "hca/qp.h"
#include "hca/requester.h"
#include "hca/queue_engine.h"
#include "hca/translation_tables.h"
#include "srdma/access.h"

namespace srdma::hca {

Requester::Requester(Qp& qp) : qp_(qp), rp_(qp.engine_.dcqcn()) {}

Requester::Step Requester::next_step() {
  QpState s = qp_.state();
  if (s == QpState::kErr) return Step::kFlush;
  // SQD drains: what is outstanding completes, nothing new is sent.
  if (s != QpState::kRts) return Step::kIdle;
  if (next_ == qp_.sq_.prod()) return Step::kIdle;
  if (rnr_until_ != Clock::time_point{}) [[unlikely]] {
    if (qp_.engine_.clock().now() < rnr_until_) return Step::kWaitRnr;
    rnr_until_ = {};  // the wait is over: no more clock reads
  }
  // The window: an ACK (asked for every kAckEveryPsns packets) reopens it.
  if (unacknowledged() && window_room() <= 0 && !grow_window()) [[unlikely]]
    return Step::kIdle;
  const SendWqe& w = qp_.sq_[next_];
  // Fence: wait for the completions of everything before (a response runs
  // the send side again; the transport timer is armed while it waits).
  if ((w.flags & SEND_FENCE) && !w.acknowledged() && outstanding()) [[unlikely]]
    return Step::kIdle;
  // max_rd_atomic (IBA 9.4.5): a READ or atomic waits while that many are
  // outstanding; the completion of one sends it.
  if (is_rd_atomic(w.opcode) && offset_ == 0 && rd_atomic_outstanding_ >= qp_.path_.max_rd_atomic) [[unlikely]]
    return Step::kIdle;
  // The pacer: only a QP a CNP (or the delay signal) slowed reads the clock.
  if (rp_.limited()) [[unlikely]] {
    const Clock::time_point now = qp_.engine_.clock().now();
    rate_until_ = rp_.send_time(now);
    publish_rate();
    if (rate_until_ > now) return Step::kWaitRate;
  }
  return Step::kSend;
}

void Requester::on_cnp() {
  rp_.on_cnp(qp_.engine_.clock().now());
  publish_rate();
}

void Requester::on_rtt(Clock::duration rtt) {
  rp_.on_rtt(rtt, qp_.engine_.clock().now());
  publish_rate();
}

void Requester::publish_rate() {
  QpCounters::SendSide& c = qp_.send_counters_;
  const DcqcnCounters& r = rp_.counters();
  c.cnps_received.set(r.cnps_received);
  c.rate_decreases.set(r.rate_decreases);
  c.rate_increases.set(r.rate_increases);
  c.paced_waits.set(r.paced_waits);
  c.rate_mbps.set(rp_.limited() ? static_cast<std::uint64_t>(rp_.rate_mbps()) : 0);
}

// The QP's translations, shared by the roles, defined in the requester's
// unit: send_whole (flatten) inlines translate_local into every message.
bool Qp::translate_local(const std::vector<Sge>& sges, std::uint32_t access, PieceList& out,
                         std::uint32_t pdn) const {
  out.clear();
  for (const Sge& s : sges) {
    auto t = tables_.translate(s.lkey, s.addr, s.length, access, pdn);
    if (!t) return false;
    t->for_each_piece([&](MemPiece p) { out.push_back(p); });
  }
  return true;
}

bool Qp::translate_slice(const std::vector<Sge>& sges, std::uint64_t offset, std::uint64_t len, std::uint32_t access,
                         std::uint32_t pdn, PieceList& out) const {
  out.clear();
  for (const Sge& s : sges) {
    if (len == 0) break;
    if (offset >= s.length) {
      offset -= s.length;
      continue;
    }
    const std::uint64_t n = std::min<std::uint64_t>(s.length - offset, len);
    auto t = tables_.translate(s.lkey, s.addr + offset, n, access, pdn);
    if (!t) return false;
    t->for_each_piece([&](MemPiece p) { out.push_back(p); });
    offset = 0;
    len -= n;
  }
  return len == 0;
}

bool Requester::outstanding() const { return qp_.completer_.consumer() != next_; }

bool Requester::unacknowledged() const {
  // Inside the oldest WQE its packets sent so far are out too: a message
  // longer than the window goes a window at a time, and so does a
  // go-back-N into one. (UC's are never acknowledged: the completer
  // retires its WQE once the requester handed all of it over.)
  return outstanding() || (mid_wqe() && qp_.init_.type != QpType::kUc);
}

std::int32_t Requester::window_room() const {
  return static_cast<std::int32_t>(window_) - psn_diff(next_psn_, qp_.completer_.oldest_unacked_psn());
}

bool Requester::grow_window() {
  if (window_ == kMaxUnackedPsns) return false;
  const std::uint32_t oldest = qp_.completer_.oldest_unacked_psn();
  const std::int32_t acked = psn_diff(window_mark_, oldest);
  window_mark_ = oldest;
  if (acked <= 0) return false;
  if (recovering_ && !psn_before(oldest, recover_psn_)) recovering_ = false;  // the episode's losses are resent
  window_acked_ += static_cast<std::uint32_t>(acked);
  while (window_acked_ >= window_ && window_ < kMaxUnackedPsns) {
    window_acked_ -= window_;
    window_ = std::min(kMaxUnackedPsns, window_ + kAckEveryPsns);
  }
  return window_room() > 0;
}

void Requester::note_loss(std::uint32_t psn) {
  // In process the NAK comes back inside the send that drew it: nothing
  // more went out meanwhile, and the window stays.
  if (!qp_.engine_.link_is_polled()) return;
  if (recovering_ && psn_before(psn, recover_psn_)) return;  // the episode's own
  window_ = std::max(kMinLossWindow, window_ / 2);
  window_acked_ = 0;
  window_mark_ = qp_.completer_.oldest_unacked_psn();
  recovering_ = true;
  recover_psn_ = sent_end_psn_;
}

void Requester::rewind_to(std::uint64_t index, std::uint32_t psn) {
  // The WQEs from `index` on are to be sent again (the READs and atomics
  // among them are counted again then); a local operation that executed
  // is passed, not executed twice.
  for (std::uint64_t i = index; i < next_; ++i) {
    SendWqe& w = qp_.sq_[i];
    if (w.acknowledged()) continue;
    if (is_rd_atomic(w.opcode)) --rd_atomic_outstanding_;
    w.state = WqeState::kPosted;
  }
  const SendWqe& w = qp_.sq_[index];
  next_ = index;
  next_psn_ = psn;
  // The resume point inside it: a SEND or WRITE resends from the packet
  // `psn`, a READ asks for the rest from there (IBA 9.7.5.2.1).
  // (An atomic has one PSN, so the product is 0 for it.)
  offset_ = static_cast<std::uint32_t>(psn_diff(psn, w.psn)) * qp_.path_.mtu;
}

void Requester::probe_last() {
  // The WQE of the last PSN sent: the one sent in part, or the last before
  // next_ that took PSNs (local operations executed after it took none; the
  // oldest outstanding WQE is never one).
  std::uint64_t i = offset_ != 0 ? next_ : next_ - 1;
  while (i != qp_.completer_.consumer() && qp_.sq_[i].acknowledged()) --i;
  const SendWqe& w = qp_.sq_[i];
  std::uint32_t psn = w.psn;  // an atomic; a READ none of whose responses came
  if (is_message_op(w.opcode))
    psn = i == next_ ? psn_add(next_psn_, kPsnMask) : psn_add(w.psn, w.npsn - 1);
  else if (wr_row(w.opcode).cls == WrClass::kRead && i == qp_.completer_.consumer())
    psn = qp_.completer_.oldest_unacked_psn();
  rewind_to(i, psn);
  probing_ = true;
}

void Requester::wait_rnr(std::uint64_t index, std::uint32_t psn, Clock::time_point until) {
  rewind_to(index, psn);
  rnr_until_ = until;
}

void Requester::stop(std::uint64_t from) {
  next_ = std::max(next_, from);
  offset_ = 0;
  rd_atomic_outstanding_ = 0;
}

void Requester::reset() {
  next_ = 0;
  offset_ = 0;
  rd_atomic_outstanding_ = 0;
  rnr_until_ = {};
  probing_ = false;
  window_ = kMaxUnackedPsns;
  window_acked_ = 0;
  recovering_ = false;
  rp_ = ReactionPoint(qp_.engine_.dcqcn());
  rate_until_ = {};
}

void Requester::execute_local(SendWqe& w) {
  // Executed once: a resend from an earlier WQE (RNR, sequence error,
  // timeout) walks past it.
  if (!w.acknowledged()) {
    const std::uint32_t pdn = qp_.init_.pdn;
    if (w.opcode == WrOpcode::kBindMw) {
      // IBA 10.6.7.2.4 / rxe: a refused bind completes with MW_BIND_ERR and,
      // like every local error, ends the QP.
      const TranslationTables::MwBind b{w.mw_key, w.rkey, w.mr_key, w.iova, w.mr_length, w.access, w.mw_type1_verb};
      if (!qp_.tables_.bind_mw(b, pdn, qp_.qpn())) return qp_.fail_wqe(next_, WcStatus::kMwBindErr);
    } else {
      Result<void> r = w.opcode == WrOpcode::kRegMr
                           ? qp_.tables_.fast_reg(w.rkey, pdn, w.access, w.iova, w.mr_length, w.page_shift, w.pages)
                           : qp_.tables_.local_invalidate(w.rkey, pdn);
      // IBA 10.6.3.3 / 10.6.6: a refused fast register or invalidate is a
      // memory management operation error; like every local error it ends
      // the QP and flushes the rest.
      if (!r) return qp_.fail_wqe(next_, WcStatus::kMemMgmtOpErr);
    }
    w.state = WqeState::kAcknowledged;
  }
  ++next_;
  // It completes now if nothing earlier is outstanding (the completer
  // relies on it: the oldest outstanding WQE is never an executed local
  // operation, which has no PSN to match).
  qp_.completer_.retire_acknowledged();
}

namespace {

// The opcode of a SEND or WRITE packet by its place in the message (IBA
// 9.2): the WR opcode table's.
Opcode send_opcode(WrOpcode op, bool first, bool last) { return wr_row(op).packet(first, last); }

}  // namespace

bool Requester::segment(const SendWqe& w, Packet& p, std::uint32_t& psns, bool& last) {
  // The next packet of a SEND or WRITE longer than the MTU, or a train of
  // them where the link carries trains: as many as the message has left
  // and the window allows.
  const SendPath& path = qp_.path_;
  const std::uint32_t left = w.length - offset_;
  std::uint32_t n = 1;
  if (qp_.trains() && left > path.mtu && !rp_.limited()) {  // (a paced QP sends packet by packet)
    n = path.packets_at_mtu(left);
    if (unacknowledged()) n = std::clamp<std::int64_t>(window_room(), 1, n);
  }
  const std::uint32_t len = static_cast<std::uint32_t>(std::min<std::uint64_t>(left, std::uint64_t{n} * path.mtu));
  const bool first = offset_ == 0;
  last = offset_ + len == w.length;
  p.op = send_opcode(w.opcode, first, last && n == 1);
  if (n > 1) {
    p.count = n;
    p.last_op = send_opcode(w.opcode, false, last);
    psns = n;
  }
  if (w.is_inline) {
    if (len) p.payload.push_back(MemPiece{const_cast<std::byte*>(w.inline_data.data()) + offset_, std::uint64_t{len}});
  } else if (!qp_.translate_slice(w.sges, offset_, len, 0, qp_.init_.pdn, p.payload)) {
    return false;
  }
  p.payload_length = len;
  if (has_reth(p.op)) {
    p.va = w.remote_addr;
    p.rkey = w.rkey;
    p.dma_length = w.length;
  }
  if (has_imm(last_opcode(p)) || has_ieth(last_opcode(p))) p.imm = w.imm;
  p.solicited = last && (w.flags & SEND_SOLICITED);
  return true;
}

bool Requester::wants_ack(const SendWqe& w, std::uint32_t last_psn, bool last) const {
  // The AckReq policy (IBA 9.7.5.1.2 lets the requester choose): a READ or
  // atomic is always answered; otherwise ask on the last packet of a WQE
  // that will need its completion, every kAckEveryPsns PSNs (so the window
  // reopens), when half the send queue waits for completions, and when a
  // local operation or a fenced WR right behind waits for this one. The
  // responder coalesces the rest: an ACK acknowledges every PSN before it.
  // (A train's packets before its last ask by the PSN rule: unroll().)
  if (is_rd_atomic(w.opcode)) return true;
  if (last && (qp_.init_.sq_sig_all || (w.flags & SEND_SIGNALED))) return true;
  if ((last_psn & (kAckEveryPsns - 1)) == kAckEveryPsns - 1) return true;
  if (!last) return false;
  const SendQueue& sq = qp_.sq_;
  if ((next_ + 1 - qp_.completer_.consumer()) * 2 >= sq.depth()) return true;
  if (next_ + 1 == sq.prod()) return false;
  const SendWqe& after = sq[next_ + 1];
  return is_local_op(after.opcode) || (after.flags & SEND_FENCE);
}

void Requester::note_sent(const Packet& p, std::uint32_t psns) {
  QpCounters::SendSide& c = qp_.send_counters_;
  c.requests_sent.bump(p.count);
  sent_again_ = psn_before(p.psn, sent_end_psn_);
  if (sent_again_) [[unlikely]]
    c.retransmissions.bump(std::min<std::uint32_t>(psn_diff(sent_end_psn_, p.psn), p.count));
  next_psn_ = psn_add(next_psn_, psns);
  if (!psn_before(next_psn_, sent_end_psn_)) sent_end_psn_ = next_psn_;
  if (rp_.limited()) [[unlikely]] {
    // What the pacer charges: the payload and each packet's headers
    // (IP, UDP, BTH and ICRC, the extended headers roughly).
    constexpr std::uint64_t kHeaderBytes = 64;
    rp_.on_sent(p.payload_length + kHeaderBytes * p.count, qp_.engine_.clock().now());
  }
}

void Requester::start_request(Packet& p) const {
  p.transport = peer_transport(qp_.init_.type);  // an XRC INI's requests are for a TGT
  p.src_addr = qp_.engine_.address();
  p.dst_addr = qp_.path_.dest_addr;
  p.src_qpn = qp_.qpn_;
  p.dst_qpn = qp_.path_.dest_qpn;
  p.udp_sport = qp_.udp_sport_;
  p.psn = next_psn_;
  // ECN-capable, so that a congested queue marks rather than drops it.
  if (qp_.congestion_control_) p.traffic_class = kEcnEct0;
}

bool Requester::fill_only(const SendWqe& w, Packet& p) const {
  // Every local byte through translate() (IBA 10.6.3: local read access is
  // implied by the lkey).
  p.op = send_opcode(w.opcode, true, true);
  if (w.is_inline) {
    if (w.length) p.payload.push_back(MemPiece{const_cast<std::byte*>(w.inline_data.data()), std::uint64_t{w.length}});
  } else if (!qp_.translate_local(w.sges, 0, p.payload)) {
    return false;
  }
  p.payload_length = w.length;
  p.va = w.remote_addr;  // RETH (read only for a WRITE)
  p.rkey = w.rkey;
  p.dma_length = w.length;
  p.imm = w.imm;  // ImmDt or IETH (read only where the opcode has one)
  p.solicited = w.flags & SEND_SOLICITED;
  return true;
}

void Requester::begin_wqe(SendWqe& w, std::uint32_t npsn) {
  // A WQE takes its PSNs when its first packet goes out. A resend from an
  // earlier WQE reaches it with the same PSN again (every WQE takes the
  // same number of PSNs each time); a resume in its middle (rewind_to)
  // comes with the offset already set and keeps them.
  if (offset_ == 0) {
    w.psn = next_psn_;
    w.npsn = npsn;
  }
  w.state = WqeState::kInFlight;
}

void Requester::finish_request(SendWqe& w, Packet&& p, std::uint32_t psns, bool last, QpType type) {
  // Nothing answers UC; the rest ask as wants_ack() says.
  p.ack_req = type != QpType::kUc && (wants_ack(w, last_psn_of(p), last) || probing_);
  probing_ = false;
  note_sent(p, psns);
  if (last) {
    if (is_rd_atomic(w.opcode)) ++rd_atomic_outstanding_;
    ++next_;
    offset_ = 0;
  } else {
    offset_ += p.payload_length;
  }
  // An unknown destination loses the request; the transport timer retries.
  (void)qp_.engine_.link().send(std::move(p));
  if (type == QpType::kUc) {  // no answer, no timer: done once sent
    if (last) handed_over(w);
    return;
  }
  qp_.completer_.request_sent();
}

void Requester::send_whole(SendWqe& w, std::uint32_t n) {
  // send_one's steps for it, with fill_only's packet (a train's headers
  // where n > 1) in place of segment's.
  begin_wqe(w, n);
  Packet p;
  start_request(p);
  if (!fill_only(w, p)) return qp_.fail_wqe(next_, WcStatus::kLocProtErr);
  if (n > 1) {  // FIRST, MIDDLE..., LAST: the headers fill_only wrote are theirs
    p.op = send_opcode(w.opcode, true, false);
    p.last_op = send_opcode(w.opcode, false, true);
    p.count = n;
  }
  finish_request(w, std::move(p), n, true, QpType::kRc);
}

void Requester::send_one() {
  SendWqe& w = qp_.sq_[next_];
  // The early entry: an RC SEND or WRITE from its start that fits one
  // packet, or that goes whole as one train.
  if (qp_.rc_entries_ && is_message_op(w.opcode) && offset_ == 0) [[likely]] {
    const SendPath& path = qp_.path_;
    if (w.length <= path.mtu) [[likely]]
      return send_whole(w, 1);
    if (qp_.trains() && !rp_.limited()) {  // a train leaves at once: not for a paced QP
      const std::uint32_t n = path.packets_at_mtu(w.length);
      if (!outstanding() || window_room() >= static_cast<std::int32_t>(n)) return send_whole(w, n);
    }
  }
  send_packet(w);
}

void Requester::send_packet(SendWqe& w) {
  const SendPath& path = qp_.path_;
  const QpType type = qp_.init_.type;
  const WrOpcodeRow& row = wr_row(w.opcode);
  if (row.cls == WrClass::kLocal) [[unlikely]]
    return execute_local(w);
  if (type == QpType::kUd) return send_datagram(w);
  begin_wqe(w, row.cls == WrClass::kAtomic ? 1 : path.packets_at_mtu(w.length));
  Packet p;
  start_request(p);
  p.xrc_srqn = w.xrc_srqn;  // XRCETH (read only by XRC's rows)
  std::uint32_t psns = 1;  // this packet takes
  bool last = true;        // of the WQE

  switch (row.cls) {
    case WrClass::kMessage:
      // ONLY, or the next packet or train of a longer one.
      if (const bool only = offset_ == 0 && w.length <= path.mtu; !(only ? fill_only(w, p) : segment(w, p, psns, last)))
        return qp_.fail_wqe(next_, WcStatus::kLocProtErr);
      break;
    case WrClass::kRead:
      // The local SGEs are checked for LOCAL_WRITE before the request goes
      // out, so a bad lkey never costs the responder a read. A resume asks
      // for the rest only, from the PSN where the responses stopped.
      if (!qp_.translate_local(w.sges, ACCESS_LOCAL_WRITE, pieces_, qp_.local_pdn(w)))
        return qp_.fail_wqe(next_, WcStatus::kLocProtErr);
      p.op = row.only;
      p.va = w.remote_addr + offset_;
      p.rkey = w.rkey;
      p.dma_length = w.length - offset_;
      psns = path.packets_at_mtu(p.dma_length);
      break;
    case WrClass::kAtomic:
      if (w.length != 8 || !qp_.translate_local(w.sges, ACCESS_LOCAL_WRITE, pieces_))
        return qp_.fail_wqe(next_, w.length != 8 ? WcStatus::kLocLenErr : WcStatus::kLocProtErr);
      p.op = row.only;
      p.va = w.remote_addr;
      p.rkey = w.rkey;
      p.compare_add = w.compare_add;
      p.swap = w.swap;
      break;
    case WrClass::kLocal:
      return;  // executed above
  }
  finish_request(w, std::move(p), psns, last, type);
}

void Requester::send_datagram(SendWqe& w) {
  Packet p;
  p.transport = QpType::kUd;
  p.op = wr_row(w.opcode).only;
  p.src_addr = qp_.engine_.address();
  p.dst_addr = w.ud_dest_addr;
  p.src_qpn = qp_.qpn_;
  p.dst_qpn = w.ud_qpn;
  p.qkey = w.ud_own_qkey ? qp_.path_.qkey : w.ud_qkey;  // IBA 10.2.4: the high bit asks for the QP's
  p.udp_sport = qp_.udp_sport_;
  p.psn = next_psn_;
  p.imm = w.imm;
  p.solicited = w.flags & SEND_SOLICITED;
  p.hop_limit = w.ud_hop_limit;
  p.traffic_class = w.ud_traffic_class;
  if (w.is_inline) {
    if (w.length) p.payload.push_back(MemPiece{w.inline_data.data(), std::uint64_t{w.length}});
  } else if (!qp_.translate_local(w.sges, 0, p.payload)) {
    return qp_.fail_wqe(next_, WcStatus::kLocProtErr);
  }
  p.payload_length = w.length;
  w.psn = next_psn_;
  w.npsn = 1;
  qp_.send_counters_.requests_sent.bump();
  next_psn_ = sent_end_psn_ = psn_add(next_psn_, 1);
  ++next_;
  // A destination no device answers for loses the datagram, as a wire
  // would; nothing tells the sender.
  (void)qp_.engine_.link().send(std::move(p));
  handed_over(w);
}

// The completer's, defined in the unit of its only caller so that
// send_whole (flatten) inlines it: a call per message was a measurable part
// of an 8-byte WRITE.
void Completer::request_sent() {
  // Time this request's round trip: the first one, then every
  // kRttSampleEvery-th, and never one sent before (Karn).
  if (--rtt_countdown_ == 0) [[unlikely]] start_rtt_sample();
  // Start the transport timer only if the answer is not already here (a
  // synchronous link usually has delivered it by now).
  // (Or in part: a message the window cut short is timed before its last
  // packet goes.)
  if (timeout_at_ == Clock::time_point{} && !timeout_unstamped_ && !qp_.answers_waiting() &&
      (consumer_ != qp_.requester_.next() || qp_.requester_.mid_wqe()))
    start_transport_timer();
}

void Completer::start_rtt_sample() {
  // One at a time: while one is out, or the requester resends, the next
  // request is asked again.
  // (Asked after the request went: the last packet of a go-back-N's
  // resend moved the requester back to where it had been, and its answer
  // was once taken as a round trip.)
  if (rtt_sampling_ || qp_.requester_.sent_again()) {
    rtt_countdown_ = 1;
    return;
  }
  rtt_countdown_ = kRttSampleEvery;
  rtt_sampling_ = true;
  rtt_psn_ = psn_add(qp_.requester_.next_psn(), kPsnMask);  // the last PSN it took
  rtt_sent_at_ = qp_.engine_.clock().now();
}

void Requester::handed_over(SendWqe& w) {
  // The link reads a batched packet's payload when the batch ends: hand it
  // to the wire now, before the completion lets the consumer reuse it.
  qp_.engine_.link().end_batch();
  w.state = WqeState::kAcknowledged;
  qp_.completer_.retire_acknowledged();
}

}  // namespace srdma::hca
