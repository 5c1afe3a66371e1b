// The NVMe over Fabrics wire format (RDMA transport): the 64-byte command
// capsule (an NVMe submission queue entry), the 16-byte response capsule (a
// completion queue entry), the SGL descriptors a capsule carries, the Connect
// data, and the Identify data structures.
//
// Layout: every struct here is exactly the bytes on the wire. The fields are
// laid out so that each one sits at its natural alignment (the specifications
// chose them that way); the few that do not (the SGL's 24-bit length and
// 32-bit key) are byte arrays behind accessors. The static_asserts on sizes and
// offsets below are the proof that there is no padding, so the structs can be
// memcpy'd to and from a capsule. Byte order: NVMe is little-endian, and so is
// every host we build for (asserted); a big-endian port would need swapping
// accessors here and nowhere else.
//
// References: NVMe Base Specification 1.4 / 2.0 (SQE 4.2, CQE 4.6, SGL 4.4,
// Identify 5.15), NVMe over Fabrics 1.1 (capsules 2.2, Connect 3.3, Property
// Get/Set 3.4/3.5, RDMA transport 7.3).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace srdma::nvmf {

static_assert(std::endian::native == std::endian::little,
              "the NVMe wire format is little-endian; add byte swapping in wire.h first");

// ---------------------------------------------------------------- opcodes --

// Admin command set (NVMe base, Figure "Opcodes for Admin Commands").
enum class AdminOpcode : std::uint8_t {
  kGetLogPage = 0x02,
  kIdentify = 0x06,
  kKeepAlive = 0x18,
};

// NVM command set I/O commands (NVMe base / NVM command set).
enum class IoOpcode : std::uint8_t {
  kFlush = 0x00,
  kWrite = 0x01,
  kRead = 0x02,
};

// Every Fabrics command has this opcode on either queue; `fctype` says which.
inline constexpr std::uint8_t kFabricsOpcode = 0x7F;

enum class FabricsType : std::uint8_t {  // NVMe-oF 1.1, Figure 12
  kPropertySet = 0x00,
  kConnect = 0x01,
  kPropertyGet = 0x04,
  kAuthenticationSend = 0x05,
  kAuthenticationReceive = 0x06,
  kDisconnect = 0x08,
};

// Identify CNS (Controller or Namespace Structure), CDW10 bits 7:0.
enum class Cns : std::uint8_t {
  kNamespace = 0x00,
  kController = 0x01,
  kActiveNamespaceList = 0x02,
};

// ------------------------------------------------------------------ flags --

// CDW0 byte 1. FUSE is bits 1:0; PSDT (PRP or SGL for Data Transfer) bits 7:6.
inline constexpr std::uint8_t kFlagsFuseMask = 0x03;
inline constexpr std::uint8_t kFlagsPsdtMask = 0xC0;
// NVMe-oF 1.1 section 2.3.1 (and Linux's nvmet_req_init): on fabrics the PSDT
// field shall be 01b, "SGL, MPTR is the address of one contiguous buffer".
// PRPs (00b) do not exist on fabrics; 10b (MPTR addresses an SGL segment) is
// not allowed either.
inline constexpr std::uint8_t kPsdtSglMetaBuffer = 0x40;

// ------------------------------------------------------------------- SGL --

// SGL descriptor type (byte 15 bits 7:4) and subtype (bits 3:0).
enum class SglType : std::uint8_t {
  kDataBlock = 0x0,       // unkeyed: with subtype kOffset, in-capsule data
  kKeyedDataBlock = 0x4,  // address, 24-bit length, 32-bit key (RDMA)
};
enum class SglSubtype : std::uint8_t {
  kAddress = 0x0,     // keyed: addr is a remote virtual address
  kOffset = 0x1,      // unkeyed: addr is an offset into the in-capsule data
  kInvalidate = 0xF,  // keyed: the target shall send with invalidate of `key`
};

// One 16-byte SGL descriptor. Keyed data block (type 4):
//   bytes 0-7 address, 8-10 length (24 bits), 11-14 key, 15 type/subtype.
// Data block (type 0), offset subtype (in-capsule data):
//   bytes 0-7 offset into the in-capsule data, 8-11 length, 12-14 reserved.
struct NvmeSgl {
  std::uint64_t addr = 0;
  std::uint8_t length_or_key[7] = {};  // see the two layouts above
  std::uint8_t type_subtype = 0;

  constexpr SglType type() const { return static_cast<SglType>(type_subtype >> 4); }
  constexpr std::uint8_t raw_type() const { return type_subtype >> 4; }
  constexpr std::uint8_t subtype() const { return type_subtype & 0x0F; }

  // Keyed layout.
  constexpr std::uint32_t keyed_length() const {
    return length_or_key[0] | (std::uint32_t{length_or_key[1]} << 8) |
           (std::uint32_t{length_or_key[2]} << 16);
  }
  constexpr std::uint32_t key() const {
    return length_or_key[3] | (std::uint32_t{length_or_key[4]} << 8) |
           (std::uint32_t{length_or_key[5]} << 16) | (std::uint32_t{length_or_key[6]} << 24);
  }
  // Unkeyed layout.
  constexpr std::uint32_t unkeyed_length() const {
    return length_or_key[0] | (std::uint32_t{length_or_key[1]} << 8) |
           (std::uint32_t{length_or_key[2]} << 16) | (std::uint32_t{length_or_key[3]} << 24);
  }

  // Builders; `length` of a keyed descriptor must fit 24 bits (the caller checks).
  static constexpr NvmeSgl keyed(std::uint64_t addr, std::uint32_t length, std::uint32_t key,
                                 bool invalidate) {
    NvmeSgl s;
    s.addr = addr;
    for (int i = 0; i < 3; ++i) s.length_or_key[i] = static_cast<std::uint8_t>(length >> (8 * i));
    for (int i = 0; i < 4; ++i) s.length_or_key[3 + i] = static_cast<std::uint8_t>(key >> (8 * i));
    s.type_subtype = static_cast<std::uint8_t>(
        (std::uint8_t{0x4} << 4) | (invalidate ? std::uint8_t{0xF} : std::uint8_t{0x0}));
    return s;
  }
  static constexpr NvmeSgl in_capsule(std::uint32_t offset, std::uint32_t length) {
    NvmeSgl s;
    s.addr = offset;
    for (int i = 0; i < 4; ++i) s.length_or_key[i] = static_cast<std::uint8_t>(length >> (8 * i));
    s.type_subtype = 0x01;  // data block, offset
    return s;
  }
};
static_assert(sizeof(NvmeSgl) == 16);
static_assert(offsetof(NvmeSgl, length_or_key) == 8);
static_assert(offsetof(NvmeSgl, type_subtype) == 15);
inline constexpr std::uint32_t kMaxKeyedSglLength = (1u << 24) - 1;

// -------------------------------------------------------- command capsule --

// The 64-byte submission queue entry (NVMe base 4.2, Figure "Common Command
// Format"); on fabrics the first 64 bytes of every command capsule.
struct NvmeCommand {
  std::uint8_t opcode = 0;
  std::uint8_t flags = 0;  // FUSE 1:0, PSDT 7:6
  std::uint16_t cid = 0;   // command identifier, echoed in the completion
  std::uint32_t nsid = 0;
  std::uint32_t cdw2 = 0;  // reserved (command specific)
  std::uint32_t cdw3 = 0;
  std::uint64_t mptr = 0;  // metadata pointer
  NvmeSgl dptr;            // SGL1: the data pointer
  std::uint32_t cdw10 = 0, cdw11 = 0, cdw12 = 0, cdw13 = 0, cdw14 = 0, cdw15 = 0;
};
static_assert(sizeof(NvmeCommand) == 64);
static_assert(offsetof(NvmeCommand, flags) == 1);
static_assert(offsetof(NvmeCommand, cid) == 2);
static_assert(offsetof(NvmeCommand, nsid) == 4);
static_assert(offsetof(NvmeCommand, mptr) == 16);
static_assert(offsetof(NvmeCommand, dptr) == 24);
static_assert(offsetof(NvmeCommand, cdw10) == 40);
static_assert(offsetof(NvmeCommand, cdw15) == 60);
static_assert(std::is_trivially_copyable_v<NvmeCommand>);

inline constexpr std::size_t kCommandCapsuleHeader = sizeof(NvmeCommand);

// The Fabrics view of the same 64 bytes (NVMe-oF 1.1 Figure 11): the fctype
// lives where an NVMe command has its NSID.
struct FabricsCommand {
  std::uint8_t opcode = kFabricsOpcode;
  std::uint8_t rsvd1 = 0;
  std::uint16_t cid = 0;
  std::uint8_t fctype = 0;
  std::uint8_t rsvd5[19] = {};
  NvmeSgl dptr;
  std::uint8_t specific[24] = {};  // fctype specific, bytes 40-63
};
static_assert(sizeof(FabricsCommand) == 64);
static_assert(offsetof(FabricsCommand, fctype) == 4);
static_assert(offsetof(FabricsCommand, dptr) == 24);
static_assert(offsetof(FabricsCommand, specific) == 40);

// Connect command (NVMe-oF 1.1 Figure 20).
struct ConnectCommand {
  std::uint8_t opcode = kFabricsOpcode;
  std::uint8_t rsvd1 = 0;
  std::uint16_t cid = 0;
  std::uint8_t fctype = static_cast<std::uint8_t>(FabricsType::kConnect);
  std::uint8_t rsvd5[19] = {};
  NvmeSgl dptr;             // the 1024-byte Connect data
  std::uint16_t recfmt = 0; // record format, 0 in NVMe-oF 1.x
  std::uint16_t qid = 0;    // 0 = admin queue
  std::uint16_t sqsize = 0; // 0's based queue size
  std::uint8_t cattr = 0;   // bit 2: SQ flow control disable
  std::uint8_t rsvd47 = 0;
  std::uint32_t kato = 0;   // keep alive timeout, ms (admin queue only)
  std::uint8_t rsvd52[12] = {};
};
static_assert(sizeof(ConnectCommand) == 64);
static_assert(offsetof(ConnectCommand, recfmt) == 40);
static_assert(offsetof(ConnectCommand, qid) == 42);
static_assert(offsetof(ConnectCommand, sqsize) == 44);
static_assert(offsetof(ConnectCommand, cattr) == 46);
static_assert(offsetof(ConnectCommand, kato) == 48);

// Property Get / Property Set (NVMe-oF 1.1 Figures 26 and 28).
struct PropertyCommand {
  std::uint8_t opcode = kFabricsOpcode;
  std::uint8_t rsvd1 = 0;
  std::uint16_t cid = 0;
  std::uint8_t fctype = 0;
  std::uint8_t rsvd5[35] = {};
  std::uint8_t attrib = 0;  // bits 2:0 size: 0 = 4 bytes, 1 = 8 bytes
  std::uint8_t rsvd41[3] = {};
  std::uint32_t offset = 0;  // property offset
  std::uint64_t value = 0;   // Property Set only
  std::uint8_t rsvd56[8] = {};
};
static_assert(sizeof(PropertyCommand) == 64);
static_assert(offsetof(PropertyCommand, attrib) == 40);
static_assert(offsetof(PropertyCommand, offset) == 44);
static_assert(offsetof(PropertyCommand, value) == 48);

// Connect data (NVMe-oF 1.1 Figure 21), 1024 bytes.
struct ConnectData {
  std::uint8_t hostid[16] = {};
  std::uint16_t cntlid = 0;  // 0xFFFF: dynamic controller model, any controller
  std::uint8_t rsvd18[238] = {};
  char subnqn[256] = {};  // NUL-terminated UTF-8
  char hostnqn[256] = {};
  std::uint8_t rsvd768[256] = {};
};
static_assert(sizeof(ConnectData) == 1024);
static_assert(offsetof(ConnectData, cntlid) == 16);
static_assert(offsetof(ConnectData, subnqn) == 256);
static_assert(offsetof(ConnectData, hostnqn) == 512);
inline constexpr std::uint16_t kDynamicCntlid = 0xFFFF;

// ------------------------------------------------------- response capsule --

// The 16-byte completion queue entry (NVMe base 4.6).
struct NvmeCompletion {
  std::uint32_t dw0 = 0;  // command specific result (Connect: cntlid; Property Get: value)
  std::uint32_t dw1 = 0;
  std::uint16_t sq_head = 0;
  std::uint16_t sq_id = 0;
  std::uint16_t cid = 0;
  std::uint16_t status = 0;  // phase 0, SC 8:1, SCT 11:9, CRD 13:12, More 14, DNR 15
};
static_assert(sizeof(NvmeCompletion) == 16);
static_assert(offsetof(NvmeCompletion, sq_head) == 8);
static_assert(offsetof(NvmeCompletion, sq_id) == 10);
static_assert(offsetof(NvmeCompletion, cid) == 12);
static_assert(offsetof(NvmeCompletion, status) == 14);
static_assert(std::is_trivially_copyable_v<NvmeCompletion>);

// ------------------------------------------------------------- properties --

// Controller properties (NVMe base 3.1, "Controller Registers"); on fabrics
// they are read and written with Property Get/Set.
enum class Property : std::uint32_t {
  kCap = 0x00,   // 8 bytes, read only
  kVs = 0x08,    // 4 bytes, read only
  kCc = 0x14,    // 4 bytes, read/write
  kCsts = 0x1C,  // 4 bytes, read only
};

struct PropertyInfo {
  Property property;
  std::uint8_t size;  // bytes
  bool writable;
  const char* name;
};
inline constexpr PropertyInfo kProperties[] = {
    {Property::kCap, 8, false, "CAP"},
    {Property::kVs, 4, false, "VS"},
    {Property::kCc, 4, true, "CC"},
    {Property::kCsts, 4, false, "CSTS"},
};

// Field positions inside the properties a controller reports.
inline constexpr std::uint64_t kCapCqr = 1ull << 16;          // contiguous queues required
inline constexpr unsigned kCapToShift = 24;                   // timeout, 500 ms units
inline constexpr unsigned kCapCssShift = 37;                  // bit 37: NVM command set
inline constexpr std::uint32_t kCcEnable = 1u << 0;
inline constexpr unsigned kCcShnShift = 14;                   // shutdown notification 15:14
inline constexpr std::uint32_t kCstsReady = 1u << 0;
inline constexpr unsigned kCstsShstShift = 2;                 // shutdown status 3:2
inline constexpr std::uint32_t kVersion1_4 = 0x00010400;      // VS: major 31:16, minor 15:8

// --------------------------------------------------------------- Identify --

inline constexpr std::size_t kIdentifyDataSize = 4096;

// Identify Controller data structure (CNS 01h), the fields a fabrics target
// fills; everything else is reserved or zero for us.
struct IdentifyController {
  std::uint16_t vid = 0;
  std::uint16_t ssvid = 0;
  char sn[20] = {};  // ASCII, space padded
  char mn[40] = {};
  char fr[8] = {};
  std::uint8_t rab = 0;
  std::uint8_t ieee[3] = {};
  std::uint8_t cmic = 0;
  std::uint8_t mdts = 0;  // max data transfer, 2^n minimum pages (0 = no limit)
  std::uint16_t cntlid = 0;
  std::uint32_t ver = 0;
  std::uint32_t rtd3r = 0;
  std::uint32_t rtd3e = 0;
  std::uint32_t oaes = 0;
  std::uint32_t ctratt = 0;
  std::uint8_t rsvd100[156] = {};
  std::uint16_t oacs = 0;
  std::uint8_t acl = 0;
  std::uint8_t aerl = 0;
  std::uint8_t frmw = 0;
  std::uint8_t lpa = 0;
  std::uint8_t elpe = 0;
  std::uint8_t npss = 0;
  std::uint8_t rsvd264[56] = {};
  std::uint16_t kas = 0;  // keep alive support, 100 ms units
  std::uint8_t rsvd322[190] = {};
  std::uint8_t sqes = 0;  // bits 3:0 required, 7:4 maximum (log2 bytes): 6 = 64 B
  std::uint8_t cqes = 0;  // 4 = 16 B
  std::uint16_t maxcmd = 0;
  std::uint32_t nn = 0;  // number of namespaces (highest nsid)
  std::uint16_t oncs = 0;
  std::uint16_t fuses = 0;
  std::uint8_t fna = 0;
  std::uint8_t vwc = 0;  // volatile write cache present
  std::uint16_t awun = 0;
  std::uint16_t awupf = 0;
  std::uint8_t nvscc = 0;
  std::uint8_t nwpc = 0;
  std::uint16_t acwu = 0;
  std::uint16_t rsvd534 = 0;
  std::uint32_t sgls = 0;  // SGL support
  std::uint32_t mnan = 0;
  std::uint8_t rsvd544[224] = {};
  char subnqn[256] = {};
  std::uint8_t rsvd1024[768] = {};
  // NVMe over Fabrics attributes.
  std::uint32_t ioccsz = 0;  // I/O command capsule size, 16-byte units (>= 4)
  std::uint32_t iorcsz = 0;  // I/O response capsule size, 16-byte units (1)
  std::uint16_t icdoff = 0;  // in-capsule data offset, 16-byte units
  std::uint8_t fcatt = 0;    // bit 0: 0 = dynamic controller model
  std::uint8_t msdbd = 0;    // max SGL data block descriptors per capsule
  std::uint16_t ofcs = 0;
  std::uint8_t rsvd1806[242] = {};
  std::uint8_t psd[1024] = {};  // power state descriptors
  std::uint8_t vs[1024] = {};
};
static_assert(sizeof(IdentifyController) == kIdentifyDataSize);
static_assert(offsetof(IdentifyController, sn) == 4);
static_assert(offsetof(IdentifyController, mn) == 24);
static_assert(offsetof(IdentifyController, fr) == 64);
static_assert(offsetof(IdentifyController, mdts) == 77);
static_assert(offsetof(IdentifyController, cntlid) == 78);
static_assert(offsetof(IdentifyController, ver) == 80);
static_assert(offsetof(IdentifyController, oacs) == 256);
static_assert(offsetof(IdentifyController, kas) == 320);
static_assert(offsetof(IdentifyController, sqes) == 512);
static_assert(offsetof(IdentifyController, cqes) == 513);
static_assert(offsetof(IdentifyController, maxcmd) == 514);
static_assert(offsetof(IdentifyController, nn) == 516);
static_assert(offsetof(IdentifyController, vwc) == 525);
static_assert(offsetof(IdentifyController, sgls) == 536);
static_assert(offsetof(IdentifyController, subnqn) == 768);
static_assert(offsetof(IdentifyController, ioccsz) == 1792);
static_assert(offsetof(IdentifyController, iorcsz) == 1796);
static_assert(offsetof(IdentifyController, icdoff) == 1800);
static_assert(offsetof(IdentifyController, msdbd) == 1803);
static_assert(offsetof(IdentifyController, psd) == 2048);

// SGLS bits (Identify Controller bytes 539:536).
inline constexpr std::uint32_t kSglsSupported = 1u << 0;       // SGLs, any alignment
inline constexpr std::uint32_t kSglsKeyedDataBlock = 1u << 2;  // keyed SGL data block
inline constexpr std::uint32_t kSglsOffset = 1u << 20;         // address as offset (in-capsule)

// LBA format (Identify Namespace bytes 128+4n).
struct LbaFormat {
  std::uint16_t ms = 0;    // metadata size
  std::uint8_t lbads = 0;  // log2 of the block size (9 = 512)
  std::uint8_t rp = 0;     // relative performance, bits 1:0
};
static_assert(sizeof(LbaFormat) == 4);

// Identify Namespace data structure (CNS 00h).
struct IdentifyNamespace {
  std::uint64_t nsze = 0;  // size in blocks
  std::uint64_t ncap = 0;  // capacity in blocks
  std::uint64_t nuse = 0;  // utilisation in blocks
  std::uint8_t nsfeat = 0;
  std::uint8_t nlbaf = 0;  // number of LBA formats, 0's based
  std::uint8_t flbas = 0;  // formatted LBA size: bits 3:0 index into lbaf
  std::uint8_t mc = 0;
  std::uint8_t dpc = 0;
  std::uint8_t dps = 0;
  std::uint8_t nmic = 0;
  std::uint8_t rescap = 0;
  std::uint8_t rsvd32[72] = {};
  std::uint8_t nguid[16] = {};
  std::uint8_t eui64[8] = {};
  LbaFormat lbaf[16] = {};
  std::uint8_t rsvd192[3904] = {};
};
static_assert(sizeof(IdentifyNamespace) == kIdentifyDataSize);
static_assert(offsetof(IdentifyNamespace, nsze) == 0);
static_assert(offsetof(IdentifyNamespace, ncap) == 8);
static_assert(offsetof(IdentifyNamespace, nuse) == 16);
static_assert(offsetof(IdentifyNamespace, nlbaf) == 25);
static_assert(offsetof(IdentifyNamespace, flbas) == 26);
static_assert(offsetof(IdentifyNamespace, nguid) == 104);
static_assert(offsetof(IdentifyNamespace, eui64) == 120);
static_assert(offsetof(IdentifyNamespace, lbaf) == 128);

// Active namespace list (CNS 02h): up to 1024 nsids in increasing order,
// zero terminated.
inline constexpr std::size_t kMaxActiveNamespaceList = kIdentifyDataSize / 4;

// nsid values with a meaning of their own.
inline constexpr std::uint32_t kNsidBroadcast = 0xFFFFFFFF;

// Discovery (NVMe-oF 1.1 section 5): the well-known discovery subsystem and
// its log page (Get Log Page, LID 70h): a 1024-byte header, then one
// 1024-byte entry per subsystem port the host may reach. Little-endian.
inline constexpr std::uint8_t kLogPageDiscovery = 0x70;

struct DiscoveryLogHeader {
  std::uint64_t genctr = 0;  // changes when the log changes
  std::uint64_t numrec = 0;
  std::uint16_t recfmt = 0;
  std::uint8_t reserved[1006] = {};
};
static_assert(sizeof(DiscoveryLogHeader) == 1024);

enum DiscoveryTrtype : std::uint8_t { kTrtypeRdma = 1 };
enum DiscoveryAdrfam : std::uint8_t { kAdrfamIpv4 = 1, kAdrfamIpv6 = 2 };
enum DiscoverySubtype : std::uint8_t { kSubtypeDiscovery = 1, kSubtypeNvme = 2 };
// The RDMA transport-specific address subtype (TSAS).
enum RdmaQptype : std::uint8_t { kRdmaQptypeConnected = 1 };
enum RdmaPrtype : std::uint8_t { kRdmaPrtypeNotSpecified = 1, kRdmaPrtypeIb = 2, kRdmaPrtypeRoce = 3, kRdmaPrtypeRoceV2 = 4 };
enum RdmaCms : std::uint8_t { kRdmaCmsRdmaCm = 1 };

struct DiscoveryLogEntry {
  std::uint8_t trtype = 0;
  std::uint8_t adrfam = 0;
  std::uint8_t subtype = 0;
  std::uint8_t treq = 0;
  std::uint16_t portid = 0;
  std::uint16_t cntlid = 0xFFFF;  // dynamic
  std::uint16_t asqsz = 0;
  std::uint8_t reserved0[22] = {};
  char trsvcid[32] = {};  // ASCII, space padded: the port
  std::uint8_t reserved1[192] = {};
  char subnqn[256] = {};  // NUL terminated
  char traddr[256] = {};  // ASCII, space padded: the address
  struct {
    std::uint8_t qptype = 0;
    std::uint8_t prtype = 0;
    std::uint8_t cms = 0;
    std::uint8_t reserved[5] = {};
    std::uint16_t pkey = 0;
    std::uint8_t reserved2[246] = {};
  } rdma;
};
static_assert(sizeof(DiscoveryLogEntry) == 1024);
static_assert(offsetof(DiscoveryLogEntry, trsvcid) == 32 && offsetof(DiscoveryLogEntry, subnqn) == 256 &&
              offsetof(DiscoveryLogEntry, traddr) == 512 && offsetof(DiscoveryLogEntry, rdma) == 768);

}  // namespace srdma::nvmf
