// The software HCA: resource tables sized by a profile, and the two halves
// that use them: the translation tables (PDs, MRs, FMRs, FRWR, the
// translation cache: translation_tables.h) and the queue engine (CQs, QPs,
// completion vectors, the engine timer, the link: queue_engine.h).
//
// This is the one narrow interface the verbs core talks to (mechanism, not
// policy): the core decides what to register and which queues to create;
// the device decides what a key means and what a work request does.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "hca/queue_engine.h"
#include "hca/translation_tables.h"
#include "hca/udp_link.h"
#include "srdma/net.h"
#include "srdma/profile.h"
#include "srdma/status.h"
#include "srdma/usage.h"

namespace srdma::hca {

class SoftHca {
 public:
  // REQUIRES: `profile` came from validate_profile(). Without `net`, the
  // device joins the in-process link under a fresh address; with it, the
  // device binds net->ip and speaks RoCEv2 (udp_link.h), its address
  // roce_address() of that IPv4 address. The bind's error, naming the
  // address, if it fails.
  static Result<std::shared_ptr<SoftHca>> open(const Profile& profile, const NetConfig* net = nullptr);
  ~SoftHca();
  SoftHca(const SoftHca&) = delete;
  SoftHca& operator=(const SoftHca&) = delete;

  const Profile& profile() const { return profile_; }
  TranslationTables& tables() { return tables_; }
  const TranslationTables& tables() const { return tables_; }
  QueueEngine& engine() { return engine_; }
  const QueueEngine& engine() const { return engine_; }

  // Every table's usage (QP, CQ, MPT, MTT segments, PD), the MTT buddies,
  // and the address space the tables take.
  std::vector<TableUsage> table_usage() const;
  std::vector<BuddyUsage> buddy_usage() const { return tables_.buddy_usage(); }
  std::size_t table_bytes() const;
  // The RoCEv2 link, or null on the in-process link.
  const UdpLink* udp() const { return udp_.get(); }
  UdpLink* udp() { return udp_.get(); }

 private:
  SoftHca(const Profile& p, MptTable mpt, MttTable mtt, alloc::IndexAllocator pd, alloc::IndexAllocator qp,
          alloc::IndexAllocator cq, std::unique_ptr<UdpLink> udp);

  const Profile profile_;
  TranslationTables tables_;
  std::unique_ptr<UdpLink> udp_;  // before engine_: the engine's QPs send on it until they are gone
  QueueEngine engine_;  // after tables_: it uses them until it is gone
};

}  // namespace srdma::hca
